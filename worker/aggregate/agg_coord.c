/*
 * agg_coord.c - rm_aggregate's coordinate-wise statistics (median, trimmed
 * mean; agg_int.h) over one slice, and the tile kernel that centered
 * clipping's start (agg_bulyan_cc.c) borrows for its median. The module's
 * design (tiles, widening, determinism, non-finite values) is at the top of
 * agg_kernels.c; what is this file's:
 *
 * Three kernels, the same bits (tests/aggregate/test_coord_vec.c):
 *   - rm__agg_coord_ref, the reference and the path for n > NET_MAX: the
 *     rows widened to double, each row's stable rank per column, the
 *     statistic from the ranks ("coordinate-wise" below);
 *   - the tile kernel: a sorting network over the rows in f32 for every
 *     float type but f64, which gives the reference's bits; the arithmetic
 *     in double ("coordinate-wise, vectorised" below), in an SSE2 and an
 *     AVX2 build picked by CPUID (agg_kernels_int.h);
 *   - the register kernel for f32 rows and 2 <= n <= 8 (agg_coord_small.c),
 *     which hands back the strips it cannot take (ties at the trimming
 *     boundaries, zero medians) to the tile kernel.
 * NaN is read as +inf wherever values are ordered, so NaN rows are the ones
 * trimmed. rm__agg_coord_sq also sums each row's squares for the norm while
 * the rows are in cache (not rm__agg_norm's bits: the kernel's order).
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

/* ---- coordinate-wise ----
 * Order statistics without sorting: per column, rank(i) = #{j : x_j < x_i,
 * or x_j == x_i and j < i} (a permutation of 0..n-1, the position of row i
 * in the stable sort), computed for a whole tile with branch-free compares
 * the vectoriser handles; n^2 compares per column, fine for the n of
 * data-parallel training, and no mispredicted branches. NaN is +inf first. */
void rm__agg_tile_ranks(double *tile, int n, size_t c, int64_t *rank)
{
  for (int i = 0; i < n; i++) {
    double *a = tile + (size_t)i * TILE;
    int64_t *ri = rank + (size_t)i * TILE;
    for (size_t k = 0; k < c; k++) {
      a[k] = a[k] != a[k] ? INFINITY : a[k];
      ri[k] = 0;
    }
  }
  for (int i = 0; i < n; i++) {
    const double *a = tile + (size_t)i * TILE;
    int64_t *ri = rank + (size_t)i * TILE;
    for (int j = 0; j < n; j++) {
      const double *b = tile + (size_t)j * TILE;
      if (j < i)
        for (size_t k = 0; k < c; k++) ri[k] += b[k] <= a[k];
      else if (j > i)
        for (size_t k = 0; k < c; k++) ri[k] += b[k] < a[k];
    }
  }
}

/* res[k] = median of column k (n odd: rank n/2; even: 0.5*lo + 0.5*hi) */
void rm__agg_tile_median(const double *tile, const int64_t *rank, int n, size_t c, double *res)
{
  int hi = n / 2, lo = n % 2 ? hi : hi - 1;
  double l[TILE], h[TILE];
  for (size_t k = 0; k < c; k++) l[k] = h[k] = 0;
  for (int i = 0; i < n; i++) {
    const double *a = tile + (size_t)i * TILE;
    const int64_t *ri = rank + (size_t)i * TILE;
    for (size_t k = 0; k < c; k++) {
      l[k] = ri[k] == lo ? a[k] : l[k];
      h[k] = ri[k] == hi ? a[k] : h[k];
    }
  }
  for (size_t k = 0; k < c; k++) res[k] = lo == hi ? l[k] : 0.5 * l[k] + 0.5 * h[k];
}

