/*
 * nccl_standin.c - TEST DOUBLE of NCCL: NCCL's own entry points
 * (ncclGetVersion, ncclCommInitRankConfig, ...; the ABI of nccl.h in
 * worker/device/), exported by tests/doubles' shared object (doubles.h).
 * The library loads it as it loads libnccl.so.2, when RINGMASTER_NCCL_LIB
 * names that object; it works only together with the stand-in GPU of the
 * same object (RINGMASTER_TEST_GPU naming it too). No GPU exists on the
 * machines the default tests run on, so neither does a working NCCL; this
 * double keeps the properties ringmaster's NCCL backend (nccl.c) depends on:
 *
 *  1. a unique id made by one rank and given to the others out of band
 *     ("RMNS" + 16 hex digits naming a shared-memory segment);
 *  2. non-blocking init: ncclCommInitRankConfig maps the segment and
 *     returns in progress; ncclCommGetAsyncError says done once every rank
 *     attached (the segment's name is then unlinked: nothing stays in
 *     /dev/shm, also after SIGKILL);
 *  3. collectives only enqueue: each is a host function on the caller's
 *     (stand-in) stream, so completion is an event like NCCL's kernels;
 *  4. a peer that stops makes the others wait forever (every collective is
 *     rounds of "write my slot, barrier, read the slots, barrier"), until
 *     ncclCommAbort, which ends the wait; nothing else does, as in NCCL.
 *
 * Data: each rank owns a slot of SLOT bytes in the segment; a collective
 * moves its payload in chunks of at most SLOT bytes (all-to-all: SLOT /
 * nranks per peer). Reductions use the CPU kernels over the ranks' slots
 * in rank order, on the stand-in GPU's host view of device memory.
 */
#define _GNU_SOURCE
#include "device/nccl.h"


#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "device/gpu.h"
#include "doubles.h"
#include "reduce/reduce.h"

#define NS_MAGIC "RMNS"
#define SLOT ((size_t)1 << 20)
#define HDR 4096

typedef struct ns_hdr {
  uint32_t attached;
  uint32_t count;  /* barrier arrivals this round */
  uint32_t sense;  /* flips when a round completes */
} ns_hdr_t;

typedef struct ns_comm {
  int nranks, rank;
  char name[40];
  ns_hdr_t *hdr;
  unsigned char *slots;
  size_t map_len;
  int aborted;      /* atomic: ncclCommAbort */
  int failed;       /* atomic: a collective ended by the abort */
  int refs;         /* atomic: the owner + one per queued collective */
  uint32_t my_sense;
  int unlinked;
  /* between GroupStart and GroupEnd: the all-to-all being collected */
  int grouping;
  const void *a2a_send;
  void *a2a_recv;
  size_t a2a_count;
  int a2a_dt;
  void *a2a_stream;
} ns_comm_t;

static __thread ns_comm_t *t_group; /* the communicator of the open group */

static void unref(ns_comm_t *m)
{
  if (__atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
  munmap(m->hdr, m->map_len);
  free(m);
}

static int ns_version(int *v)
{
  *v = 22800;
  return RM__NCCL_OK;
}

static const char *ns_error_string(int r)
{
  switch (r) {
  case RM__NCCL_OK: return "no error (stand-in NCCL)";
  case RM__NCCL_IN_PROGRESS: return "in progress (stand-in NCCL)";
  case RM__NCCL_INVALID_ARGUMENT: return "invalid argument (stand-in NCCL)";
  case RM__NCCL_REMOTE_ERROR: return "remote process exited or there was a network error (stand-in NCCL)";
  default: return "system error (stand-in NCCL)";
  }
}

static int ns_unique_id(rm__nccl_id_t *id)
{
  unsigned char r[8];
  memset(id, 0, sizeof *id);
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) return RM__NCCL_SYSTEM_ERROR;
  memcpy(id->internal, NS_MAGIC, 4);
  for (int i = 0; i < 8; i++) sprintf(id->internal + 4 + 2 * i, "%02x", r[i]);
  return RM__NCCL_OK;
}

