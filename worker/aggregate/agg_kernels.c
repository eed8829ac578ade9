/*
 * agg_kernels.c - the per-slice math of rm_aggregate (agg_int.h): no I/O.
 *
 * Every kernel walks its block in tiles of TILE columns: the n rows' values
 * of the tile are widened to double once (f16/bf16 through reduce/half.h,
 * exactly as the reduction kernels widen them), the statistic is computed in
 * double and narrowed once (f16/bf16 via f32, round to nearest even). The
 * exceptions, each with the scalar kernel it replaced kept as its reference
 * (the `_ref` functions, tests/aggregate/test_coord_vec.c and
 * test_krum_vec.c):
 *   - the coordinate-wise order statistics (median, trimmed mean, centered
 *     clipping's start) and Bulyan's second phase: a sorting network over
 *     the rows, in f32 for every float type but f64 (Bulyan: in double),
 *     which gives the reference's bits; their arithmetic is in double;
 *   - the Krum family's squared distances: f32 lanes summed in double per
 *     tile, within ~1e-6 of the double reference (not bitwise; the
 *     selection made from them is the reference's, see "Krum family,
 *     vectorised distances");
 *   - the mean of the chosen rows: f32 rows read in place, the same
 *     double arithmetic.
 * Each comes in an SSE2 and an AVX2 build with the same bits ("builds").
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

/* ---- builds ----
 * The vectorised kernels come in an SSE2 build (the x86-64 baseline) and an
 * AVX2 one (target attribute, no FMA, so no contraction), picked once by
 * CPUID as the reduction kernels are; both do the same operations in the
 * same order and give the same bits (the tests compare them). */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define AGG_HAVE_AVX2 1
#define AGG_AVX2 __attribute__((target("avx2")))
#endif

static int g_agg_sse2_only; /* rm__agg_sse2_only: tests and benchmarks */

void rm__agg_sse2_only(int on) { g_agg_sse2_only = on; }

int rm__agg_avx2(void)
{
#ifdef AGG_HAVE_AVX2
  static int avx2 = -1;
  if (avx2 < 0) /* racing threads store the same value */
    avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
  return avx2 && !g_agg_sse2_only;
#else
  return 0;
#endif
}

/* ---- vector helpers ---- */
typedef float agg_v4f __attribute__((vector_size(16)));
typedef double agg_v4d __attribute__((vector_size(32)));

/* four f32 values widened (a full 16-byte load, then one conversion) */
#define AGG_CVT4(p) ({                                                               \
    agg_v4f v_;                                                                      \
    memcpy(&v_, (p), sizeof v_);                                                     \
    __builtin_convertvector(v_, agg_v4d);                                            \
  })

/* the sum of squares of f32 values as sumsq computes it after widening
 * (per tile of TILE: four lanes k mod 4 in double, (l0 + l1) + (l2 + l3),
 * added to the total tile by tile), the same bits, with four tiles in
 * flight so that four addition chains overlap instead of one */
#define NORM_F32(NAME, ATTR)                                                         \
  ATTR static double NAME(const float *p, size_t count)                              \
  {                                                                                  \
    double ss = 0;                                                                   \
    size_t j0 = 0;                                                                   \
    for (; j0 + 4 * TILE <= count; j0 += 4 * TILE) {                                 \
      agg_v4d a = {0, 0, 0, 0}, b = a, c = a, d = a;                                 \
      const float *pa = p + j0, *pb = pa + TILE, *pc = pb + TILE, *pd = pc + TILE;    \
      for (size_t k = 0; k < TILE; k += 4) {                                         \
        agg_v4d x = AGG_CVT4(pa + k), y = AGG_CVT4(pb + k);                          \
        agg_v4d z = AGG_CVT4(pc + k), w = AGG_CVT4(pd + k);                          \
        a += x * x;                                                                  \
        b += y * y;                                                                  \
        c += z * z;                                                                  \
        d += w * w;                                                                  \
      }                                                                              \
      ss += (a[0] + a[1]) + (a[2] + a[3]);                                           \
      ss += (b[0] + b[1]) + (b[2] + b[3]);                                           \
      ss += (c[0] + c[1]) + (c[2] + c[3]);                                           \
      ss += (d[0] + d[1]) + (d[2] + d[3]);                                           \
    }                                                                                \
    for (; j0 < count; j0 += TILE) {                                                 \
      size_t n = count - j0 < TILE ? count - j0 : TILE, k = 0;                       \
      agg_v4d a = {0, 0, 0, 0};                                                      \
      for (; k + 4 <= n; k += 4) {                                                   \
        agg_v4d x = AGG_CVT4(p + j0 + k);                                            \
        a += x * x;                                                                  \
      }                                                                              \
      for (; k < n; k++) a[0] += (double)p[j0 + k] * (double)p[j0 + k];              \
      ss += (a[0] + a[1]) + (a[2] + a[3]);                                           \
    }                                                                                \
    return ss;                                                                       \
  }
