/*
 * agg_bulyan_cc.c - Bulyan's second phase and centered clipping
 * (agg_int.h) over one slice. The module's design (tiles, widening,
 * determinism, non-finite values) is at the top of agg_kernels.c; what is
 * this file's:
 *   - Bulyan's second phase, per coordinate over the rows Krum chose
 *     (agg_krum.c): the mean of the beta values nearest the median. The
 *     reference rm__agg_bulyan_coord_ref sorts each column (insertion sort,
 *     stable; NaN as +inf) and grows a window from the median's insertion
 *     point; the vectorised kernel sorts a tile with agg_coord.c's sorting
 *     network in double and replays the window's growth branch-free, the
 *     same bits ("Bulyan's second phase, vectorised" below), in an SSE2 and
 *     an AVX2 build; for k <= 8 f32 rows agg_coord_small.c's register
 *     kernel takes the strips of 8 columns it can (AVX2);
 *   - centered clipping: the start is the coordinate-wise median
 *     (agg_coord.c's tile kernel, or its reference for n > NET_MAX) and
 *     each row's squared distance to it; a step moves v by the weighted
 *     mean of the rows' differences, rows in rank order, in double. The
 *     weights come from the all-reduced norms (aggregate.c).
 */

/* -O3 like the reduction kernels (worker/CMakeLists.txt sets it for
 * reduce/ only): the rank and distance loops below are written for the
 * vectoriser */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "aggregate/agg_int.h"
#include "aggregate/agg_kernels_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- ordering ---- */
/* v[0..n-1] ascending, idx carried along; stable, so equal values keep row
 * order */
static void sort_pairs(double *v, int *idx, int n)
{
  for (int i = 1; i < n; i++) {
    double x = v[i];
    int xi = idx[i], j = i - 1;
    for (; j >= 0 && v[j] > x; j--) {
      v[j + 1] = v[j];
      idx[j + 1] = idx[j];
    }
    v[j + 1] = x;
    idx[j + 1] = xi;
  }
}

static double median_sorted(const double *v, int n)
{
  return (n % 2) ? v[n / 2] : 0.5 * v[n / 2 - 1] + 0.5 * v[n / 2];
}

/* column k of the tile (rows 0..n-1), NaN as +inf, sorted */
static void column(const double *tile, int n, size_t k, double *v, int *idx)
{
  for (int i = 0; i < n; i++) {
    double x = tile[(size_t)i * TILE + k];
    v[i] = isnan(x) ? INFINITY : x;
    idx[i] = i;
  }
  sort_pairs(v, idx, n);
}

/* the beta values of sorted v[0..k-1] nearest med: a window of the sorted
 * order grown one value at a time from med's insertion point, the lower
 * side winning ties in distance; summed ascending */
static double nearest_mean(const double *v, int k, int beta, double med)
{
  int lo = 0;
  while (lo < k && v[lo] < med) lo++;
  int hi = lo; /* window [lo, hi) */
  while (hi - lo < beta) {
    if (lo == 0) hi++;
    else if (hi == k) lo--;
    else if (med - v[lo - 1] <= v[hi] - med) lo--;
    else hi++;
  }
  double sum = 0;
  for (int p = lo; p < hi; p++) sum += v[p];
  return sum / (double)beta;
}

rm_status_t rm__agg_bulyan_coord_ref(const rm__agg_block_t *b, const int *sel,
                                     int k, int beta, void *out)
{
  double res[TILE];
  rm__agg_scratch_t s;
  if (rm__agg_scratch_get(&s, k) != RM_OK) return RM_ERR_NOMEM;
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    load_tile(b, sel, k, j0, c, s.tile);
    for (size_t q = 0; q < c; q++) {
      column(s.tile, k, q, s.v, s.idx);
      res[q] = nearest_mean(s.v, k, beta, median_sorted(s.v, k));
    }
    rm__agg_narrow_at(res, c, b->dt, out, j0);
  }
  rm__agg_scratch_put(&s);
  return RM_OK;
}

/* ---- Bulyan's second phase, vectorised ----
 * The same bits as rm__agg_bulyan_coord_ref: the k chosen rows of a tile
 * widened to double as the reference widens them (NaN -> +inf), sorted by
 * the merge-exchange network of the coordinate-wise kernel, which gives the
 * reference's sorted values (+0 and -0 may trade places, which changes no
 * result below: they only meet comparisons and sums that start at +0).
 * Then per column, in double as the reference: the median, the insertion
 * point (#{v < med}), the reference's window growth replayed step by step
 * (beta steps; the values beside the window are picked from the sorted
 * rows by index compares and bit masks, no gathers), and the sum of the
 * window in ascending order (values outside it add +0, which changes
 * nothing). All lanes are 64-bit (values, masks, indices), which AVX2
 * compares and selects in 4 lanes; the SSE2 build (no 64-bit integer
 * compares) vectorises only the network and the median, so the AVX2 build
 * is picked by CPUID as for the distances. */