static int ns_init(void **out, int nranks, rm__nccl_id_t id, int rank, rm__nccl_config_t *cfg)
{
  ns_comm_t *m;
  int fd;
  (void)cfg;
  if (memcmp(id.internal, NS_MAGIC, 4) != 0 || nranks < 1 || rank < 0 || rank >= nranks)
    return RM__NCCL_INVALID_ARGUMENT;
  m = calloc(1, sizeof *m);
  if (m == NULL) return RM__NCCL_SYSTEM_ERROR;
  m->nranks = nranks;
  m->rank = rank;
  m->refs = 1;
  snprintf(m->name, sizeof m->name, "/rm-nccl-%.16s", id.internal + 4);
  m->map_len = HDR + (size_t)nranks * SLOT;
  fd = shm_open(m->name, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)m->map_len) != 0) {
    if (fd >= 0) close(fd);
    free(m);
    return RM__NCCL_SYSTEM_ERROR;
  }
  void *p = mmap(NULL, m->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    free(m);
    return RM__NCCL_SYSTEM_ERROR;
  }
  m->hdr = p;
  m->slots = (unsigned char *)p + HDR;
  __atomic_add_fetch(&m->hdr->attached, 1, __ATOMIC_ACQ_REL);
  *out = m;
  return RM__NCCL_IN_PROGRESS;
}

static int ns_async_error(void *c, int *state)
{
  ns_comm_t *m = c;
  if (__atomic_load_n(&m->failed, __ATOMIC_ACQUIRE)) {
    *state = RM__NCCL_REMOTE_ERROR;
    return RM__NCCL_OK;
  }
  if (__atomic_load_n(&m->hdr->attached, __ATOMIC_ACQUIRE) < (uint32_t)m->nranks) {
    *state = RM__NCCL_IN_PROGRESS;
    return RM__NCCL_OK;
  }
  if (!m->unlinked) { /* everyone mapped it: the name can go */
    shm_unlink(m->name);
    m->unlinked = 1;
  }
  *state = RM__NCCL_OK;
  return RM__NCCL_OK;
}

static int ns_abort(void *c)
{
  ns_comm_t *m = c;
  __atomic_store_n(&m->aborted, 1, __ATOMIC_RELEASE);
  if (!m->unlinked) shm_unlink(m->name);
  m->unlinked = 1;
  unref(m);
  return RM__NCCL_OK;
}

static int ns_destroy(void *c) { return ns_abort(c); }

/* Every rank arrives, or the abort: 0, or -1 after an abort. */
static int barrier(ns_comm_t *m)
{
  uint32_t sense = m->my_sense ^ 1u;
  m->my_sense = sense;
  if (__atomic_add_fetch(&m->hdr->count, 1, __ATOMIC_ACQ_REL) == (uint32_t)m->nranks) {
    __atomic_store_n(&m->hdr->count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&m->hdr->sense, sense, __ATOMIC_RELEASE);
    return 0;
  }
  struct timespec ts = {0, 20000};
  while (__atomic_load_n(&m->hdr->sense, __ATOMIC_ACQUIRE) != sense) {
    if (__atomic_load_n(&m->aborted, __ATOMIC_ACQUIRE)) return -1;
    nanosleep(&ts, NULL);
  }
  return 0;
}

static rm_dtype_t rm_dt(int t)
{
  switch (t) {
  case RM__NCCL_FLOAT32: return RM_F32;
  case RM__NCCL_FLOAT64: return RM_F64;
  case RM__NCCL_FLOAT16: return RM_F16;
  case RM__NCCL_BFLOAT16: return RM_BF16;
  case RM__NCCL_INT32: return RM_I32;
  case RM__NCCL_INT64: return RM_I64;
  case RM__NCCL_UINT8: return RM_U8;
  default: return RM_DTYPE_COUNT;
  }
}

static rm_op_t rm_op(int o)
{
  switch (o) {
  case RM__NCCL_SUM: return RM_SUM;
  case RM__NCCL_PROD: return RM_PROD;
  case RM__NCCL_MIN: return RM_MIN;
  case RM__NCCL_MAX: return RM_MAX;
  case RM__NCCL_AVG: return RM_AVG;
  default: return RM_OP_COUNT;
  }
}

