/*
 * test_krum_vec.c - the vectorised Krum-family kernels
 * (worker/aggregate/agg_krum.c, agg_bulyan_cc.c) against the scalar ones they replaced,
 * which stay as the reference:
 *   rm__agg_pair_dist (f32 lanes, double per tile) vs rm__agg_pair_dist_ref
 *     (double): the diagonal (non-finite counts) equal, every distance of
 *     two finite rows within 4e-6 relative, equal bits where the values are
 *     small dyadic numbers (every sum exact); and the selection made from
 *     either matrix (rm__agg_krum_select: krum, multi_krum with m = 0 and
 *     2, bulyan where n >= 4f + 3, every f the rule allows) the same rows,
 *     in particular the same Krum index when rows tie (duplicated rows);
 *   rm__agg_bulyan_coord (sorting network) vs rm__agg_bulyan_coord_ref
 *     (insertion sort per column): bit for bit, every beta from 1 to k;
 *   rm__agg_mean_rows (f32 rows read in place) vs the mean computed here in
 *     double, row by row: bit for bit (any NaN for a NaN);
 *   rm__agg_norm of f32 (read in place, four tiles at a time) vs the same
 *     values as f64 (the widening path f32 took before): bit for bit;
 *   the SSE2 builds (rm__agg_sse2_only) give the AVX2 builds' bits.
 * n = 1..17 and 33 (and 70 for Bulyan's reference path), lengths that are
 * not multiples of the tile or of the 32 lanes, f32 / f64 / f16 / bf16.
 * Inputs (seeded): Gaussian-like rows with some rows duplicated; small
 * dyadic values (ties); rows with a NaN or infinity; rows of huge finite
 * values (whose f32 squares overflow) and of tiny ones (whose f32 squares
 * underflow), where the kernel must fall back to double; and for Bulyan
 * the coordinate test's mix of NaN, +-inf, +-0, ties, huge and subnormal.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregate/agg_int.h"
#include "reduce/half.h"
#include "agg_test.h"

#include "rm_testcheck.h"
#include "rm_testrng.h"

static uint64_t g_rng = 0x6b72756d76656331ULL;
static uint64_t next_u64(void) { return rm_test_splitmix(&g_rng); }
static double unif(void) { return (double)(next_u64() >> 11) / 9007199254740992.0; }

/* the coordinate test's mix: specials, ties, ordinary values */
static double pick(void)
{
  static const double special[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e30,
                                   -1e30, 1e-40, 3.0, -3.0};
  uint64_t r = next_u64();
  switch (r % 8) {
  case 0: return special[(r >> 8) % 10];
  case 1:
  case 2: return (double)((int)((r >> 8) % 5) - 2) * 0.5;
  default: return ((double)(r >> 11) / 9007199254740992.0 - 0.5) * 8.0;
  }
}

enum { GAUSS, DYADIC, NONFINITE, HUGE, TINY, NKINDS };
static const char *const kind_name[] = {"gauss", "dyadic", "nonfinite", "huge", "tiny"};

/* rows of one kind; some rows copy an earlier one (Krum ties) */
static void fill(char *rows, int n, size_t len, size_t stride, rm_dtype_t dt, int kind)
{
  for (int i = 0; i < n; i++) {
    int copy = i > 0 && next_u64() % 4 == 0 ? (int)(next_u64() % (uint64_t)i) : -1;
    double spread = 0.5 + unif(); /* rows at different distances */
    for (size_t q = 0; q < len; q++) {
      double v;
      if (copy >= 0) {
        memcpy(rows + ((size_t)i * stride + q) * rm_dtype_size(dt),
               rows + ((size_t)copy * stride + q) * rm_dtype_size(dt), rm_dtype_size(dt));
        continue;
      }
      switch (kind) {
      case DYADIC: v = (double)((int)(next_u64() % 7) - 3) * 0.5; break;
      case HUGE: v = (unif() - 0.5) * spread * 1e25; break;
      case TINY: v = (unif() - 0.5) * spread * 1e-30; break;
      default: v = (unif() - 0.5) * spread; break;
      }
      agg_test_store(rows, (size_t)i * stride + q, dt, v);
    }
    if (kind == NONFINITE && copy < 0 && next_u64() % 3 == 0) {
      static const double bad[] = {NAN, INFINITY, -INFINITY};
      agg_test_store(rows, (size_t)i * stride + next_u64() % len, dt, bad[next_u64() % 3]);
    }
  }
}

static int g_sel_cases;

