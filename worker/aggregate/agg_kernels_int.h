/*
 * agg_kernels_int.h - what the per-slice kernels of rm_aggregate share
 * between their files (agg_kernels.c, agg_coord.c, agg_krum.c,
 * agg_bulyan_cc.c; the design is at the top of agg_kernels.c). Private to
 * worker/aggregate/, below agg_int.h (which declares the kernels).
 *
 * The tile (TILE columns of the block's n rows), the SSE2 / AVX2 builds,
 * widening to double (f32) and narrowing back, the scratch buffers and the
 * sorting network's buffers. Only the helpers without floating-point
 * arithmetic (row_ptr, load_tile) are static inline.
 *
 * Include it after the file's "#pragma GCC optimize("O3")", so that the
 * inline helpers are compiled -O3 with the kernels that call them.
 */
#ifndef RM_WORKER_AGGREGATE_AGG_KERNELS_INT_H
#define RM_WORKER_AGGREGATE_AGG_KERNELS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "aggregate/agg_int.h"

/* columns per tile: the unit every kernel walks a block in */
#define TILE 256
/* the largest n (rows) the sorting network takes; more go to the reference */
#define NET_MAX 64

/* ---- builds ----
 * The vectorised kernels come in an SSE2 build (the x86-64 baseline) and an
 * AVX2 one (target attribute, no FMA, so no contraction), picked once by
 * CPUID as the reduction kernels are; both do the same operations in the
 * same order and give the same bits (the tests compare them). */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define AGG_HAVE_AVX2 1
#define AGG_AVX2 __attribute__((target("avx2")))
#endif

/* ---- widening and narrowing (agg_kernels.c) ----
 * Out of line, as they were when the kernels were one file. Where both
 * operands of an addition are NaN, x86 keeps the first one's, so the sign
 * of such a NaN follows the compiler's operand order: no result here
 * promises it (every consumer tests isnan). All other bits are fixed by
 * the order of operations the code spells out. */
/* dst[0..c) = row[j0..j0+c) in double (f16/bf16 through reduce/half.h) */
void rm__agg_widen(const void *row, size_t j0, size_t c, rm_dtype_t dt, double *dst);
/* row[j0..j0+c) = src (dt; f16/bf16 via f32, round to nearest even) */
void rm__agg_narrow_at(const double *src, size_t c, rm_dtype_t dt, void *row, size_t j0);
/* dst[0..c) = row[j0..j0+c) in f32: f16/bf16 widened (exact), f32 copied */
void rm__agg_widen32(const void *row, size_t j0, size_t c, rm_dtype_t dt, float *dst);
/* sum (x - y)^2 in four fixed lanes (k mod 4), then (l0 + l1) + (l2 + l3) */
double rm__agg_sumsq_diff(const double *x, const double *y, size_t c);

/* ---- rows ---- */
static inline const void *row_ptr(const rm__agg_block_t *b, int i)
{
  if (b->own && i == b->own_row) return b->own;
  return (const char *)b->rows + (size_t)i * b->stride * rm_dtype_size(b->dt);
}

/* The register kernels (agg_coord_small.c) hand back a bit per strip of 8
 * columns they left; the tile kernels take those in runs. The next run at
 * or after strip *s of a c-column stretch: columns [*a, *z) of it; *s moves
 * past the run; 0 when none is left. */
static inline int rm__agg_next_run(uint32_t left, size_t c, size_t *s, size_t *a, size_t *z)
{
  while (*s * 8 < c && !(left >> *s & 1u)) (*s)++;
  if (*s * 8 >= c) return 0;
  size_t e = *s;
  while ((e + 1) * 8 < c && (left >> (e + 1) & 1u)) e++;
  *a = *s * 8;
  *z = (e + 1) * 8 < c ? (e + 1) * 8 : c;
  *s = e + 1;
  return 1;
}

/* tile[i*TILE + k] = row i, column j0 + k, for the rows listed (or all) */
static inline void load_tile(const rm__agg_block_t *b, const int *sel, int k, size_t j0,
                      size_t c, double *tile)
{
  for (int i = 0; i < k; i++)
    rm__agg_widen(row_ptr(b, sel ? sel[i] : i), j0, c, b->dt, tile + (size_t)i * TILE);
}

/* ---- buffers ---- */
/* a widened tile of n rows, and a column with its row indices */
typedef struct rm__agg_scratch {
  double *tile, *v;
  int *idx;
} rm__agg_scratch_t;
rm_status_t rm__agg_scratch_get(rm__agg_scratch_t *s, int n);
void rm__agg_scratch_put(rm__agg_scratch_t *s);

/* the network's comparators and the tile buffers (x and its sorted copy),
 * agg_coord.c; dt RM_F64 sizes x for double, others for f32 */
typedef struct rm__agg_net {
  int *pi, *pj, npairs;
  char *x;
} rm__agg_net_t;
/* the network run on a tile of n rows of T (srt, TILE apart): per
 * comparator (pi[p], pj[p]), per column, the lower value to row pi[p] and
 * the higher to row pj[p], branch-free (NaN made +inf before, so every
 * value compares); the rows end sorted, column by column, ascending */
#define AGG_NET_SORT(T, srt, pi, pj, npairs, c)                                      \
  for (int p_ = 0; p_ < (npairs); p_++) {                                            \
    T *restrict u_ = (srt) + (size_t)(pi)[p_] * TILE;                                \
    T *restrict v_ = (srt) + (size_t)(pj)[p_] * TILE;                                \
    for (size_t k_ = 0; k_ < (c); k_++) {                                            \
      T lo_ = u_[k_] < v_[k_] ? u_[k_] : v_[k_], hi_ = u_[k_] < v_[k_] ? v_[k_] : u_[k_]; \
      u_[k_] = lo_;                                                                  \
      v_[k_] = hi_;                                                                  \
    }                                                                                \
  }
rm_status_t rm__agg_net_get(rm__agg_net_t *w, int n, rm_dtype_t dt);
void rm__agg_net_put(rm__agg_net_t *w);
/* res[0..c) (double) = the coordinate-wise statistic of columns
 * j0..j0+c-1 by the tile kernel (n <= NET_MAX); trimmed as rm__agg_coord */
void rm__agg_net_tile(rm__agg_net_t *w, const rm__agg_block_t *b, size_t j0, size_t c,
                      rm_agg_method_t m, int f, double *res, uint32_t *trimmed);

/* ---- the reference's ranks (agg_coord.c) ----
 * rank[i*TILE + k] = position of row i in the stable sort of column k
 * (NaN made +inf in the tile first); res[k] = the median from the ranks */
void rm__agg_tile_ranks(double *tile, int n, size_t c, int64_t *rank);
void rm__agg_tile_median(const double *tile, const int64_t *rank, int n, size_t c,
                         double *res);

/* ---- sums of squares (agg_kernels.c) ---- */
/* sq[i] += sum of squares of row i, columns [j0, j0 + c), in double */
void rm__agg_rows_sumsq(const rm__agg_block_t *b, size_t j0, size_t c, double *sq);
/* sq[i] += sum of squares of f32 row x[i], c columns, in double (four
 * chains: not rm__agg_norm's order) */
void rm__agg_rows_sumsq_f32(const float *const *x, int n, size_t c, double *sq);

#endif
