/*
 * agg_int.h - module-private pieces of rm_aggregate (aggregate.c): the
 * slice layout and the per-slice kernels (agg_kernels.c and the files it
 * lists). Nothing here talks to the network; every kernel is
 * deterministic (fixed summation order, ties broken by row index = rank),
 * so one slice computed by its owner is the same bytes whoever computes
 * it.
 *
 * Slice layout of a vector of `count` elements over n ranks:
 *   base = count / n, rem = count % n, len(r) = base + (r < rem),
 *   off(r) = r * base + min(r, rem), blk = ceil(count / n) (the padded
 *   block every collective moves; padding is zeros).
 *
 * A block (rm__agg_block_t) is what rank r holds after the all-to-all: n
 * rows, row i = worker i's elements of slice r, `len` elements each, row i
 * at rows + i * stride elements, in the caller's dtype; except, when `own`
 * is set, row own_row, which is at `own` (the caller's own slice read where
 * it lies, not copied into the block: rm_aggregate's all-to-all moves only
 * the other ranks' rows).
 */
#ifndef RM_WORKER_AGGREGATE_AGG_INT_H
#define RM_WORKER_AGGREGATE_AGG_INT_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"

typedef struct rm__agg_slices {
  int n;
  size_t count, base, rem, blk;
} rm__agg_slices_t;

static inline void rm__agg_slices_init(rm__agg_slices_t *s, int n, size_t count)
{
  s->n = n;
  s->count = count;
  s->base = count / (size_t)n;
  s->rem = count % (size_t)n;
  s->blk = s->base + (s->rem > 0);
}
static inline size_t rm__agg_len(const rm__agg_slices_t *s, int r)
{
  return s->base + ((size_t)r < s->rem);
}
static inline size_t rm__agg_off(const rm__agg_slices_t *s, int r)
{
  return (size_t)r * s->base + ((size_t)r < s->rem ? (size_t)r : s->rem);
}

typedef struct rm__agg_block {
  const void *rows; /* borrowed */
  size_t stride;    /* elements between rows */
  size_t len;       /* elements of each row in the slice */
  int n;
  rm_dtype_t dt;
  const void *own; /* row own_row, when not NULL (borrowed) */
  int own_row;
} rm__agg_block_t;

/* ---- vector helpers (dt a float type) ---- */
/* L2 norm in double, without overflow for finite inputs; NaN/inf when the
 * vector holds one. */
double rm__agg_norm(const void *buf, size_t count, rm_dtype_t dt);
/* buf[i] = round_dt(buf[i] * factor), the product in double. */
void rm__agg_scale(void *buf, size_t count, rm_dtype_t dt, double factor);

/* The vectorised kernels below run an AVX2 build where the CPU has it, else
 * an SSE2 one, with the same bits. on != 0: the SSE2 build only (tests
 * compare the two; benchmarks time both). Not thread-safe; set it before. */
void rm__agg_sse2_only(int on);
/* 1 where the AVX2 builds run (CPUID, unless rm__agg_sse2_only) */
int rm__agg_avx2(void);

/* ---- coordinate-wise (NaN read as +inf) ----
 * out[len] (dt) = per coordinate median (n odd: middle value; even:
 * 0.5*lo + 0.5*hi) or trimmed mean (the values of sorted positions
 * f .. n-f-1, summed in row order, / (n - 2f)). trimmed[i] += number of coordinates where
 * row i sorted (by value, then row) among the f lowest or f highest. */
rm_status_t rm__agg_coord(const rm__agg_block_t *b, rm_agg_method_t m, int f,
                          void *out, uint32_t *trimmed);
/* rm__agg_coord's register kernel (agg_coord_small.c), for blocks where
 * rm__agg_coord_small_ok: columns [j0, j0 + c) (c <= 256) of the slice,
 * eight at a time; writes out (f32) for the strips it takes, adds to
 * kept[i] (f > 0) the columns of row i it kept there, and returns a bit per
 * strip of 8 columns it left for the tile kernel (ties at the trimming
 * boundaries, a zero median, a partial strip). */
int rm__agg_coord_small_ok(const rm__agg_block_t *b);
uint32_t rm__agg_coord_small(const rm__agg_block_t *b, rm_agg_method_t m, int f, size_t j0,
                             size_t c, void *out, int64_t *kept, double *sq);
/* Bulyan's second phase (rm__agg_bulyan_coord) in agg_coord_small.c's
 * registers (f32, 2 <= k <= 8, AVX2): columns [j0, j0 + c) (c <= 256),
 * eight at a time; writes out for the strips it takes and returns a bit
 * per strip left for the tile kernel (a partial strip; where beta < k, a
 * strip with a value that is not finite); every bit where it does not
 * apply */
uint32_t rm__agg_bulyan_small(const rm__agg_block_t *b, const int *sel, int k, int beta,
                              size_t j0, size_t c, void *out);