enum { K_ALLREDUCE, K_BCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_ALLTOALL };

typedef struct ns_job {
  ns_comm_t *m;
  int kind, root;
  const void *s;
  void *r;
  size_t count; /* elements: per rank (allgather, reduce-scatter, all-to-all), else total */
  rm_dtype_t dt;
  rm_op_t op;
} ns_job_t;

/* Reduce `n` bytes at offset `off` of every slot, in rank order, into out. */
static void reduce_slots(ns_comm_t *m, const ns_job_t *j, size_t off, size_t n, unsigned char *out)
{
  size_t esz = rm_dtype_size(j->dt);
  memcpy(out, m->slots + off, n);
  for (int p = 1; p < m->nranks; p++)
    rm__reduce_fn(j->dt, j->op)(out, m->slots + (size_t)p * SLOT + off, n / esz);
  if (j->op == RM_AVG) rm__scale_avg(out, n / esz, j->dt, m->nranks);
}

/* Bytes of the send and receive buffers of a job. */
static void spans(const ns_job_t *j, size_t n, size_t *sb, size_t *rb)
{
  size_t b = j->count * rm_dtype_size(j->dt);
  *sb = *rb = b;
  if (j->kind == K_ALLGATHER) *rb = n * b;
  if (j->kind == K_REDUCE_SCATTER) *sb = n * b;
  if (j->kind == K_ALLTOALL) *sb = *rb = n * b;
}

/* One collective, on the stream's thread. */
static void run(void *arg)
{
  ns_job_t *j = arg;
  ns_comm_t *m = j->m;
  size_t esz = rm_dtype_size(j->dt), n = (size_t)m->nranks, sb, rb;
  unsigned char *mine = m->slots + (size_t)m->rank * SLOT;
  spans(j, n, &sb, &rb);
  const unsigned char *s = j->s ? rm__standin_xlate(j->s, sb) : NULL;
  unsigned char *r = j->r ? rm__standin_xlate(j->r, rb) : NULL;
  size_t total = j->count * esz; /* per rank where the kind says so */
  size_t chunk = (j->kind == K_ALLTOALL ? SLOT / n : SLOT) / esz * esz;
  int bad = (j->s && !s) || (j->r && !r); /* an illegal address */
  if (__atomic_load_n(&m->aborted, __ATOMIC_ACQUIRE)) goto out;
  for (size_t off = 0; off < total && !bad; off += chunk) {
    size_t len = total - off < chunk ? total - off : chunk;
    switch (j->kind) {
    case K_ALLREDUCE:
    case K_REDUCE:
      memcpy(mine, s + off, len);
      if ((bad = barrier(m)) != 0) break;
      if (j->kind == K_ALLREDUCE || m->rank == j->root) reduce_slots(m, j, 0, len, r + off);
      break;
    case K_BCAST:
      if (m->rank == j->root) memcpy(mine, s + off, len);
      if ((bad = barrier(m)) != 0) break;
      if (m->rank != j->root) memcpy(r + off, m->slots + (size_t)j->root * SLOT, len);
      break;
    case K_ALLGATHER:
      memcpy(mine, s + off, len);
      if ((bad = barrier(m)) != 0) break;
      for (size_t p = 0; p < n; p++) memcpy(r + p * total + off, m->slots + p * SLOT, len);
      break;
    case K_REDUCE_SCATTER: /* one block at a time: block b goes to rank b */
      for (size_t b = 0; b < n && !bad; b++) {
        memcpy(mine, s + b * total + off, len);
        if ((bad = barrier(m)) != 0) break;
        if (b == (size_t)m->rank) reduce_slots(m, j, 0, len, r + off);
        if (b + 1 < n) bad = barrier(m);
      }
      break;
    case K_ALLTOALL:
      for (size_t p = 0; p < n; p++) memcpy(mine + p * chunk, s + p * total + off, len);
      if ((bad = barrier(m)) != 0) break;
      for (size_t p = 0; p < n; p++)
        memcpy(r + p * total + off, m->slots + p * SLOT + (size_t)m->rank * chunk, len);
      break;
    }
    if (!bad) bad = barrier(m); /* the slots may be written again */
  }
  if (bad) __atomic_store_n(&m->failed, 1, __ATOMIC_RELEASE);
out:
  unref(m);
  free(j);
}

