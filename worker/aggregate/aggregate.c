/*
 * aggregate.c - rm_aggregate (ringmaster.h, aggregation.h): clipping, then
 * mean or a Byzantine-robust method, over the public collectives only. The
 * per-slice math is agg_kernels.c and the files it lists.
 *
 * Notation: n ranks, a vector of D bytes per rank (count elements of the
 * dtype), slices as in agg_int.h (slice r of every vector is owned by rank
 * r; blk = ceil(count / n) elements, padded with zeros).
 *
 * 0. CHECK. rm_agg_check(cfg, n) and the arguments, before any byte moves:
 *    a refused call is RM_ERR_INVALID_ARG on every rank (they all see the
 *    same world and config) and the communicator stays usable.
 * 1. CLIP (every method). norm = ||send||_2 in double (info->norm); when
 *    clip_norm > 0 and norm > clip_norm, this rank's vector is scaled by
 *    clip_norm / norm (info->clipped = 1). A vector whose norm is not finite
 *    cannot be scaled: the robust methods get it as it is (they trim or
 *    exclude it), `mean` gets zeros instead (clipping bounds every rank's
 *    contribution; one that cannot be measured contributes nothing), and
 *    clipped = 1. Without clipping, `mean` is plain rm_allreduce(AVG) and a
 *    NaN propagates, as there.
 *    NORM FUSED: without clipping the norm is information only, and a pass
 *    over the whole vector for it costs about a third of an all-reduce of
 *    the same size; median, trimmed_mean and the Krum family then take it
 *    from the pass their kernel makes over the slices anyway: each rank
 *    sums the squares of every row over its slice, the N partial sums
 *    travel in the small all-reduce of step 4 (with the trimmed counts, or
 *    after the distance matrix), and rank r's norm is the root of its
 *    row's total. Same value up to the order of the
 *    additions; where the total is not finite (a non-finite value, or
 *    squares that overflow) the rank computes it as above instead.
 * 2. MEAN: rm_allreduce(AVG) of the (clipped) vector. Cost: the all-reduce's,
 *    2(N-1)/N * D per rank for the ring.
 * 3. EXCHANGE (every robust method): pack the (clipped) vector as n blocks
 *    of blk elements, one rm_alltoall (U8, blk * esz bytes per block): rank
 *    r now holds slice r of every rank's vector (the block, agg_int.h).
 *    Sent per rank: (N-1) * blk * esz ~ (N-1)/N * D.
 * 4. STATISTIC on the slice:
 *    median, trimmed_mean  coordinate-wise (agg_coord.c); each rank counts
 *        per row how many of its coordinates sorted among the f lowest or f
 *        highest ("trimmed"); one small all-reduce sums the N counts.
 *    krum, multi_krum, bulyan  partial squared distances of all row pairs on
 *        the slice plus each row's count of non-finite values (diagonal),
 *        one rm_allreduce(SUM, f64) of the N x N matrix (8 N^2 bytes): every
 *        rank then holds the same matrix bytes and runs the same selection
 *        (Krum score = sum of the n - f - 2 smallest squared distances to the
 *        other rows, Blanchard et al. 2017; rows with a non-finite value rank
 *        after every finite row; ties to the lowest rank):
 *          krum        the best row;
 *          multi_krum  the m best (m = n - f when 0);
 *          bulyan      n - 2f rows chosen by Krum repeatedly on the rows
 *                      left (k = |left| - f - 2, at least 1), then per
 *                      coordinate the mean of the beta = n - 4f values
 *                      nearest the median of the chosen (El Mhamdi et al.
 *                      2018).
 *        Only finite rows are selected while any is left: when fewer finite
 *        rows exist than wanted the selection is the finite ones (Krum: a
 *        finite row whenever one exists), so the output is finite whenever
 *        the honest rows are; only when no row is finite is the output not.
 *        Then the mean of the selected rows (Bulyan: phase two) slice-wise.
 *    centered_clip  v = coordinate-wise median of the slice (this call's
 *        own inputs: no state is kept between calls), partial squared norms
 *        ||x_i - v||^2 of the slice, then `iterations` rounds of: one
 *        rm_allreduce(SUM, f64) of the N partial norms, w_i = min(1, tau /
 *        ||x_i - v||) (0 when that norm is not finite), v += (1/n) sum_i
 *        w_i (x_i - v) on the slice, fused with the next round's partial
 *        norms (Karimireddy et al. 2021). 8N bytes per round.
 * 5. ALL-GATHER the result slices: rm_allgather (U8) of blk * esz bytes;
 *    rank r's block is slice r. Sent per rank: (N-1) * blk * esz ~ (N-1)/N
 *    * D. (median/trimmed_mean with f > 0 first all-reduce the N trimmed
 *    counts, f64, exact.) When N divides count no copy is made on either
 *    side: the vector's slices are the blocks and the gather lands in recv.
 *
 * COST per rank: 2(N-1)/N * D bytes, as a ring all-reduce, plus 8 N^2
 * (Krum family) or 8 N * iterations (centered_clip) bytes of small
 * all-reduces; latency: N-1 + N-1 sequential exchanges plus one or
 * `iterations` small all-reduces. Memory: 2 D for the exchange, 2 D / N * N
 * for the gather (none of the copies when N divides count), (D / N) * 8 / esz for centered_clip's v. Compute:
 * O(D * N log N / N) sort per rank (coordinate-wise), O(D / N * N^2) per
 * rank for the distances.
 *
 * Bitwise identical on every rank: each coordinate of the result is computed
 * by one rank and all-gathered; every selection is made from the same
 * all-reduced bytes with the same code; info->excluded/scores come from the
 * same matrix / counts / weights on every rank.
 *
 * info (written only on success): contributors = n; norm, clipped (this
 * rank); bytes_sent (this call, payload bytes this rank sent); excluded /
 * scores per rank when given:
 *    mean           excluded 0, scores NaN
 *    median, trimmed_mean  scores = fraction of coordinates trimmed
 *    krum family    scores = Krum score over all n rows (k = n - f - 2)
 *    centered_clip  scores = weight w_i of the last round
 * excluded: suspects.c's rule on those scores (an outlier relative to the
 * spread of the rows themselves, never one of the honest majority's
 * ordinary noise; a non-finite row always). "excluded" is the SUSPECT signal the coordinator counts over a window
 * (byzantine_suspect events), so it marks outliers, not every row a
 * method happened to leave out: Krum selects one row and drops n - 1
 * honest ones every step, which says nothing about them.
 *
 * WHICH METHOD (docs/robust-aggregation.md). Krum returns one worker's
 * vector, so its output has one batch's variance (n times the mean's) and
 * follows a different worker from step to step: training behaves as with
 * an n times smaller batch. Multi-Krum (the mean of n - f chosen rows) keeps
 * the mean's variance and drops far rows (scaled sign flips, noise);
 * trimmed mean / median handle garbage per coordinate (NaN, huge values);
 * Bulyan combines both at n >= 4f + 3; centered clipping bounds how far any
 * row moves the result, the one defence against attacks that stay inside
 * the honest spread (ALIE, IPM), which no suspect rule can name.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aggregate/agg_int.h"
#include "collectives/collectives.h"
#include "comm/comm_int.h"
#include "device/gpu.h"
#include "rm_log.h"

static int is_float(rm_dtype_t dt)
{
  return dt == RM_F32 || dt == RM_F64 || dt == RM_F16 || dt == RM_BF16;
}

/* what a call computes before it fills info */
typedef struct agg_out {
  size_t bytes;
  uint8_t *excluded; /* n, owned */
  double *scores;    /* n, owned */
} agg_out_t;

