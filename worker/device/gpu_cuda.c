/*
 * gpu_cuda.c - gpu.h over the CUDA runtime (built only when RM_HAVE_CUDA).
 *
 * The library links the static runtime (cudart_static), which loads the
 * driver itself at the first call: on a machine without a driver or a
 * device rm__gpu_cuda_probe() returns NULL after one info line (the same
 * words as transport/probe/cuda_probe.c) and nothing else here runs.
 *
 * Pointers: cudaPointerGetAttributes; device and managed memory count as
 * device memory (reduced on the GPU), registered and unregistered host
 * memory as host memory.
 *
 * Streams are created non-blocking (cudaStreamNonBlocking): they do not
 * synchronise implicitly with the legacy default stream, so the data plane
 * orders itself after the user's work only where it says so (an event
 * recorded on the user's stream, worker/device/dev.c).
 *
 * IPC: cudaIpcGetMemHandle names the allocation; its base (for the offset
 * of an interior pointer) comes from the driver's cuMemGetAddressRange,
 * reached through cudaGetDriverEntryPointByVersion (no link against
 * libcuda). Memory the runtime cannot export (cudaMallocAsync pools,
 * virtual-memory mappings) fails ipc_get, and the caller stages instead.
 */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "device/gpu.h"
#include "reduce/reduce_cuda.h"
#include "rm_log.h"
#include "transport/probe.h"

static __thread char t_err[256];

static rm_status_t fail(cudaError_t e, const char *what)
{
  snprintf(t_err, sizeof t_err, "%s: %s (%s)", what, cudaGetErrorName(e),
           cudaGetErrorString(e));
  (void)cudaGetLastError(); /* clear the runtime's sticky last error */
  return e == cudaErrorMemoryAllocation ? RM_ERR_NOMEM : RM_ERR_SYSTEM;
}

#define CU(call, what)                                                        \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) return fail(e_, what);                             \
  } while (0)

static const char *cu_err(void) { return t_err; }

static int cu_ptr_is_device(const void *p, int *dev)
{
  struct cudaPointerAttributes a;
  memset(&a, 0, sizeof a);
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) return 0;
  if (dev) *dev = a.device;
  return 1;
}

static int cu_device_count(void)
{
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

static rm_status_t cu_set_device(int dev, int *prev)
{
  int cur = -1;
  CU(cudaGetDevice(&cur), "cudaGetDevice");
  if (prev) *prev = cur;
  if (cur != dev) CU(cudaSetDevice(dev), "cudaSetDevice");
  return RM_OK;
}

static rm_status_t cu_dev_alloc(size_t n, void **p)
{
  CU(cudaMalloc(p, n ? n : 1), "cudaMalloc");
  return RM_OK;
}

static void cu_dev_free(void *p)
{
  if (p && cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
}

static rm_status_t cu_host_alloc(size_t n, void **p)
{
  CU(cudaHostAlloc(p, n ? n : 1, cudaHostAllocPortable), "cudaHostAlloc");
  return RM_OK;
}

static void cu_host_free(void *p)
{
  if (p && cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
}

static rm_status_t cu_stream_create(void **s)
{
  cudaStream_t st;
  CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
  *s = st;
  return RM_OK;
}

static void cu_stream_destroy(void *s)
{
  if (s && cudaStreamDestroy((cudaStream_t)s) != cudaSuccess) (void)cudaGetLastError();
}

static rm_status_t cu_event_create(void **e)
{
  cudaEvent_t ev;
  CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
  *e = ev;
  return RM_OK;
}

static void cu_event_destroy(void *e)
{
  if (e && cudaEventDestroy((cudaEvent_t)e) != cudaSuccess) (void)cudaGetLastError();
}

static rm_status_t cu_event_record(void *e, void *s)
{
  CU(cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s), "cudaEventRecord");
  return RM_OK;
}

static int cu_event_query(void *e)
{
  cudaError_t r = cudaEventQuery((cudaEvent_t)e);
  if (r == cudaSuccess) return 1;
  if (r == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return 0;
  }
  fail(r, "cudaEventQuery");
  return -1;
}

static rm_status_t cu_stream_wait(void *s, void *e)
{
  CU(cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0), "cudaStreamWaitEvent");
  return RM_OK;
}

static rm_status_t cu_copy(void *dst, const void *src, size_t n, void *s)
{
  if (n == 0) return RM_OK;
  CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)s), "cudaMemcpyAsync");
  return RM_OK;
}

