/*
 * agg_kernels.c - the per-slice math of rm_aggregate (agg_int.h): no I/O.
 *
 * Every kernel walks its block in tiles of TILE columns: the n rows' values
 * of the tile are widened to double once (f16/bf16 through reduce/half.h,
 * exactly as the reduction kernels widen them), the statistic is computed in
 * double and narrowed once (f16/bf16 via f32, round to nearest even). The
 * exception is the coordinate-wise order statistics (median, trimmed mean,
 * centered clipping's start): a sorting network over the rows in f32 for
 * every float type but f64, which gives the same bits (see "coordinate-wise,
 * vectorised" below); their arithmetic is still in double.
 *
 * Determinism: a coordinate is computed by one rank only (its slice owner),
 * so bitwise agreement needs only a fixed order of operations, which every
 * loop here has: rows in rank order, sorted values in ascending order, sort
 * ties broken by row (insertion sort, stable). Selections (Krum) run on the
 * all-reduced matrix, which every rank holds bitwise equal.
 *
 * Non-finite values: NaN is read as +inf wherever values are ordered
 * (median, trimmed mean, Bulyan), so NaN rows are the ones trimmed. For the
 * Krum family a row with any non-finite value is at infinite distance from
 * every other row and ranks after all finite rows.
 */
/* -O3 like the reduction kernels (worker/CMakeLists.txt sets it for
 * reduce/ only): the rank and distance loops below are written for the
 * vectoriser */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "aggregate/agg_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reduce/half.h"

#define TILE 256

static void widen(const void *row, size_t j0, size_t c, rm_dtype_t dt, double *dst)
{
  switch (dt) {
  case RM_F32: {
    const float *p = (const float *)row + j0;
    for (size_t k = 0; k < c; k++) dst[k] = p[k];
    break;
  }
  case RM_F64:
    memcpy(dst, (const double *)row + j0, c * sizeof *dst);
    break;
  case RM_F16: {
    const uint16_t *p = (const uint16_t *)row + j0;
    for (size_t k = 0; k < c; k++) dst[k] = rm__h2f(p[k]);
    break;
  }
  case RM_BF16: {
    const uint16_t *p = (const uint16_t *)row + j0;
    for (size_t k = 0; k < c; k++) dst[k] = rm__b2f(p[k]);
    break;
  }
  default:
    for (size_t k = 0; k < c; k++) dst[k] = NAN;
  }
}

static void narrow(const double *src, size_t c, rm_dtype_t dt, void *row, size_t j0)
{
  switch (dt) {
  case RM_F32: {
    float *p = (float *)row + j0;
    for (size_t k = 0; k < c; k++) p[k] = (float)src[k];
    break;
  }
  case RM_F64:
    memcpy((double *)row + j0, src, c * sizeof *src);
    break;
  case RM_F16: {
    uint16_t *p = (uint16_t *)row + j0;
    for (size_t k = 0; k < c; k++) p[k] = rm__f2h((float)src[k]);
    break;
  }
  case RM_BF16: {
    uint16_t *p = (uint16_t *)row + j0;
    for (size_t k = 0; k < c; k++) p[k] = rm__f2b((float)src[k]);
    break;
  }
  default:
    break;
  }
}

void rm__agg_narrow(const double *v, size_t len, rm_dtype_t dt, void *out)
{
  narrow(v, len, dt, out, 0);
}

static const void *row_ptr(const rm__agg_block_t *b, int i)
{
  return (const char *)b->rows + (size_t)i * b->stride * rm_dtype_size(b->dt);
}

/* tile[i*TILE + k] = row i, column j0 + k, for the rows listed (or all) */
static void load_tile(const rm__agg_block_t *b, const int *sel, int k, size_t j0,
                      size_t c, double *tile)
{
  for (int i = 0; i < k; i++)
    widen(row_ptr(b, sel ? sel[i] : i), j0, c, b->dt, tile + (size_t)i * TILE);
}

/* ---- vector helpers ---- */
static double sumsq(const double *t, size_t c, double scale)
{
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  size_t k = 0;
  for (; k + 4 <= c; k += 4) {
    double x0 = t[k] * scale, x1 = t[k + 1] * scale, x2 = t[k + 2] * scale,
           x3 = t[k + 3] * scale;
    a0 += x0 * x0;
    a1 += x1 * x1;
    a2 += x2 * x2;
    a3 += x3 * x3;
  }
  for (; k < c; k++) a0 += (t[k] * scale) * (t[k] * scale);
  return (a0 + a1) + (a2 + a3);
}