rm_status_t rm__agg_coord_ref(const rm__agg_block_t *b, rm_agg_method_t m, int f,
                              void *out, uint32_t *trimmed)
{
  int n = b->n;
  double res[TILE];
  rm__agg_scratch_t s;
  int64_t *rank = malloc((size_t)n * TILE * sizeof *rank);
  if (!rank) return RM_ERR_NOMEM;
  if (rm__agg_scratch_get(&s, n) != RM_OK) {
    free(rank);
    return RM_ERR_NOMEM;
  }
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    load_tile(b, NULL, n, j0, c, s.tile);
    rm__agg_tile_ranks(s.tile, n, c, rank);
    if (m == RM_AGG_MEDIAN) {
      rm__agg_tile_median(s.tile, rank, n, c, res);
    } else { /* kept values summed in row order */
      for (size_t k = 0; k < c; k++) res[k] = 0;
      for (int i = 0; i < n; i++) {
        const double *a = s.tile + (size_t)i * TILE;
        const int64_t *ri = rank + (size_t)i * TILE;
        for (size_t k = 0; k < c; k++) res[k] += ri[k] >= f && ri[k] < n - f ? a[k] : 0.0;
      }
      for (size_t k = 0; k < c; k++) res[k] /= (double)(n - 2 * f);
    }
    for (int i = 0; i < n && f > 0; i++) {
      const int64_t *ri = rank + (size_t)i * TILE;
      uint32_t t = 0;
      for (size_t k = 0; k < c; k++) t += ri[k] < f || ri[k] >= n - f;
      trimmed[i] += t;
    }
    rm__agg_narrow_at(res, c, b->dt, out, j0);
  }
  rm__agg_scratch_put(&s);
  free(rank);
  return RM_OK;
}

/* ---- coordinate-wise, vectorised ----
 * The same results, bit for bit, as rm__agg_coord_ref (tests/aggregate/
 * test_coord_vec.c checks it on random inputs with NaN, infinities, ties and
 * signed zeros in every dtype), a few times faster for the n of data-parallel
 * training:
 *   1. the tile's n rows in their own precision (f32, and f16/bf16 widened
 *      to f32, which is exact; f64 stays f64): comparisons of f32 values
 *      give the same answers in f32 as in double, so nothing is lost;
 *      NaN -> +inf as in the reference
 *   2. a copy sorted by a sorting network over the rows (Batcher's merge
 *      exchange, Knuth 5.2.2 M, for any n <= NET_MAX): every comparator is
 *      an element-wise min/max of two rows of TILE values, branch-free and
 *      SIMD-wide; the sorted VALUES give the order statistics' values
 *   3. one pass over the rows in row order recovers WHICH row holds each
 *      order statistic as the reference's stable rank does: a row's rank is
 *      #{smaller} + #{equal rows before it}, so with L = #{x < v} the row of
 *      rank p among those equal to v is the (p - L)-th equal one. This is
 *      what keeps -0 and +0 (equal, different bits) and the kept set of the
 *      trimmed mean exactly the reference's.
 *   4. the arithmetic (0.5 lo + 0.5 hi, the row-order sum of kept values,
 *      the division) in double, as the reference, then narrowed the same way.
 * n > NET_MAX goes to the reference. */

/* comparator pairs (i < j) of Batcher's merge exchange for n elements;
 * returns the count (at most NET_MAX^2 / 2 for n <= NET_MAX) */
static int net_pairs(int n, int *pi, int *pj)
{
  int t = 0, cnt = 0;
  while ((1 << t) < n) t++;
  for (int p = t ? 1 << (t - 1) : 0; p > 0; p >>= 1) {
    int q = t ? 1 << (t - 1) : 0, r = 0, d = p;
    for (;;) {
      for (int i = 0; i < n - d; i++)
        if ((i & p) == r) {
          pi[cnt] = i;
          pj[cnt] = i + d;
          cnt++;
        }
      if (q == p) break;
      d = q - p;
      q >>= 1;
      r = p;
    }
  }
  return cnt;
}

/* the kernel for one element type T (float or double) and the integer type
 * TI of its width (so compares, counters and selects vectorise together).
 * Order of work per tile: NaN -> +inf; the network on a copy; L counts;
 * per row (in order) the median's selection, then keep / trimmed, the
 * row's kept values left in x; the trimmed mean's row-order sum last. */