typedef uint64_t agg_u64a __attribute__((may_alias));

#define BULYAN_TILE(NAME, ATTR)                                                      \
  ATTR static void NAME(double *restrict srt, int k, size_t c, const int *pi,          \
                        const int *pj, int npairs, int beta, double *res)             \
  {                                                                                  \
    double med[TILE];                                                                \
    int64_t lo[TILE], hi[TILE];                                                      \
    uint64_t vl[TILE], vh[TILE];                                                     \
    for (int i = 0; i < k; i++) {                                                    \
      double *restrict a = srt + (size_t)i * TILE;                                   \
      for (size_t q = 0; q < c; q++) a[q] = a[q] != a[q] ? (double)INFINITY : a[q];  \
    }                                                                                \
    AGG_NET_SORT(double, srt, pi, pj, npairs, c);                                    \
    if (beta == k) { /* f = 0: the window is every value, summed ascending */        \
      for (size_t q = 0; q < c; q++) res[q] = 0; /* +0 first, as the reference */     \
      for (int p = 0; p < k; p++) {                                                  \
        const double *restrict a = srt + (size_t)p * TILE;                           \
        for (size_t q = 0; q < c; q++) res[q] += a[q];                               \
      }                                                                              \
      for (size_t q = 0; q < c; q++) res[q] /= (double)beta;                         \
      return;                                                                        \
    }                                                                                \
    const double *sm = srt + (size_t)(k / 2) * TILE, *sl = k % 2 ? sm : sm - TILE;    \
    for (size_t q = 0; q < c; q++) {                                                 \
      med[q] = k % 2 ? sm[q] : 0.5 * sl[q] + 0.5 * sm[q];                            \
      lo[q] = 0;                                                                     \
    }                                                                                \
    for (int p = 0; p < k; p++) {                                                    \
      const double *restrict a = srt + (size_t)p * TILE;                             \
      for (size_t q = 0; q < c; q++) lo[q] += a[q] < med[q];                         \
    }                                                                                \
    for (size_t q = 0; q < c; q++) hi[q] = lo[q];                                    \
    for (int step = 0; step < beta; step++) {                                        \
      for (size_t q = 0; q < c; q++) vl[q] = vh[q] = 0;                              \
      for (int p = 0; p < k; p++) {                                                  \
        const agg_u64a *restrict a = (const agg_u64a *)(srt + (size_t)p * TILE);     \
        int64_t p1 = p + 1, p0 = p;                                                  \
        for (size_t q = 0; q < c; q++) {                                             \
          vl[q] |= a[q] & -(uint64_t)(lo[q] == p1);                                  \
          vh[q] |= a[q] & -(uint64_t)(hi[q] == p0);                                  \
        }                                                                            \
      }                                                                              \
      for (size_t q = 0; q < c; q++) {                                               \
        double l, h;                                                                 \
        memcpy(&l, &vl[q], sizeof l);                                                \
        memcpy(&h, &vh[q], sizeof h);                                                \
        int64_t left = (lo[q] > 0) & ((hi[q] == k) | (med[q] - l <= h - med[q]));    \
        lo[q] -= left;                                                               \
        hi[q] += 1 - left;                                                           \
      }                                                                              \
    }                                                                                \
    for (size_t q = 0; q < c; q++) res[q] = 0;                                       \
    for (int p = 0; p < k; p++) {                                                    \
      const agg_u64a *restrict a = (const agg_u64a *)(srt + (size_t)p * TILE);       \
      int64_t p0 = p;                                                                \
      for (size_t q = 0; q < c; q++) {                                               \
        uint64_t m = a[q] & -(uint64_t)((lo[q] <= p0) & (p0 < hi[q]));               \
        double x;                                                                    \
        memcpy(&x, &m, sizeof x);                                                    \
        res[q] += x;                                                                 \
      }                                                                              \
    }                                                                                \
    for (size_t q = 0; q < c; q++) res[q] /= (double)beta;                           \
  }

#ifdef AGG_HAVE_AVX2
BULYAN_TILE(bu_tile_avx2, AGG_AVX2)
#endif
BULYAN_TILE(bu_tile_base, )