double rm__agg_norm(const void *buf, size_t count, rm_dtype_t dt)
{
  double t[TILE], ss = 0, amax = 0;
  for (size_t j0 = 0; j0 < count; j0 += TILE) {
    size_t c = count - j0 < TILE ? count - j0 : TILE;
    widen(buf, j0, c, dt, t);
    ss += sumsq(t, c, 1.0);
  }
  if (!isinf(ss)) return sqrt(ss);
  /* inf: a non-finite value, or finite values whose squares overflow */
  for (size_t j0 = 0; j0 < count; j0 += TILE) {
    size_t c = count - j0 < TILE ? count - j0 : TILE;
    widen(buf, j0, c, dt, t);
    for (size_t k = 0; k < c; k++) amax = fabs(t[k]) > amax || isnan(t[k]) ? fabs(t[k]) : amax;
  }
  if (!isfinite(amax)) return isnan(amax) ? NAN : INFINITY;
  ss = 0;
  for (size_t j0 = 0; j0 < count; j0 += TILE) {
    size_t c = count - j0 < TILE ? count - j0 : TILE;
    widen(buf, j0, c, dt, t);
    ss += sumsq(t, c, 1.0 / amax);
  }
  return sqrt(ss) * amax;
}

void rm__agg_scale(void *buf, size_t count, rm_dtype_t dt, double factor)
{
  double t[TILE];
  for (size_t j0 = 0; j0 < count; j0 += TILE) {
    size_t c = count - j0 < TILE ? count - j0 : TILE;
    widen(buf, j0, c, dt, t);
    for (size_t k = 0; k < c; k++) t[k] *= factor;
    narrow(t, c, dt, buf, j0);
  }
}

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

typedef struct scratch {
  double *tile, *v;
  int *idx;
} scratch_t;

static rm_status_t scratch_get(scratch_t *s, int n)
{
  s->tile = malloc((size_t)n * TILE * sizeof *s->tile);
  s->v = malloc((size_t)n * sizeof *s->v);
  s->idx = malloc((size_t)n * sizeof *s->idx);
  if (s->tile && s->v && s->idx) return RM_OK;
  free(s->tile);
  free(s->v);
  free(s->idx);
  return RM_ERR_NOMEM;
}

static void scratch_put(scratch_t *s)
{
  free(s->tile);
  free(s->v);
  free(s->idx);
}

/* ---- coordinate-wise ----
 * Order statistics without sorting: per column, rank(i) = #{j : x_j < x_i,
 * or x_j == x_i and j < i} (a permutation of 0..n-1, the position of row i
 * in the stable sort), computed for a whole tile with branch-free compares
 * the vectoriser handles; n^2 compares per column, fine for the n of
 * data-parallel training, and no mispredicted branches. NaN is +inf first. */
