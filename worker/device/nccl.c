/*
 * nccl.c - NCCL as the backend of a communicator's device collectives,
 * under ringmaster's membership.
 *
 * Who asks: the algorithm RM_ALGO_NCCL ("nccl"), per call (rm_allreduce_ex)
 * or as the communicator's default (rm_comm_set_algorithm, the job spec's
 * "algorithm", RINGMASTER_ALGO). Then collectives on device buffers run on
 * NCCL (topology-aware kernels, NVLink, InfiniBand, GPUDirect, SHARP where
 * the fabric has them; every dtype and op has an NCCL counterpart); host
 * buffers run on ringmaster's own algorithms.
 *
 * States of c->nccl:
 *
 *   (none) --first NCCL collective: rm__nccl_attach--> RUNNING
 *        \--- any rank could not start NCCL ------------> OFF (for good on
 *             this communicator: ringmaster's algorithms; one WARN names
 *             the lowest such rank, which logs its reason)
 *   RUNNING --peer lost, deadline, abort, NCCL error--> ABORTED (ncclCommAbort;
 *             the communicator's sticky failure; the session re-forms and
 *             the next generation's communicator starts NCCL anew)
 *   RUNNING/ABORTED --rm_comm_destroy--> gone (ncclCommDestroy / Abort)
 *
 * Bootstrap (rm__nccl_attach, a collective every rank enters at the same
 * call, before the device collective starts; every decision below follows
 * an agreement, so all ranks run the same host collectives):
 *   1. the ranks agree (a MIN all-reduce over the data plane) on the lowest
 *      rank without the library and on whether every rank holds the unique
 *      id rank 0 made and the coordinator relayed (a session's
 *      communicator: rm__nccl_set_id, over gRPC). If one lacks it (the
 *      relay failed there, or no session), rank 0 makes a new one and
 *      broadcasts [ok, id] over the data plane and every rank takes it;
 *   2. when every rank has the library and the id, each calls
 *      ncclCommInitRankConfig non-blocking on its device and polls
 *      ncclCommGetAsyncError until it is done, at most connect_timeout_ms
 *      (an abort of the communicator stops the wait);
 *   3. the ranks agree again: a MIN of (started ? world : rank). All
 *      started -> RUNNING; else (at 1, 2 or 3) every rank aborts what it
 *      started and the communicator is OFF (the warning names the lowest
 *      rank that could not; each such rank logs its own reason). So no
 *      rank ever runs NCCL while another runs ringmaster's algorithm for
 *      the same call.
 *
 * Waiting: an NCCL call only enqueues; completion is an event on stream s,
 * polled with the rules of every blocking wait in ringmaster: a deadline of
 * timeout_ms (RM_ERR_TIMEOUT), the communicator's abort or sticky failure
 * (another thread: rm_comm_abort, the session on a membership change), and
 * ncclCommGetAsyncError (a peer's failure that NCCL saw: RM_ERR_PEER_LOST).
 * Any of them calls ncclCommAbort, which stops the kernels that wait for a
 * peer that will not come. NCCL cannot say which peer stopped; the words
 * say so, and the session's heartbeats name it for the coordinator.
 *
 * Numerics are NCCL's: f16/bf16 sums are rounded per hop (ringmaster's own
 * algorithms widen to f32 and round once), so the last bits can differ.
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"
#include "device/nccl.h"
#include "rm_check.h"
#include "rm_clock.h"
#include "rm_log.h"

enum { N_NONE = 0, N_RUNNING = 1, N_OFF = -1, N_ABORTED = -2 };

struct rm__nccl {
  const rm__nccl_lib_t *lib;
  void *comm;     /* ncclComm_t */
  int state;
  int ordinal;
  rm__nccl_id_t id;
  int id_set;
};

static struct rm__nccl *state_of(rm_comm_t *c)
{
  if (c->nccl == NULL) c->nccl = calloc(1, sizeof *c->nccl);
  return c->nccl;
}

rm_status_t rm__nccl_unique_id(rm__nccl_id_t *id, char *why, size_t n)
{
  const rm__nccl_lib_t *lib = rm__nccl_lib(why, n);
  int r;
  if (lib == NULL) return RM_ERR_UNSUPPORTED;
  r = lib->GetUniqueId(id);
  if (r != RM__NCCL_OK) {
    snprintf(why, n, "ncclGetUniqueId: %s", lib->GetErrorString(r));
    return RM_ERR_SYSTEM;
  }
  return RM_OK;
}

