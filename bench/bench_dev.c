/* bench_dev.c - device memory for the benchmarks (bench_dev.h). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "bench_dev.h"
#include "rm_config.h"

#if RM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static void *(*h_alloc)(size_t);
static void (*h_free)(void *);
static int (*h_copy)(void *, const void *, size_t);
#if RM_HAVE_CUDA
static int use_cuda;
#endif

int rm_bench_dev_init(char *why, size_t n)
{
  *(void **)&h_alloc = dlsym(RTLD_DEFAULT, "rm_testhook_gpu_alloc");
  *(void **)&h_free = dlsym(RTLD_DEFAULT, "rm_testhook_gpu_free");
  *(void **)&h_copy = dlsym(RTLD_DEFAULT, "rm_testhook_gpu_copy");
  if (h_alloc && h_free && h_copy) {
    void *p = h_alloc(64);
    if (p) {
      h_free(p);
      return 0;
    }
    snprintf(why, n, "the library's GPU runtime has no device (no GPU; RINGMASTER_TEST_GPU=PATH of "
                     "the tests' libringmaster_doubles.so for the stand-in)");
    return -1;
  }
  h_alloc = NULL;
#if RM_HAVE_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0 && cudaSetDevice(0) == cudaSuccess) {
    use_cuda = 1;
    return 0;
  }
  snprintf(why, n, "no CUDA device");
#else
  snprintf(why, n, "this build has neither CUDA nor test hooks");
#endif
  return -1;
}

void *rm_bench_dev_alloc(size_t n)
{
  void *p = NULL;
  (void)n;
  if (h_alloc) return h_alloc(n);
#if RM_HAVE_CUDA
  if (use_cuda && cudaMalloc(&p, n) != cudaSuccess) p = NULL;
#endif
  return p;
}

void rm_bench_dev_free(void *p)
{
  if (h_free) {
    h_free(p);
    return;
  }
#if RM_HAVE_CUDA
  if (use_cuda) cudaFree(p);
#endif
}

int rm_bench_dev_copy(void *dst, const void *src, size_t n)
{
  (void)dst;
  (void)src;
  (void)n;
  if (h_copy) return h_copy(dst, src, n);
#if RM_HAVE_CUDA
  if (use_cuda) return cudaMemcpy(dst, src, n, cudaMemcpyDefault) == cudaSuccess ? 0 : -1;
#endif
  return -1;
}