static rm_status_t allreduce_f64(rm_comm_t *c, double *x, size_t n, agg_out_t *o)
{
  rm_allreduce_info_t ai;
  memset(&ai, 0, sizeof ai);
  rm_status_t st = rm_allreduce_ex(c, x, x, n, RM_F64, RM_SUM, RM_ALGO_AUTO, &ai);
  o->bytes += ai.bytes_sent;
  return st;
}

static rm_status_t run_mean(rm_comm_t *c, const void *send, void *recv, size_t count,
                            rm_dtype_t dt, int clipped, double factor, agg_out_t *o)
{
  size_t esz = rm_dtype_size(dt);
  rm_allreduce_info_t ai;
  memset(&ai, 0, sizeof ai);
  if (clipped) {
    if (recv != send) memcpy(recv, send, count * esz);
    if (factor == 0) memset(recv, 0, count * esz);
    else rm__agg_scale(recv, count, dt, factor);
    send = recv;
  }
  rm_status_t st = rm_allreduce_ex(c, send, recv, count, dt, RM_AVG, RM_ALGO_AUTO, &ai);
  o->bytes += ai.bytes_sent;
  return st;
}

/* Krum family on the block: matrix, selection, the mean of the chosen rows
 * (or Bulyan's phase two) into out */
static rm_status_t run_krum(rm_comm_t *c, const rm__agg_block_t *b,
                            const rm_agg_config_t *cfg, void *out, agg_out_t *o, double *sq)
{
  int n = b->n, f = cfg->f, nsel;
  size_t nn = (size_t)n * n;
  rm_status_t st = RM_ERR_NOMEM;
  /* the matrix, then (NORM FUSED) the rows' partial sums of squares */
  double *d = calloc(nn + (size_t)n, sizeof *d);
  int *sel = malloc((size_t)n * sizeof *sel);
  if (!d || !sel) goto out;
  if ((st = rm__agg_pair_dist_sq(b, d, sq ? d + nn : NULL)) != RM_OK) goto out;
  if ((st = allreduce_f64(c, d, sq ? nn + (size_t)n : nn, o)) != RM_OK) goto out;
  if (sq) memcpy(sq, d + nn, (size_t)n * sizeof *sq);
  nsel = rm__agg_krum_select(d, n, cfg->method, f, cfg->m, o->scores, sel);
  if (nsel < 0) {
    st = RM_ERR_NOMEM;
    goto out;
  }
  rm__agg_suspects_dist(o->scores, n, f, o->excluded);
  if (cfg->method == RM_AGG_BULYAN) {
    int beta = nsel - 2 * f;
    st = rm__agg_bulyan_coord(b, sel, nsel, beta < 1 ? 1 : beta, out);
  } else {
    st = rm__agg_mean_rows(b, sel, nsel, out);
  }
out:
  free(d);
  free(sel);
  return st;
}