void rm__nccl_set_id(rm_comm_t *c, const rm__nccl_id_t *id)
{
  struct rm__nccl *n = state_of(c);
  if (n == NULL) return; /* ENOMEM: the data plane bootstraps one instead */
  n->id = *id;
  n->id_set = 1;
}

int rm__nccl_wanted(const rm_comm_t *c, rm_algo_t algo)
{
  rm_algo_t a = algo != RM_ALGO_AUTO ? algo : c->algorithm;
  return a == RM_ALGO_NCCL && (c->nccl == NULL || c->nccl->state >= 0);
}

int rm__nccl_active(const rm_comm_t *c) { return c->nccl != NULL && c->nccl->state == N_RUNNING; }

/* Host collectives of the bootstrap: the communicator's memory kind is set
 * aside (a communicator told "device memory" still bootstraps on host). */
static rm_status_t host_bcast(rm_comm_t *c, void *buf, size_t n)
{
  rm_mem_t k = c->mem_kind;
  c->mem_kind = RM_MEM_HOST;
  rm_status_t st = rm_broadcast(c, buf, n, RM_U8, 0);
  c->mem_kind = k;
  return st;
}

/* MIN over the ranks of v[0..n-1], in place. */
static rm_status_t host_min(rm_comm_t *c, int32_t *v, size_t n)
{
  rm_mem_t k = c->mem_kind;
  c->mem_kind = RM_MEM_HOST;
  rm_status_t st = rm_allreduce(c, v, v, n, RM_I32, RM_MIN);
  c->mem_kind = k;
  return st;
}

static rm_status_t start(rm_comm_t *c, struct rm__nccl *n, int ordinal, char *why, size_t wn)
{
  const rm__gpu_ops_t *g = rm__gpu();
  int prev = 0, r, async = RM__NCCL_IN_PROGRESS;
  rm__nccl_config_t cfg = {sizeof cfg, 0xcafebeefu, 21403u, 0, INT_MIN, INT_MIN, INT_MIN, NULL};
  int64_t end = rm__now_ns() + (int64_t)c->connect_timeout_ms * 1000000;
  if (g == NULL || g->set_device(ordinal, &prev) != RM_OK) {
    snprintf(why, wn, "cannot select device %d: %s", ordinal, g ? g->err() : "no GPU runtime");
    return RM_ERR_UNSUPPORTED;
  }
  r = n->lib->CommInitRankConfig(&n->comm, c->world, n->id, c->rank, &cfg);
  if (r != RM__NCCL_OK && r != RM__NCCL_IN_PROGRESS) {
    snprintf(why, wn, "ncclCommInitRankConfig: %s", n->lib->GetErrorString(r));
    n->comm = NULL;
  } else {
    while (n->lib->CommGetAsyncError(n->comm, &async) == RM__NCCL_OK &&
           async == RM__NCCL_IN_PROGRESS && rm__now_ns() < end &&
           !__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE))
      sched_yield();
    if (async != RM__NCCL_OK)
      snprintf(why, wn, "ncclCommInitRankConfig: %s",
               async == RM__NCCL_IN_PROGRESS ? "not finished within the connect deadline "
                                               "(or the communicator was aborted)"
                                             : n->lib->GetErrorString(async));
  }
  if (prev != ordinal) (void)g->set_device(prev, &r);
  if (n->comm != NULL && async == RM__NCCL_OK) return RM_OK;
  if (n->comm != NULL) n->lib->CommAbort(n->comm);
  n->comm = NULL;
  return RM_ERR_SYSTEM;
}

