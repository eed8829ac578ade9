/*
 * suspect.c - Byzantine suspects from the aggregator's exclusions.
 *
 * A robust aggregation (krum, multi_krum, bulyan, trimmed_mean, ...; see
 * include/ringmaster/aggregation.h) excludes or down-weights some ranks at
 * each step, and every rank computes the same set; each ReportStep carries
 * it (excluded_ranks). The coordinator takes the set from the FIRST report
 * of each step of the running generation (any member's: they agree) and
 * ignores the other members' copies.
 *
 * Per worker (keyed by the worker record, so a re-formation that renumbers
 * ranks keeps each worker's history) a window of its last W steps is kept
 * as a bit mask (bit 0 = newest step; W <= 64): bit set = excluded. After
 * each step:
 *
 *   excluded in >= M of its last W steps, not flagged -> flagged:
 *      event "byzantine_suspect", rank r, "rank 3 (host1) excluded by krum
 *      in 14 of the last 20 steps (through step 57)"
 *   flagged, fewer than M -> unflagged: event "byzantine_cleared"
 *
 * A worker that joined later has a shorter window ("in 10 of the last 12
 * steps"); M is the same. M and W: RINGMASTER_SUSPECT_M (default 10) and
 * RINGMASTER_SUSPECT_W (default 20), read once per process; W in 1..64,
 * M in 1..W (else the defaults, with a warning).
 *
 * The mark (rm_worker_info_t.suspect) stays on a worker that leaves or is
 * lost while flagged, so a finished job still shows who was named; the
 * gauge (rm_coord_counters_t.byzantine_suspects) counts live workers of
 * active jobs only. Memory only: a restarted coordinator starts the windows
 * afresh. Cost: one pass over the members per step (not per report).
 * No SQL, no protobuf: rpc/rpc.c hands the ranks over as an array.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"
#include "rm_log.h"

enum { DEFAULT_M = 10, DEFAULT_W = 20, MAX_W = 64 };

static int g_m = DEFAULT_M, g_w = DEFAULT_W;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int env_int(const char *name, int *out)
{
  const char *v = getenv(name);
  char *end;
  long x;
  if (!v || !*v) return 0;
  x = strtol(v, &end, 10);
  if (*end || x < 1 || x > MAX_W) {
    RM_WARN("%s=%s ignored: must be an integer in 1..%d", name, v, MAX_W);
    return 0;
  }
  *out = (int)x;
  return 1;
}

static void read_config(void)
{
  int m = DEFAULT_M, w = DEFAULT_W;
  env_int("RINGMASTER_SUSPECT_W", &w);
  env_int("RINGMASTER_SUSPECT_M", &m);
  if (m > w) {
    RM_WARN("RINGMASTER_SUSPECT_M=%d > RINGMASTER_SUSPECT_W=%d: using M = %d, W = %d",
            m, w, DEFAULT_M < w ? DEFAULT_M : w, w);
    m = DEFAULT_M < w ? DEFAULT_M : w;
  }
  g_m = m;
  g_w = w;
}

void rm__suspect_config(int *m, int *w)
{
  pthread_once(&g_once, read_config);
  if (m) *m = g_m;
  if (w) *w = g_w;
}

static int popcount64(uint64_t x)
{
  return __builtin_popcountll(x);
}

void rm__suspect_step(rm_coord_t *c, rm__job_t *j, uint64_t step,
                      const uint32_t *ranks, size_t n)
{
  int m, wn;
  const char *method = j->info.spec.aggregation[0] ? j->info.spec.aggregation : "mean";
  if (j->info.state != RM_JOB_RUNNING || j->nmembers <= 0) return;
  if (j->susp_gen == j->info.generation && step <= j->susp_step) return;
  j->susp_gen = j->info.generation;
  j->susp_step = step;
  rm__suspect_config(&m, &wn);
  uint64_t wmask = wn >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << wn) - 1);
  for (int r = 0; r < j->nmembers; r++) {
    rm__worker_t *w = &j->w[j->members[r]];
    if (w->state != RM_WORKER_RUNNING) continue;
    w->excl_mask = (w->excl_mask << 1) & wmask;
    if (w->excl_seen < wn) w->excl_seen++;
  }
  for (size_t i = 0; i < n; i++)
    if (ranks[i] < (uint32_t)j->nmembers) {
      rm__worker_t *w = &j->w[j->members[ranks[i]]];
      if (w->state == RM_WORKER_RUNNING) w->excl_mask |= 1;
    }
  for (int r = 0; r < j->nmembers; r++) {
    rm__worker_t *w = &j->w[j->members[r]];
    int k = popcount64(w->excl_mask);
    if (w->state != RM_WORKER_RUNNING || (k >= m) == (w->suspect != 0)) continue;
    w->suspect = k >= m;
    if (w->suspect)
      rm__event(c, j, "byzantine_suspect", w->rank, "rank %d (%s) excluded by "
                "%s in %d of the last %d steps (through step %llu): a "
                "Byzantine suspect", w->rank, w->host, method, k, w->excl_seen,
                (unsigned long long)step);
    else
      rm__event(c, j, "byzantine_cleared", w->rank, "rank %d (%s) excluded by "
                "%s in %d of the last %d steps (through step %llu), fewer "
                "than %d: no longer a Byzantine suspect", w->rank, w->host,
                method, k, w->excl_seen, (unsigned long long)step, m);
  }
}