static rm_status_t run_cc(rm_comm_t *c, const rm__agg_block_t *b,
                          const rm_agg_config_t *cfg, void *out, agg_out_t *o)
{
  int n = b->n, rounds = cfg->iterations ? cfg->iterations : 3;
  double tau = cfg->tau > 0 ? cfg->tau : 1.0;
  rm_status_t st = RM_ERR_NOMEM;
  double *v = malloc((b->len ? b->len : 1) * sizeof *v);
  double *part = malloc((size_t)n * sizeof *part), *w = malloc((size_t)n * sizeof *w);
  if (!v || !part || !w) goto out;
  if ((st = rm__agg_cc_start(b, v, part)) != RM_OK) goto out;
  for (int t = 0; t < rounds; t++) {
    if ((st = allreduce_f64(c, part, (size_t)n, o)) != RM_OK) goto out;
    for (int i = 0; i < n; i++) {
      double nrm = sqrt(part[i]);
      w[i] = !isfinite(nrm) ? 0.0 : (nrm > tau ? tau / nrm : 1.0);
    }
    st = rm__agg_cc_step(b, w, v, t + 1 < rounds ? part : NULL);
    if (st != RM_OK) goto out;
  }
  for (int i = 0; i < n; i++) o->scores[i] = w[i];
  rm__agg_suspects_cc(w, n, cfg->f, o->excluded);
  rm__agg_narrow(v, b->len, b->dt, out);
out:
  free(v);
  free(part);
  free(w);
  return st;
}

/* steps 3-5 of the design. When n divides count the vector's slices are
 * already the all-to-all's blocks and the gathered slices are the result:
 * no packing, no unpacking (unless clipping scales a copy). */
