/*
 * straggler.c - straggler detection with robust statistics and hysteresis.
 *
 * INPUT. A stream of step reports (worker, step, compute, comm, wait, step
 * time in ms). The detection metric is COMPUTE time: a straggler's peers show
 * it as wait time, so wait/comm cannot tell who is slow, compute can.
 *
 * PER WORKER. A ring of its last W reports (W = cfg.window <= 64) and the
 * medians of each metric over that window (cached, recomputed per report by
 * quickselect over a fixed scratch array: O(W), no allocation).
 *
 * REFERENCE (robust, across workers). Let v_1..v_n be the compute window
 * medians of the n tracked workers, taken as a SNAPSHOT, sorted. For worker w
 * at snapshot position p:
 *
 *   ref_w = median of { v_i : i != p }          (leave-one-out median: a
 *                                                worker is compared with its
 *                                                PEERS, O(1) from the sorted
 *                                                snapshot)
 *   mad   = 1.4826 * median_i |v_i - median(v)|  (scaled MAD of all workers;
 *                                                a consistent estimator of
 *                                                the std. deviation for
 *                                                normal data)
 *
 * The snapshot is rebuilt (O(n log n)) when membership changed or once n
 * reports arrived since the last rebuild, i.e. about once per step of the
 * job: amortised O(log n) per report.
 *
 * CLASSIFICATION of each report with compute c and reference ref:
 *
 *   slow  <=>  c > factor * ref  AND  c > ref + mad_k * mad
 *              AND  c - ref > min_excess_ms
 *   fast  <=>  c <= recover_factor * ref
 *
 * The MAD term keeps a naturally heterogeneous population (spread-out
 * medians) from being flagged; the factor is the main test; the absolute
 * floor ignores jitter of sub-millisecond steps.
 *
 * STATE MACHINE per worker (hysteresis in value AND time, so no flapping):
 *
 *   NORMAL --[>= M of the last W classified reports slow AND the window
 *             median > factor * ref]--> FLAGGED
 *   FLAGGED --[recover_steps consecutive fast reports]--> NORMAL
 *                 (the slow history is cleared: flagging again needs M
 *                  fresh slow reports)
 *
 *   transition -> function: both in classify(), reported through
 *   rm_straggler_report(); leave of a FLAGGED worker reports UNFLAGGED.
 *
 * SMALL WORLDS. n = 1: there is no peer, no report is classified, score 1,
 * never flagged. n = 2: the reference is the other worker's window median and
 * the MAD term is 0 (no spread can be measured from one peer), so the slower
 * of two is flagged when it is slower by `factor`; the faster never is.
 * n >= 3: as above. With half or more of the workers slow nobody is
 * flagged: for a strict majority the median is theirs (breakdown point of
 * the median); for exactly half (even n) each slow worker's peers have a
 * fast median, but the MAD of a half/half population is half the gap g, and
 * c - ref = g > mad_k * 1.4826 * g/2 fails for mad_k >= 1.35 (default 3): a
 * bimodal population is not called a straggler problem.
 *
 * INVARIANTS.
 *  1. workers[] is sorted by id; snap_pos of every worker indexes the
 *     current snapshot when snap_valid (membership changes clear snap_valid).
 *  2. nflagged == number of workers with flagged set.
 *  3. slow_bits holds only the last min(classified, W) classifications.
 *  4. Only join (first report) and growth of the worker count allocate.
 */
#include "straggler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_alloc.h"

enum { M_COMPUTE = 0, M_COMM = 1, M_WAIT = 2, M_STEP = 3, M_COUNT = 4 };

typedef struct worker {
  uint64_t id;
  double *win;        /* M_COUNT rings of W values: win[m * W + i] */
  int head, filled;   /* ring position, entries in use */
  int reports;
  uint64_t last_step;
  uint64_t slow_bits; /* bit 0 = newest classification (invariant 3) */
  int classified;
  int flagged;
  int fast_run;
  double med[M_COUNT];
  double reference;
  int snap_pos;
} worker_t;

typedef struct snap_entry {
  double v;
  int idx;
} snap_entry_t;

