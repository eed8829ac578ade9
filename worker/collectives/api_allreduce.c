/*
 * api_allreduce.c - rm_allreduce / rm_allreduce_ex: argument checks, the
 * memory kind (host or device, device/dev.h), the out-of-place copy,
 * NCCL or algorithm resolution (select.c), the run, avg scaling.
 *
 * Argument errors (NULL communicator, NULL buffer with count > 0, bad dtype,
 * op or algorithm, a byte size that overflows size_t) return
 * RM_ERR_INVALID_ARG before anything else happens: the collective sequence
 * is not advanced and the communicator is not failed, so it stays usable.
 * Everything after rm__coll_begin is a real collective on every rank, even
 * for count 0 or world 1 (they return at once).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "collectives/coll_int.h"
#include "device/nccl.h"
#include "rm_check.h"
#include "rm_clock.h"

typedef rm_status_t (*algo_fn_t)(rm_comm_t *, void *, size_t, rm_dtype_t,
                                 const rm__reducer_t *);

static const algo_fn_t g_algos[RM_ALGO_COUNT] = {
    [RM_ALGO_RING] = rm__allreduce_ring,
    [RM_ALGO_HALVING_DOUBLING] = rm__allreduce_hd,
    [RM_ALGO_BUTTERFLY] = rm__allreduce_butterfly,
    [RM_ALGO_TREE] = rm__allreduce_tree,
    [RM_ALGO_HIERARCHICAL] = rm__allreduce_hier,
};

rm_status_t rm__check_buf(const void *buf, size_t count, rm_dtype_t dt)
{
  size_t esz = rm_dtype_size(dt);
  if (esz == 0 || count > SIZE_MAX / esz || (count > 0 && buf == NULL))
    return RM_ERR_INVALID_ARG;
  return RM_OK;
}

static rm_status_t check_args(rm_comm_t *c, const void *send, void *recv,
                              size_t count, rm_dtype_t dt, rm_op_t op,
                              rm_algo_t algo)
{
  if (c == NULL || (unsigned)op >= RM_OP_COUNT || (unsigned)algo >= RM_ALGO_COUNT)
    return RM_ERR_INVALID_ARG;
  RM_CHECK(rm__check_buf(send, count, dt));
  return rm__check_buf(recv, count, dt);
}

rm_status_t rm_allreduce_ex(rm_comm_t *comm, const void *send, void *recv,
                            size_t count, rm_dtype_t dt, rm_op_t op,
                            rm_algo_t algo, rm_allreduce_info_t *info)
{
  int64_t t0 = rm__now_ns();
  size_t sent0, esz;
  rm_algo_t chosen = RM_ALGO_RING;
  double predicted = 0.0;
  const void *bufs[2] = {send, recv};
  int device = 0, ordinal = 0, nccl = 0;
  rm_status_t st = RM_OK;
  rm__reducer_t red = rm__reducer(dt, op);
  RM_CHECK(check_args(comm, send, recv, count, dt, op, algo));
  int user_sum = !comm->use_internal && count > 0 && (op == RM_SUM || op == RM_AVG) &&
                 (dt == RM_F32 || dt == RM_F64 || dt == RM_F16 || dt == RM_BF16);
  /* before any byte moves: a command job's spec forbids plain float sums */
  if (user_sum && comm->use_guard) return rm__use_refuse(comm, count * rm_dtype_size(dt));
  if (count > 0) RM_CHECK(rm__mem_classify(comm, bufs, 2, &device, &ordinal));
  sent0 = comm->bytes_sent;
  /* NCCL first (device/nccl.c), outside the device collective: attaching
   * is a host collective every rank runs alike and ends in an agreement,
   * so every rank takes the same branch below */
  if (device && rm__nccl_wanted(comm, algo)) {
    RM_CHECK(rm__nccl_attach(comm, ordinal));
    nccl = rm__nccl_active(comm);
  }
  RM_CHECK(rm__coll_begin(comm));
  esz = rm_dtype_size(dt);
  /* resolve on the host when NCCL does not carry the call: auto's first use
   * calibrates with host messages */
  if (nccl) chosen = RM_ALGO_NCCL;
  else if (rm_comm_world(comm) > 1 && count > 0)
    RM_CHECK(rm__allreduce_resolve(comm, algo, count * esz, &chosen, &predicted));
  if (device) RM_CHECK(rm__dev_begin(comm, ordinal));
  if (nccl) {
    st = rm__nccl_allreduce(comm, send, recv, count, dt, op);
    goto out;
  }
  if (send != recv && count > 0)
    RM_CHECK_GOTO(rm__mcopy(comm, recv, send, count * esz), st, out);
  if (rm_comm_world(comm) > 1 && count > 0)
    RM_CHECK_GOTO(g_algos[chosen](comm, recv, count, dt, &red), st, out);
  if (op == RM_AVG && count > 0)
    RM_CHECK_GOTO(rm__mscale(comm, recv, count, dt, rm_comm_world(comm)), st, out);
out:
  if (device) st = rm__dev_end(comm, st);
  if (st != RM_OK) return st;
  comm->allreduce_ns += rm__now_ns() - t0;
  comm->allreduce_bytes += count * esz;
  if (user_sum) comm->use_plain_bytes += count * esz;
  if (info) {
    info->algorithm = chosen;
    info->predicted_us = predicted;
    info->elapsed_us = (double)(rm__now_ns() - t0) / 1e3;
    info->bytes_sent = comm->bytes_sent - sent0;
  }
  return RM_OK;
}

/* SPEC USE refusal: the words name what the spec asked, what the program
 * did and what to call instead; the communicator is not failed (nothing
 * moved, every rank of the job refuses alike). */
rm_status_t rm__use_refuse(rm_comm_t *c, size_t bytes)
{
  char w[sizeof c->last_error];
  if (c->use_guard & RM__USE_GUARD_SECURE)
    snprintf(w, sizeof w,
             "the job's spec asks for secure_aggregation, and rank %d's program called a "
             "plain all-reduce (float sum/average, %zu bytes): refused before it was sent, "
             "a plaintext gradient never leaves a worker of this job; sum gradients with "
             "rm_session_secure_allreduce (Python: ringmaster.secure_allreduce, or "
             "ringmaster.torch.DistributedOptimizer)", rm_comm_rank(c), bytes);
  else
    snprintf(w, sizeof w,
             "the job's spec asks for a robust aggregation, and rank %d's program called a "
             "plain all-reduce (float sum/average, %zu bytes), which would average the "
             "gradients instead: refused; combine gradients with rm_aggregate on the "
             "session's communicator (Python: ringmaster.aggregate, or "
             "ringmaster.torch.DistributedOptimizer)", rm_comm_rank(c), bytes);
  if (c->use_refused) c->use_refused(c->use_ctx, w);
  return RM_ERR_DENIED;
}

rm_status_t rm_allreduce(rm_comm_t *comm, const void *send, void *recv,
                         size_t count, rm_dtype_t dt, rm_op_t op)
{
  return rm_allreduce_ex(comm, send, recv, count, dt, op, RM_ALGO_AUTO, NULL);
}
