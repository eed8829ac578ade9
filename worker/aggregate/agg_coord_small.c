/*
 * agg_coord_small.c - the coordinate-wise statistics (median, trimmed mean)
 * of f32 rows for the n of data-parallel training (2 <= n <= 8), in
 * registers: the common case of rm__agg_coord (agg_coord.c), which keeps
 * its tile kernel for everything else.
 *
 * Why a second kernel: the tile kernel is general (any n up to 64, any
 * float type, ties) and walks a tile of 256 columns once per step of its
 * work: NaN pass, a sorted copy, one pass per comparator of the sorting
 * network, the boundary checks, the trimming, the sum, the narrowing, each
 * a load and a store of the tile. For small n the whole column group fits
 * in registers, so this kernel does all of it in one pass over the rows,
 * eight columns (one 32-byte vector of f32) at a time:
 *   1. load the n rows' 8 values (f32, read in place), NaN -> +inf;
 *   2. sort a copy with Batcher's merge-exchange network for n (the tables
 *      below, the pairs rm__agg_coord's net_pairs produces), unrolled for
 *      the constant n so that every comparator is one vector min and one
 *      max on registers (vminps / vmaxps: "lo = u < v ? u : v", equal
 *      values included);
 *   3. the tile kernel's fast-path test: no tie across the trimming
 *      boundaries (sorted f-1 / f and n-f-1 / n-f, when f > 0) and, for the
 *      median, no zero at the median's positions (+0 and -0 compare equal
 *      but differ in bits). Where any of the 8 columns fails it, the strip
 *      is left to the tile kernel, which recovers each value's row exactly
 *      (the caller gets a bit per strip and runs those columns there);
 *   4. otherwise a row's rank follows from its value alone: kept iff
 *      sorted[f] <= x <= sorted[n-f-1]; per row the count of trimmed
 *      columns (f > 0); the median is 0.5 lo + 0.5 hi in double (or the
 *      middle value), the trimmed mean the kept values (others +0) summed
 *      in row order in double from +0, divided by n - 2f; narrowed to f32;
 *   5. when asked, each row's sum of squares over the strips taken (f32
 *      squared in double, four lanes, summed per call): rm_aggregate's norm
 *      without a second pass over the vector (aggregate.c, "norm fused").
 * These are the tile kernel's operations in its order on the same values,
 * so the result is the same bits as rm__agg_coord_ref's
 * (tests/aggregate/test_coord_vec.c compares on inputs with NaN,
 * infinities, ties and signed zeros; the SSE2 build against the AVX2 one).
 *
 * The body is compiled once per (n, method, f) that rm_agg_check allows,
 * so that the positions picked, the tie test and the trimming are
 * constants; a per-call switch picks the instance.
 *
 * Bulyan's second phase for k <= 8 chosen rows is the same pass with the
 * window of values nearest the median in place of the trimming
 * (rm__agg_bulyan_small, below).
 *
 * Build: AVX2 only (where rm__agg_avx2() says the CPU has it); elsewhere
 * rm__agg_coord keeps its tile kernel, which gives the same bits.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "aggregate/agg_int.h"
#include "aggregate/agg_kernels_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STRIP 8
/* read-ahead, in f32 elements (1 KiB) per row: the rows come from the
 * exchange, mostly out of L2, and the n streams at once outrun the
 * hardware prefetcher (measured: the n = 4 median 2.1 -> 1.8 ms per 1 M
 * columns, rm_bench_coord) */
#define CS_AHEAD 256
/* the address as an integer: the last strips' read-ahead points past the
 * row, which a prefetch may (it never faults) but C pointer arithmetic may
 * not */
#define CS_PREFETCH(p) __builtin_prefetch((const void *)((uintptr_t)(p) + CS_AHEAD * sizeof(float)))

typedef float cs_v8f __attribute__((vector_size(32)));
typedef int32_t cs_v8i __attribute__((vector_size(32)));
typedef float cs_v4f __attribute__((vector_size(16)));
typedef double cs_v4d __attribute__((vector_size(32)));
typedef int64_t cs_v4l __attribute__((vector_size(32)));