static void tile_ranks(double *tile, int n, size_t c, int64_t *rank)
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
static void tile_median(const double *tile, const int64_t *rank, int n, size_t c, double *res)
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
  scratch_t s;
  int64_t *rank = malloc((size_t)n * TILE * sizeof *rank);
  if (!rank) return RM_ERR_NOMEM;
  if (scratch_get(&s, n) != RM_OK) {
    free(rank);
    return RM_ERR_NOMEM;
  }
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    load_tile(b, NULL, n, j0, c, s.tile);
    tile_ranks(s.tile, n, c, rank);
    if (m == RM_AGG_MEDIAN) {
      tile_median(s.tile, rank, n, c, res);
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
    narrow(res, c, b->dt, out, j0);
  }
  scratch_put(&s);
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
#define NET_MAX 64

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
#define COORD_VEC(T, TI, NAME)                                                       \
  static void NAME##_tile(T *restrict x, T *restrict srt, int n, size_t c,           \
                          const int *pi, const int *pj, int npairs,                  \
                          rm_agg_method_t m, int f, double *res, uint32_t *trimmed)  \
  {                                                                                  \
    int med = m == RM_AGG_MEDIAN, trim = !med || f > 0;                              \
    for (int i = 0; i < n; i++) {                                                    \
      T *restrict a = x + (size_t)i * TILE, *restrict o = srt + (size_t)i * TILE;     \
      for (size_t k = 0; k < c; k++) o[k] = a[k] = a[k] != a[k] ? (T)INFINITY : a[k]; \
    }                                                                                \
    for (int q = 0; q < npairs; q++) {                                               \
      T *restrict u = srt + (size_t)pi[q] * TILE, *restrict v = srt + (size_t)pj[q] * TILE; \
      for (size_t k = 0; k < c; k++) {                                               \
        T lo = u[k] < v[k] ? u[k] : v[k], hi = u[k] < v[k] ? v[k] : u[k];             \
        u[k] = lo;                                                                   \
        v[k] = hi;                                                                   \
      }                                                                              \
    }                                                                                \
    /* ranks wanted: the median's lo/hi, the kept range [f, n - f - 1] */            \
    TI phi = n / 2, plo = n % 2 ? phi : phi - 1, kf = f, kl = n - f - 1;              \
    const T *slo = srt + (size_t)plo * TILE, *shi = srt + (size_t)phi * TILE;         \
    const T *sf = srt + (size_t)kf * TILE, *sl = srt + (size_t)kl * TILE;             \
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
COORD_VEC(float, int32_t, cv32)
COORD_VEC(double, int64_t, cv64)

static void widen32(const void *row, size_t j0, size_t c, rm_dtype_t dt, float *dst)
{
  switch (dt) {
  case RM_F32:
    memcpy(dst, (const float *)row + j0, c * sizeof *dst);
    break;
  case RM_F16: {
    const uint16_t *p = (const uint16_t *)row + j0;
    for (size_t k = 0; k < c; k++) dst[k] = rm__h2f(p[k]);
    break;
  }
  case RM_BF16: {
    const uint16_t *p = (const uint16_t *)row + j0;
    for (size_t k = 0; k < c; k++) dst[k] = rm__b2f(p[k]);
    break;
  }
  default:
    for (size_t k = 0; k < c; k++) dst[k] = NAN;
  }
}

/* the network's comparators and the tile buffers (x and its sorted copy) */
typedef struct net {
  int *pi, *pj, npairs;
  char *x;
} net_t;

static rm_status_t net_get(net_t *w, int n, rm_dtype_t dt)
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

static void net_put(net_t *w)
{
  free(w->pi);
  free(w->pj);
  free(w->x);
}

/* res[0..c) (double) = the statistic of columns j0..j0+c-1 */
static void net_tile(net_t *w, const rm__agg_block_t *b, size_t j0, size_t c,
                     rm_agg_method_t m, int f, double *res, uint32_t *trimmed)
{
  int n = b->n;
  if (b->dt == RM_F64) {
    double *x = (double *)w->x;
    for (int i = 0; i < n; i++)
      memcpy(x + (size_t)i * TILE, (const double *)row_ptr(b, i) + j0, c * sizeof *x);
    cv64_tile(x, x + (size_t)n * TILE, n, c, w->pi, w->pj, w->npairs, m, f, res, trimmed);
  } else {
    float *x = (float *)w->x;
    for (int i = 0; i < n; i++) widen32(row_ptr(b, i), j0, c, b->dt, x + (size_t)i * TILE);
    cv32_tile(x, x + (size_t)n * TILE, n, c, w->pi, w->pj, w->npairs, m, f, res, trimmed);
  }
}

rm_status_t rm__agg_coord(const rm__agg_block_t *b, rm_agg_method_t m, int f,
                          void *out, uint32_t *trimmed)
{
  double res[TILE];
  net_t w;
  if (b->n > NET_MAX || b->n < 1) return rm__agg_coord_ref(b, m, f, out, trimmed);
  if (net_get(&w, b->n, b->dt) != RM_OK) return RM_ERR_NOMEM;
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    net_tile(&w, b, j0, c, m, f, res, trimmed);
    narrow(res, c, b->dt, out, j0);
  }
  net_put(&w);
  return RM_OK;
}

/* ---- Krum family ---- */
/* sum (x - y)^2 in four fixed lanes (k mod 4), then (l0 + l1) + (l2 + l3) */
static double sumsq_diff(const double *x, const double *y, size_t c)
{
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  size_t k = 0;
  for (; k + 4 <= c; k += 4) {
    double e0 = x[k] - y[k], e1 = x[k + 1] - y[k + 1], e2 = x[k + 2] - y[k + 2],
           e3 = x[k + 3] - y[k + 3];
    a0 += e0 * e0;
    a1 += e1 * e1;
    a2 += e2 * e2;
    a3 += e3 * e3;
  }
  for (; k < c; k++) a0 += (x[k] - y[k]) * (x[k] - y[k]);
  return (a0 + a1) + (a2 + a3);
}

rm_status_t rm__agg_pair_dist(const rm__agg_block_t *b, double *d)
{
  int n = b->n;
  scratch_t s;
  if (scratch_get(&s, n) != RM_OK) return RM_ERR_NOMEM;
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    load_tile(b, NULL, n, j0, c, s.tile);
    for (int i = 0; i < n; i++) {
      const double *x = s.tile + (size_t)i * TILE;
      size_t bad = 0;
      for (size_t k = 0; k < c; k++) bad += !isfinite(x[k]);
      d[(size_t)i * n + i] += (double)bad;
      for (int j = i + 1; j < n; j++) {
        const double *y = s.tile + (size_t)j * TILE;
        d[(size_t)i * n + j] += sumsq_diff(x, y, c);
      }
    }
  }
  scratch_put(&s);
  return RM_OK;
}

static int row_bad(const double *d, int n, int i) { return d[(size_t)i * n + i] != 0; }

