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
 *      the constant n so that every comparator is a vector min and max on
 *      registers ("lo = u < v ? u : v", written with masks: C has no
 *      vector ?:);
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
 * Build: AVX2 only (where rm__agg_avx2() says the CPU has it); elsewhere
 * rm__agg_coord keeps its tile kernel, which gives the same bits.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include "aggregate/agg_int.h"
#include "aggregate/agg_kernels_int.h"

#include <math.h>
#include <string.h>

#define STRIP 8

typedef float cs_v8f __attribute__((vector_size(32)));
typedef int32_t cs_v8i __attribute__((vector_size(32)));
typedef float cs_v4f __attribute__((vector_size(16)));
typedef double cs_v4d __attribute__((vector_size(32)));

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

/* the 8 f32 values as two halves widened to double */
#define CS_LO(v) __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3), cs_v4d)
#define CS_HI(v) __builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7), cs_v4d)
#define CS_SEL(m, a, b) ((cs_v8f)(((cs_v8i)(a) & (m)) | ((cs_v8i)(b) & ~(m))))

/*
 * One kernel per (n, build). Arguments: the n rows (f32 pointers), columns
 * [j0, j0 + c), c <= 32 * STRIP; out (f32) written for the strips taken;
 * kept[i] += columns of row i kept (f > 0); returns a bit per strip that
 * the caller must give to the tile kernel (ties, or a partial last strip).
 */