typedef void (*bu_tile_fn)(double *, int, size_t, const int *, const int *, int, int, double *);

static bu_tile_fn bu_tile_pick(void)
{
#ifdef AGG_HAVE_AVX2
  if (rm__agg_avx2()) return bu_tile_avx2;
#endif
  return bu_tile_base;
}

rm_status_t rm__agg_bulyan_coord(const rm__agg_block_t *b, const int *sel,
                                 int k, int beta, void *out)
{
  double res[TILE];
  rm__agg_net_t w;
  if (k > NET_MAX || k < 1 || beta < 1 || beta > k)
    return rm__agg_bulyan_coord_ref(b, sel, k, beta, out);
  if (rm__agg_net_get(&w, k, RM_F64) != RM_OK) return RM_ERR_NOMEM;
  bu_tile_fn tile = bu_tile_pick();
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    /* k <= 8 f32 rows: the register kernel (agg_coord_small.c) takes the
     * strips of 8 columns it can; the tile kernel the runs it leaves */
    uint32_t left = rm__agg_bulyan_small(b, sel, k, beta, j0, c, out);
    for (size_t s = 0, a, z; rm__agg_next_run(left, c, &s, &a, &z);) {
      double *x = (double *)w.x;
      for (int i = 0; i < k; i++)
        rm__agg_widen(row_ptr(b, sel[i]), j0 + a, z - a, b->dt, x + (size_t)i * TILE);
      tile(x, k, z - a, w.pi, w.pj, w.npairs, beta, res);
      rm__agg_narrow_at(res, z - a, b->dt, out, j0 + a);
    }
  }
  rm__agg_net_put(&w);
  return RM_OK;
}

/* ---- centered clipping ---- */
static void partial_norms(const double *tile, int n, size_t c, const double *v,
                          double *part)
{
  for (int i = 0; i < n; i++) {
    const double *x = tile + (size_t)i * TILE;
    part[i] += rm__agg_sumsq_diff(x, v, c);
  }
}

rm_status_t rm__agg_cc_start(const rm__agg_block_t *b, double *v, double *part)
{
  int n = b->n, vec = n <= NET_MAX;
  rm__agg_scratch_t s;
  rm__agg_net_t w;
  int64_t *rank = vec ? NULL : malloc((size_t)n * TILE * sizeof *rank);
  if (!vec && !rank) return RM_ERR_NOMEM;
  if (vec && rm__agg_net_get(&w, n, b->dt) != RM_OK) return RM_ERR_NOMEM;
  if (rm__agg_scratch_get(&s, n) != RM_OK) {
    if (vec) rm__agg_net_put(&w);
    free(rank);
    return RM_ERR_NOMEM;
  }
  memset(part, 0, (size_t)n * sizeof *part);
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    if (vec) { /* the median as rm__agg_coord computes it (same bits as below) */
      rm__agg_net_tile(&w, b, j0, c, RM_AGG_MEDIAN, 0, v + j0, NULL);
    } else {
      load_tile(b, NULL, n, j0, c, s.tile);
      rm__agg_tile_ranks(s.tile, n, c, rank);
      rm__agg_tile_median(s.tile, rank, n, c, v + j0);
    }
    load_tile(b, NULL, n, j0, c, s.tile); /* NaN back as NaN */
    partial_norms(s.tile, n, c, v + j0, part);
  }
  rm__agg_scratch_put(&s);
  if (vec) rm__agg_net_put(&w);
  free(rank);
  return RM_OK;
}

rm_status_t rm__agg_cc_step(const rm__agg_block_t *b, const double *w,
                            double *v, double *part)
{
  int n = b->n;
  double acc[TILE];
  rm__agg_scratch_t s;
  if (rm__agg_scratch_get(&s, n) != RM_OK) return RM_ERR_NOMEM;
  if (part) memset(part, 0, (size_t)n * sizeof *part);
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    double *vt = v + j0;
    load_tile(b, NULL, n, j0, c, s.tile);
    memset(acc, 0, c * sizeof *acc);
    for (int i = 0; i < n; i++) {
      if (!(w[i] > 0)) continue;
      const double *x = s.tile + (size_t)i * TILE;
      for (size_t k = 0; k < c; k++) acc[k] += w[i] * (x[k] - vt[k]);
    }
    for (size_t k = 0; k < c; k++) vt[k] += acc[k] / (double)n;
    if (part) partial_norms(s.tile, n, c, vt, part);
  }
  rm__agg_scratch_put(&s);
  return RM_OK;
}
