/*
 * api_coll.c - the other public collectives: reduce-scatter and all-gather
 * (ring halves), broadcast and reduce (binomial trees, any root), all-to-all
 * (pairwise exchange) and barrier (dissemination).
 *
 * Argument errors return RM_ERR_INVALID_ARG before rm__coll_begin (the
 * communicator is not failed). Then each call is a collective on every rank.
 * Buffers of one call are host or device memory (device/dev.h): the copies,
 * temporaries, reductions and scaling below follow the kind.
 *
 * all-to-all, pairwise exchange: N-1 steps; at step s rank r sends block
 * (r+s) mod N to rank r+s and receives block (r-s) mod N from rank r-s
 * (tag: the element offset of the block at the receiver). Every link is used
 * once. Up to 8 steps are in flight at once (posted, then waited for
 * oldest first): a step whose peer is late (descheduled, a slower link)
 * no longer holds up the others, and one step's copies overlap the next
 * one's; with more than 8 peers no rank receives from more than 8 at a
 * time. Cost (N-1)(alpha + n/N beta), the alphas overlapped.
 *
 * all-to-all with counts (rm_alltoallv): the same pairwise schedule, each
 * pair's message as long as the pair's count says (the sender's
 * send_counts[to], the receiver's recv_counts[from]); a pair whose count is
 * 0 still exchanges an empty message, so that two ranks that disagree on a
 * count fail at once with RM_ERR_PROTOCOL (the transport checks each
 * message's length against the posted receive) instead of one of them
 * waiting out its deadline for a message that never comes. Tag: the sender's
 * rank. No padding: each pair moves exactly its bytes.
 *
 * gather and scatter, linear at the root: the root posts its N-1 receives
 * (gather) or sends (scatter) at once, one per rank, each straight into or
 * out of that rank's block of the root's buffer; every other rank makes one
 * send or receive. Each block moves once: the root receives (or sends) N-1
 * blocks and every other rank one, where an all-gather would bring N-1
 * blocks to every rank. The root's link carries N-1 blocks, which no
 * schedule avoids (every block must reach it, or leave it); a tree would add
 * copies through intermediate ranks and save only latency.
 * Tag: the rank whose block the message carries.
 *
 * barrier, dissemination: ceil(log2 N) rounds; in round k (distance 2^k)
 * rank r sends a one-byte token to r + 2^k and waits for one from r - 2^k.
 * After the last round every rank has (transitively) heard from all.
 */
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_int.h"
#include "device/nccl.h"
#include "rm_check.h"

rm_status_t rm__check_buf(const void *buf, size_t count, rm_dtype_t dt);

static rm_status_t check_n(const rm_comm_t *c, const void *buf, size_t count,
                           rm_dtype_t dt, size_t mult)
{
  if (c == NULL || (mult > 1 && count > SIZE_MAX / mult))
    return RM_ERR_INVALID_ARG;
  return rm__check_buf(buf, count * mult, dt);
}

/* The memory kind of a call's buffers (device/dev.h; a or b may be NULL),
 * and *nccl = 1 when NCCL carries the call: device buffers on a
 * communicator whose algorithm is nccl start NCCL first (nccl.c), and
 * every rank agrees whether it runs. */
static rm_status_t mem_begin(rm_comm_t *c, const void *a, const void *b, int *device, int *nccl)
{
  const void *bufs[2] = {a, b};
  int ordinal = 0;
  *nccl = 0;
  RM_CHECK(rm__mem_classify(c, bufs, 2, device, &ordinal));
  if (*device && rm__nccl_wanted(c, RM_ALGO_AUTO)) {
    RM_CHECK(rm__nccl_attach(c, ordinal));
    *nccl = rm__nccl_active(c);
  }
  RM_CHECK(rm__coll_begin(c));
  return *device ? rm__dev_begin(c, ordinal) : RM_OK;
}

static rm_status_t mem_end(rm_comm_t *c, int device, rm_status_t st)
{
  return device ? rm__dev_end(c, st) : st;
}