static rm_status_t run_robust(rm_comm_t *c, const void *send, void *recv, size_t count,
                              rm_dtype_t dt, const rm_agg_config_t *cfg, int clipped,
                              double factor, agg_out_t *o, double *norm)
{
  int n = rm_comm_world(c), rank = rm_comm_rank(c);
  size_t esz = rm_dtype_size(dt);
  rm__agg_slices_t s;
  rm__agg_slices_init(&s, n, count);
  int coord = cfg->method == RM_AGG_MEDIAN || cfg->method == RM_AGG_TRIMMED_MEAN;
  int even = s.rem == 0, scale = clipped && factor > 0;
  size_t bb = s.blk * esz, nb = (size_t)n * bb;
  rm_status_t st = RM_ERR_NOMEM;
  /* working memory, the communicator's (kept between calls): rows (n
   * blocks), mine (one), then pack and all (n blocks each) when needed */
  int need_pack = !even || scale;
  char *work = NULL, *pack = NULL, *all = NULL, *rows = NULL, *mine = NULL;
  /* trimmed counts, then (norm fused) the rows' partial sums of squares */
  double *trim = calloc(2 * (size_t)n, sizeof *trim), *sq = trim + n;
  uint32_t *mytrim = calloc((size_t)n, sizeof *mytrim);
  const char *src = send;
  if (!trim || !mytrim) goto out;
  if ((st = rm__agg_scratch(c, nb + bb + (need_pack ? nb : 0) + (even ? 0 : nb),
                            (void **)&work)) != RM_OK)
    goto out;
  st = RM_ERR_NOMEM;
  rows = work;
  mine = rows + nb;
  if (need_pack) pack = mine + bb;
  if (!even) all = mine + bb + (need_pack ? nb : 0);
  if (need_pack) {
    for (int j = 0; j < n; j++) {
      size_t len = rm__agg_len(&s, j);
      memcpy(pack + (size_t)j * bb, (const char *)send + rm__agg_off(&s, j) * esz, len * esz);
      memset(pack + (size_t)j * bb + len * esz, 0, bb - len * esz);
    }
    if (scale) rm__agg_scale(pack, (size_t)n * s.blk, dt, factor);
    src = pack;
  }
  /* the other ranks' rows only: this rank's own row is read where it lies
   * in src (a copy of 1/n of the vector less) */
  if ((st = rm__alltoall_peers(c, src, rows, bb)) != RM_OK) goto out;
  o->bytes += (size_t)(n - 1) * bb;
  rm__agg_block_t b = {rows, s.blk, rm__agg_len(&s, rank), n, dt, src + (size_t)rank * bb, rank};
  memset(mine + rm__agg_len(&s, rank) * esz, 0, bb - rm__agg_len(&s, rank) * esz); /* padding */
  switch (cfg->method) {
  case RM_AGG_MEDIAN:
  case RM_AGG_TRIMMED_MEAN:
    st = rm__agg_coord_sq(&b, cfg->method, cfg->f, mine, mytrim, norm ? sq : NULL);
    break;
  case RM_AGG_CENTERED_CLIP:
    st = run_cc(c, &b, cfg, mine, o);
    break;
  default:
    st = run_krum(c, &b, cfg, mine, o, norm ? sq : NULL);
  }
  if (st != RM_OK) goto out;
  if (coord && (cfg->f > 0 || norm)) { /* trimmed counts: exact in f64, the same on every rank */
    for (int i = 0; i < n; i++) trim[i] = mytrim[i];
    if (norm && cfg->f == 0) {
      if ((st = allreduce_f64(c, sq, (size_t)n, o)) != RM_OK) goto out;
    } else if ((st = allreduce_f64(c, trim, (size_t)(norm ? 2 * n : n), o)) != RM_OK) {
      goto out;
    }
  }
  if (norm) { /* NORM FUSED: this rank's row over every slice */
    *norm = sqrt(sq[rank]);
    if (!isfinite(*norm)) *norm = rm__agg_norm(send, count, dt);
  }
  if (even) {
    st = rm_allgather(c, mine, recv, bb, RM_U8);
  } else if ((st = rm_allgather(c, mine, all, bb, RM_U8)) == RM_OK) {
    for (int r = 0; r < n; r++)
      memcpy((char *)recv + rm__agg_off(&s, r) * esz, all + (size_t)r * bb,
             rm__agg_len(&s, r) * esz);
  }
  if (st != RM_OK) goto out;
  o->bytes += (size_t)(n - 1) * bb;
  if (coord) {
    for (int i = 0; i < n; i++) o->scores[i] = trim[i] / (double)count;
    rm__agg_suspects_trim(o->scores, n, cfg->f, o->excluded);
  }
out:
  free(trim);
  free(mytrim);
  return st;
}