#ifdef AGG_HAVE_AVX2
NORM_F32(norm_f32_avx2, AGG_AVX2)
#endif
NORM_F32(norm_f32_base, )

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
  if (dt == RM_F32) {
#ifdef AGG_HAVE_AVX2
    if (rm__agg_avx2()) ss = norm_f32_avx2(buf, count);
    else
#endif
      ss = norm_f32_base(buf, count);
  } else {
    for (size_t j0 = 0; j0 < count; j0 += TILE) {
      size_t c = count - j0 < TILE ? count - j0 : TILE;
      widen(buf, j0, c, dt, t);
      ss += sumsq(t, c, 1.0);
    }
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
#ifdef AGG_HAVE_AVX2
    if (rm__agg_avx2())
      cv64_avx2_tile(x, x + (size_t)n * TILE, n, c, w->pi, w->pj, w->npairs, m, f, res, trimmed);
    else
#endif
      cv64_tile(x, x + (size_t)n * TILE, n, c, w->pi, w->pj, w->npairs, m, f, res, trimmed);
  } else {
    float *x = (float *)w->x;
    for (int i = 0; i < n; i++) widen32(row_ptr(b, i), j0, c, b->dt, x + (size_t)i * TILE);
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
/* sq[i] += sum of squares of row i, columns [j0, j0 + c), in double */
static void rows_sumsq(const rm__agg_block_t *b, size_t j0, size_t c, double *sq)
{
  double t[TILE];
  for (int i = 0; i < b->n; i++) {
    widen(row_ptr(b, i), j0, c, b->dt, t);
    sq[i] += sumsq(t, c, 1.0);
  }
}

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
  net_t w;
  int small = rm__agg_coord_small_ok(b) && TILE == 32 * 8;
  if (b->n > NET_MAX || b->n < 1) {
    if (sq)
      for (size_t j0 = 0; j0 < b->len; j0 += TILE)
        rows_sumsq(b, j0, b->len - j0 < TILE ? b->len - j0 : TILE, sq);
    return rm__agg_coord_ref(b, m, f, out, trimmed);
  }
  if (net_get(&w, b->n, b->dt) != RM_OK) return RM_ERR_NOMEM;
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    if (!small) {
      if (sq) rows_sumsq(b, j0, c, sq);
      net_tile(&w, b, j0, c, m, f, res, trimmed);
      narrow(res, c, b->dt, out, j0);
      continue;
    }
    uint32_t left = rm__agg_coord_small(b, m, f, j0, c, out, kept, sq);
    size_t done = c;
    for (size_t s = 0; s * 8 < c; s++) {
      if (!(left >> s & 1u)) continue;
      size_t e = s; /* a run of strips left: s .. e */
      while ((e + 1) * 8 < c && (left >> (e + 1) & 1u)) e++;
      size_t a = s * 8, z = (e + 1) * 8 < c ? (e + 1) * 8 : c;
      if (sq) rows_sumsq(b, j0 + a, z - a, sq);
      net_tile(&w, b, j0 + a, z - a, m, f, res, trimmed);
      narrow(res, z - a, b->dt, out, j0 + a);
      done -= z - a;
      s = e;
    }
    taken += done;
  }
  /* the register kernel counts kept columns; trimmed = taken - kept */
  if (small && f > 0)
    for (int i = 0; i < b->n; i++) trimmed[i] += (uint32_t)((int64_t)taken - kept[i]);
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

rm_status_t rm__agg_pair_dist_ref(const rm__agg_block_t *b, double *d)
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