rm_status_t rm_reduce_scatter(rm_comm_t *comm, const void *send, void *recv,
                              size_t recv_count, rm_dtype_t dt, rm_op_t op)
{
  size_t n, esz;
  void *tmp = NULL;
  int device = 0, nccl = 0;
  rm_status_t st = RM_OK;
  rm__reducer_t red = rm__reducer(dt, op);
  RM_CHECK(check_n(comm, recv, recv_count, dt, 1));
  n = (size_t)rm_comm_world(comm);
  RM_CHECK(check_n(comm, send, recv_count, dt, n));
  if ((unsigned)op >= RM_OP_COUNT)
    return RM_ERR_INVALID_ARG;
  if (recv_count == 0)
    return rm__coll_begin(comm);
  RM_CHECK(mem_begin(comm, send, recv, &device, &nccl));
  esz = rm_dtype_size(dt);
  if (nccl) {
    st = rm__nccl_reduce_scatter(comm, send, recv, recv_count, dt, op);
    goto out;
  }
  RM_CHECK_GOTO(rm__mtmp(comm, n * recv_count * esz, &tmp), st, out);
  RM_CHECK_GOTO(rm__mcopy(comm, tmp, send, n * recv_count * esz), st, out);
  if (n > 1)
    RM_CHECK_GOTO(rm__ring_reduce_scatter(comm, tmp, n * recv_count, dt, &red), st, out);
  RM_CHECK_GOTO(rm__mcopy(comm, recv, (char *)tmp + (size_t)rm_comm_rank(comm) * recv_count * esz,
                          recv_count * esz), st, out);
  if (op == RM_AVG)
    RM_CHECK_GOTO(rm__mscale(comm, recv, recv_count, dt, (int)n), st, out);
out:
  if (tmp) rm__mtmp_free(comm, tmp);
  return mem_end(comm, device, st);
}

rm_status_t rm_allgather(rm_comm_t *comm, const void *send, void *recv,
                         size_t send_count, rm_dtype_t dt)
{
  size_t n, esz;
  int device = 0, nccl = 0;
  rm_status_t st = RM_OK;
  RM_CHECK(check_n(comm, send, send_count, dt, 1));
  n = (size_t)rm_comm_world(comm);
  RM_CHECK(check_n(comm, recv, send_count, dt, n));
  if (send_count == 0)
    return rm__coll_begin(comm);
  RM_CHECK(mem_begin(comm, send, recv, &device, &nccl));
  esz = rm_dtype_size(dt);
  if (nccl) {
    st = rm__nccl_allgather(comm, send, recv, send_count, dt);
    goto out;
  }
  RM_CHECK_GOTO(rm__mcopy(comm, (char *)recv + (size_t)rm_comm_rank(comm) * send_count * esz,
                          send, send_count * esz), st, out);
  if (n > 1)
    st = rm__ring_allgather(comm, recv, n * send_count, dt);
out:
  return mem_end(comm, device, st);
}

rm_status_t rm_broadcast(rm_comm_t *comm, void *buf, size_t count,
                         rm_dtype_t dt, int root)
{
  int device = 0, nccl = 0;
  rm_status_t st;
  RM_CHECK(check_n(comm, buf, count, dt, 1));
  if (root < 0 || root >= rm_comm_world(comm))
    return RM_ERR_INVALID_ARG;
  if (count == 0 || rm_comm_world(comm) == 1)
    return rm__coll_begin(comm);
  RM_CHECK(mem_begin(comm, buf, NULL, &device, &nccl));
  if (nccl) st = rm__nccl_broadcast(comm, buf, count, dt, root);
  else st = rm__tree_bcast(comm, buf, count, rm_dtype_size(dt), root);
  return mem_end(comm, device, st);
}

rm_status_t rm_reduce(rm_comm_t *comm, const void *send, void *recv,
                      size_t count, rm_dtype_t dt, rm_op_t op, int root)
{
  int device = 0, nccl = 0;
  rm_status_t st = RM_OK;
  rm__reducer_t red = rm__reducer(dt, op);
  RM_CHECK(check_n(comm, send, count, dt, 1));
  if (root < 0 || root >= rm_comm_world(comm) || (unsigned)op >= RM_OP_COUNT)
    return RM_ERR_INVALID_ARG;
  int is_root = rm_comm_rank(comm) == root;
  if (is_root)
    RM_CHECK(check_n(comm, recv, count, dt, 1));
  if (count == 0)
    return rm__coll_begin(comm);
  RM_CHECK(mem_begin(comm, send, is_root ? recv : NULL, &device, &nccl));
  size_t esz = rm_dtype_size(dt);
  if (nccl) {
    st = rm__nccl_reduce(comm, send, recv, count, dt, op, root);
    goto out;
  }
  if (rm_comm_world(comm) == 1) {
    RM_CHECK_GOTO(rm__mcopy(comm, recv, send, count * esz), st, out);
  } else {
    RM_CHECK_GOTO(rm__tree_reduce(comm, send, is_root ? recv : NULL, count, esz, &red, root),
                  st, out);
  }
  if (is_root && op == RM_AVG)
    RM_CHECK_GOTO(rm__mscale(comm, recv, count, dt, rm_comm_world(comm)), st, out);
out:
  return mem_end(comm, device, st);
}

/* The N - 1 pairwise exchanges of an all-to-all of blk bytes per rank
 * (everything but the caller's own block), up to A2A_WINDOW steps in flight
 * (top of the file). A failed post or wait fails the communicator, whose
 * transports then forget every queued request (transport.h), these on the
 * stack too. */