rm_status_t rm__nccl_attach(rm_comm_t *c, int ordinal)
{
  struct rm__nccl *n = state_of(c);
  char why[256] = "";
  int ok;
  if (n == NULL) return RM_ERR_NOMEM;
  if (n->state != N_NONE) return RM_OK;
  n->lib = rm__nccl_lib(why, sizeof why);
  ok = n->lib != NULL;
  /* 1: agree on [lowest rank without the library (world: none), whether
   * every rank holds the coordinator's id]; every rank takes the same
   * branches from here on */
  int32_t v[2] = {ok ? c->world : c->rank, n->id_set};
  rm_status_t st = host_min(c, v, 2);
  if (st == RM_OK && v[0] == c->world && !v[1]) { /* rank 0's id over the data plane */
    unsigned char msg[1 + RM__NCCL_ID_BYTES] = {0};
    if (c->rank == 0)
      msg[0] = rm__nccl_unique_id((rm__nccl_id_t *)(msg + 1), why, sizeof why) == RM_OK;
    st = host_bcast(c, msg, sizeof msg);
    if (st == RM_OK && msg[0]) {
      memcpy(n->id.internal, msg + 1, RM__NCCL_ID_BYTES);
      n->id_set = 1;
    } else if (st == RM_OK) {
      v[0] = 0; /* rank 0 could not make one (its log says why) */
      ok = c->rank != 0;
    }
  }
  /* 2: init only when every rank has the library and the id (else the
   * others would wait the whole connect deadline for a rank that never
   * comes); 3: agree again on the lowest rank that could not start it */
  if (st == RM_OK && v[0] == c->world) {
    ok = start(c, n, ordinal, why, sizeof why) == RM_OK;
    v[0] = ok ? c->world : c->rank;
    st = host_min(c, v, 1);
  }
  if (st != RM_OK || v[0] != c->world) {
    if (n->comm) n->lib->CommAbort(n->comm);
    n->comm = NULL;
    n->state = N_OFF;
    if (st == RM_OK) {
      RM_WARN("rank %d: job %llu generation %llu: NCCL is off on this communicator: rank %d "
              "could not start it; device collectives use ringmaster's own algorithms",
              c->rank, (unsigned long long)c->job_id, (unsigned long long)c->generation,
              (int)v[0]);
      if (!ok) RM_WARN("rank %d: NCCL: %s", c->rank, why);
    }
    return st;
  }
  n->state = N_RUNNING;
  n->ordinal = ordinal;
  RM_INFO("rank %d: job %llu generation %llu: NCCL (%s) carries device collectives on "
          "device %d, %d ranks", c->rank, (unsigned long long)c->job_id,
          (unsigned long long)c->generation, n->lib->name, ordinal, c->world);
  return RM_OK;
}

/* Stop NCCL's kernels for good and make the failure sticky (msg: words). */
static rm_status_t abort_with(rm_comm_t *c, rm_status_t st, const char *msg)
{
  struct rm__nccl *n = c->nccl;
  if (n->comm) n->lib->CommAbort(n->comm);
  n->comm = NULL;
  n->state = N_ABORTED;
  if (rm_comm_status(c) != RM_OK) return rm_comm_status(c);
  return rm__comm_fail(c, st, -1, "nccl: %s", msg);
}

/* Wait for the NCCL call just enqueued on s (top of file: Waiting). */
static rm_status_t finish(rm_comm_t *c, const char *what, int r)
{
  struct rm__nccl *n = c->nccl;
  const rm__gpu_ops_t *g = c->dev->g;
  void *ev = NULL;
  int64_t t0 = rm__now_ns(), span = (int64_t)c->timeout_ms * 1000000;
  rm_status_t st = RM_OK;
  char msg[320];
  if (r != RM__NCCL_OK) {
    snprintf(msg, sizeof msg, "%s: %s", what, n->lib->GetErrorString(r));
    return abort_with(c, RM_ERR_SYSTEM, msg);
  }
  RM_CHECK(rm__dev_event(c, &ev));
  if (g->event_record(ev, c->dev->s) != RM_OK) {
    rm__dev_event_put(c, ev);
    return rm__dev_fail(c, RM_ERR_SYSTEM, "event after an NCCL call");
  }
  for (;;) {
    int q = g->event_query(ev), async = RM__NCCL_OK;
    if (q == 1) break;
    if (q < 0) {
      snprintf(msg, sizeof msg, "%s: the GPU failed: %s", what, g->err());
      st = abort_with(c, RM_ERR_SYSTEM, msg);
      break;
    }
    if (rm_comm_status(c) != RM_OK || __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE)) {
      snprintf(msg, sizeof msg, "%s: communicator aborted", what);
      st = abort_with(c, RM_ERR_ABORTED, msg);
      break;
    }
    if (n->lib->CommGetAsyncError(n->comm, &async) == RM__NCCL_OK && async != RM__NCCL_OK &&
        async != RM__NCCL_IN_PROGRESS) {
      snprintf(msg, sizeof msg, "%s: %s (a peer failed or left)", what,
               n->lib->GetErrorString(async));
      st = abort_with(c, RM_ERR_PEER_LOST, msg);
      break;
    }
    if (rm__now_ns() - t0 >= span) {
      snprintf(msg, sizeof msg, "%s did not complete within %d ms: a peer stopped or left "
               "(NCCL does not say which; the coordinator names it from heartbeats)",
               what, c->timeout_ms);
      st = abort_with(c, RM_ERR_TIMEOUT, msg);
      break;
    }
    sched_yield();
  }
  rm__dev_event_put(c, ev);
  return st;
}

