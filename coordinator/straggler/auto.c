/*
 * auto.c - straggler_policy "auto": synchronous steps until a
 * worker is persistently late, then backup or deadline until every worker
 * is on time again.
 *
 * STATE MACHINE (one per job generation; core/step_gate.c drives it under
 * the coordinator lock):
 *
 *   SYNC --observe: some rank late in >= M of its last W--> BACKUP (b >= 1)
 *                                                        or DEADLINE (b = 0)
 *   BACKUP | DEADLINE --observe: every rank late in <= M/3 of its last W--> SYNC
 *   any --reset (a new generation)--> SYNC, every window empty
 *
 *   The gate of each mode (step_gate.c): SYNC RM_GATE_ALL (every member,
 *   once every member arrived: exactly straggler_policy none); BACKUP
 *   RM_GATE_FIRST_K with k = world - backup_workers; DEADLINE
 *   RM_GATE_DEADLINE with the slack of straggler_policy deadline. A
 *   transition reported by rm_auto_observe for step s takes effect when
 *   step s+1 starts (the gate is recreated then): a step's member set is
 *   never changed while the step is under way.
 *
 * VERDICTS (rm_auto_verdicts), one per rank per decided step. Let t_r be
 * rank r's arrival (its StepGate "ready" call), t_med the median arrival
 * (the ceil(n/2)-th of the n ranks that arrived, as decide.c's DEADLINE) and
 *   threshold = max(1 ms, 0.5 x the median over the members of their last
 *               reported compute_ms)                    (rm_auto_threshold)
 *   SYNC       late  iff  t_r > t_med + threshold
 *   mitigating late  iff  r is not in the decided member mask and
 *                         t_r > t_med + threshold
 *   A rank that did not arrive is late in both modes. Before any member
 *   reported a step (threshold NaN) the caller gives no verdicts at all: a
 *   first step's arrival spread is start-up, not straggling.
 *   Why the threshold also while mitigating: under BACKUP b ranks are left
 *   out of every step, so a window holds W*b "not a member" verdicts spread
 *   over the ranks; with world*(M/3) < W*b (4 workers, b = 1: 8 < 10) no
 *   job could ever satisfy the OFF rule. A rank left out by a hair (someone
 *   must be last) is on time; a rank left out that is also far behind the
 *   median is late. Under DEADLINE "not a member" already means behind the
 *   median by the deadline slack (10 % of a step), and the threshold (50 %)
 *   keeps ordinary jitter from counting.
 *
 * WINDOWS. Per rank the last W verdicts, one bit each (W <= 64); before W
 * steps were observed the counts are over the steps observed. The windows
 * are kept across a switch: the hysteresis (ON at >= M, OFF at <= M/3, so
 * with W = 10, M = 6: on at 6 late of 10, off at 2) is what keeps the mode
 * from flapping, and a rank that turned mitigation on must be on time in
 * about M - M/3 steps of the new mode before it ends. The windows are
 * cleared only by rm_auto_reset: a new generation has new ranks (a rank
 * number may now name another worker) and starts synchronous.
 *
 * INVARIANTS. 1. mode == SYNC or the last transition was ON; 2. bits of a
 * window above W are 0; 3. no allocation after rm_auto_create.
 */
#include "auto.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rm_alloc.h"

#define RM_AUTO_FLOOR_MS 1.0   /* threshold floor */
#define RM_AUTO_COMPUTE_PART 0.5 /* threshold: this part of a step's compute */

struct rm_auto {
  rm_auto_config_t cfg;
  rm_auto_mode_t mode;
  uint64_t *win;  /* world windows, bit 0 = the newest verdict */
  double *sorted; /* world: scratch for the median arrival */
  int seen;       /* steps observed since the reset, capped at W */
};

void rm_auto_config_init(rm_auto_config_t *cfg, int world, int backup)
{
  cfg->world = world;
  cfg->window = 10;
  cfg->min_late = 6;
  cfg->backup = backup;
}