#define COORD_VEC(T, TI, NAME, ATTR)                                                 \
  ATTR static void NAME##_tile(T *restrict x, T *restrict srt, int n, size_t c,           \
                          const int *pi, const int *pj, int npairs,                  \
                          rm_agg_method_t m, int f, double *res, uint32_t *trimmed)  \
  {                                                                                  \
    int med = m == RM_AGG_MEDIAN, trim = !med || f > 0;                              \
    for (int i = 0; i < n; i++) {                                                    \
      T *restrict a = x + (size_t)i * TILE, *restrict o = srt + (size_t)i * TILE;     \
      for (size_t k = 0; k < c; k++) o[k] = a[k] = a[k] != a[k] ? (T)INFINITY : a[k]; \
    }                                                                                \
    AGG_NET_SORT(T, srt, pi, pj, npairs, c);                                         \
    /* ranks wanted: the median's lo/hi, the kept range [f, n - f - 1] */            \
    TI phi = n / 2, plo = n % 2 ? phi : phi - 1, kf = f, kl = n - f - 1;              \
    const T *slo = srt + (size_t)plo * TILE, *shi = srt + (size_t)phi * TILE;         \
    const T *sf = srt + (size_t)kf * TILE, *sl = srt + (size_t)kl * TILE;             \
    /* fast path: where no column of the tile has a tie across the trimming      \
     * boundaries (rank f-1 / f, n-f-1 / n-f) nor a zero median, a row's rank    \
     * follows from its value alone (rank >= f iff x >= sf, rank <= n-f-1 iff    \
     * x <= sl) and the median's value is its bits (equal nonzero values have    \
     * equal bits; only +0 and -0 differ), so the L counts and the equal-row     \
     * bookkeeping below are not needed; the results are the same */            \
    TI tie = 0;                                                                      \
    if (trim && f > 0) {                                                             \
      const T *sf1 = srt + (size_t)(kf - 1) * TILE, *sl1 = srt + (size_t)(kl + 1) * TILE; \
      for (size_t k = 0; k < c; k++) tie |= (sf1[k] == sf[k]) | (sl[k] == sl1[k]);    \
    }                                                                                \
    if (med)                                                                         \
      for (size_t k = 0; k < c; k++) tie |= (slo[k] == 0) | (shi[k] == 0);            \
    if (!tie) {                                                                      \
      for (int i = 0; i < n && trim; i++) {                                          \
        T *restrict a = x + (size_t)i * TILE;                                        \
        TI tr = 0;                                                                   \
        for (size_t k = 0; k < c; k++) {                                             \
          T y = a[k];                                                                \
          TI keep = (y >= sf[k]) & (y <= sl[k]);                                     \
          a[k] = keep ? y : (T)0;                                                    \
          tr += 1 - keep;                                                            \
        }                                                                            \
        if (f > 0) trimmed[i] += (uint32_t)tr;                                       \
      }                                                                              \
      if (med) {                                                                     \
        for (size_t k = 0; k < c; k++)                                               \
          res[k] = plo == phi ? (double)slo[k] : 0.5 * (double)slo[k] + 0.5 * (double)shi[k]; \
        return;                                                                      \
      }                                                                              \
      for (size_t k = 0; k < c; k++) res[k] = 0;                                     \
      for (int i = 0; i < n; i++) {                                                  \
        const T *restrict a = x + (size_t)i * TILE;                                  \
        for (size_t k = 0; k < c; k++) res[k] += (double)a[k];                       \
      }                                                                              \
      for (size_t k = 0; k < c; k++) res[k] /= (double)(n - 2 * f);                  \
      return;                                                                        \
    }                                                                                \
    TI llo[TILE], lhi[TILE], lf[TILE], ll[TILE], elo[TILE], ehi[TILE], ef[TILE], el[TILE]; \
    T vlo[TILE], vhi[TILE];                                                          \
    for (size_t k = 0; k < c; k++) {                                                 \
      llo[k] = lhi[k] = lf[k] = ll[k] = elo[k] = ehi[k] = ef[k] = el[k] = 0;          \
      vlo[k] = vhi[k] = 0;                                                           \
      res[k] = 0;                                                                    \
    }                                                                                \
    for (int i = 0; i < n; i++) { /* L = #{x < v} for each wanted value */          \
      const T *restrict a = x + (size_t)i * TILE;                                    \
      if (med)                                                                       \
        for (size_t k = 0; k < c; k++) {                                             \
          llo[k] += a[k] < slo[k];                                                   \
          lhi[k] += a[k] < shi[k];                                                   \
        }                                                                            \
      if (trim)                                                                      \
        for (size_t k = 0; k < c; k++) {                                             \
          lf[k] += a[k] < sf[k];                                                     \
          ll[k] += a[k] < sl[k];                                                     \
        }                                                                            \
    }                                                                                \
    for (int i = 0; i < n; i++) { /* rows in order: rank = L + #equal before */     \
      T *restrict a = x + (size_t)i * TILE;                                          \
      if (med)                                                                       \
        for (size_t k = 0; k < c; k++) {                                             \
          T y = a[k];                                                                \
          TI qlo = y == slo[k], qhi = y == shi[k];                                   \
          vlo[k] = (qlo & (llo[k] + elo[k] == plo)) ? y : vlo[k];                     \
          vhi[k] = (qhi & (lhi[k] + ehi[k] == phi)) ? y : vhi[k];                     \
          elo[k] += qlo;                                                             \
          ehi[k] += qhi;                                                             \
        }                                                                            \
      if (trim) {                                                                    \
        TI tr = 0;                                                                   \
        for (size_t k = 0; k < c; k++) {                                             \
          T y = a[k];                                                                \
          TI qf = y == sf[k], ql = y == sl[k];                                       \
          /* rank >= f: above sf, or equal with enough equal rows before */          \
          TI keep = ((y > sf[k]) | (qf & (lf[k] + ef[k] >= kf))) &                    \
                    ((y < sl[k]) | (ql & (ll[k] + el[k] <= kl)));                    \
          a[k] = keep ? y : (T)0;                                                    \
          tr += 1 - keep;                                                            \
          ef[k] += qf;                                                               \
          el[k] += ql;                                                               \
        }                                                                            \
        if (f > 0) trimmed[i] += (uint32_t)tr;                                       \
      }                                                                              \
    }                                                                                \
    if (med) {                                                                       \
      for (size_t k = 0; k < c; k++)                                                 \
        res[k] = plo == phi ? (double)vlo[k] : 0.5 * (double)vlo[k] + 0.5 * (double)vhi[k]; \
      return;                                                                        \
    }                                                                                \
    for (int i = 0; i < n; i++) { /* kept values (others +0) summed in row order */ \
      const T *restrict a = x + (size_t)i * TILE;                                    \
      for (size_t k = 0; k < c; k++) res[k] += (double)a[k];                         \
    }                                                                                \
    for (size_t k = 0; k < c; k++) res[k] /= (double)(n - 2 * f);                    \
  }
