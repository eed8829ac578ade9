/*
 * step_engine.c - the straggler step engine: one step loop for
 * every workload and session program. Interface in step_engine.h.
 *
 * A STEP (0-based global step s, rank r of world W), for every policy:
 *   1. compute: the workload's real work, then simulated extra time (the
 *      slow_* options) spent by rm__sp_spend in 1 ms slices;
 *   2. decide: the member mask M(s) (rm__sp_decide): the coordinator's
 *      StepGate answers every rank with the same mask
 *      (coordinator/core/step_gate.c); under none M(s) = everyone and no
 *      call is made;
 *   3. reduce: the workload's masked all-reduce over M(s) (members add their
 *      contribution, the others zeros; everyone receives the result), or
 *      coded's decode plan, or stale's fold (below);
 *   4. apply / verify: the same bytes on every rank.
 *
 *   policy    who decides M(s)          a late rank ...
 *   none      nobody: all ranks         is waited for
 *   backup    first W - b arrivals      stops computing when dropped
 *   deadline  arrivals by median+slack  stops computing when dropped
 *   coded     one arrival per group     stops computing when dropped
 *   auto      coordinator: all ranks    (off) is waited for; (on) as backup
 *             until a rank is late in   when backup_workers b >= 1, else
 *             M of W steps, then as     as deadline; the worker side is
 *             backup / deadline         deadline's: poll every 1 ms
 *   stale     arrivals by median+slack  keeps computing; its gradient is
 *                                       folded into a later step
 *
 * A dropped rank learns it while computing (the gate is asked every 2 ms in
 * step 1; with a Session open to a coordinator that pushes decisions, the
 * question is answered from the last pushed one, without a call:
 * session_live.c GATE PUSHES) and stops at once; real compute that cannot
 * be interrupted (a user's program between rm_session_step_dropped()
 * checks) simply arrives late and contributes zeros.
 *
 * STALE (bounded staleness k = max_staleness >= 1). Rank r owes at most one
 * gradient at a time: g_r computed on the parameters theta(f) of step f (the
 * "from" step) over its shard of batch f.
 *   step s, r owes nothing:  compute g_r(theta(s)) now, f = s; its simulated
 *                            time is owed (rm__sp_stale_owe)
 *   work (rm__sp_stale_work): spend the owed time; if the gate decides step
 *     s without r before it is done and s - f < k, r stops for this step
 *     (contributes zeros, keeps the rest owed); if s - f == k it spends all
 *     of it without asking (its peers wait in the all-reduce: that wait is
 *     the price of the bound);
 *   a rank whose gradient is done arrives at the gate and contributes it to
 *     step s: staleness s - f (0 for an on-time rank);
 *   header (rm__sp_stale_header): one f64 all-reduce of [rows, f_r + 1 per
 *     rank] before the data, so every rank knows who folded what, checks
 *     s - f_r <= k for every contributor (a violation fails the step), and
 *     divides the summed gradient by the summed rows.
 * WEIGHTING: a folded gradient counts by its rows like a fresh one (no
 * discount by staleness): the step's gradient is the mean over every row
 * contributed to it, as under backup's rescaling. A step nobody contributed
 * to applies a zero gradient (momentum still moves, identically on every
 * rank).
 * CONSISTENCY: every rank applies the same summed bytes and rows at every
 * step, so parameters stay bitwise identical on every rank after every step
 * (the train workload's checksums check it); a gradient is at most k steps
 * older than the parameters it updates. A re-formed generation drops what
 * was owed (parameters were re-synchronised, rm__sp_start).
 *
 * WAITS. Every gate call has its deadline (the session's call timeouts);
 * the long poll under backup and coded is 30 s per call, re-asked. Under
 * deadline, stale and auto a waiting rank asks once without waiting; when
 * the answer says a long poll will be answered as soon as the step is
 * decided (arrivals_decide: every gate of a coordinator that times its
 * deadlines, core/step_gate.c TIMED DEADLINES; with an older one only
 * when no deadline runs, e.g. auto while synchronous) it long-polls, else
 * it polls every 1 ms. A gate that fails (the generation moved on) ends the
 * step with RM_ERR_ABORTED.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rm_clock.h"
#include "rm_log.h"
#include "session/step_engine.h"

/* ---- the engine ---- */
static const char *const k_names[] = {"none", "backup", "deadline", "coded",
                                      "stale", "auto"};

