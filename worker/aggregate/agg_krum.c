/*
 * agg_krum.c - rm_aggregate's Krum family (krum, multi_krum, and Bulyan's
 * first phase; agg_int.h) over one slice: the pairwise squared distances,
 * the selection on the all-reduced matrix, and the mean of the chosen rows.
 * The module's design (tiles, widening, determinism) is at the top of
 * agg_kernels.c; what is this file's:
 *   - the squared distances: f32 lanes summed in double per tile, within
 *     ~1e-6 of the double reference rm__agg_pair_dist_ref (not bitwise;
 *     the selection made from them is the reference's, see "Krum family,
 *     vectorised distances" below; tests/aggregate/test_krum_vec.c), in an
 *     SSE2 and an AVX2 build with the same bits; f64 goes to the reference;
 *   - the mean of the chosen rows: f32 rows read in place, the same double
 *     arithmetic as the widened path (rows summed in the order given);
 *   - the selection runs on the all-reduced matrix, which every rank holds
 *     bitwise equal, so every rank chooses the same rows; ties go to the
 *     lower rank.
 * Non-finite values: a row with any non-finite value is at infinite
 * distance from every other row and ranks after all finite rows (the
 * matrix's diagonal counts them).
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

/* ---- Krum family ---- */
rm_status_t rm__agg_pair_dist_ref(const rm__agg_block_t *b, double *d)
{
  int n = b->n;
  rm__agg_scratch_t s;
  if (rm__agg_scratch_get(&s, n) != RM_OK) return RM_ERR_NOMEM;
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
        d[(size_t)i * n + j] += rm__agg_sumsq_diff(x, y, c);
      }
    }
  }
  rm__agg_scratch_put(&s);
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
      rm__agg_widen32(row, j0, c, b->dt, buf + (size_t)i * TILE);
      x[i] = buf + (size_t)i * TILE;
    }
  }
}

rm_status_t rm__agg_pair_dist(const rm__agg_block_t *b, double *d)
{
  return rm__agg_pair_dist_sq(b, d, NULL);
}

rm_status_t rm__agg_pair_dist_sq(const rm__agg_block_t *b, double *d, double *sq)
{
  int n = b->n;
  if (b->dt == RM_F64 || n < 2) {
    if (sq)
      for (size_t j0 = 0; j0 < b->len; j0 += TILE)
        rm__agg_rows_sumsq(b, j0, b->len - j0 < TILE ? b->len - j0 : TILE, sq);
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
      rm__agg_rows_sumsq_f32(x, n, c, sq);
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
    rm__agg_scratch_t s;
    if (rm__agg_scratch_get(&s, k > 0 ? k : 1) != RM_OK) return RM_ERR_NOMEM;
    for (size_t j0 = 0; j0 < b->len && k > 0; j0 += TILE) {
      size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
      load_tile(b, sel, k, j0, c, s.tile);
      for (size_t q = 0; q < c; q++) res[q] = s.tile[q];
      for (int i = 1; i < k; i++)
        for (size_t q = 0; q < c; q++) res[q] += s.tile[(size_t)i * TILE + q];
      if (k > 1)
        for (size_t q = 0; q < c; q++) res[q] /= (double)k;
      rm__agg_narrow_at(res, c, b->dt, out, j0);
    }
    rm__agg_scratch_put(&s);
    return RM_OK;
  }
  /* f32: the register kernel takes the whole groups of 16 columns, the
   * tile kernel the rest */
  size_t done = rm__agg_mean_small(b, sel, k, out);
  if (done == b->len) return RM_OK;
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
  for (size_t j0 = done; j0 < b->len; j0 += TILE) {
    size_t c = b->len - j0 < TILE ? b->len - j0 : TILE;
    f32_rows(b, sel, k, j0, c, buf, x);
    tile(x, k, c, res);
    rm__agg_narrow_at(res, c, b->dt, out, j0);
  }
  free(buf);
  free(x);
  return RM_OK;
}