static int enqueue(ns_comm_t *m, const ns_job_t *tmpl, void *stream)
{
  ns_job_t *j = malloc(sizeof *j);
  if (j == NULL) return RM__NCCL_SYSTEM_ERROR;
  *j = *tmpl;
  j->m = m;
  if (j->dt == RM_DTYPE_COUNT || (j->kind != K_BCAST && j->kind != K_ALLGATHER &&
                                  j->kind != K_ALLTOALL && j->op == RM_OP_COUNT)) {
    free(j);
    return RM__NCCL_INVALID_ARGUMENT;
  }
  __atomic_add_fetch(&m->refs, 1, __ATOMIC_ACQ_REL);
  if (rm__standin_host_fn(stream, run, j) != RM_OK) {
    unref(m);
    free(j);
    return RM__NCCL_SYSTEM_ERROR;
  }
  return RM__NCCL_OK;
}

static int ns_allreduce(const void *s, void *r, size_t count, int dt, int op, void *c, void *st)
{
  return enqueue(c, &(ns_job_t){.kind = K_ALLREDUCE, .s = s, .r = r, .count = count,
                                .dt = rm_dt(dt), .op = rm_op(op)}, st);
}

static int ns_bcast(const void *s, void *r, size_t count, int dt, int root, void *c, void *st)
{
  return enqueue(c, &(ns_job_t){.kind = K_BCAST, .s = s, .r = r, .count = count, .dt = rm_dt(dt),
                                .root = root}, st);
}

static int ns_reduce(const void *s, void *r, size_t count, int dt, int op, int root, void *c,
                     void *st)
{
  return enqueue(c, &(ns_job_t){.kind = K_REDUCE, .s = s, .r = r, .count = count,
                                .dt = rm_dt(dt), .op = rm_op(op), .root = root}, st);
}

static int ns_allgather(const void *s, void *r, size_t sendcount, int dt, void *c, void *st)
{
  return enqueue(c, &(ns_job_t){.kind = K_ALLGATHER, .s = s, .r = r, .count = sendcount,
                                .dt = rm_dt(dt)}, st);
}

static int ns_reduce_scatter(const void *s, void *r, size_t recvcount, int dt, int op, void *c,
                             void *st)
{
  return enqueue(c, &(ns_job_t){.kind = K_REDUCE_SCATTER, .s = s, .r = r, .count = recvcount,
                                .dt = rm_dt(dt), .op = rm_op(op)}, st);
}

/* Grouped sends and receives: only the pattern of an all-to-all (one send
 * and one receive per peer, in peer order, equal counts) is understood;
 * GroupEnd runs it as one collective. */
static int ns_group_start(void)
{
  t_group = NULL;
  return RM__NCCL_OK;
}

static int ns_send(const void *s, size_t count, int dt, int peer, void *c, void *st)
{
  ns_comm_t *m = c;
  if (peer == 0) {
    t_group = m;
    m->a2a_send = s;
    m->a2a_count = count;
    m->a2a_dt = dt;
    m->a2a_stream = st;
  }
  return t_group == m ? RM__NCCL_OK : RM__NCCL_INVALID_USAGE;
}

static int ns_recv(void *r, size_t count, int dt, int peer, void *c, void *st)
{
  ns_comm_t *m = c;
  (void)st;
  if (peer == 0) m->a2a_recv = r;
  return t_group == m && count == m->a2a_count && dt == m->a2a_dt ? RM__NCCL_OK
                                                                 : RM__NCCL_INVALID_USAGE;
}

static int ns_group_end(void)
{
  ns_comm_t *m = t_group;
  t_group = NULL;
  if (m == NULL) return RM__NCCL_OK;
  return enqueue(m, &(ns_job_t){.kind = K_ALLTOALL, .s = m->a2a_send, .r = m->a2a_recv,
                                .count = m->a2a_count, .dt = rm_dt(m->a2a_dt)},
                 m->a2a_stream);
}