#define A2A_WINDOW 8
static rm_status_t alltoall_exchange(rm_comm_t *comm, const void *send, void *recv, size_t blk)
{
  int n = rm_comm_world(comm), r = rm_comm_rank(comm);
  rm__req_t sreq[A2A_WINDOW], rreq[A2A_WINDOW];
  for (int s = 1; s < n; s++) {
    rm__req_t *rq = &rreq[s % A2A_WINDOW], *sq = &sreq[s % A2A_WINDOW];
    if (s > A2A_WINDOW) { /* step s - A2A_WINDOW held this slot */
      RM_CHECK(rm__wait(comm, rq));
      RM_CHECK(rm__wait(comm, sq));
    }
    int to = (r + s) % n, from = (r - s + n) % n;
    RM_CHECK(rm__irecv(comm, from, (char *)recv + (size_t)from * blk, blk, (uint64_t)from * blk,
                       rq));
    RM_CHECK(rm__isend(comm, to, (const char *)send + (size_t)to * blk, blk, (uint64_t)r * blk,
                       sq));
  }
  for (int s = n > A2A_WINDOW ? n - A2A_WINDOW : 1; s < n; s++) { /* the steps still in flight */
    RM_CHECK(rm__wait(comm, &rreq[s % A2A_WINDOW]));
    RM_CHECK(rm__wait(comm, &sreq[s % A2A_WINDOW]));
  }
  return RM_OK;
}

rm_status_t rm_alltoall(rm_comm_t *comm, const void *send, void *recv,
                        size_t count, rm_dtype_t dt)
{
  int n, r, device = 0, nccl = 0;
  size_t esz, blk;
  rm_status_t st = RM_OK;
  RM_CHECK(check_n(comm, send, count, dt, 1));
  n = rm_comm_world(comm);
  RM_CHECK(check_n(comm, send, count, dt, (size_t)n));
  RM_CHECK(check_n(comm, recv, count, dt, (size_t)n));
  if (count > 0 && send == recv)
    return RM_ERR_INVALID_ARG;
  if (count == 0)
    return rm__coll_begin(comm);
  RM_CHECK(mem_begin(comm, send, recv, &device, &nccl));
  r = rm_comm_rank(comm);
  esz = rm_dtype_size(dt);
  blk = count * esz;
  if (nccl) {
    st = rm__nccl_alltoall(comm, send, recv, count, dt);
    goto out;
  }
  RM_CHECK_GOTO(rm__mcopy(comm, (char *)recv + (size_t)r * blk, (const char *)send + (size_t)r * blk,
                          blk), st, out);
  st = alltoall_exchange(comm, send, recv, blk);
out:
  return mem_end(comm, device, st);
}

rm_status_t rm__alltoall_peers(rm_comm_t *comm, const void *send, void *recv, size_t blk)
{
  if (comm == NULL || (blk > 0 && (send == NULL || recv == NULL || send == recv)))
    return RM_ERR_INVALID_ARG;
  RM_CHECK(rm__coll_begin(comm));
  return blk > 0 ? alltoall_exchange(comm, send, recv, blk) : RM_OK;
}

rm_status_t rm_barrier(rm_comm_t *comm)
{
  int n, r;
  char token = 1, got = 0;
  if (comm == NULL)
    return RM_ERR_INVALID_ARG;
  RM_CHECK(rm__coll_begin(comm));
  n = rm_comm_world(comm);
  r = rm_comm_rank(comm);
  for (int k = 1; k < n; k *= 2)
    RM_CHECK(rm__sendrecv(comm, (r + k) % n, &token, 1, (uint64_t)k,
                          (r - k + n) % n, &got, 1, (uint64_t)k));
  return RM_OK;
}

/* Check world counts/displacements (elements) against the buffer; *any =
 * some count is nonzero. */
static rm_status_t check_v(const void *buf, const size_t *counts, const size_t *displs, int n,
                           rm_dtype_t dt, int *any)
{
  if (counts == NULL || displs == NULL)
    return RM_ERR_INVALID_ARG;
  for (int j = 0; j < n; j++) {
    if (counts[j] > SIZE_MAX - displs[j])
      return RM_ERR_INVALID_ARG;
    RM_CHECK(rm__check_buf(buf, displs[j] + counts[j], dt));
    if (counts[j]) *any = 1;
  }
  return RM_OK;
}