rm_status_t rm_auto_create(const rm_auto_config_t *cfg, rm_auto_t **out)
{
  if (!cfg || !out || cfg->world < 1 || cfg->world > 65536 || cfg->window < 1 ||
      cfg->window > RM_AUTO_WINDOW_MAX || cfg->min_late < 1 ||
      cfg->min_late > cfg->window || cfg->backup < 0)
    return RM_ERR_INVALID_ARG;
  rm_auto_t *a = rm__xcalloc(1, sizeof *a);
  a->cfg = *cfg;
  a->win = rm__xcalloc((size_t)cfg->world, sizeof *a->win);
  a->sorted = rm__xcalloc((size_t)cfg->world, sizeof *a->sorted);
  *out = a;
  return RM_OK;
}

void rm_auto_destroy(rm_auto_t *a)
{
  if (!a) return;
  free(a->win);
  free(a->sorted);
  free(a);
}

void rm_auto_reset(rm_auto_t *a)
{
  a->mode = RM_AUTO_SYNC;
  a->seen = 0;
  memset(a->win, 0, (size_t)a->cfg.world * sizeof *a->win);
}

rm_auto_mode_t rm_auto_mode(const rm_auto_t *a) { return a->mode; }

double rm_auto_threshold(double median_compute_ms)
{
  double t = RM_AUTO_COMPUTE_PART * median_compute_ms;
  if (isnan(t)) return NAN;
  return t > RM_AUTO_FLOOR_MS ? t : RM_AUTO_FLOOR_MS;
}

static int cmp_double(const void *x, const void *y)
{
  double p = *(const double *)x, q = *(const double *)y;
  return (p > q) - (p < q);
}

void rm_auto_verdicts(rm_auto_t *a, const double *arrive_ms,
                      const uint8_t *members, double threshold_ms,
                      uint8_t *late)
{
  int world = a->cfg.world, n = 0;
  for (int r = 0; r < world; r++)
    if (!isnan(arrive_ms[r])) a->sorted[n++] = arrive_ms[r];
  qsort(a->sorted, (size_t)n, sizeof *a->sorted, cmp_double);
  double cut = n ? a->sorted[(n + 1) / 2 - 1] + threshold_ms : NAN;
  for (int r = 0; r < world; r++) {
    int sync = a->mode == RM_AUTO_SYNC;
    int left_out = !sync && members && !members[r];
    late[r] = (uint8_t)(isnan(arrive_ms[r]) || (arrive_ms[r] > cut && (sync || left_out)));
  }
}

/* The rank with the most late verdicts in its window (lowest on a tie). */
static int worst_rank(const rm_auto_t *a, int *count)
{
  int best = 0, most = -1;
  for (int r = 0; r < a->cfg.world; r++) {
    int k = __builtin_popcountll(a->win[r]);
    if (k > most) most = k, best = r;
  }
  *count = most;
  return best;
}

void rm_auto_observe(rm_auto_t *a, const uint8_t *late, rm_auto_event_t *ev)
{
  uint64_t keep = a->cfg.window == 64 ? ~0ull : ((1ull << a->cfg.window) - 1);
  rm_auto_event_t e = {RM_AUTO_SAME, a->mode, -1, 0, 0};
  int most;
  for (int r = 0; r < a->cfg.world; r++)
    a->win[r] = ((a->win[r] << 1) | (late[r] != 0)) & keep;
  if (a->seen < a->cfg.window) a->seen++;
  int r = worst_rank(a, &most);
  e.of = a->seen;
  if (a->mode == RM_AUTO_SYNC && most >= a->cfg.min_late) {
    a->mode = a->cfg.backup >= 1 ? RM_AUTO_BACKUP : RM_AUTO_DEADLINE;
    e = (rm_auto_event_t){RM_AUTO_ON, a->mode, r, most, a->seen};
  } else if (a->mode != RM_AUTO_SYNC && most <= a->cfg.min_late / 3) {
    a->mode = RM_AUTO_SYNC;
    e = (rm_auto_event_t){RM_AUTO_OFF, a->mode, -1, most, a->seen};
  }
  if (ev) *ev = e;
}