/* Batcher's merge exchange (Knuth 5.2.2 M) for n = 2..8: (i, j) pairs */
static const unsigned char NET2[][2] = {{0, 1}};
static const unsigned char NET3[][2] = {{0, 2}, {0, 1}, {1, 2}};
static const unsigned char NET4[][2] = {{0, 2}, {1, 3}, {0, 1}, {2, 3}, {1, 2}};
static const unsigned char NET5[][2] = {{0, 4}, {0, 2}, {1, 3}, {2, 4}, {0, 1},
                                        {2, 3}, {1, 4}, {1, 2}, {3, 4}};
static const unsigned char NET6[][2] = {{0, 4}, {1, 5}, {0, 2}, {1, 3}, {2, 4}, {3, 5},
                                        {0, 1}, {2, 3}, {4, 5}, {1, 4}, {1, 2}, {3, 4}};
static const unsigned char NET7[][2] = {{0, 4}, {1, 5}, {2, 6}, {0, 2}, {1, 3}, {4, 6},
                                        {2, 4}, {3, 5}, {0, 1}, {2, 3}, {4, 5}, {1, 4},
                                        {3, 6}, {1, 2}, {3, 4}, {5, 6}};
static const unsigned char NET8[][2] = {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {0, 2}, {1, 3},
                                        {4, 6}, {5, 7}, {2, 4}, {3, 5}, {0, 1}, {2, 3},
                                        {4, 5}, {6, 7}, {1, 4}, {3, 6}, {1, 2}, {3, 4},
                                        {5, 6}};

#define CS_SEL(m, a, b) ((cs_v8f)(((cs_v8i)(a) & (m)) | ((cs_v8i)(b) & ~(m))))

/*
 * The kernel's body, inlined with constant N, MED and F: the sorted rows it
 * picks, the tie test and the trimming are then fixed per instance (no
 * branch or select on the method in the loop, y stays in registers), and
 * each comparator is one vector min and one max (NaN is +inf by then, and
 * min(u, v) / max(v, u) are "u < v ? u : v" / "u < v ? v : u", equal
 * values included, so the bits are the masked selects' ones). Arguments:
 * the n rows (f32 pointers), columns [j0, j0 + c), c <= 32 * STRIP; out
 * (f32) written for the strips taken; kept[i] += columns of row i kept
 * (F > 0); returns a bit per strip that the caller must give to the tile
 * kernel (ties, or a partial last strip).
 *
 * x86-64 with AVX2 only: the SSE2 baseline would split every 32-byte
 * vector in two and spill (it measured slower than the tile kernel), so
 * there rm__agg_coord keeps the tile kernel.
 */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define CS_HAVE 1
#include <immintrin.h>
/* the 8 f32 values as two halves widened to double, and four doubles
 * narrowed: the instructions themselves (vcvtps2pd / vcvtpd2ps on 256
 * bits); GCC's generic conversions of these vector types went through the
 * stack in two-element pieces */
#define CS_LO(v) ((cs_v4d)_mm256_cvtps_pd(_mm256_castps256_ps128((__m256)(v))))
#define CS_HI(v) ((cs_v4d)_mm256_cvtps_pd(_mm256_extractf128_ps((__m256)(v), 1)))
#define CS_NARROW(d) ((cs_v4f)_mm256_cvtpd_ps((__m256d)(d)))
#define CS_ANY(t) __builtin_ia32_movmskps256((cs_v8f)(t))
#define CS_MIN(a, b) __builtin_ia32_minps256(a, b)
#define CS_MAX(a, b) __builtin_ia32_maxps256(a, b)

/* the K rows' 8 values at column j, NaN read as +inf, with read-ahead */
__attribute__((target("avx2"), always_inline)) static inline void
cs_load(const int K, const float *const *rp, size_t j, cs_v8f *x)
{
  const cs_v8f inf = {INFINITY, INFINITY, INFINITY, INFINITY,
                      INFINITY, INFINITY, INFINITY, INFINITY};
  _Pragma("GCC unroll 8") for (int i = 0; i < K; i++)
  {
    memcpy(&x[i], rp[i] + j, sizeof x[i]);
    CS_PREFETCH(rp[i] + j);
    x[i] = CS_SEL(x[i] == x[i], x[i], inf);
  }
}

