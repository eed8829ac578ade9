/*
 * bench_nccl.c - NCCL called directly, on the same device buffers, for
 * rm_bench's "nccl-direct" cells: the reference that "-a nccl" (NCCL
 * through ringmaster: its bootstrap, stream ordering, deadline polling) is
 * compared against. Only in builds with CUDA, only with the real libnccl
 * (dlopen, as the library does). One NCCL communicator per process, made
 * on first use: rank 0's unique id goes to the others over ringmaster's own
 * broadcast (host memory), then ncclCommInitRank. Each call is
 * ncclAllReduce on a stream of our own followed by cudaStreamSynchronize,
 * so the time is end to end as rm_allreduce's is.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "bench_nccl.h"
#include "rm_config.h"

#if !RM_HAVE_CUDA
int rm_bench_nccl_direct(rm_comm_t *c, void *dbuf, size_t count, rm_dtype_t dt)
{
  (void)c;
  (void)dbuf;
  (void)count;
  (void)dt;
  fprintf(stderr, "nccl-direct: this build has no CUDA\n");
  return -1;
}
#else
#include <cuda_runtime_api.h>

typedef struct { char internal[128]; } id_t128;
static int (*p_uid)(id_t128 *);
static int (*p_init)(void **, int, id_t128, int);
static int (*p_allreduce)(const void *, void *, size_t, int, int, void *, cudaStream_t);
static void *g_comm;
static cudaStream_t g_stream;

static int nccl_dtype(rm_dtype_t dt)
{
  switch (dt) {
  case RM_F32: return 7;
  case RM_F64: return 8;
  case RM_F16: return 6;
  case RM_BF16: return 9;
  case RM_I32: return 2;
  case RM_I64: return 4;
  default: return 1;
  }
}

static int setup(rm_comm_t *c)
{
  id_t128 id;
  unsigned char ok = 1;
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (h) {
    *(void **)&p_uid = dlsym(h, "ncclGetUniqueId");
    *(void **)&p_init = dlsym(h, "ncclCommInitRank");
    *(void **)&p_allreduce = dlsym(h, "ncclAllReduce");
  }
  if (!h || !p_uid || !p_init || !p_allreduce) {
    fprintf(stderr, "nccl-direct: no libnccl.so.2\n");
    ok = 0;
  }
  memset(&id, 0, sizeof id);
  if (ok && rm_comm_rank(c) == 0 && p_uid(&id) != 0) ok = 0;
  if (rm_broadcast(c, &id, sizeof id, RM_U8, 0) != RM_OK) return -1;
  if (rm_allreduce(c, &ok, &ok, 1, RM_U8, RM_MIN) != RM_OK || !ok) return -1;
  if (cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking) != cudaSuccess) return -1;
  if (p_init(&g_comm, rm_comm_world(c), id, rm_comm_rank(c)) != 0) {
    fprintf(stderr, "nccl-direct: ncclCommInitRank failed (several ranks on one GPU?)\n");
    return -1;
  }
  return 0;
}

int rm_bench_nccl_direct(rm_comm_t *c, void *dbuf, size_t count, rm_dtype_t dt)
{
  if (g_comm == NULL && setup(c) != 0) return -1;
  if (p_allreduce(dbuf, dbuf, count, nccl_dtype(dt), 0, g_comm, g_stream) != 0) return -1;
  return cudaStreamSynchronize(g_stream) == cudaSuccess ? 0 : -1;
}
#endif