/* ---- Krum family, vectorised distances ----
 * rm__agg_pair_dist computes what rm__agg_pair_dist_ref does, in f32 for
 * every float type but f64 (which goes to the reference), several times
 * faster (bench/aggregate/rm_bench_coord):
 *   - one pass over the slice in tiles of TILE columns; a tile's n rows
 *     (f32 in place, f16/bf16 widened to f32, exact) stay in L1 while all
 *     n(n-1)/2 pairs of the tile are computed from them;
 *   - a pair's tile: e = x - y and e*e in f32, summed in 32 fixed lanes
 *     (column k into lane k mod 32, 8 terms per lane), the lanes added
 *     pairwise (4 lane groups in f32, then 8 values in double), and the
 *     tile's sum added to the pair's double total; the < 32 last columns
 *     of a slice in double. GCC vector types written for 8 lanes: one AVX2
 *     vector or two SSE2 ones, the same additions in the same order, so
 *     the AVX2 build (picked by CPUID) gives the SSE2 build's bits.
 *   - error: each e and e*e is rounded once to f32 and a lane sums 8
 *     terms, so a pair's distance is within about 1e-6 (relative) of the
 *     reference's (all terms are >= 0, nothing cancels); exact when the
 *     values are small dyadic numbers. The same inputs give the same bits
 *     in either argument order ((x-y)^2 == (y-x)^2), so equal rows have
 *     equal distances and Krum's ties stay ties.
 *   - where f32 would lose what double keeps, the double sum is taken
 *     instead: a tile whose f32 sum overflowed while its two rows are
 *     finite (|e| > ~1.8e19), and a pair whose slice total is below 2^-90
 *     (its e*e underflowed to f32 subnormals or zero; also a pair of
 *     equal rows, which costs that pair one more pass).
 *   - non-finite values: x*0 summed per row in f32 lanes is NaN iff the
 *     row's tile holds one; only then are they counted (the diagonal). */
typedef float agg_v8f __attribute__((vector_size(32), aligned(4), may_alias));

#define PD_TILE(NAME, ATTR)                                                          \
  ATTR static void NAME(const float *const *x, int n, size_t c32, double *s, float *z) \
  {                                                                                  \
    for (int i = 0; i < n; i++) {                                                    \
      const float *a = x[i];                                                         \
      agg_v8f q = {0};                                                               \
      for (size_t k = 0; k < c32; k += 8) q += *(const agg_v8f *)(a + k) * 0.0f;      \
      z[i] = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));       \
      for (int j = i + 1; j < n; j++) {                                              \
        const float *b = x[j];                                                       \
        agg_v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};                              \
        for (size_t k = 0; k < c32; k += 32) {                                       \
          agg_v8f e0 = *(const agg_v8f *)(a + k) - *(const agg_v8f *)(b + k);         \
          agg_v8f e1 = *(const agg_v8f *)(a + k + 8) - *(const agg_v8f *)(b + k + 8); \
          agg_v8f e2 = *(const agg_v8f *)(a + k + 16) - *(const agg_v8f *)(b + k + 16); \
          agg_v8f e3 = *(const agg_v8f *)(a + k + 24) - *(const agg_v8f *)(b + k + 24); \
          a0 += e0 * e0;                                                             \
          a1 += e1 * e1;                                                             \
          a2 += e2 * e2;                                                             \
          a3 += e3 * e3;                                                             \
        }                                                                            \
        agg_v8f t = (a0 + a1) + (a2 + a3);                                           \
        s[(size_t)i * n + j] = (((double)t[0] + (double)t[1]) + ((double)t[2] + (double)t[3])) + \
                               (((double)t[4] + (double)t[5]) + ((double)t[6] + (double)t[7])); \
      }                                                                              \
    }                                                                                \
  }

#ifdef AGG_HAVE_AVX2
PD_TILE(pd_tile_avx2, AGG_AVX2)
#endif
PD_TILE(pd_tile_base, )

typedef void (*pd_tile_fn)(const float *const *, int, size_t, double *, float *);

static pd_tile_fn pd_tile_pick(void)
{
#ifdef AGG_HAVE_AVX2
  if (rm__agg_avx2()) return pd_tile_avx2;
#endif
  return pd_tile_base;
}

/* sum (x - y)^2 in double over c f32 values, in order */
static double sumsq_diff_f(const float *x, const float *y, size_t c)
{
  double s = 0;
  for (size_t k = 0; k < c; k++) {
    double e = (double)x[k] - (double)y[k];
    s += e * e;
  }
  return s;
}

/* the rows of tile j0 as f32: pointers into the block (f32) or widened
 * into buf (n x TILE) */