static void check_dist(const char *dn, rm_dtype_t dt, int n, size_t len, int kind)
{
  size_t stride = len + 5, esz = rm_dtype_size(dt);
  char *rows = malloc((size_t)n * stride * esz);
  double *d1 = calloc((size_t)n * n, sizeof *d1), *d2 = calloc((size_t)n * n, sizeof *d2);
  double *d3 = calloc((size_t)n * n, sizeof *d3);
  double s1[64], s2[64];
  int sel1[64], sel2[64];
  if (!rows || !d1 || !d2 || !d3) exit(1);
  fill(rows, n, len, stride, dt, kind);
  rm__agg_block_t b = {rows, stride, len, n, dt, NULL, 0};
  CHECK(rm__agg_pair_dist(&b, d1) == RM_OK);
  CHECK(rm__agg_pair_dist_ref(&b, d2) == RM_OK);
  /* the SSE2 build: the AVX2 build's bits */
  rm__agg_sse2_only(1);
  CHECK(rm__agg_pair_dist(&b, d3) == RM_OK);
  rm__agg_sse2_only(0);
  CHECKF(memcmp(d1, d3, (size_t)n * n * sizeof *d1) == 0,
         "%s n=%d len=%zu %s: the SSE2 and AVX2 distances differ", dn, n, len, kind_name[kind]);
  int bad = 0;
  for (int i = 0; i < n && bad < 3; i++)
    for (int j = i; j < n && bad < 3; j++) {
      double x = d1[i * n + j], y = d2[i * n + j];
      int ok;
      if (i == j || kind == DYADIC)
        ok = memcmp(&x, &y, sizeof x) == 0;
      else if (d2[i * n + i] != 0 || d2[j * n + j] != 0)
        ok = 1; /* a row with a non-finite value: the distance is not used */
      else
        ok = isfinite(x) && fabs(x - y) <= 4e-6 * y;
      if (!ok) bad++;
      CHECKF(ok, "%s n=%d len=%zu %s: d[%d][%d] %.17g, reference %.17g", dn, n, len,
             kind_name[kind], i, j, x, y);
    }
  for (int f = 0; f == 0 || n >= 2 * f + 3; f++) {
    static const rm_agg_method_t ms[] = {RM_AGG_KRUM, RM_AGG_MULTI_KRUM, RM_AGG_MULTI_KRUM,
                                         RM_AGG_BULYAN};
    for (int a = 0; a < 4; a++) {
      int m = a == 2 ? 2 : 0;
      if (ms[a] == RM_AGG_BULYAN && n < 4 * f + 3) continue;
      if (m > n - f) continue;
      int k1 = rm__agg_krum_select(d1, n, ms[a], f, m, s1, sel1);
      int k2 = rm__agg_krum_select(d2, n, ms[a], f, m, s2, sel2);
      CHECKF(k1 == k2 && k1 >= 0 && memcmp(sel1, sel2, (size_t)k1 * sizeof *sel1) == 0,
             "%s n=%d len=%zu %s f=%d method %d m=%d: selected %d rows (first %d), the "
             "reference %d (first %d)", dn, n, len, kind_name[kind], f, (int)ms[a], m, k1,
             k1 > 0 ? sel1[0] : -1, k2, k2 > 0 ? sel2[0] : -1);
      for (int i = 0; i < n; i++)
        CHECKF((isnan(s1[i]) && isnan(s2[i])) || s1[i] == s2[i] ||
                   fabs(s1[i] - s2[i]) <= 4e-6 * fabs(s2[i]),
               "%s n=%d %s: score[%d] %.17g, reference %.17g", dn, n, kind_name[kind], i,
               s1[i], s2[i]);
      g_sel_cases++;
    }
  }
  free(rows);
  free(d1);
  free(d2);
  free(d3);
}

static int g_bulyan_cases;

static void check_bulyan(const char *dn, rm_dtype_t dt, int n, size_t len)
{
  agg_test_bufs_t bf;
  int sel[80];
  agg_test_bufs_get(&bf, n, len, dt, pick);
  rm__agg_block_t b = {bf.rows, bf.stride, len, n, dt, NULL, 0};
  /* k of the n rows in a shuffled order */
  for (int i = 0; i < n; i++) sel[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(next_u64() % (uint64_t)(i + 1)), t = sel[i];
    sel[i] = sel[j];
    sel[j] = t;
  }
  for (int k = 1; k <= n; k += (n > 20 ? 7 : 1))
    for (int beta = 1; beta <= k; beta++)
      for (int sse2 = 0; sse2 < 2; sse2++) { /* the AVX2 build, then the SSE2 one */
        memset(bf.o1, 0x5a, len * bf.esz);
        memset(bf.o2, 0xa5, len * bf.esz);
        rm__agg_sse2_only(sse2);
        CHECK(rm__agg_bulyan_coord(&b, sel, k, beta, bf.o1) == RM_OK);
        rm__agg_sse2_only(0);
        CHECK(rm__agg_bulyan_coord_ref(&b, sel, k, beta, bf.o2) == RM_OK);
        CHECKF(memcmp(bf.o1, bf.o2, len * bf.esz) == 0,
               "%s n=%d len=%zu k=%d beta=%d sse2=%d: Bulyan's phase two differs from the "
               "reference", dn, n, len, k, beta, sse2);
        g_bulyan_cases++;
      }
  agg_test_bufs_put(&bf);
}