/* y sorted ascending per lane by the network (constant pairs) */
__attribute__((target("avx2"), always_inline)) static inline void
cs_sort(const unsigned char (*net)[2], const int npairs, cs_v8f *y)
{
  _Pragma("GCC unroll 32") for (int q = 0; q < npairs; q++)
  {
    cs_v8f u = y[net[q][0]], v = y[net[q][1]];
    y[net[q][0]] = CS_MIN(u, v);
    y[net[q][1]] = CS_MAX(v, u);
  }
}

__attribute__((target("avx2"), always_inline)) static inline uint32_t
cs_body(const int N, const unsigned char (*net)[2], const int npairs, const int MED, const int F,
        const float *const *rows, size_t j0, size_t c, float *out, int64_t *kept, double *sq)
{
  const int phi = N / 2, plo = N % 2 ? phi : phi - 1;
  const int trim = !MED || F > 0;
  const int kf = trim ? F : 0, kl = trim ? N - F - 1 : N - 1;
  const cs_v8f zero = {0};
  const double div = (double)(N - 2 * F);
  const float *rp[8];
  cs_v8i kc[8];
  cs_v4d acc[8];
  uint32_t left = 0;
  for (int i = 0; i < N; i++) {
    rp[i] = rows[i];
    kc[i] = (cs_v8i){0};
    acc[i] = (cs_v4d){0};
  }
  for (size_t s = 0; s * STRIP < c; s++) {
    size_t j = j0 + s * STRIP;
    if (c - s * STRIP < STRIP) {
      left |= 1u << s;
      continue;
    }
    cs_v8f x[8], y[8];
    cs_load(N, rp, j, x);
    _Pragma("GCC unroll 8") for (int i = 0; i < N; i++) y[i] = x[i];
    if (sq) {
      _Pragma("GCC unroll 8") for (int i = 0; i < N; i++)
      {
        cs_v4d l = CS_LO(x[i]), h = CS_HI(x[i]);
        acc[i] += l * l + h * h;
      }
    }
    cs_sort(net, npairs, y);
    cs_v8i tie = {0};
    if (trim && F > 0) tie |= (y[kf - 1] == y[kf]) | (y[kl] == y[kl + 1]);
    if (MED) tie |= (y[plo] == zero) | (y[phi] == zero);
    if (CS_ANY(tie)) {
      left |= 1u << s;
      continue;
    }
    cs_v8f kx[8];
    if (trim) {
      _Pragma("GCC unroll 8") for (int i = 0; i < N; i++)
      {
        cs_v8i keep = (x[i] >= y[kf]) & (x[i] <= y[kl]);
        kc[i] -= keep;
        kx[i] = CS_SEL(keep, x[i], zero);
      }
    }
    cs_v4d rl, rh;
    if (MED) {
      if (plo == phi) {
        rl = CS_LO(y[plo]);
        rh = CS_HI(y[plo]);
      } else {
        rl = 0.5 * CS_LO(y[plo]) + 0.5 * CS_LO(y[phi]);
        rh = 0.5 * CS_HI(y[plo]) + 0.5 * CS_HI(y[phi]);
      }
    } else {
      rl = (cs_v4d){0};
      rh = (cs_v4d){0};
      _Pragma("GCC unroll 8") for (int i = 0; i < N; i++)
      {
        rl += CS_LO(kx[i]);
        rh += CS_HI(kx[i]);
      }
      rl /= div;
      rh /= div;
    }
    cs_v4f ol = CS_NARROW(rl), oh = CS_NARROW(rh);
    memcpy(out + j, &ol, sizeof ol);
    memcpy(out + j + 4, &oh, sizeof oh);
  }
  if (trim && F > 0)
    for (int i = 0; i < N; i++)
      for (int k = 0; k < STRIP; k++) kept[i] += kc[i][k];
  if (sq)
    for (int i = 0; i < N; i++) sq[i] += (acc[i][0] + acc[i][1]) + (acc[i][2] + acc[i][3]);
  return left;
}

/* one entry per n: the method and f picked here, once per call, among the
 * instances rm_agg_check allows (f <= (n - 1) / 2); any other f returns
 * every strip to the tile kernel */
#define CS_CASE(N, MED, F)                                                              \
  case F:                                                                               \
    if (F <= (N - 1) / 2)                                                               \
      return cs_body(N, NET##N, (int)(sizeof NET##N / sizeof NET##N[0]), MED, F, rows,  \
                     j0, c, out, kept, sq);                                             \
    break
