/*
 * gpu.h - the one interface between the data plane and a GPU runtime.
 *
 * Everything the library does with device memory goes through one const
 * table of function pointers, chosen once per process:
 *
 *   "cuda"     gpu_cuda.c: the CUDA runtime (built when the toolkit exists,
 *              RM_HAVE_CUDA; linked statically, so a machine without a
 *              driver starts and simply has no GPU)
 *   a test's   test-hook builds only (RINGMASTER_TEST_HOOKS): the process
 *              sets RINGMASTER_TEST_GPU to the path of a shared object
 *              whose exported RM__GPU_TEST_ENTRY function returns a
 *              table. The library knows no such object by name; the
 *              tests' stand-in GPU (tests/doubles/gpu_standin.c, a GPU in
 *              host memory whose device memory faults on host access and
 *              whose streams run late) is how every device path is tested
 *              on a machine without a GPU. Builds without test hooks
 *              ignore the variable.
 *
 * rm__gpu() returns NULL when neither is usable: then no pointer is device
 * memory and every collective is the host path, at the cost of one load.
 *
 * Contract of every op (both implementations):
 *  - streams are opaque (void *); NULL is the runtime's default stream;
 *  - copy / zero / reduce / scale only enqueue on a stream and return; the work
 *    runs in enqueue order per stream; stream_wait makes a stream wait for
 *    what an event captured when it was recorded (CUDA semantics);
 *  - event_query: 1 done (or never recorded), 0 pending, -1 error;
 *  - a failing op returns a status (RM_ERR_SYSTEM for a runtime error,
 *    RM_ERR_NOMEM for an allocation) and leaves words in err(), which is
 *    per thread and overwritten by the next failure;
 *  - the "current device" is per thread (cudaSetDevice): callers save and
 *    restore it around their calls (set_device returns the previous one).
 *
 * IPC (CUDA IPC between processes of one host, transport/cuda_ipc.c): a
 * handle names an allocation; ipc_get gives the handle of the allocation
 * holding p and p's offset in it; ipc_open maps a peer's allocation into
 * this process (returns its base), ipc_close unmaps.
 */
#ifndef RM_WORKER_DEVICE_GPU_H
#define RM_WORKER_DEVICE_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"

/* Opaque bytes of an IPC handle (cudaIpcMemHandle_t is 64 bytes). */
#define RM__IPC_HANDLE_BYTES 64
typedef struct rm__ipc_handle {
  unsigned char bytes[RM__IPC_HANDLE_BYTES];
} rm__ipc_handle_t;

typedef struct rm__gpu_ops {
  const char *name;
  /* 1 when p is device memory (OUT *dev its device ordinal), 0 host. */
  int (*ptr_is_device)(const void *p, int *dev);
  int (*device_count)(void);
  rm_status_t (*set_device)(int dev, int *prev);
  rm_status_t (*dev_alloc)(size_t n, void **p);
  void (*dev_free)(void *p);
  /* page-locked host memory for staging */
  rm_status_t (*host_alloc)(size_t n, void **p);
  void (*host_free)(void *p);
  rm_status_t (*stream_create)(void **s);
  void (*stream_destroy)(void *s);
  rm_status_t (*event_create)(void **e);
  void (*event_destroy)(void *e);
  rm_status_t (*event_record)(void *e, void *s);
  int (*event_query)(void *e);
  rm_status_t (*stream_wait)(void *s, void *e);
  /* n bytes, any direction (unified addressing), async on s */
  rm_status_t (*copy)(void *dst, const void *src, size_t n, void *s);
  /* n zero bytes at device pointer dst (cudaMemsetAsync), async on s */
  rm_status_t (*zero)(void *dst, size_t n, void *s);
  /* dst[i] = dst[i] op src[i] on device pointers (reduce_cuda.h semantics) */
  rm_status_t (*reduce)(void *dst, const void *src, size_t count, rm_dtype_t dt,
                        rm_op_t op, void *s);
  rm_status_t (*scale_avg)(void *buf, size_t count, rm_dtype_t dt, int world, void *s);
  rm_status_t (*ipc_get)(const void *p, rm__ipc_handle_t *h, size_t *off);
  rm_status_t (*ipc_open)(const rm__ipc_handle_t *h, void **base);
  void (*ipc_close)(void *base);
  /* Words about this thread's last failure. */
  const char *(*err)(void);
  /* Whether the NIC reaches this runtime's memory directly (GPUDirect
   * RDMA, rm__gpu_gdr); NULL: decided from the system (nvidia-peermem). */
  int (*gdr)(void);
} rm__gpu_ops_t;

/* The function a test's GPU shared object exports (top of file): given
 * sizeof(rm__gpu_ops_t) of the library, its table, or NULL to refuse. */
#define RM__GPU_TEST_ENTRY "rm_test_gpu_ops"
typedef const rm__gpu_ops_t *(*rm__gpu_test_entry_t)(size_t table_size);

/* The runtime of this process (top of file), or NULL. Decided on the first
 * call (thread-safe); a probe that finds no device logs one info line. */
const rm__gpu_ops_t *rm__gpu(void);

/* 1 when p is device memory of the runtime in use (OUT *dev), else 0. */
static inline int rm__gpu_ptr_is_device(const void *p, int *dev)
{
  const rm__gpu_ops_t *g = rm__gpu();
  return g != NULL && p != NULL && g->ptr_is_device(p, dev);
}

/* Whether this process offers CUDA IPC to ranks of its host (the
 * cuda:<host>/ipc1 token, common/rm_transports.h), decided WITHOUT touching
 * the GPU (endpoints may open in a parent that forks ranks): off with
 * RINGMASTER_CUDA_IPC=0 or RINGMASTER_GPU=off; on for the stand-in; else
 * on when the build has CUDA and a GPU driver is loaded (/dev/nvidiactl).
 * A rank that offers it but finds no usable device later still works: a
 * sender that cannot export its memory sends by value. */
int rm__gpu_ipc_offerable(void);

/* Whether the RDMA transport may register device memory directly
 * (GPUDirect RDMA) instead of staging it: RINGMASTER_GDR=0 off; else the
 * runtime's own answer when its table has gdr (a test's GPU); else the
 * CUDA runtime in use and
 * nvidia-peermem loaded (/sys/kernel/mm/memory_peers/nv_mem or
 * /sys/module/nvidia_peermem). Decided once, logged once. */
int rm__gpu_gdr(void);

/* NULL when the CUDA runtime is not built in or sees no device. */
const rm__gpu_ops_t *rm__gpu_cuda_probe(void);

#endif