/* an SSE2 build and an AVX2 one (picked by CPUID, as the reduction kernels
 * are): the same operations in the same order, so the same bits; AVX2
 * doubles the lanes and has the 64-bit compares the f64 kernel needs */
#ifdef AGG_HAVE_AVX2
COORD_VEC(float, int32_t, cv32_avx2, AGG_AVX2)
COORD_VEC(double, int64_t, cv64_avx2, AGG_AVX2)
#endif
COORD_VEC(float, int32_t, cv32, )
COORD_VEC(double, int64_t, cv64, )

rm_status_t rm__agg_net_get(rm__agg_net_t *w, int n, rm_dtype_t dt)
{
  size_t esz = dt == RM_F64 ? sizeof(double) : sizeof(float);
  w->pi = malloc((size_t)NET_MAX * NET_MAX * sizeof *w->pi);
  w->pj = malloc((size_t)NET_MAX * NET_MAX * sizeof *w->pj);
  w->x = malloc(2 * (size_t)n * TILE * esz);
  if (w->pi && w->pj && w->x) {
    w->npairs = net_pairs(n, w->pi, w->pj);
    return RM_OK;
  }
  free(w->pi);
  free(w->pj);
  free(w->x);
  return RM_ERR_NOMEM;
}

void rm__agg_net_put(rm__agg_net_t *w)
{
  free(w->pi);
  free(w->pj);
  free(w->x);
}