/* rm__agg_mean_rows in agg_coord_small.c's registers (f32, AVX2): writes
 * out for columns [0, returned) (whole groups of 16) and returns how many;
 * 0 where it does not apply */
size_t rm__agg_mean_small(const rm__agg_block_t *b, const int *sel, int k, void *out);
/* rm__agg_coord, and when sq is not NULL also sq[i] += the sum of squares
 * of row i over the slice, in double (the order of the additions is the
 * kernel's, not rm__agg_norm's: not the same bits) */
rm_status_t rm__agg_coord_sq(const rm__agg_block_t *b, rm_agg_method_t m, int f,
                             void *out, uint32_t *trimmed, double *sq);
/* the same, one rank computation per coordinate in double (the reference
 * the vectorised rm__agg_coord must match bit for bit; also its path for
 * n > 64) */
rm_status_t rm__agg_coord_ref(const rm__agg_block_t *b, rm_agg_method_t m, int f,
                              void *out, uint32_t *trimmed);

/* ---- Krum family ----
 * d[n*n] += partial squared distances of this slice: d[i*n+j] (i < j) the
 * sum of (x_i - x_j)^2, d[i*n+i] the count of non-finite values of row i.
 * All-reduced (SUM) it is the whole vector's matrix. */
rm_status_t rm__agg_pair_dist(const rm__agg_block_t *b, double *d);
/* the same, and when sq is not NULL sq[i] += the sum of squares of row i
 * over the slice in double (summed per tile: not rm__agg_norm's bits) */
rm_status_t rm__agg_pair_dist_sq(const rm__agg_block_t *b, double *d, double *sq);
/* the same in double, one pair at a time (what the f32 rm__agg_pair_dist
 * replaced; its path for f64, and the tests' reference): d's diagonal is
 * the same, the distances within ~1e-6 relative */
rm_status_t rm__agg_pair_dist_ref(const rm__agg_block_t *b, double *d);
/* Krum scores over the rows with alive[i] != 0: score[i] = the sum of the k
 * smallest distances to the other alive rows (fewer when fewer exist);
 * a pair involving a row with non-finite values is +inf. NaN for rows not
 * alive. */
void rm__agg_krum_scores(const double *d, int n, const uint8_t *alive, int k,
                         double *score, double *work /* n doubles */);
/* The best alive row: finite rows first, then the lowest score, then the
 * lowest rank. -1 when none is alive. */
int rm__agg_krum_best(const double *d, int n, const uint8_t *alive,
                      const double *score);
/* out[len] = mean of rows sel[0..k-1] (summed in the order given). */
/* The selection on the (all-reduced) matrix: scores[n] = Krum scores over
 * all rows (k = n - f - 2); sel[0..return) = the chosen rows in rank order:
 * krum the best, multi_krum the m best (n - f when m = 0), bulyan n - 2f
 * by Krum repeatedly on the rows left (k = max(1, left - f - 2)); finite
 * rows only once one is chosen. -1 when out of memory. */
int rm__agg_krum_select(const double *d, int n, rm_agg_method_t method, int f, int m,
                        double *scores, int *sel);
rm_status_t rm__agg_mean_rows(const rm__agg_block_t *b, const int *sel, int k,
                              void *out);
/* Bulyan's second phase over rows sel[0..k-1]: per coordinate the mean of
 * the beta values nearest the median of the k (ties in distance to the
 * lower value), summed in ascending order. */
rm_status_t rm__agg_bulyan_coord(const rm__agg_block_t *b, const int *sel,
                                 int k, int beta, void *out);
/* the same one column at a time (insertion sort; the vectorised one must
 * match it bit for bit; also its path for k > 64) */
rm_status_t rm__agg_bulyan_coord_ref(const rm__agg_block_t *b, const int *sel,
                                     int k, int beta, void *out);

/* ---- centered clipping ----
 * start: v[len] = coordinate-wise median, part[i] = sum (x_i - v)^2.
 * step:  v += (1/n) * sum over rows with w[i] > 0 of w[i] * (x_i - v)
 *        (rows in order); then, when part != NULL, part[i] as above. */
rm_status_t rm__agg_cc_start(const rm__agg_block_t *b, double *v, double *part);
rm_status_t rm__agg_cc_step(const rm__agg_block_t *b, const double *w,
                            double *v, double *part);
/* out (dt) = v, len elements */
void rm__agg_narrow(const double *v, size_t len, rm_dtype_t dt, void *out);

/* ---- suspects (suspects.c): excluded[n] from the per-row statistic ----
 * dist: Krum scores; trim: fractions of coordinates trimmed; cc: weights */
void rm__agg_suspects_dist(const double *score, int n, int f, uint8_t *excluded);
void rm__agg_suspects_trim(const double *frac, int n, int f, uint8_t *excluded);
void rm__agg_suspects_cc(const double *w, int n, int f, uint8_t *excluded);

#endif