static double pair(const double *d, int n, int i, int j)
{
  if (row_bad(d, n, i) || row_bad(d, n, j)) return INFINITY;
  double x = i < j ? d[(size_t)i * n + j] : d[(size_t)j * n + i];
  return isnan(x) ? INFINITY : x;
}

void rm__agg_krum_scores(const double *d, int n, const uint8_t *alive, int k,
                         double *score, double *v)
{
  for (int i = 0; i < n; i++) {
    if (!alive[i]) {
      score[i] = NAN;
      continue;
    }
    int m = 0;
    for (int j = 0; j < n; j++) {
      if (j == i || !alive[j]) continue;
      double x = pair(d, n, i, j);
      int p = m++;
      for (; p > 0 && v[p - 1] > x; p--) v[p] = v[p - 1];
      v[p] = x;
    }
    double sum = 0;
    for (int p = 0; p < k && p < m; p++) sum += v[p];
    score[i] = sum;
  }
}

int rm__agg_krum_best(const double *d, int n, const uint8_t *alive,
                      const double *score)
{
  int best = -1;
  for (int i = 0; i < n; i++) {
    if (!alive[i]) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    int bi = row_bad(d, n, i), bb = row_bad(d, n, best);
    if (bi < bb || (bi == bb && score[i] < score[best])) best = i;
  }
  return best;
}

rm_status_t rm__agg_mean_rows(const rm__agg_block_t *b, const int *sel, int k,
                              void *out)
{
  double res[TILE];
  scratch_t s;
  if (scratch_get(&s, k) != RM_OK) return RM_ERR_NOMEM;
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    load_tile(b, sel, k, j0, c, s.tile);
    for (size_t q = 0; q < c; q++) res[q] = s.tile[q];
    for (int i = 1; i < k; i++)
      for (size_t q = 0; q < c; q++) res[q] += s.tile[(size_t)i * TILE + q];
    if (k > 1)
      for (size_t q = 0; q < c; q++) res[q] /= (double)k;
    narrow(res, c, b->dt, out, j0);
  }
  scratch_put(&s);
  return RM_OK;
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

rm_status_t rm__agg_bulyan_coord(const rm__agg_block_t *b, const int *sel,
                                 int k, int beta, void *out)
{
  double res[TILE];
  scratch_t s;
  if (scratch_get(&s, k) != RM_OK) return RM_ERR_NOMEM;
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    load_tile(b, sel, k, j0, c, s.tile);
    for (size_t q = 0; q < c; q++) {
      column(s.tile, k, q, s.v, s.idx);
      res[q] = nearest_mean(s.v, k, beta, median_sorted(s.v, k));
    }
    narrow(res, c, b->dt, out, j0);
  }
  scratch_put(&s);
  return RM_OK;
}

/* ---- centered clipping ---- */
static void partial_norms(const double *tile, int n, size_t c, const double *v,
                          double *part)
{
  for (int i = 0; i < n; i++) {
    const double *x = tile + (size_t)i * TILE;
    part[i] += sumsq_diff(x, v, c);
  }
}

rm_status_t rm__agg_cc_start(const rm__agg_block_t *b, double *v, double *part)
{
  int n = b->n, vec = n <= NET_MAX;
  scratch_t s;
  net_t w;
  int64_t *rank = vec ? NULL : malloc((size_t)n * TILE * sizeof *rank);
  if (!vec && !rank) return RM_ERR_NOMEM;
  if (vec && net_get(&w, n, b->dt) != RM_OK) return RM_ERR_NOMEM;
  if (scratch_get(&s, n) != RM_OK) {
    if (vec) net_put(&w);
    free(rank);
    return RM_ERR_NOMEM;
  }
  memset(part, 0, (size_t)n * sizeof *part);
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    if (vec) { /* the median as rm__agg_coord computes it (same bits as below) */
      net_tile(&w, b, j0, c, RM_AGG_MEDIAN, 0, v + j0, NULL);
    } else {
      load_tile(b, NULL, n, j0, c, s.tile);
      tile_ranks(s.tile, n, c, rank);
      tile_median(s.tile, rank, n, c, v + j0);
    }
    load_tile(b, NULL, n, j0, c, s.tile); /* NaN back as NaN */
    partial_norms(s.tile, n, c, v + j0, part);
  }
  scratch_put(&s);
  if (vec) net_put(&w);
  free(rank);
  return RM_OK;
}

rm_status_t rm__agg_cc_step(const rm__agg_block_t *b, const double *w,
                            double *v, double *part)
{
  int n = b->n;
  double acc[TILE];
  scratch_t s;
  if (scratch_get(&s, n) != RM_OK) return RM_ERR_NOMEM;
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
  scratch_put(&s);
  return RM_OK;
}