#define CS_KERNEL(N, NAME)                                                              \
  __attribute__((target("avx2"))) static uint32_t NAME(                                 \
      const float *const *rows, size_t j0, size_t c, int med, int f, float *out,        \
      int64_t *kept, double *sq)                                                        \
  {                                                                                     \
    if (med) {                                                                          \
      switch (f) {                                                                      \
        CS_CASE(N, 1, 0);                                                               \
        CS_CASE(N, 1, 1);                                                               \
        CS_CASE(N, 1, 2);                                                               \
        CS_CASE(N, 1, 3);                                                               \
      }                                                                                 \
    } else {                                                                            \
      switch (f) {                                                                      \
        CS_CASE(N, 0, 0);                                                               \
        CS_CASE(N, 0, 1);                                                               \
        CS_CASE(N, 0, 2);                                                               \
        CS_CASE(N, 0, 3);                                                               \
      }                                                                                 \
    }                                                                                   \
    return c >= 32 * STRIP ? 0xffffffffu : (1u << ((c + STRIP - 1) / STRIP)) - 1;       \
  }

CS_KERNEL(2, cs2)
CS_KERNEL(3, cs3)
CS_KERNEL(4, cs4)
CS_KERNEL(5, cs5)
CS_KERNEL(6, cs6)
CS_KERNEL(7, cs7)
CS_KERNEL(8, cs8)

/*
 * Bulyan's second phase: per column, the mean of the beta values of the k
 * chosen rows nearest their median. rm__agg_bulyan_coord_ref sorts the
 * column (NaN as +inf) and grows a window from the median's insertion
 * point L = #{v < med}, one value at a time, taking the lower side when
 * med - v[lo - 1] <= v[hi] - med; the window summed ascending in double
 * from +0, divided by beta. Here, per strip of 8 columns: the values
 * sorted by the same network (in f32: the same order as their exact
 * widenings; where +0 and -0 trade places no result changes, as sums start
 * at +0 and distances do not see the sign of a zero), then, in double,
 * 4 lanes at a time:
 *   - beta == k (f = 0): the window is the whole column; the sum of the
 *     sorted values;
 *   - beta < k: the growth is a merge of two ascending lists, the lower
 *     side's distances dl_i = med - v[L - i] and the upper side's dr_j =
 *     v[L + j - 1] - med (rounding is monotone, so both stay ascending),
 *     ties to the lower. The lower side's i-th value is among the first
 *     beta taken iff i <= beta and fewer than beta - i + 1 upper values are
 *     strictly nearer, i.e. unless the upper value at sorted position
 *     p + beta (p = L - i) exists and v[p + beta] - med < med - v[p]. That
 *     test names fixed positions, so a = the count of lower values taken
 *     needs no per-lane indexing; the window is [L - a, L - a + beta).
 *     The replay and the merge agree where the order is total, that is
 *     where every value of the strip is finite: a strip with an infinity
 *     (or a NaN) is left to the tile kernel, which replays the growth.
 * The same operations as the reference on the same doubles (the distances,
 * the comparisons, the sum in ascending order), so the same bits
 * (tests/aggregate/test_krum_vec.c).
 */