rm_status_t rm_alltoallv(rm_comm_t *comm, const void *send, const size_t *send_counts,
                         const size_t *send_displs, void *recv, const size_t *recv_counts,
                         const size_t *recv_displs, rm_dtype_t dt)
{
  int n, r, any_s = 0, any_r = 0, device = 0, nccl = 0;
  size_t esz = rm_dtype_size(dt);
  rm_status_t st = RM_OK;
  if (comm == NULL || esz == 0)
    return RM_ERR_INVALID_ARG;
  n = rm_comm_world(comm);
  r = rm_comm_rank(comm);
  RM_CHECK(check_v(send, send_counts, send_displs, n, dt, &any_s));
  RM_CHECK(check_v(recv, recv_counts, recv_displs, n, dt, &any_r));
  if (send_counts[r] != recv_counts[r] || ((any_s || any_r) && send == recv))
    return RM_ERR_INVALID_ARG;
  RM_CHECK(mem_begin(comm, any_s ? send : NULL, any_r ? recv : NULL, &device, &nccl));
  (void)nccl; /* NCCL has no counted all-to-all of its own: the pairs below */
  if (send_counts[r])
    RM_CHECK_GOTO(rm__mcopy(comm, (char *)recv + recv_displs[r] * esz,
                            (const char *)send + send_displs[r] * esz, send_counts[r] * esz),
                  st, out);
  for (int s = 1; s < n; s++) {
    int to = (r + s) % n, from = (r - s + n) % n;
    RM_CHECK_GOTO(rm__sendrecv(comm, to, (const char *)send + send_displs[to] * esz,
                               send_counts[to] * esz, (uint64_t)r, from,
                               (char *)recv + recv_displs[from] * esz,
                               recv_counts[from] * esz, (uint64_t)from), st, out);
  }
out:
  return mem_end(comm, device, st);
}

/* gather (to_root) and scatter (!to_root): see the top of the file. buf is
 * the root's world-block buffer, mine this rank's block. */
static rm_status_t rooted(rm_comm_t *c, void *buf, void *mine, size_t count, rm_dtype_t dt,
                          int root, int to_root)
{
  int n = rm_comm_world(c), r = rm_comm_rank(c), device = 0, nccl = 0;
  size_t blk = count * rm_dtype_size(dt);
  rm__req_t *reqs = NULL;
  rm_status_t st = RM_OK;
  if (count == 0)
    return rm__coll_begin(c);
  RM_CHECK(mem_begin(c, r == root ? buf : NULL, mine, &device, &nccl));
  (void)nccl; /* NCCL's gather is point-to-point too: the same schedule here */
  if (r != root) {
    st = to_root ? rm__sendrecv(c, root, mine, blk, (uint64_t)r, -1, NULL, 0, 0)
                 : rm__sendrecv(c, -1, NULL, 0, 0, root, mine, blk, (uint64_t)r);
    return mem_end(c, device, st);
  }
  char *own = (char *)buf + (size_t)r * blk;
  if (own != (char *)mine)
    RM_CHECK_GOTO(to_root ? rm__mcopy(c, own, mine, blk) : rm__mcopy(c, mine, own, blk), st,
                  out);
  if (n == 1)
    goto out;
  reqs = rm__reqs_new((size_t)n);
  if (reqs == NULL) {
    st = RM_ERR_NOMEM;
    goto out;
  }
  for (int j = 0; j < n; j++) {
    if (j == r) continue;
    char *b = (char *)buf + (size_t)j * blk;
    RM_CHECK_GOTO(to_root ? rm__irecv(c, j, b, blk, (uint64_t)j, &reqs[j])
                          : rm__isend(c, j, b, blk, (uint64_t)j, &reqs[j]), st, out);
  }
  for (int j = 0; j < n; j++)
    if (j != r) RM_CHECK_GOTO(rm__wait(c, &reqs[j]), st, out);
out:
  free(reqs);
  return mem_end(c, device, st);
}

/* The arguments of gather / scatter: the root's buffer holds world blocks,
 * the others' may be NULL. */
static rm_status_t check_rooted(rm_comm_t *c, const void *rootbuf, const void *mine,
                                size_t count, rm_dtype_t dt, int root)
{
  RM_CHECK(check_n(c, mine, count, dt, 1));
  if (root < 0 || root >= rm_comm_world(c))
    return RM_ERR_INVALID_ARG;
  if (rm_comm_rank(c) == root)
    RM_CHECK(check_n(c, rootbuf, count, dt, (size_t)rm_comm_world(c)));
  return RM_OK;
}

rm_status_t rm_gather(rm_comm_t *comm, const void *send, void *recv, size_t count,
                      rm_dtype_t dt, int root)
{
  RM_CHECK(check_rooted(comm, recv, send, count, dt, root));
  return rooted(comm, recv, (void *)(uintptr_t)send, count, dt, root, 1);
}

rm_status_t rm_scatter(rm_comm_t *comm, const void *send, void *recv, size_t count,
                       rm_dtype_t dt, int root)
{
  RM_CHECK(check_rooted(comm, send, recv, count, dt, root));
  return rooted(comm, (void *)(uintptr_t)send, recv, count, dt, root, 0);
}