static rm_status_t cu_zero(void *dst, size_t n, void *s)
{
  if (n == 0) return RM_OK;
  CU(cudaMemsetAsync(dst, 0, n, (cudaStream_t)s), "cudaMemsetAsync");
  return RM_OK;
}

static rm_status_t cu_reduce(void *dst, const void *src, size_t count, rm_dtype_t dt,
                             rm_op_t op, void *s)
{
  rm_status_t st = rm__reduce_cuda(dst, src, count, dt, op, s);
  if (st != RM_OK) snprintf(t_err, sizeof t_err, "reduction kernel launch: %s", rm_status_name(st));
  return st;
}

static rm_status_t cu_scale_avg(void *buf, size_t count, rm_dtype_t dt, int world, void *s)
{
  rm_status_t st = rm__scale_avg_cuda(buf, count, dt, world, s);
  if (st != RM_OK) snprintf(t_err, sizeof t_err, "average kernel launch: %s", rm_status_name(st));
  return st;
}

/* CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p) */
typedef int (*get_range_fn)(unsigned long long *, size_t *, unsigned long long);

static get_range_fn range_fn(void)
{
  static get_range_fn fn;
  static int tried;
  if (!__atomic_load_n(&tried, __ATOMIC_ACQUIRE)) {
    void *f = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000,
                                         cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      f = NULL;
    }
    fn = (get_range_fn)f;
    __atomic_store_n(&tried, 1, __ATOMIC_RELEASE);
  }
  return fn;
}

static rm_status_t cu_ipc_get(const void *p, rm__ipc_handle_t *h, size_t *off)
{
  cudaIpcMemHandle_t ch;
  unsigned long long base = 0;
  size_t size = 0;
  get_range_fn fn = range_fn();
  if (fn == NULL) {
    snprintf(t_err, sizeof t_err, "cuMemGetAddressRange unavailable");
    return RM_ERR_UNSUPPORTED;
  }
  if (fn(&base, &size, (unsigned long long)(uintptr_t)p) != 0) {
    snprintf(t_err, sizeof t_err, "cuMemGetAddressRange failed for %p", p);
    return RM_ERR_UNSUPPORTED;
  }
  CU(cudaIpcGetMemHandle(&ch, (void *)(uintptr_t)base), "cudaIpcGetMemHandle");
  _Static_assert(sizeof ch <= RM__IPC_HANDLE_BYTES, "IPC handle size");
  memset(h, 0, sizeof *h);
  memcpy(h->bytes, &ch, sizeof ch);
  *off = (size_t)((uintptr_t)p - (uintptr_t)base);
  return RM_OK;
}

static rm_status_t cu_ipc_open(const rm__ipc_handle_t *h, void **base)
{
  cudaIpcMemHandle_t ch;
  memcpy(&ch, h->bytes, sizeof ch);
  CU(cudaIpcOpenMemHandle(base, ch, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
  return RM_OK;
}

static void cu_ipc_close(void *base)
{
  if (base && cudaIpcCloseMemHandle(base) != cudaSuccess) (void)cudaGetLastError();
}

static const rm__gpu_ops_t cuda_ops = {
    .name = "cuda",
    .ptr_is_device = cu_ptr_is_device,
    .device_count = cu_device_count,
    .set_device = cu_set_device,
    .dev_alloc = cu_dev_alloc,
    .dev_free = cu_dev_free,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_query = cu_event_query,
    .stream_wait = cu_stream_wait,
    .copy = cu_copy,
    .zero = cu_zero,
    .reduce = cu_reduce,
    .scale_avg = cu_scale_avg,
    .ipc_get = cu_ipc_get,
    .ipc_open = cu_ipc_open,
    .ipc_close = cu_ipc_close,
    .err = cu_err,
};

const rm__gpu_ops_t *rm__gpu_cuda_probe(void)
{
  char why[256];
  /* the probe logs "no CUDA device (...)" once when there is none */
  if (rm__cuda_devices(NULL, 0, why, sizeof why) <= 0) return NULL;
  RM_INFO("gpu: CUDA runtime %d.%d, %d device(s): device buffers are staged or "
          "moved by CUDA IPC and reduced on the GPU",
          CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, cu_device_count());
  return &cuda_ops;
}