struct rm_straggler {
  rm_straggler_config_t cfg;
  worker_t *w; /* sorted by id (invariant 1) */
  int n, cap;
  snap_entry_t *snap; /* cap entries */
  double *dev;        /* cap entries, scratch for the MAD */
  int snap_n, snap_valid, since_snap;
  double mad;
  int nflagged;
  double scratch[RM_STRAGGLER_MAX_WINDOW];
};

void rm_straggler_config_init(rm_straggler_config_t *cfg)
{
  memset(cfg, 0, sizeof *cfg);
  cfg->window = 10;
  cfg->min_slow = 6;
  cfg->factor = 1.5;
  cfg->mad_k = 3.0;
  cfg->min_excess_ms = 1.0;
  cfg->recover_factor = 1.2;
  cfg->recover_steps = 5;
}

rm_status_t rm_straggler_config_check(const rm_straggler_config_t *c,
                                      char *errbuf, size_t errlen)
{
  const char *bad = NULL;
  if (c == NULL) bad = "config";
  else if (c->window < 1 || c->window > RM_STRAGGLER_MAX_WINDOW) bad = "window";
  else if (c->min_slow < 1 || c->min_slow > c->window) bad = "min_slow";
  else if (!(c->factor > 1.0) || !isfinite(c->factor)) bad = "factor";
  else if (!(c->mad_k >= 0.0) || !isfinite(c->mad_k)) bad = "mad_k";
  else if (!(c->min_excess_ms >= 0.0) || !isfinite(c->min_excess_ms)) bad = "min_excess_ms";
  else if (!(c->recover_factor >= 1.0) || !(c->recover_factor <= c->factor))
    bad = "recover_factor";
  else if (c->recover_steps < 1) bad = "recover_steps";
  if (bad == NULL) return RM_OK;
  if (errbuf != NULL && errlen > 0)
    snprintf(errbuf, errlen, "straggler config: %s out of range", bad);
  return RM_ERR_INVALID_ARG;
}

rm_status_t rm_straggler_create(const rm_straggler_config_t *cfg,
                                rm_straggler_t **out)
{
  rm_straggler_config_t def;
  if (out == NULL) return RM_ERR_INVALID_ARG;
  if (cfg == NULL) {
    rm_straggler_config_init(&def);
    cfg = &def;
  }
  if (rm_straggler_config_check(cfg, NULL, 0) != RM_OK) return RM_ERR_INVALID_ARG;
  rm_straggler_t *d = rm__xcalloc(1, sizeof *d);
  d->cfg = *cfg;
  *out = d;
  return RM_OK;
}

void rm_straggler_destroy(rm_straggler_t *d)
{
  if (d == NULL) return;
  for (int i = 0; i < d->n; i++) free(d->w[i].win);
  free(d->w);
  free(d->snap);
  free(d->dev);
  free(d);
}

/* ---- order statistics ---- */
static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* k-th smallest of v[0..n-1] (Hoare quickselect; reorders v) */
static double select_kth(double *v, int n, int k)
{
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    double pivot = v[lo + (hi - lo) / 2];
    int i = lo, j = hi;
    while (i <= j) {
      while (v[i] < pivot) i++;
      while (v[j] > pivot) j--;
      if (i <= j) {
        double t = v[i];
        v[i++] = v[j];
        v[j--] = t;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else break;
  }
  return v[k];
}

/* median of v[0..n-1], n >= 1 (reorders v) */
static double median(double *v, int n)
{
  double hi = select_kth(v, n, n / 2);
  if (n % 2) return hi;
  double lo = v[0];
  for (int i = 1; i < n / 2; i++) lo = v[i] > lo ? v[i] : lo; /* max of lower half */
  return 0.5 * (lo + hi);
}

/* ---- workers ---- */
static int find(const rm_straggler_t *d, uint64_t id, int *pos)
{
  int lo = 0, hi = d->n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (d->w[mid].id < id) lo = mid + 1;
    else hi = mid;
  }
  *pos = lo;
  return lo < d->n && d->w[lo].id == id;
}