rm_status_t rm_aggregate(rm_comm_t *comm, const void *send, void *recv, size_t count,
                         rm_dtype_t dt, const rm_agg_config_t *cfg, rm_agg_info_t *info)
{
  char why[160];
  if (comm == NULL || !is_float(dt) || (count > 0 && (send == NULL || recv == NULL)) ||
      (info != NULL && info->struct_size < sizeof *info))
    return RM_ERR_INVALID_ARG;
  int n = rm_comm_world(comm), dev = 0;
  /* the methods compute on the CPU: device memory is refused, not touched */
  if (count > 0 && (rm__gpu_ptr_is_device(send, &dev) || rm__gpu_ptr_is_device(recv, &dev))) {
    RM_ERROR("rm_aggregate: device (GPU) memory is not supported: the aggregation methods "
             "compute on the CPU; copy the gradient to host memory");
    return RM_ERR_UNSUPPORTED;
  }
  if (rm_agg_check(cfg, n, why, sizeof why) != RM_OK) {
    RM_DEBUG("rm_aggregate refused: %s", why);
    return RM_ERR_INVALID_ARG;
  }
  rm_status_t st = rm_comm_status(comm);
  if (st != RM_OK) return st;
  /* SPEC USE (comm/comm_int.h): the method's own all-reduces are the
   * library's, not the program's plain sums */
  comm->use_internal++;
  agg_out_t o = {0, calloc((size_t)n, 1), malloc((size_t)n * sizeof(double))};
  if (!o.excluded || !o.scores) {
    st = RM_ERR_NOMEM;
    goto out;
  }
  for (int i = 0; i < n; i++) o.scores[i] = NAN;
  /* 1. clip; NORM FUSED: without clipping, the coordinate-wise methods
   * take the norm from their own pass over the slices */
  int fuse = !(cfg->clip_norm > 0) && count > 0 && cfg->method != RM_AGG_MEAN &&
             cfg->method != RM_AGG_CENTERED_CLIP;
  double norm = fuse ? NAN : rm__agg_norm(send, count, dt), factor = 1.0;
  int clipped = 0;
  if (cfg->clip_norm > 0 && !(norm <= cfg->clip_norm)) {
    clipped = 1;
    factor = isfinite(norm) ? cfg->clip_norm / norm : 0.0;
  }
  if (count == 0) {
    st = RM_OK;
  } else if (cfg->method == RM_AGG_MEAN) {
    st = run_mean(comm, send, recv, count, dt, clipped, factor, &o);
  } else {
    st = run_robust(comm, send, recv, count, dt, cfg, clipped, factor, &o,
                    fuse ? &norm : NULL);
  }
  if (st == RM_OK && info != NULL) {
    info->contributors = n;
    info->norm = norm;
    info->clipped = clipped;
    info->bytes_sent = o.bytes;
    if (info->excluded) memcpy(info->excluded, o.excluded, (size_t)n);
    if (info->scores) memcpy(info->scores, o.scores, (size_t)n * sizeof(double));
  }
out:
  comm->use_internal--;
  if (st == RM_OK) {
    comm->use_agg_calls++;
    comm->use_agg_method = (int)cfg->method;
    if (!comm->use_excluded) comm->use_excluded = calloc((size_t)n, 1);
    for (int i = 0; comm->use_excluded && i < n; i++) comm->use_excluded[i] |= o.excluded[i];
  }
  free(o.excluded);
  free(o.scores);
  return st;
}
