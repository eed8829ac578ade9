/*
 * suspects.c - which rows one rm_aggregate call marks "excluded": the
 * per-step SUSPECT signal that the coordinator counts over a window
 * (coordinator/core/suspect.c: M of the last W steps names a worker in a
 * byzantine_suspect event). Pure functions of numbers every rank holds
 * bitwise equal (the Krum scores from the all-reduced matrix, the
 * all-reduced trimmed counts, the centered-clipping weights), so every rank
 * marks the same rows.
 *
 * Principle: naming an honest worker is worse than naming nobody. A row is
 * marked only when its distance score is an outlier RELATIVE TO THE SPREAD
 * OF THE ROWS THEMSELVES, which is dominated by the honest ones (at most f
 * of the n rows attack, f < n / 2):
 *
 *   t_i    = log(s_i / med(s))         s: the method's "badness" (below)
 *   spread = 1.4826 * med_j |t_j|      the honest rows' spread of t (MAD)
 *   mark i = s_i not finite, or
 *            i is among the max(f, 1) worst AND t_i > max(log RMIN, K spread)
 *
 * Logs make the rule scale-free (gradients shrink during training) and the
 * spread term makes it adapt: when honest workers differ a lot among
 * themselves (uneven shards, non-i.i.d. data, small batches) the bar rises
 * with them; when they agree closely (large batches: scores concentrate,
 * spread -> 0) RMIN still holds the bar at RMIN times the median, so a
 * single noisy honest batch is not an accusation. K = 4 and RMIN = 4 (K =
 * 2.5 for trimmed fractions) come from bench/aggregate/rm_bench_suspects
 * (methods x attacks x seeds): RMIN = 3 still named the noisy honest worker
 * in 1 of 30 Krum runs, K = 2 for trimmed fractions in 1 of 30 alie runs;
 * K = 3 there missed a 4x sign flip in 21% of 12 runs. Its table and
 * the rule it replaced are in bench/results/2026-12-06-suspects.md. The
 * old rule (a worst-f row with s > 2 med) named an honest worker whose own
 * noise is 1.8x the others' in 83-100% of the clean Krum-family runs.
 *
 * The badness s per method:
 *   krum family    the Krum score over all n rows (k = n - f - 2)
 *   median, trimmed_mean  the fraction of coordinates where the row was
 *                  trimmed; a fraction is at most 1, so here t = s - med
 *                  (no log) and s must also exceed the midpoint between
 *                  what an honest row expects (2f / n) and always (1); with
 *                  f = 0 nothing is trimmed and nothing is marked
 *   centered_clip  1 / w_i (w the last round's clipping weight), so
 *                  with tau below the honest distances the rule reads
 *                  distances; w = 0 (a non-finite row) is marked
 *
 * What no distance rule can do (docs/robust-aggregation.md): an attacker
 * whose vectors are as close to the honest ones as they are to each other
 * (a plain sign flip of a noisy gradient, "a little is enough", small
 * inner-product manipulation) is not named; the window only accumulates
 * evidence the single steps carry.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aggregate/agg_int.h"

#define SUSPECT_K 4.0
#define SUSPECT_RMIN 4.0
#define SUSPECT_KT 2.5

static int cmp_d(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* median of the m finite values copied into work */
static double median_finite(const double *v, int n, double *work, int *m)
{
  int k = 0;
  for (int i = 0; i < n; i++)
    if (isfinite(v[i])) work[k++] = v[i];
  *m = k;
  if (k == 0) return NAN;
  qsort(work, (size_t)k, sizeof *work, cmp_d);
  return k % 2 ? work[k / 2] : 0.5 * work[k / 2 - 1] + 0.5 * work[k / 2];
}

/* see the top of the file; scale_free: t = log(s / med), the bar at least
 * log RMIN; else t = s - med and s must exceed floor */
static void mark(const double *s, int n, int f, int scale_free, double floor,
                 double kk, uint8_t *excluded)
{
  double *work = malloc((size_t)n * sizeof *work), *t = malloc((size_t)n * sizeof *t);
  int m = 0, dummy, worst = f > 0 ? f : 1;
  for (int i = 0; i < n; i++) excluded[i] = !isfinite(s[i]);
  if (!work || !t) goto out; /* out of memory: only the certain marks */
  double med = median_finite(s, n, work, &m);
  if (m < 3 || (scale_free && !(med > 0))) goto out; /* nothing to measure against */
  for (int i = 0; i < n; i++)
    t[i] = !isfinite(s[i]) ? INFINITY : scale_free ? log(s[i] / med) : s[i] - med;
  for (int i = 0, k = 0; i < n; i++)
    if (isfinite(s[i])) work[k++] = fabs(t[i]);
  double bar = kk * 1.4826 * median_finite(work, m, work, &dummy);
  if (scale_free && bar < log(SUSPECT_RMIN)) bar = log(SUSPECT_RMIN);
  for (int i = 0; i < n; i++) {
    if (excluded[i]) continue;
    int worse = 0; /* rows ranking worse than i: larger s, or equal and later */
    for (int j = 0; j < n; j++)
      worse += j != i && (!isfinite(s[j]) || s[j] > s[i] || (s[j] == s[i] && j > i));
    excluded[i] = worse < worst && t[i] > bar && (scale_free || s[i] > floor);
  }
out:
  free(work);
  free(t);
}

void rm__agg_suspects_dist(const double *score, int n, int f, uint8_t *excluded)
{
  mark(score, n, f, 1, 0, SUSPECT_K, excluded);
}

void rm__agg_suspects_trim(const double *frac, int n, int f, uint8_t *excluded)
{
  if (f <= 0) {
    memset(excluded, 0, (size_t)n);
    return;
  }
  mark(frac, n, f, 0, (2.0 * f / n + 1.0) / 2, SUSPECT_KT, excluded);
}

void rm__agg_suspects_cc(const double *w, int n, int f, uint8_t *excluded)
{
  double *inv = malloc((size_t)n * sizeof *inv);
  if (!inv) {
    for (int i = 0; i < n; i++) excluded[i] = !(w[i] > 0);
    return;
  }
  for (int i = 0; i < n; i++) inv[i] = w[i] > 0 ? 1.0 / w[i] : INFINITY;
  mark(inv, n, f, 1, 0, SUSPECT_K, excluded);
  free(inv);
}