static worker_t *join(rm_straggler_t *d, uint64_t id, int pos)
{
  if (d->n == d->cap) {
    int ncap = d->cap ? 2 * d->cap : 8;
    d->w = rm__xrealloc(d->w, (size_t)ncap * sizeof *d->w);
    d->snap = rm__xrealloc(d->snap, (size_t)ncap * sizeof *d->snap);
    d->dev = rm__xrealloc(d->dev, (size_t)ncap * sizeof *d->dev);
    d->cap = ncap;
  }
  memmove(&d->w[pos + 1], &d->w[pos], (size_t)(d->n - pos) * sizeof *d->w);
  d->n++;
  worker_t *w = &d->w[pos];
  memset(w, 0, sizeof *w);
  w->id = id;
  w->win = rm__xcalloc((size_t)M_COUNT * (size_t)d->cfg.window, sizeof(double));
  w->snap_pos = -1;
  d->snap_valid = 0;
  return w;
}

static void push(rm_straggler_t *d, worker_t *w, const rm_straggler_report_t *r)
{
  int W = d->cfg.window;
  double v[M_COUNT] = {r->compute_ms, r->comm_ms, r->wait_ms, r->step_ms};
  if (v[M_STEP] == 0.0) v[M_STEP] = r->compute_ms + r->comm_ms + r->wait_ms;
  for (int m = 0; m < M_COUNT; m++) w->win[m * W + w->head] = v[m];
  w->head = (w->head + 1) % W;
  if (w->filled < W) w->filled++;
  for (int m = 0; m < M_COUNT; m++) {
    memcpy(d->scratch, &w->win[m * W], (size_t)w->filled * sizeof(double));
    w->med[m] = median(d->scratch, w->filled);
  }
  w->reports++;
  w->last_step = r->step;
}

static void rebuild_snapshot(rm_straggler_t *d)
{
  int n = d->n;
  for (int i = 0; i < n; i++) {
    d->snap[i].v = d->w[i].med[M_COMPUTE];
    d->snap[i].idx = i;
  }
  qsort(d->snap, (size_t)n, sizeof *d->snap, cmp_double); /* v is first */
  for (int i = 0; i < n; i++) d->w[d->snap[i].idx].snap_pos = i;
  d->mad = 0.0;
  if (n >= 3) {
    double m = (n % 2) ? d->snap[n / 2].v : 0.5 * (d->snap[n / 2 - 1].v + d->snap[n / 2].v);
    for (int i = 0; i < n; i++) d->dev[i] = fabs(d->snap[i].v - m);
    d->mad = 1.4826 * median(d->dev, n);
  }
  d->snap_n = n;
  d->snap_valid = 1;
  d->since_snap = 0;
}

/* median of the snapshot without position p; NAN when nothing is left */
static double loo_median(const rm_straggler_t *d, int p)
{
  int n = d->snap_n - 1;
  if (n < 1) return NAN;
#define AT(r) d->snap[(r) < p ? (r) : (r) + 1].v
  double v = (n % 2) ? AT(n / 2) : 0.5 * (AT(n / 2 - 1) + AT(n / 2));
#undef AT
  return v;
}

static rm_straggler_transition_t classify(rm_straggler_t *d, worker_t *w,
                                          double c, double ref)
{
  const rm_straggler_config_t *k = &d->cfg;
  uint64_t mask = (k->window == 64) ? ~0ULL : ((1ULL << k->window) - 1);
  int slow = c > k->factor * ref && c > ref + k->mad_k * d->mad &&
             c - ref > k->min_excess_ms;
  int fast = c <= k->recover_factor * ref;
  w->slow_bits = ((w->slow_bits << 1) | (uint64_t)slow) & mask;
  if (w->classified < k->window) w->classified++;
  if (!w->flagged) {
    if (__builtin_popcountll(w->slow_bits) < k->min_slow) return RM_STRAGGLER_NONE;
    /* The slow bits were classified against the references of their own
     * steps; flag only if the window as a whole is still `factor` slower
     * than the current reference (what the event reports as the score), so
     * a burst of noise while the peers' median drifts is not a straggler. */
    if (!(w->med[M_COMPUTE] > k->factor * ref)) return RM_STRAGGLER_NONE;
    w->flagged = 1;
    w->fast_run = 0;
    d->nflagged++;
    return RM_STRAGGLER_FLAGGED;
  }
  w->fast_run = fast ? w->fast_run + 1 : 0;
  if (w->fast_run < k->recover_steps) return RM_STRAGGLER_NONE;
  w->flagged = 0;
  w->slow_bits = 0;
  w->classified = 0;
  w->fast_run = 0;
  d->nflagged--;
  return RM_STRAGGLER_UNFLAGGED;
}