static void f32_rows(const rm__agg_block_t *b, const int *sel, int k, size_t j0, size_t c,
                     float *buf, const float **x)
{
  for (int i = 0; i < k; i++) {
    const void *row = row_ptr(b, sel ? sel[i] : i);
    if (b->dt == RM_F32) {
      x[i] = (const float *)row + j0;
    } else {
      widen32(row, j0, c, b->dt, buf + (size_t)i * TILE);
      x[i] = buf + (size_t)i * TILE;
    }
  }
}

rm_status_t rm__agg_pair_dist(const rm__agg_block_t *b, double *d)
{
  return rm__agg_pair_dist_sq(b, d, NULL);
}

/* sum of squares of c f32 values in double (the norm's kernel) */
static double sumsq_f32(const float *p, size_t c)
{
#ifdef AGG_HAVE_AVX2
  if (rm__agg_avx2()) return norm_f32_avx2(p, c);
#endif
  return norm_f32_base(p, c);
}

rm_status_t rm__agg_pair_dist_sq(const rm__agg_block_t *b, double *d, double *sq)
{
  int n = b->n;
  if (b->dt == RM_F64 || n < 2) {
    if (sq)
      for (size_t j0 = 0; j0 < b->len; j0 += TILE)
        rows_sumsq(b, j0, b->len - j0 < TILE ? b->len - j0 : TILE, sq);
    return rm__agg_pair_dist_ref(b, d);
  }
  size_t nn = (size_t)n * n;
  float *buf = malloc((size_t)n * TILE * sizeof *buf), *z = malloc((size_t)n * sizeof *z);
  const float **x = malloc((size_t)n * sizeof *x);
  double *s = malloc(nn * sizeof *s), *acc = calloc(nn, sizeof *acc);
  uint8_t *bad = calloc((size_t)n, 1);
  rm_status_t st = RM_ERR_NOMEM;
  if (!buf || !z || !x || !s || !acc || !bad) goto out;
  pd_tile_fn tile = pd_tile_pick();
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE, c32 = c & ~(size_t)31;
    f32_rows(b, NULL, n, j0, c, buf, x);
    tile(x, n, c32, s, z);
    if (sq) /* the rows are in L1 now: the norm's sums for free */
      for (int i = 0; i < n; i++) sq[i] += sumsq_f32(x[i], c);
    for (int i = 0; i < n; i++) { /* non-finite values of the tile: counted when present */
      size_t cnt = 0;
      if (z[i] != 0)
        for (size_t k = 0; k < c32; k++) cnt += !isfinite(x[i][k]);
      for (size_t k = c32; k < c; k++) cnt += !isfinite(x[i][k]);
      d[(size_t)i * n + i] += (double)cnt;
      bad[i] = cnt > 0;
    }
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++) {
        double v = s[(size_t)i * n + j];
        if (!(v < INFINITY) && !bad[i] && !bad[j]) /* f32 overflow of finite values */
          v = sumsq_diff_f(x[i], x[j], c32);
        acc[(size_t)i * n + j] += v + sumsq_diff_f(x[i] + c32, x[j] + c32, c - c32);
      }
  }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      double v = acc[(size_t)i * n + j];
      if (v < 0x1p-90) { /* what f32 squares could have lost: the pair in double */
        v = 0;
        for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
          size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
          int ij[2] = {i, j};
          f32_rows(b, ij, 2, j0, c, buf, x);
          v += sumsq_diff_f(x[0], x[1], c);
        }
      }
      d[(size_t)i * n + j] += v;
    }
  st = RM_OK;
out:
  free(buf);
  free(z);
  free(x);
  free(s);
  free(acc);
  free(bad);
  return st;
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