__attribute__((target("avx2"), always_inline)) static inline uint32_t
bs_body(const int K, const unsigned char (*net)[2], const int npairs, const float *const *rows,
        size_t j0, size_t c, int beta, float *out)
{
  const cs_v8f inf = {INFINITY, INFINITY, INFINITY, INFINITY,
                      INFINITY, INFINITY, INFINITY, INFINITY};
  const cs_v8f ninf = -inf;
  const float *rp[8];
  uint32_t left = 0;
  for (int i = 0; i < K; i++) rp[i] = rows[i];
  for (size_t s = 0; s * STRIP < c; s++) {
    size_t j = j0 + s * STRIP;
    if (c - s * STRIP < STRIP) {
      left |= 1u << s;
      continue;
    }
    cs_v8f y[8];
    cs_load(K, rp, j, y);
    cs_sort(net, npairs, y);
    cs_v4d r[2];
    if (beta == K) {
      r[0] = (cs_v4d){0};
      r[1] = (cs_v4d){0};
      _Pragma("GCC unroll 8") for (int i = 0; i < K; i++)
      {
        r[0] += CS_LO(y[i]);
        r[1] += CS_HI(y[i]);
      }
    } else {
      if (CS_ANY((y[0] == ninf) | (y[K - 1] == inf))) { /* not all finite */
        left |= 1u << s;
        continue;
      }
      for (int h = 0; h < 2; h++) {
        cs_v4d v[8], med;
        _Pragma("GCC unroll 8") for (int i = 0; i < K; i++) v[i] = h ? CS_HI(y[i]) : CS_LO(y[i]);
        med = K % 2 ? v[K / 2] : 0.5 * v[K / 2 - 1] + 0.5 * v[K / 2];
        cs_v4l L = {0}, a = {0}, bl = {beta, beta, beta, beta};
        _Pragma("GCC unroll 8") for (int i = 0; i < K; i++) L -= (cs_v4l)(v[i] < med);
        _Pragma("GCC unroll 8") for (int p = 0; p < K; p++)
        {
          cs_v4l pl = {p, p, p, p};
          cs_v4l take = (pl < L) & (L <= pl + bl); /* a lower value, i = L - p <= beta */
          if (p + beta < K) {
            cs_v4d up = v[0]; /* v[p + beta]: beta is the call's, so a select */
            _Pragma("GCC unroll 8") for (int q = 1; q < K; q++) if (q == p + beta) up = v[q];
            take &= ~(cs_v4l)(up - med < med - v[p]);
          }
          a -= take;
        }
        cs_v4l lo = L - a, hi = lo + bl;
        cs_v4d sum = {0};
        _Pragma("GCC unroll 8") for (int p = 0; p < K; p++)
        {
          cs_v4l pl = {p, p, p, p};
          cs_v4l in = (lo <= pl) & (pl < hi);
          sum += (cs_v4d)((cs_v4l)v[p] & in);
        }
        r[h] = sum;
      }
    }
    r[0] /= (double)beta;
    r[1] /= (double)beta;
    cs_v4f ol = CS_NARROW(r[0]), oh = CS_NARROW(r[1]);
    memcpy(out + j, &ol, sizeof ol);
    memcpy(out + j + 4, &oh, sizeof oh);
  }
  return left;
}