#define CS_KERNEL(N, NAME, ATTR)                                                      \
  ATTR static uint32_t NAME(const float *const *rows, size_t j0, size_t c, int med,   \
                            int f, float *out, int64_t *kept, double *sq)             \
  {                                                                                   \
    const unsigned char(*net)[2] = NET##N;                                            \
    const int npairs = (int)(sizeof NET##N / sizeof NET##N[0]);                       \
    const int phi = N / 2, plo = N % 2 ? phi : phi - 1;                               \
    const int trim = !med || f > 0;                                                   \
    const int kf = trim ? f : 0, kl = trim ? N - f - 1 : N - 1;                       \
    const cs_v8f inf = {INFINITY, INFINITY, INFINITY, INFINITY,                       \
                        INFINITY, INFINITY, INFINITY, INFINITY};                      \
    const cs_v8f zero = {0};                                                          \
    const double div = (double)(N - 2 * f);                                           \
    cs_v8i kc[N];                                                                     \
    cs_v4d acc[N];                                                                    \
    uint32_t left = 0;                                                                \
    for (int i = 0; i < N; i++) {                                                     \
      kc[i] = (cs_v8i){0};                                                            \
      acc[i] = (cs_v4d){0};                                                           \
    }                                                                                 \
    for (size_t s = 0; s * STRIP < c; s++) {                                          \
      size_t j = j0 + s * STRIP;                                                      \
      if (c - s * STRIP < STRIP) {                                                    \
        left |= 1u << s;                                                              \
        continue;                                                                     \
      }                                                                               \
      cs_v8f x[N], y[N];                                                              \
      _Pragma("GCC unroll 8") for (int i = 0; i < N; i++)                             \
      {                                                                               \
        memcpy(&x[i], rows[i] + j, sizeof x[i]);                                     \
        x[i] = CS_SEL(x[i] == x[i], x[i], inf);                                       \
        y[i] = x[i];                                                                  \
      }                                                                               \
      if (sq) {                                                                       \
        _Pragma("GCC unroll 8") for (int i = 0; i < N; i++)                           \
        {                                                                             \
          cs_v4d l = CS_LO(x[i]), h = CS_HI(x[i]);                                    \
          acc[i] += l * l + h * h;                                                    \
        }                                                                             \
      }                                                                               \
      _Pragma("GCC unroll 32") for (int q = 0; q < npairs; q++)                       \
      {                                                                               \
        cs_v8f u = y[net[q][0]], v = y[net[q][1]];                                    \
        cs_v8i lt = u < v;                                                            \
        y[net[q][0]] = CS_SEL(lt, u, v);                                              \
        y[net[q][1]] = CS_SEL(lt, v, u);                                              \
      }                                                                               \
      /* the sorted rows wanted, picked by constant index (y stays in      \
       * registers; kf and kl are the same for every strip) */               \
      cs_v8f sf0 = zero, sf = zero, sl = zero, sl1 = zero;                            \
      _Pragma("GCC unroll 8") for (int i = 0; i < N; i++)                             \
      {                                                                               \
        if (i == kf - 1) sf0 = y[i];                                                  \
        if (i == kf) sf = y[i];                                                       \
        if (i == kl) sl = y[i];                                                       \
        if (i == kl + 1) sl1 = y[i];                                                  \
      }                                                                               \
      cs_v8i tie = {0};                                                               \
      if (trim && f > 0) tie |= (sf0 == sf) | (sl == sl1);                            \
      if (med) tie |= (y[plo] == zero) | (y[phi] == zero);                            \
      if (CS_ANY(tie)) {                                                              \
        left |= 1u << s;                                                              \
        continue;                                                                     \
      }                                                                               \
      cs_v8f kx[N];                                                                   \
      if (trim) {                                                                     \
        _Pragma("GCC unroll 8") for (int i = 0; i < N; i++)                           \
        {                                                                             \
          cs_v8i keep = (x[i] >= sf) & (x[i] <= sl);                                  \
          kc[i] -= keep;                                                              \
          kx[i] = CS_SEL(keep, x[i], zero);                                           \
        }                                                                             \
      }                                                                               \
      cs_v4d rl, rh;                                                                  \
      if (med) {                                                                      \
        if (plo == phi) {                                                             \
          rl = CS_LO(y[plo]);                                                         \
          rh = CS_HI(y[plo]);                                                         \
        } else {                                                                      \
          rl = 0.5 * CS_LO(y[plo]) + 0.5 * CS_LO(y[phi]);                             \
          rh = 0.5 * CS_HI(y[plo]) + 0.5 * CS_HI(y[phi]);                             \
        }                                                                             \
      } else {                                                                        \
        rl = (cs_v4d){0};                                                             \
        rh = (cs_v4d){0};                                                             \
        _Pragma("GCC unroll 8") for (int i = 0; i < N; i++)                           \
        {                                                                             \
          rl += CS_LO(kx[i]);                                                         \
          rh += CS_HI(kx[i]);                                                         \
        }                                                                             \
        rl /= div;                                                                    \
        rh /= div;                                                                    \
      }                                                                               \
      cs_v4f ol = __builtin_convertvector(rl, cs_v4f);                                \
      cs_v4f oh = __builtin_convertvector(rh, cs_v4f);                                \
      memcpy(out + j, &ol, sizeof ol);                                                \
      memcpy(out + j + 4, &oh, sizeof oh);                                            \
    }                                                                                 \
    if (trim && f > 0)                                                                \
      for (int i = 0; i < N; i++)                                                     \
        for (int k = 0; k < STRIP; k++) kept[i] += kc[i][k];                          \
    if (sq)                                                                           \
      for (int i = 0; i < N; i++) sq[i] += (acc[i][0] + acc[i][1]) + (acc[i][2] + acc[i][3]); \
    return left;                                                                      \
  }

/* x86-64 with AVX2 only: the SSE2 baseline would split every 32-byte
 * vector in two and spill (it measured slower than the tile kernel), so
 * there rm__agg_coord keeps the tile kernel */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define CS_HAVE 1
#define CS_ANY(t) __builtin_ia32_movmskps256((cs_v8f)(t))
CS_KERNEL(2, cs2, __attribute__((target("avx2"))))
CS_KERNEL(3, cs3, __attribute__((target("avx2"))))
CS_KERNEL(4, cs4, __attribute__((target("avx2"))))
CS_KERNEL(5, cs5, __attribute__((target("avx2"))))
CS_KERNEL(6, cs6, __attribute__((target("avx2"))))
CS_KERNEL(7, cs7, __attribute__((target("avx2"))))
CS_KERNEL(8, cs8, __attribute__((target("avx2"))))
#endif

#ifdef CS_HAVE
typedef uint32_t (*cs_fn)(const float *const *, size_t, size_t, int, int, float *, int64_t *,
                          double *);
#endif

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
  size_t strips = (c + STRIP - 1) / STRIP; /* at most 32: c <= 32 * STRIP */
  uint32_t all = strips >= 32 ? 0xffffffffu : (1u << strips) - 1;
#ifdef CS_HAVE
  cs_fn fn = NULL;
  switch (rm__agg_coord_small_ok(b) ? b->n : 0) {
  case 2: fn = cs2; break;
  case 3: fn = cs3; break;
  case 4: fn = cs4; break;
  case 5: fn = cs5; break;
  case 6: fn = cs6; break;
  case 7: fn = cs7; break;
  case 8: fn = cs8; break;
  default: return all;
  }
  const float *rp[8];
  for (int i = 0; i < b->n; i++)
    rp[i] = (const float *)row_ptr(b, i);
  return fn(rp, j0, c, m == RM_AGG_MEDIAN, f, (float *)out, kept, sq);
#else
  (void)m, (void)f, (void)j0, (void)out, (void)kept, (void)b, (void)sq;
  return all;
#endif
}