int rm__sp_kind_parse(const char *name)
{
  if (!name || !*name) return RM__SP_NONE;
  for (int i = 0; i < (int)(sizeof k_names / sizeof k_names[0]); i++)
    if (!strcmp(name, k_names[i])) return i;
  return -1;
}

const char *rm__sp_kind_name(int kind)
{
  return kind >= 0 && kind <= RM__SP_AUTO ? k_names[kind] : "unknown";
}

rm_status_t rm__sp_start(rm__sp_t *p, const char *policy, int rank, int world,
                         int coded_s, int max_staleness, rm__sp_gate_fn gate,
                         void *ctx)
{
  int kind = rm__sp_kind_parse(policy);
  if (kind < 0 || world < 1 || rank < 0 || rank >= world) return RM_ERR_INVALID_ARG;
  if (!gate || world == 1) kind = RM__SP_NONE;
  if (kind == RM__SP_CODED && (coded_s < 1 || world % (coded_s + 1)))
    kind = RM__SP_NONE; /* the coordinator's documented fallback: all ranks */
  if (kind == RM__SP_STALE && max_staleness < 1) return RM_ERR_INVALID_ARG;
  if (p->world != world || !p->members) {
    free(p->members);
    free(p->hdr);
    p->members = calloc((size_t)world, 1);
    p->hdr = calloc((size_t)world + 1, sizeof *p->hdr);
    if (!p->members || !p->hdr) return RM_ERR_NOMEM;
  }
  p->kind = kind;
  p->rank = rank;
  p->world = world;
  p->s = coded_s;
  p->k = max_staleness;
  p->gate = gate;
  p->ctx = ctx;
  p->pending = 0;
  p->left_ms = 0;
  return RM_OK;
}

void rm__sp_free(rm__sp_t *p)
{
  free(p->members);
  free(p->hdr);
  p->members = NULL;
  p->hdr = NULL;
}

int rm__sp_gated(const rm__sp_t *p) { return p->kind != RM__SP_NONE; }

static void sleep_ms(double ms, int spin)
{
  if (ms <= 0) return;
  if (spin) {
    int64_t end = rm__now_ns() + (int64_t)(ms * 1e6);
    while (rm__now_ns() < end) {
    }
    return;
  }
  struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000.0) * 1e6)};
  nanosleep(&ts, NULL);
}

/* Is step decided? 1 decided (members filled), 0 not yet, -1 the gate
 * failed. */
static int ask(rm__sp_t *p, uint64_t step, int ready, int wait_ms, int *dropped)
{
  *dropped = 0;
  int rc = p->gate(p->ctx, step, ready, wait_ms, p->members, dropped);
  if (rc == 1) {
    p->nmembers = 0;
    for (int r = 0; r < p->world; r++) p->nmembers += p->members[r] != 0;
  }
  return rc;
}

int rm__sp_spend(rm__sp_t *p, uint64_t step, double ms, double *left)
{
  int64_t end = rm__now_ns() + (int64_t)(ms * 1e6), last = rm__now_ns();
  if (left) *left = 0;
  if (ms <= 0) return 0;
  if (!rm__sp_gated(p)) {
    sleep_ms(ms, p->spin);
    return 0;
  }
  while (rm__now_ns() < end) {
    double rest = (double)(end - rm__now_ns()) / 1e6;
    sleep_ms(rest < 1 ? rest : 1, p->spin);
    if (rm__now_ns() - last < 2000000) continue;
    last = rm__now_ns();
    int dropped = 0;
    if (ask(p, step, 0, 0, &dropped) == 1 && dropped) {
      if (left) {
        *left = (double)(end - rm__now_ns()) / 1e6;
        if (*left < 0) *left = 0;
      }
      return 1;
    }
  }
  return 0;
}

rm_status_t rm__sp_decide(rm__sp_t *p, uint64_t step)
{
  if (!rm__sp_gated(p)) {
    memset(p->members, 1, (size_t)p->world);
    p->nmembers = p->world;
    return RM_OK;
  }
  int poll = p->kind == RM__SP_DEADLINE || p->kind == RM__SP_STALE ||
             p->kind == RM__SP_AUTO;
  int64_t t0 = rm__now_ns();
  int rc, dropped, wait = poll ? 0 : 30000;
  for (;;) {
    rc = ask(p, step, 1, wait, &dropped);
    if (rc == 2) { /* no deadline runs (auto while synchronous): long poll */
      wait = 30000;
      continue;
    }
    if (rc != 0) break;
    if (wait == 0) sleep_ms(1, 0);
  }
  p->wait_ms += (double)(rm__now_ns() - t0) / 1e6;
  return rc == 1 ? RM_OK : RM_ERR_ABORTED;
}