static void fill_event(const worker_t *w, uint64_t step,
                       rm_straggler_transition_t t, rm_straggler_event_t *ev)
{
  if (ev == NULL) return;
  ev->worker = w->id;
  ev->step = step;
  ev->transition = t;
  ev->compute_ms = w->med[M_COMPUTE];
  ev->reference_ms = w->reference;
  ev->score = w->reference > 0.0 ? w->med[M_COMPUTE] / w->reference : 1.0;
  ev->slow_in_window = __builtin_popcountll(w->slow_bits);
}

static int valid_time(double x) { return isfinite(x) && x >= 0.0; }

rm_status_t rm_straggler_report(rm_straggler_t *d,
                                const rm_straggler_report_t *r,
                                rm_straggler_event_t *ev)
{
  int pos;
  if (d == NULL || r == NULL || !valid_time(r->compute_ms) ||
      !valid_time(r->comm_ms) || !valid_time(r->wait_ms) || !valid_time(r->step_ms))
    return RM_ERR_INVALID_ARG;
  worker_t *w = find(d, r->worker, &pos) ? &d->w[pos] : join(d, r->worker, pos);
  rm_straggler_transition_t t = RM_STRAGGLER_NONE;
  if (w->reports > 0 && w->last_step == r->step) { /* duplicate */
    fill_event(w, r->step, t, ev);
    return RM_OK;
  }
  push(d, w, r);
  if (!d->snap_valid || ++d->since_snap >= d->n) rebuild_snapshot(d);
  double ref = loo_median(d, w->snap_pos);
  if (!isnan(ref)) {
    w->reference = ref;
    t = classify(d, w, r->compute_ms, ref);
  }
  fill_event(w, r->step, t, ev);
  return RM_OK;
}

rm_status_t rm_straggler_leave(rm_straggler_t *d, uint64_t worker,
                               rm_straggler_event_t *ev)
{
  int pos;
  if (d == NULL) return RM_ERR_INVALID_ARG;
  if (!find(d, worker, &pos)) return RM_ERR_NOT_FOUND;
  worker_t *w = &d->w[pos];
  rm_straggler_transition_t t = w->flagged ? RM_STRAGGLER_UNFLAGGED : RM_STRAGGLER_NONE;
  fill_event(w, w->last_step, t, ev);
  if (w->flagged) d->nflagged--;
  free(w->win);
  memmove(&d->w[pos], &d->w[pos + 1], (size_t)(d->n - pos - 1) * sizeof *d->w);
  d->n--;
  d->snap_valid = 0;
  return RM_OK;
}

static void fill_info(const worker_t *w, rm_straggler_info_t *out)
{
  memset(out, 0, sizeof *out);
  out->worker = w->id;
  out->flagged = w->flagged;
  out->reports = w->reports;
  out->slow_in_window = __builtin_popcountll(w->slow_bits);
  out->compute_ms = w->med[M_COMPUTE];
  out->comm_ms = w->med[M_COMM];
  out->wait_ms = w->med[M_WAIT];
  out->step_ms = w->med[M_STEP];
  out->reference_ms = w->reference;
  out->score = w->reference > 0.0 ? w->med[M_COMPUTE] / w->reference : 1.0;
}

rm_status_t rm_straggler_get(const rm_straggler_t *d, uint64_t worker,
                             rm_straggler_info_t *out)
{
  int pos;
  if (d == NULL || out == NULL) return RM_ERR_INVALID_ARG;
  if (!find(d, worker, &pos)) return RM_ERR_NOT_FOUND;
  fill_info(&d->w[pos], out);
  return RM_OK;
}

int rm_straggler_list(const rm_straggler_t *d, rm_straggler_info_t *out,
                      int cap)
{
  int n = 0;
  for (; d != NULL && out != NULL && n < cap && n < d->n; n++)
    fill_info(&d->w[n], &out[n]);
  return n;
}

int rm_straggler_workers(const rm_straggler_t *d) { return d ? d->n : 0; }
int rm_straggler_flagged(const rm_straggler_t *d) { return d ? d->nflagged : 0; }