int rm__agg_krum_select(const double *d, int n, rm_agg_method_t method, int f, int m,
                        double *scores, int *sel)
{
  int want, nsel = 0;
  double *score = malloc((size_t)n * sizeof *score), *work = malloc((size_t)n * sizeof *work);
  uint8_t *alive = malloc((size_t)n);
  if (!score || !work || !alive) {
    nsel = -1;
    goto out;
  }
  memset(alive, 1, (size_t)n);
  rm__agg_krum_scores(d, n, alive, n - f - 2, scores, work);
  want = method == RM_AGG_KRUM ? 1 : method == RM_AGG_MULTI_KRUM ? (m ? m : n - f) : n - 2 * f;
  for (int t = 0; t < want; t++) {
    int left = n - t, k = left - f - 2;
    if (method == RM_AGG_BULYAN) { /* rescored on the rows left */
      k = k < 1 ? 1 : k;
      rm__agg_krum_scores(d, n, alive, k, score, work);
    } else {
      for (int i = 0; i < n; i++) score[i] = alive[i] ? scores[i] : NAN;
    }
    int best = rm__agg_krum_best(d, n, alive, score);
    if (best < 0 || (nsel > 0 && d[(size_t)best * n + best] != 0)) break; /* finite only */
    nsel++;
    alive[best] = 0;
  }
  /* in rank order: the mean sums in rank order */
  for (int i = 0, p = 0; i < n; i++)
    if (!alive[i]) sel[p++] = i;
out:
  free(score);
  free(work);
  free(alive);
  return nsel;
}

/* the mean of k f32 rows of a tile, summed in double in row order: the
 * rows read in place (no widened copy), the conversions and additions
 * vectorised; an AVX2 build and an SSE2 one (the same operations) */
#define MEAN_TILE(NAME, ATTR)                                                        \
  ATTR static void NAME(const float *const *x, int k, size_t c, double *res)          \
  {                                                                                  \
    const float *a = x[0];                                                           \
    for (size_t q = 0; q < c; q++) res[q] = (double)a[q];                            \
    for (int i = 1; i < k; i++) {                                                    \
      const float *restrict b = x[i];                                                \
      for (size_t q = 0; q < c; q++) res[q] += (double)b[q];                         \
    }                                                                                \
    if (k > 1)                                                                       \
      for (size_t q = 0; q < c; q++) res[q] /= (double)k;                            \
  }
#ifdef AGG_HAVE_AVX2
MEAN_TILE(mean_tile_avx2, AGG_AVX2)
#endif
MEAN_TILE(mean_tile_base, )

rm_status_t rm__agg_mean_rows(const rm__agg_block_t *b, const int *sel, int k,
                              void *out)
{
  double res[TILE];
  if (b->dt == RM_F64 || k < 1) {
    scratch_t s;
    if (scratch_get(&s, k > 0 ? k : 1) != RM_OK) return RM_ERR_NOMEM;
    for (size_t j0 = 0; j0 < b->len && k > 0; j0 += TILE) {
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
  float *buf = b->dt == RM_F32 ? NULL : malloc((size_t)k * TILE * sizeof *buf);
  const float **x = malloc((size_t)k * sizeof *x);
  if (!x || (b->dt != RM_F32 && !buf)) {
    free(buf);
    free(x);
    return RM_ERR_NOMEM;
  }
  void (*tile)(const float *const *, int, size_t, double *) = mean_tile_base;
#ifdef AGG_HAVE_AVX2
  if (rm__agg_avx2()) tile = mean_tile_avx2;
#endif
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    f32_rows(b, sel, k, j0, c, buf, x);
    tile(x, k, c, res);
    narrow(res, c, b->dt, out, j0);
  }
  free(buf);
  free(x);
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

rm_status_t rm__agg_bulyan_coord_ref(const rm__agg_block_t *b, const int *sel,
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
    for (int p = 0; p < npairs; p++) {                                               \
      double *restrict u = srt + (size_t)pi[p] * TILE, *restrict v = srt + (size_t)pj[p] * TILE; \
      for (size_t q = 0; q < c; q++) {                                               \
        double l = u[q] < v[q] ? u[q] : v[q], h = u[q] < v[q] ? v[q] : u[q];         \
        u[q] = l;                                                                    \
        v[q] = h;                                                                    \
      }                                                                              \
    }                                                                                \
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
  net_t w;
  if (k > NET_MAX || k < 1 || beta < 1 || beta > k)
    return rm__agg_bulyan_coord_ref(b, sel, k, beta, out);
  if (net_get(&w, k, RM_F64) != RM_OK) return RM_ERR_NOMEM;
  bu_tile_fn tile = bu_tile_pick();
  for (size_t j0 = 0; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    double *x = (double *)w.x;
    for (int i = 0; i < k; i++) widen(row_ptr(b, sel[i]), j0, c, b->dt, x + (size_t)i * TILE);
    tile(x, k, c, w.pi, w.pj, w.npairs, beta, res);
    narrow(res, c, b->dt, out, j0);
  }
  net_put(&w);
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