void rm__sp_count(rm__sp_t *p, int contributed, int contributors)
{
  p->steps++;
  p->my_dropped += !contributed;
  if (!p->min_contrib || contributors < p->min_contrib) p->min_contrib = contributors;
  if (contributors > p->max_contrib) p->max_contrib = contributors;
}

/* ---- stale ---- */
int rm__sp_stale_fresh(const rm__sp_t *p) { return !p->pending; }

void rm__sp_stale_owe(rm__sp_t *p, uint64_t step, double extra_ms)
{
  p->pending = 1;
  p->pending_from = step;
  p->left_ms = extra_ms > 0 ? extra_ms : 0;
}

int rm__sp_stale_work(rm__sp_t *p, uint64_t step)
{
  double left = 0;
  if (!p->pending) return 0;
  if (step - p->pending_from >= (uint64_t)p->k) {
    /* at the bound: finish whatever it takes; peers wait for it */
    sleep_ms(p->left_ms, p->spin);
    p->left_ms = 0;
  } else if (rm__sp_spend(p, step, p->left_ms, &left)) {
    p->left_ms = left;
    return 0; /* dropped from this step; the rest stays owed */
  } else {
    p->left_ms = 0;
  }
  return rm__sp_decide(p, step) == RM_OK ? 1 : -1;
}

rm_status_t rm__sp_stale_header(rm__sp_t *p, rm_comm_t *comm, uint64_t step,
                                int contributing, double rows,
                                double *rows_total, char *err, size_t errlen)
{
  memset(p->hdr, 0, ((size_t)p->world + 1) * sizeof *p->hdr);
  if (contributing) {
    p->hdr[0] = rows;
    p->hdr[1 + p->rank] = (double)p->pending_from + 1;
  }
  rm_status_t st = rm_allreduce(comm, p->hdr, p->hdr, (size_t)p->world + 1,
                                RM_F64, RM_SUM);
  if (st != RM_OK) return st;
  int n = 0;
  for (int r = 0; r < p->world; r++) {
    int64_t f = rm__sp_stale_from(p, r);
    if (f < 0) continue;
    n++;
    uint64_t late = step - (uint64_t)f;
    if ((uint64_t)f > step || late > (uint64_t)p->k) {
      snprintf(err, errlen, "stale: step %llu would fold rank %d's gradient "
               "of step %lld (staleness %lld > max_staleness %d)",
               (unsigned long long)step, r, (long long)f,
               (long long)step - (long long)f, p->k);
      return RM_ERR_INTERNAL;
    }
    if (late) {
      p->folded++;
      if (late > p->max_seen) p->max_seen = late;
      if (p->rank == 0)
        RM_INFO("stale: step %llu folds rank %d's gradient of step %llu "
                "(staleness %llu)", (unsigned long long)step, r,
                (unsigned long long)f, (unsigned long long)late);
    }
  }
  *rows_total = p->hdr[0];
  if (contributing) p->pending = 0;
  rm__sp_count(p, contributing, n);
  return RM_OK;
}

int64_t rm__sp_stale_from(const rm__sp_t *p, int r)
{
  double v = p->hdr[1 + r];
  return v >= 1 ? (int64_t)v - 1 : -1;
}

void rm__sp_summary(const rm__sp_t *p, char *buf, size_t len)
{
  snprintf(buf, len, "\"straggler\":{\"policy\":\"%s\",\"rank\":%d,\"steps\":%llu,"
           "\"min_contributors\":%d,\"max_contributors\":%d,"
           "\"my_dropped_steps\":%llu,\"folded\":%llu,\"max_staleness\":%llu}",
           rm__sp_kind_name(p->kind), p->rank, (unsigned long long)p->steps,
           p->min_contrib, p->max_contrib, (unsigned long long)p->my_dropped,
           (unsigned long long)p->folded, (unsigned long long)p->max_seen);
}