#define BS_KERNEL(K, NAME)                                                              \
  __attribute__((target("avx2"))) static uint32_t NAME(const float *const *rows,        \
                                                       size_t j0, size_t c, int beta,   \
                                                       float *out)                      \
  {                                                                                     \
    const unsigned char(*net)[2] = NET##K;                                              \
    const int np = (int)(sizeof NET##K / sizeof NET##K[0]);                             \
    if (beta == K) return bs_body(K, net, np, rows, j0, c, K, out);                     \
    return bs_body(K, net, np, rows, j0, c, beta, out);                                 \
  }
BS_KERNEL(2, bs2)
BS_KERNEL(3, bs3)
BS_KERNEL(4, bs4)
BS_KERNEL(5, bs5)
BS_KERNEL(6, bs6)
BS_KERNEL(7, bs7)
BS_KERNEL(8, bs8)

/*
 * The mean of k chosen f32 rows (the Krum family's result, agg_krum.c's
 * rm__agg_mean_rows): per column the first row's value widened to double,
 * the others added in row order, divided by k when k > 1, narrowed. The
 * tile kernel's operations in its order, so the same bits; here the sums
 * stay in registers, 16 columns at a time, and each row is read once with
 * read-ahead. Full 16-column groups only; the caller takes the rest.
 */
__attribute__((target("avx2"))) static void ms_avx2(const float *const *rows, int k,
                                                    size_t groups, float *out)
{
  for (size_t g = 0; g < groups; g++) {
    size_t j = g * 2 * STRIP;
    cs_v8f a, b;
    memcpy(&a, rows[0] + j, sizeof a);
    memcpy(&b, rows[0] + j + STRIP, sizeof b);
    CS_PREFETCH(rows[0] + j);
    cs_v4d r0 = CS_LO(a), r1 = CS_HI(a), r2 = CS_LO(b), r3 = CS_HI(b);
    for (int i = 1; i < k; i++) {
      memcpy(&a, rows[i] + j, sizeof a);
      memcpy(&b, rows[i] + j + STRIP, sizeof b);
      CS_PREFETCH(rows[i] + j);
      r0 += CS_LO(a);
      r1 += CS_HI(a);
      r2 += CS_LO(b);
      r3 += CS_HI(b);
    }
    if (k > 1) {
      r0 /= (double)k;
      r1 /= (double)k;
      r2 /= (double)k;
      r3 /= (double)k;
    }
    cs_v4f o0 = CS_NARROW(r0), o1 = CS_NARROW(r1), o2 = CS_NARROW(r2), o3 = CS_NARROW(r3);
    memcpy(out + j, &o0, sizeof o0);
    memcpy(out + j + 4, &o1, sizeof o1);
    memcpy(out + j + 8, &o2, sizeof o2);
    memcpy(out + j + 12, &o3, sizeof o3);
  }
}
#endif

#ifdef CS_HAVE
/* the instances by n (k for Bulyan): 2..8 */
typedef uint32_t (*cs_fn)(const float *const *, size_t, size_t, int, int, float *, int64_t *,
                          double *);
typedef uint32_t (*bs_fn)(const float *const *, size_t, size_t, int, float *);
static const cs_fn CS_FN[9] = {NULL, NULL, cs2, cs3, cs4, cs5, cs6, cs7, cs8};
static const bs_fn BS_FN[9] = {NULL, NULL, bs2, bs3, bs4, bs5, bs6, bs7, bs8};
#endif

/* a bit for each strip of c <= 32 * STRIP columns: what a kernel that
 * takes none of them returns */
static uint32_t all_strips(size_t c)
{
  size_t strips = (c + STRIP - 1) / STRIP;
  return strips >= 32 ? 0xffffffffu : (1u << strips) - 1;
}

int rm__agg_coord_small_ok(const rm__agg_block_t *b)
{
#ifdef CS_HAVE
  return b->dt == RM_F32 && b->n >= 2 && b->n <= 8 && rm__agg_avx2();
#else
  (void)b;
  return 0;
#endif
}

uint32_t rm__agg_coord_small(const rm__agg_block_t *b, rm_agg_method_t m, int f, size_t j0,
                             size_t c, void *out, int64_t *kept, double *sq)
{
#ifdef CS_HAVE
  if (!rm__agg_coord_small_ok(b)) return all_strips(c);
  const float *rp[8];
  for (int i = 0; i < b->n; i++)
    rp[i] = (const float *)row_ptr(b, i);
  return CS_FN[b->n](rp, j0, c, m == RM_AGG_MEDIAN, f, (float *)out, kept, sq);
#else
  (void)m, (void)f, (void)j0, (void)out, (void)kept, (void)b, (void)sq;
  return all_strips(c);
#endif
}

uint32_t rm__agg_bulyan_small(const rm__agg_block_t *b, const int *sel, int k, int beta,
                              size_t j0, size_t c, void *out)
{
#ifdef CS_HAVE
  if (b->dt != RM_F32 || k < 2 || k > 8 || beta < 1 || beta > k || !rm__agg_avx2())
    return all_strips(c);
  const float *rp[8];
  for (int i = 0; i < k; i++)
    rp[i] = (const float *)row_ptr(b, sel[i]);
  return BS_FN[k](rp, j0, c, beta, (float *)out);
#else
  (void)b, (void)sel, (void)k, (void)beta, (void)j0, (void)out;
  return all_strips(c);
#endif
}

size_t rm__agg_mean_small(const rm__agg_block_t *b, const int *sel, int k, void *out)
{
#ifdef CS_HAVE
  const float *stack[8], **rp = stack;
  size_t groups = b->len / (2 * STRIP);
  if (b->dt != RM_F32 || k < 1 || groups == 0 || !rm__agg_avx2()) return 0;
  if (k > 8 && !(rp = malloc((size_t)k * sizeof *rp))) return 0; /* the tile kernel then */
  for (int i = 0; i < k; i++)
    rp[i] = (const float *)row_ptr(b, sel[i]);
  ms_avx2(rp, k, groups, (float *)out);
  if (rp != stack) free(rp);
  return groups * 2 * STRIP;
#else
  (void)b, (void)sel, (void)k, (void)out;
  return 0;
#endif
}