/* Every dtype and op of ringmaster has an NCCL counterpart; callers have
 * validated dt and op (the public collectives' argument checks). */
static const int g_dtype[RM_DTYPE_COUNT] = {
    [RM_F32] = RM__NCCL_FLOAT32, [RM_F64] = RM__NCCL_FLOAT64, [RM_F16] = RM__NCCL_FLOAT16,
    [RM_BF16] = RM__NCCL_BFLOAT16, [RM_I32] = RM__NCCL_INT32, [RM_I64] = RM__NCCL_INT64,
    [RM_U8] = RM__NCCL_UINT8,
};
static const int g_op[RM_OP_COUNT] = {
    [RM_SUM] = RM__NCCL_SUM, [RM_PROD] = RM__NCCL_PROD, [RM_MIN] = RM__NCCL_MIN,
    [RM_MAX] = RM__NCCL_MAX, [RM_AVG] = RM__NCCL_AVG,
};

#define LIB (c->nccl->lib)
#define NC (c->nccl->comm)
#define S (c->dev->s)

rm_status_t rm__nccl_allreduce(rm_comm_t *c, const void *s, void *r, size_t count,
                               rm_dtype_t dt, rm_op_t op)
{
  return finish(c, "all-reduce", LIB->AllReduce(s, r, count, g_dtype[dt], g_op[op], NC, S));
}

rm_status_t rm__nccl_broadcast(rm_comm_t *c, void *buf, size_t count, rm_dtype_t dt, int root)
{
  return finish(c, "broadcast", LIB->Broadcast(buf, buf, count, g_dtype[dt], root, NC, S));
}

rm_status_t rm__nccl_reduce(rm_comm_t *c, const void *s, void *r, size_t count, rm_dtype_t dt,
                            rm_op_t op, int root)
{
  return finish(c, "reduce", LIB->Reduce(s, r, count, g_dtype[dt], g_op[op], root, NC, S));
}

rm_status_t rm__nccl_allgather(rm_comm_t *c, const void *s, void *r, size_t sendcount,
                               rm_dtype_t dt)
{
  return finish(c, "all-gather", LIB->AllGather(s, r, sendcount, g_dtype[dt], NC, S));
}

rm_status_t rm__nccl_reduce_scatter(rm_comm_t *c, const void *s, void *r, size_t recvcount,
                                    rm_dtype_t dt, rm_op_t op)
{
  return finish(c, "reduce-scatter",
                LIB->ReduceScatter(s, r, recvcount, g_dtype[dt], g_op[op], NC, S));
}

/* NCCL has no all-to-all: a group of sends and receives, one pair each. */
rm_status_t rm__nccl_alltoall(rm_comm_t *c, const void *s, void *r, size_t count, rm_dtype_t dt)
{
  int t = g_dtype[dt], res = LIB->GroupStart();
  size_t blk = count * rm_dtype_size(dt);
  for (int p = 0; p < c->world && res == RM__NCCL_OK; p++) {
    res = LIB->Send((const char *)s + (size_t)p * blk, count, t, p, NC, S);
    if (res == RM__NCCL_OK) res = LIB->Recv((char *)r + (size_t)p * blk, count, t, p, NC, S);
  }
  int end = LIB->GroupEnd();
  return finish(c, "all-to-all", res != RM__NCCL_OK ? res : end);
}

void rm__nccl_destroy(rm_comm_t *c)
{
  struct rm__nccl *n = c->nccl;
  if (n == NULL) return;
  if (n->comm != NULL) {
    if (rm_comm_status(c) == RM_OK) n->lib->CommDestroy(n->comm);
    else n->lib->CommAbort(n->comm);
  }
  free(n);
  c->nccl = NULL;
}