static double load(const void *rows, size_t idx, rm_dtype_t dt)
{
  switch (dt) {
  case RM_F32: return ((const float *)rows)[idx];
  case RM_F64: return ((const double *)rows)[idx];
  case RM_F16: return rm__h2f(((const uint16_t *)rows)[idx]);
  default: return rm__b2f(((const uint16_t *)rows)[idx]);
  }
}

/* the mean of the chosen rows (Krum, Multi-Krum): the rows summed in double
 * in the order given, divided by k when k > 1, narrowed once; bit for bit */
static void check_mean(const char *dn, rm_dtype_t dt, int n, size_t len)
{
  agg_test_bufs_t bf;
  int sel[64];
  agg_test_bufs_get(&bf, n, len, dt, pick);
  for (int i = 0; i < n; i++) sel[i] = n - 1 - i;
  for (int k = 1; k <= n; k++)
    for (int sse2 = 0; sse2 < 2; sse2++) {
      for (size_t q = 0; q < len; q++) {
        double sum = load(bf.rows, (size_t)sel[0] * bf.stride + q, dt);
        for (int i = 1; i < k; i++) sum += load(bf.rows, (size_t)sel[i] * bf.stride + q, dt);
        agg_test_store(bf.o2, q, dt, k > 1 ? sum / (double)k : sum);
      }
      rm__agg_block_t b = {bf.rows, bf.stride, len, n, dt, NULL, 0};
      memset(bf.o1, 0x5a, len * bf.esz);
      rm__agg_sse2_only(sse2);
      CHECK(rm__agg_mean_rows(&b, sel, k, bf.o1) == RM_OK);
      rm__agg_sse2_only(0);
      /* bit for bit, except that a NaN's sign and payload are the compiler's
       * (it may swap the operands of an addition); NaN matches NaN */
      size_t at = 0;
      while (at < len && (memcmp(bf.o1 + at * bf.esz, bf.o2 + at * bf.esz, bf.esz) == 0 ||
                          (isnan(load(bf.o1, at, dt)) && isnan(load(bf.o2, at, dt)))))
        at++;
      CHECKF(at == len, "%s n=%d len=%zu k=%d sse2=%d: mean of rows differs at %zu: %.9g, here %.9g",
             dn, n, len, k, sse2, at, at < len ? load(bf.o1, at, dt) : 0.0,
             at < len ? load(bf.o2, at, dt) : 0.0);
    }
  agg_test_bufs_put(&bf);
}

/* the norm every method starts with (clipping, info->norm): f32 read in
 * place, four tiles at a time, must give the bits of the same values
 * widened to f64 (the double path, which f32 took before) */
static void check_norm(size_t len, int specials)
{
  float *x = malloc(len * sizeof *x);
  double *y = malloc(len * sizeof *y);
  if (!x || !y) exit(1);
  for (size_t q = 0; q < len; q++) {
    x[q] = specials ? (float)pick() : (float)((unif() - 0.5) * 1e3);
    y[q] = x[q];
  }
  double want = rm__agg_norm(y, len, RM_F64);
  for (int sse2 = 0; sse2 < 2; sse2++) {
    rm__agg_sse2_only(sse2);
    double got = rm__agg_norm(x, len, RM_F32);
    rm__agg_sse2_only(0);
    CHECKF(memcmp(&got, &want, sizeof got) == 0 || (isnan(got) && isnan(want)),
           "norm len=%zu specials=%d sse2=%d: %.17g, the double path %.17g", len, specials, sse2,
           got, want);
  }
  free(x);
  free(y);
}

int main(void)
{
  static const rm_dtype_t dts[] = {RM_F32, RM_F64, RM_F16, RM_BF16};
  static const char *const dtn[] = {"f32", "f64", "f16", "bf16"};
  static const size_t lens[] = {1, 31, 256, 613, 2085};
  int ns[19], nn = 0;
  for (int n = 1; n <= 17; n++) ns[nn++] = n;
  ns[nn++] = 33;
  for (int d = 0; d < 4; d++)
    for (int a = 0; a < nn; a++)
      for (int l = 0; l < 5; l++) {
        for (int kind = 0; kind < NKINDS; kind++) check_dist(dtn[d], dts[d], ns[a], lens[l], kind);
        if (lens[l] < 1000) check_bulyan(dtn[d], dts[d], ns[a], lens[l]);
        check_mean(dtn[d], dts[d], ns[a], lens[l]);
      }
  check_bulyan("f32", RM_F32, 70, 300);
  static const size_t nlens[] = {1, 3, 255, 256, 1023, 1024, 1031, 4096, 5000, 70001};
  for (int l = 0; l < 10; l++)
    for (int sp = 0; sp < 2; sp++)
      for (int rep = 0; rep < 5; rep++) check_norm(nlens[l], sp && rep < 2);
  printf("test_krum_vec: %d selections and %d Bulyan phases compared\n", g_sel_cases,
         g_bulyan_cases);
  return rm_check_exit("test_krum_vec");
}
