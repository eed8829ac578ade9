/*
 * agg_kernels.c - the per-slice math of rm_aggregate (agg_int.h): no I/O;
 * this file holds what its kernels share (the builds, the norm and the
 * scale, the scratch buffers), the kernels are in the files below.
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
 *     selection made from them is the reference's, see agg_krum.c);
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
 *
 * Files (helpers shared between them: agg_kernels_int.h):
 *   agg_kernels.c      builds (SSE2 / AVX2 pick), norm and scale, the
 *                      scratch buffers, the rows' sums of squares;
 *   agg_coord.c        coordinate-wise: the reference (ranks), the tile
 *                      kernel (sorting network), rm__agg_coord/_sq;
 *   agg_coord_small.c  coordinate-wise, f32 rows, 2 <= n <= 8, in registers;
 *   agg_krum.c         Krum family: distances (reference and f32), the
 *                      selection, the mean of the chosen rows;
 *   agg_bulyan_cc.c    Bulyan's second phase and centered clipping.
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

#include "reduce/half.h"

void rm__agg_narrow(const double *v, size_t len, rm_dtype_t dt, void *out)
{
  rm__agg_narrow_at(v, len, dt, out, 0);
}

/* ---- widening and narrowing (agg_kernels_int.h) ---- */
/* the cases rm__agg_widen and rm__agg_widen32 share (dst double or f32,
 * both exact): f16 and bf16 through reduce/half.h, NaN for a dtype that is
 * no float type */
#define WIDEN_HALF_AND_DEFAULT                                                       \
  case RM_F16: {                                                                     \
    const uint16_t *p = (const uint16_t *)row + j0;                                  \
    for (size_t k = 0; k < c; k++) dst[k] = rm__h2f(p[k]);                           \
    break;                                                                           \
  }                                                                                  \
  case RM_BF16: {                                                                    \
    const uint16_t *p = (const uint16_t *)row + j0;                                  \
    for (size_t k = 0; k < c; k++) dst[k] = rm__b2f(p[k]);                           \
    break;                                                                           \
  }                                                                                  \
  default:                                                                           \
    for (size_t k = 0; k < c; k++) dst[k] = NAN;

void rm__agg_widen(const void *row, size_t j0, size_t c, rm_dtype_t dt, double *dst)
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
  WIDEN_HALF_AND_DEFAULT
  }
}

void rm__agg_narrow_at(const double *src, size_t c, rm_dtype_t dt, void *row, size_t j0)
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

void rm__agg_widen32(const void *row, size_t j0, size_t c, rm_dtype_t dt, float *dst)
{
  switch (dt) {
  case RM_F32:
    memcpy(dst, (const float *)row + j0, c * sizeof *dst);
    break;
  WIDEN_HALF_AND_DEFAULT
  }
}

/* sum (x - y)^2 in four fixed lanes (k mod 4), then (l0 + l1) + (l2 + l3) */
double rm__agg_sumsq_diff(const double *x, const double *y, size_t c)
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

/* ---- builds (agg_kernels_int.h) ---- */
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

/* sq[i] += the sum of squares of f32 row x[i] over c columns, in double:
 * four chains of four lanes over 16 columns at a time, so that a short run
 * (one tile, where a caller sums while the rows are in L1) is not one
 * chain's latency per column; its own order, not rm__agg_norm's bits */
#define ROWS_SUMSQ_F32(NAME, ATTR)                                                    \
  ATTR static void NAME(const float *const *x, int n, size_t c, double *sq)          \
  {                                                                                  \
    for (int i = 0; i < n; i++) {                                                    \
      const float *p = x[i];                                                         \
      agg_v4d a = {0, 0, 0, 0}, b = a, e = a, d = a;                                 \
      size_t k = 0;                                                                  \
      for (; k + 16 <= c; k += 16) {                                                 \
        agg_v4d w = AGG_CVT4(p + k), y = AGG_CVT4(p + k + 4);                        \
        agg_v4d z = AGG_CVT4(p + k + 8), u = AGG_CVT4(p + k + 12);                   \
        a += w * w;                                                                  \
        b += y * y;                                                                  \
        e += z * z;                                                                  \
        d += u * u;                                                                  \
      }                                                                              \
      a = (a + b) + (e + d);                                                         \
      double t = (a[0] + a[1]) + (a[2] + a[3]);                                      \
      for (; k < c; k++) t += (double)p[k] * (double)p[k];                           \
      sq[i] += t;                                                                    \
    }                                                                                \
  }
#ifdef AGG_HAVE_AVX2
ROWS_SUMSQ_F32(rows_sumsq_f32_avx2, AGG_AVX2)
#endif
ROWS_SUMSQ_F32(rows_sumsq_f32_base, )

void rm__agg_rows_sumsq_f32(const float *const *x, int n, size_t c, double *sq)
{
#ifdef AGG_HAVE_AVX2
  if (rm__agg_avx2()) {
    rows_sumsq_f32_avx2(x, n, c, sq);
    return;
  }
#endif
  rows_sumsq_f32_base(x, n, c, sq);
}

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
      rm__agg_widen(buf, j0, c, dt, t);
      ss += sumsq(t, c, 1.0);
    }
  }
  if (!isinf(ss)) return sqrt(ss);
  /* inf: a non-finite value, or finite values whose squares overflow */
  for (size_t j0 = 0; j0 < count; j0 += TILE) {
    size_t c = count - j0 < TILE ? count - j0 : TILE;
    rm__agg_widen(buf, j0, c, dt, t);
    for (size_t k = 0; k < c; k++) amax = fabs(t[k]) > amax || isnan(t[k]) ? fabs(t[k]) : amax;
  }
  if (!isfinite(amax)) return isnan(amax) ? NAN : INFINITY;
  ss = 0;
  for (size_t j0 = 0; j0 < count; j0 += TILE) {
    size_t c = count - j0 < TILE ? count - j0 : TILE;
    rm__agg_widen(buf, j0, c, dt, t);
    ss += sumsq(t, c, 1.0 / amax);
  }
  return sqrt(ss) * amax;
}

void rm__agg_scale(void *buf, size_t count, rm_dtype_t dt, double factor)
{
  double t[TILE];
  for (size_t j0 = 0; j0 < count; j0 += TILE) {
    size_t c = count - j0 < TILE ? count - j0 : TILE;
    rm__agg_widen(buf, j0, c, dt, t);
    for (size_t k = 0; k < c; k++) t[k] *= factor;
    rm__agg_narrow_at(t, c, dt, buf, j0);
  }
}

/* sq[i] += sum of squares of row i, columns [j0, j0 + c), in double */
void rm__agg_rows_sumsq(const rm__agg_block_t *b, size_t j0, size_t c, double *sq)
{
  double t[TILE];
  for (int i = 0; i < b->n; i++) {
    rm__agg_widen(row_ptr(b, i), j0, c, b->dt, t);
    sq[i] += sumsq(t, c, 1.0);
  }
}

rm_status_t rm__agg_scratch_get(rm__agg_scratch_t *s, int n)
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

void rm__agg_scratch_put(rm__agg_scratch_t *s)
{
  free(s->tile);
  free(s->v);
  free(s->idx);
}
