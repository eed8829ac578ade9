/*
 * aggregate.h - participant-set (masked) and robust aggregation of gradients
 * (module tier; internal rm__ names, not part of the public API).
 *
 * Two families, both built ONLY on the public collectives of ringmaster.h:
 *
 *  1. Masked all-reduce (participants.c) for the `backup` and `deadline`
 *     straggler policies and for gradient coding: the coordinator fixes the
 *     set of contributing ranks of a step; EVERY rank of the communicator
 *     calls rm__masked_allreduce with that same set; non-members contribute
 *     zeros and still receive the result, so all ranks apply the same update.
 *  2. Robust aggregation (robust.c math, robust_allreduce.c collective):
 *     gradients are all-gathered and combined coordinate-wise by median or
 *     trimmed mean, or by a mean of per-worker norm-clipped gradients, so a
 *     bounded number of arbitrary (Byzantine) contributions cannot move the
 *     result far.
 *
 * The math functions (rm__robust_combine, rm__clip_norm, rm__l2_norm,
 * rm__scale) work on in-memory arrays, allocate nothing, and are
 * thread-safe. Float dtypes only (f32, f64, f16, bf16; accumulation in
 * double); integer dtypes get RM_ERR_INVALID_ARG.
 */
#ifndef RM_WORKER_AGGREGATE_AGGREGATE_H
#define RM_WORKER_AGGREGATE_AGGREGATE_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"

/* ---- participant sets ----
 * A member mask is `world` bytes, member[r] != 0 when rank r contributes. */

/* Build a mask from a rank list. RM_ERR_INVALID_ARG for a rank out of
 * [0, world) or listed twice. OUT member[0..world-1]. */
rm_status_t rm__members_from_list(const int *ranks, int n, int world,
                                  uint8_t *member);
/* Number of members (bytes != 0) among world. */
int rm__members_count(const uint8_t *member, int world);

/* Verify that every rank passes the same member mask: flag for
 * rm__masked_allreduce (costs one extra 16-byte all-reduce). */
#define RM__AGG_VERIFY_MEMBERS 0x1u

/* Masked all-reduce. Collective: every rank of comm calls it with the same
 * count, dtype, op and member mask (checked when flags has
 * RM__AGG_VERIFY_MEMBERS; a mismatch returns RM_ERR_PROTOCOL on every rank
 * before any gradient byte moves, and the communicator stays usable).
 *
 *   op RM_SUM: recv = sum over members r of send_r
 *   op RM_AVG: recv = (sum over members r of send_r) / k,  k = |members|
 *
 * RESCALING (documented contract for `backup` and `deadline`): with RM_AVG
 * the result is the average over the ranks that contributed, NOT over the
 * world. Each worker's gradient is a mean over its local batch b, so the
 * step's gradient is the mean over a global batch of k*b samples instead of
 * world*b: its expected value is unchanged (unbiased as long as who is late
 * does not depend on the data), only its variance grows by world/k. The
 * learning rate is therefore NOT rescaled. Integer dtypes divide truncating.
 *
 * send is ignored on non-members (may be NULL); recv receives the result on
 * EVERY rank. send == recv means in place. Other ops: RM_ERR_INVALID_ARG
 * (zero is the identity of sum only). An empty mask: RM_ERR_INVALID_ARG.
 * OUT *contributors (may be NULL) = k on success. Errors of the underlying
 * collective are returned as is (they are sticky on the communicator). */
rm_status_t rm__masked_allreduce(rm_comm_t *comm, const void *send,
                                 void *recv, size_t count, rm_dtype_t dt,
                                 rm_op_t op, const uint8_t *member,
                                 unsigned flags, int *contributors);

/* ---- robust aggregation ---- */
typedef enum {
  RM__ROBUST_MEDIAN = 0,       /* coordinate-wise median */
  RM__ROBUST_TRIMMED_MEAN = 1, /* coordinate-wise, drop `trim` low + high */
  RM__ROBUST_CLIPPED_MEAN = 2, /* mean of rows clipped to L2 norm clip_norm */
  RM__ROBUST_COUNT
} rm__robust_method_t;

typedef struct rm__robust_opts {
  rm__robust_method_t method;
  int trim;         /* TRIMMED_MEAN: 0 <= 2*trim < rows */
  double clip_norm; /* CLIPPED_MEAN: > 0 */
} rm__robust_opts_t;

/* Combine `rows` vectors of `count` elements stored back to back in `data`
 * (row r at data + r*count*elem) into out[count]. work must hold `rows`
 * doubles (scratch). NaN is read as +inf, so NaN and infinities count as
 * extreme values that median/trim discard; CLIPPED_MEAN
 * drops rows whose norm is not finite (mean over the remaining rows;
 * RM_ERR_INVALID_ARG when none remains). out must not alias data. */
rm_status_t rm__robust_combine(const void *data, int rows, size_t count,
                               rm_dtype_t dt, const rm__robust_opts_t *o,
                               void *out, double *work);

/* Collective: all-gather every rank's `send` (count elements) with
 * rm_allgather, then rm__robust_combine on every rank (so all ranks get the
 * same recv). Memory: world*count elements, allocated per call
 * (RM_ERR_NOMEM). Meant for moderate world sizes; cost O(world * count)
 * bytes on every rank, unlike an all-reduce. */
rm_status_t rm__robust_allreduce(rm_comm_t *comm, const void *send,
                                 void *recv, size_t count, rm_dtype_t dt,
                                 const rm__robust_opts_t *o);

/* ---- vector helpers ---- */
/* L2 norm in double; NaN if any element is NaN. dt must be a float type
 * (returns NaN otherwise). */
double rm__l2_norm(const void *buf, size_t count, rm_dtype_t dt);
/* buf *= factor. */
rm_status_t rm__scale(void *buf, size_t count, rm_dtype_t dt, double factor);
/* If ||buf|| > max_norm, scale buf to norm max_norm. OUT *norm_before (may
 * be NULL): the norm before clipping. A non-finite norm: buf untouched,
 * RM_ERR_INVALID_ARG. */
rm_status_t rm__clip_norm(void *buf, size_t count, rm_dtype_t dt,
                          double max_norm, double *norm_before);

#endif
