/*
 * cuda_probe.c - CUDA device discovery through the CUDA runtime (built only
 * when RM_HAVE_CUDA). See transport/probe.h.
 *
 * Discovery only: the device data path (staging, GPU reductions, CUDA IPC)
 * is worker/device/, which asks this probe once per process whether the
 * CUDA runtime sees a device (device/gpu_cuda.c).
 *
 * Driver independence: the library links the *static* CUDA runtime
 * (CUDA::cudart_static), which dlopen()s the driver libcuda.so.1 at its first
 * call. So nothing in the binary's NEEDED list requires a GPU driver, and on a
 * machine without one cudaGetDeviceCount() returns an error
 * (cudaErrorInsufficientDriver / cudaErrorNoDevice / ...) that we report as
 * "no CUDA device (no driver: libcuda.so.1: cannot open ...)" - one info log
 * line, never a crash or a failed start.
 *
 * Entry format: "cuda:ORDINAL NAME (GIB GiB, sm_MAJORMINOR)".
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "rm_log.h"
#include "transport/probe.h"

static int logged_none; /* atomic; one info line per process */

/* Words for a failed cudaGetDeviceCount. For the "insufficient driver" case
 * find out whether the driver is missing altogether or only too old. */
static void explain(cudaError_t err, char *text, size_t len)
{
  if (err == cudaErrorInsufficientDriver) {
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
      const char *e = dlerror();
      snprintf(text, len, "no driver: %s", e ? e : "libcuda.so.1 not found");
      return;
    }
    dlclose(h);
    snprintf(text, len, "driver older than runtime %d.%d (%s)",
             CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, cudaGetErrorName(err));
    return;
  }
  snprintf(text, len, "%s: %s", cudaGetErrorName(err),
           cudaGetErrorString(err));
}

int rm__cuda_devices(char *buf, size_t len, char *why, size_t why_len)
{
  char text[256];
  size_t used = 0;
  int count = 0, n = 0;
  cudaError_t err;
  if (buf && len > 0)
    buf[0] = '\0';
  err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count <= 0) {
    if (err == cudaSuccess)
      snprintf(text, sizeof text, "driver reports 0 devices");
    else
      explain(err, text, sizeof text);
    (void)cudaGetLastError(); /* clear the runtime's sticky last error */
    if (why && why_len > 0)
      snprintf(why, why_len, "%s", text);
    if (!__atomic_exchange_n(&logged_none, 1, __ATOMIC_RELAXED))
      RM_INFO("cuda: no CUDA device (%s): buffers are host memory", text);
    return 0;
  }
  for (int d = 0; d < count; d++) {
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
      (void)cudaGetLastError();
      rm__devices_append(buf, len, &used, "%scuda:%d (properties unavailable)",
                         used ? "; " : "", d);
      continue;
    }
    rm__devices_append(buf, len, &used, "%scuda:%d %s (%.0f GiB, sm_%d%d)",
                       used ? "; " : "", d, p.name,
                       (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
                       p.major, p.minor);
    n++;
  }
  if (n == 0 && why && why_len > 0)
    snprintf(why, why_len, "%d CUDA device(s) present, properties unavailable", count);
  return n;
}