/* res[0..c) (double) = the statistic of columns j0..j0+c-1 */
void rm__agg_net_tile(rm__agg_net_t *w, const rm__agg_block_t *b, size_t j0, size_t c,
                     rm_agg_method_t m, int f, double *res, uint32_t *trimmed)
{
  int n = b->n;
  if (b->dt == RM_F64) {
    double *x = (double *)w->x;
    for (int i = 0; i < n; i++)
      memcpy(x + (size_t)i * TILE, (const double *)row_ptr(b, i) + j0, c * sizeof *x);
#ifdef AGG_HAVE_AVX2
    if (rm__agg_avx2())
      cv64_avx2_tile(x, x + (size_t)n * TILE, n, c, w->pi, w->pj, w->npairs, m, f, res, trimmed);
    else
#endif
      cv64_tile(x, x + (size_t)n * TILE, n, c, w->pi, w->pj, w->npairs, m, f, res, trimmed);
  } else {
    float *x = (float *)w->x;
    for (int i = 0; i < n; i++) rm__agg_widen32(row_ptr(b, i), j0, c, b->dt, x + (size_t)i * TILE);
#ifdef AGG_HAVE_AVX2
    if (rm__agg_avx2())
      cv32_avx2_tile(x, x + (size_t)n * TILE, n, c, w->pi, w->pj, w->npairs, m, f, res, trimmed);
    else
#endif
      cv32_tile(x, x + (size_t)n * TILE, n, c, w->pi, w->pj, w->npairs, m, f, res, trimmed);
  }
}

/* f32 rows and 2 <= n <= 8 go to the register kernel (agg_coord_small.c)
 * eight columns at a time; the strips it leaves (ties, zero medians, a
 * partial last strip) come here, in runs of adjacent strips */
rm_status_t rm__agg_coord(const rm__agg_block_t *b, rm_agg_method_t m, int f,
                          void *out, uint32_t *trimmed)
{
  return rm__agg_coord_sq(b, m, f, out, trimmed, NULL);
}

rm_status_t rm__agg_coord_sq(const rm__agg_block_t *b, rm_agg_method_t m, int f,
                             void *out, uint32_t *trimmed, double *sq)
{
  double res[TILE];
  int64_t kept[8] = {0};
  size_t taken = 0;
  rm__agg_net_t w;
  int small = rm__agg_coord_small_ok(b) && TILE == 32 * 8;
  if (b->n > NET_MAX || b->n < 1) {
    if (sq)
      for (size_t j0 = 0; j0 < b->len; j0 += TILE)
        rm__agg_rows_sumsq(b, j0, b->len - j0 < TILE ? b->len - j0 : TILE, sq);
    return rm__agg_coord_ref(b, m, f, out, trimmed);
  }
  if (rm__agg_net_get(&w, b->n, b->dt) != RM_OK) return RM_ERR_NOMEM;
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    if (!small) {
      if (sq) rm__agg_rows_sumsq(b, j0, c, sq);
      rm__agg_net_tile(&w, b, j0, c, m, f, res, trimmed);
      rm__agg_narrow_at(res, c, b->dt, out, j0);
      continue;
    }
    uint32_t left = rm__agg_coord_small(b, m, f, j0, c, out, kept, sq);
    size_t done = c;
    for (size_t s = 0, a, z; rm__agg_next_run(left, c, &s, &a, &z);) {
      if (sq) rm__agg_rows_sumsq(b, j0 + a, z - a, sq);
      rm__agg_net_tile(&w, b, j0 + a, z - a, m, f, res, trimmed);
      rm__agg_narrow_at(res, z - a, b->dt, out, j0 + a);
      done -= z - a;
    }
    taken += done;
  }
  /* the register kernel counts kept columns; trimmed = taken - kept */
  if (small && f > 0)
    for (int i = 0; i < b->n; i++) trimmed[i] += (uint32_t)((int64_t)taken - kept[i]);
  rm__agg_net_put(&w);
  return RM_OK;
}