/* NCCL's exported names, as libnccl.so.2 has them (nccl_lib.c resolves
 * them with dlsym). */
RM_DOUBLE_API int ncclGetVersion(int *v);
RM_DOUBLE_API int ncclGetUniqueId(rm__nccl_id_t *id);
RM_DOUBLE_API int ncclCommInitRankConfig(void **comm, int nranks, rm__nccl_id_t id, int rank,
                                         rm__nccl_config_t *config);
RM_DOUBLE_API int ncclCommGetAsyncError(void *comm, int *state);
RM_DOUBLE_API int ncclCommAbort(void *comm);
RM_DOUBLE_API int ncclCommDestroy(void *comm);
RM_DOUBLE_API const char *ncclGetErrorString(int result);
RM_DOUBLE_API int ncclAllReduce(const void *s, void *r, size_t count, int dt, int op, void *comm,
                                void *stream);
RM_DOUBLE_API int ncclBroadcast(const void *s, void *r, size_t count, int dt, int root, void *comm,
                                void *stream);
RM_DOUBLE_API int ncclReduce(const void *s, void *r, size_t count, int dt, int op, int root,
                             void *comm, void *stream);
RM_DOUBLE_API int ncclAllGather(const void *s, void *r, size_t sendcount, int dt, void *comm,
                                void *stream);
RM_DOUBLE_API int ncclReduceScatter(const void *s, void *r, size_t recvcount, int dt, int op,
                                    void *comm, void *stream);
RM_DOUBLE_API int ncclSend(const void *s, size_t count, int dt, int peer, void *comm, void *stream);
RM_DOUBLE_API int ncclRecv(void *r, size_t count, int dt, int peer, void *comm, void *stream);
RM_DOUBLE_API int ncclGroupStart(void);
RM_DOUBLE_API int ncclGroupEnd(void);

int ncclGetVersion(int *v) { return ns_version(v); }
int ncclGetUniqueId(rm__nccl_id_t *id) { return ns_unique_id(id); }
int ncclCommInitRankConfig(void **comm, int nranks, rm__nccl_id_t id, int rank,
                           rm__nccl_config_t *config)
{
  /* its device memory is the stand-in GPU's: without it, nothing to reduce */
  if (!rm__standin_gpu_in_use()) return RM__NCCL_INVALID_USAGE;
  return ns_init(comm, nranks, id, rank, config);
}
int ncclCommGetAsyncError(void *comm, int *state) { return ns_async_error(comm, state); }
int ncclCommAbort(void *comm) { return ns_abort(comm); }
int ncclCommDestroy(void *comm) { return ns_destroy(comm); }
const char *ncclGetErrorString(int result) { return ns_error_string(result); }
int ncclAllReduce(const void *s, void *r, size_t count, int dt, int op, void *comm, void *stream)
{
  return ns_allreduce(s, r, count, dt, op, comm, stream);
}
int ncclBroadcast(const void *s, void *r, size_t count, int dt, int root, void *comm, void *stream)
{
  return ns_bcast(s, r, count, dt, root, comm, stream);
}
int ncclReduce(const void *s, void *r, size_t count, int dt, int op, int root, void *comm,
               void *stream)
{
  return ns_reduce(s, r, count, dt, op, root, comm, stream);
}
int ncclAllGather(const void *s, void *r, size_t sendcount, int dt, void *comm, void *stream)
{
  return ns_allgather(s, r, sendcount, dt, comm, stream);
}
int ncclReduceScatter(const void *s, void *r, size_t recvcount, int dt, int op, void *comm,
                      void *stream)
{
  return ns_reduce_scatter(s, r, recvcount, dt, op, comm, stream);
}
int ncclSend(const void *s, size_t count, int dt, int peer, void *comm, void *stream)
{
  return ns_send(s, count, dt, peer, comm, stream);
}
int ncclRecv(void *r, size_t count, int dt, int peer, void *comm, void *stream)
{
  return ns_recv(r, count, dt, peer, comm, stream);
}
int ncclGroupStart(void) { return ns_group_start(); }
int ncclGroupEnd(void) { return ns_group_end(); }
