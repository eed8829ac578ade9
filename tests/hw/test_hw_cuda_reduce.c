/*
 * test_hw_cuda_reduce.c - the CUDA reduction kernels (worker/reduce/
 * reduce_cuda.cu) against the CPU kernels (rm__reduce_fn), bit for bit.
 *
 *   test_hw_cuda_reduce          every dtype x op (avg = sum + scale by 3)
 *                                x counts {1, 7, 1000, 4099, 2^20+3} x
 *                                {16-byte aligned, one element off}, plus
 *                                in place (dst == src), count 0 and invalid
 *                                arguments. Exit 77 (CTest skip) with
 *                                "SKIPPED: no CUDA device (...)" when the build
 *                                has no CUDA or the machine no device/driver.
 *   test_hw_cuda_reduce bench [MiB]
 *                                kernel bandwidth, not a test: f32/bf16/u8 sum
 *                                over MiB-sized buffers (default 256), median
 *                                of 20 launches, GB/s counted as 3 x bytes
 *                                (two loads and one store per element),
 *                                against the device's own device-to-device
 *                                copy (cudaMemcpyAsync, 2 x bytes: one load,
 *                                one store) measured the same way: the
 *                                ratio is the kernel's share of what the
 *                                memory can move (aims at >= 90%
 *                                for large sums).
 *
 * Inputs: 16-bit types are raw random bit patterns (every class: normals,
 * subnormals, inf, NaN); f32/f64 are 3/4 scaled random values and 1/4 raw
 * bits; integers raw bits (wrapping arithmetic). Floats compare equal when
 * the bits match or both are NaN (NaN payloads may differ between CPU and
 * GPU; the kernels promise a NaN, not which one).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_config.h"

#define SKIP_CODE 77

#if !RM_HAVE_CUDA
int main(void)
{
  printf("SKIPPED: no CUDA device (this build has no CUDA: RINGMASTER_WITH_CUDA=OFF "
         "or no toolkit)\n");
  return SKIP_CODE;
}
#else

#include <cuda_runtime_api.h>

#include "reduce/reduce.h"
#include "reduce/reduce_cuda.h"
#include "transport/probe.h"

#define MAXN ((size_t)(1u << 20) + 3)
#define AVG_WORLD 3

static int failures;
static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void fill(void *buf, size_t n, rm_dtype_t dt)
{
  for (size_t i = 0; i < n; i++) {
    uint64_t r = next();
    double v = ((double)(r >> 11) / 9007199254740992.0 - 0.5) * (double)(1 << (r % 24));
    switch (dt) {
    case RM_F32: {
      float f = (float)v;
      if (i % 4 == 0) memcpy(&f, &r, 4);
      ((float *)buf)[i] = f;
      break;
    }
    case RM_F64:
      if (i % 4 == 0) memcpy(&v, &r, 8);
      ((double *)buf)[i] = v;
      break;
    case RM_F16: case RM_BF16: ((uint16_t *)buf)[i] = (uint16_t)r; break;
    case RM_I32: ((uint32_t *)buf)[i] = (uint32_t)r; break;
    case RM_I64: ((uint64_t *)buf)[i] = r; break;
    case RM_U8: ((uint8_t *)buf)[i] = (uint8_t)r; break;
    default: break;
    }
  }
}

static int is_nan(const void *p, rm_dtype_t dt)
{
  uint16_t h;
  switch (dt) {
  case RM_F32: { float f; memcpy(&f, p, 4); return f != f; }
  case RM_F64: { double d; memcpy(&d, p, 8); return d != d; }
  case RM_F16: memcpy(&h, p, 2); return (h & 0x7C00) == 0x7C00 && (h & 0x03FF);
  case RM_BF16: memcpy(&h, p, 2); return (h & 0x7F80) == 0x7F80 && (h & 0x007F);
  default: return 0;
  }
}

/* number of mismatching elements; prints the first */
static size_t compare(const char *what, const void *got, const void *want, size_t n,
                      rm_dtype_t dt)
{
  size_t es = rm_dtype_size(dt), bad = 0;
  for (size_t i = 0; i < n; i++) {
    const unsigned char *g = (const unsigned char *)got + i * es;
    const unsigned char *w = (const unsigned char *)want + i * es;
    if (memcmp(g, w, es) == 0 || (is_nan(g, dt) && is_nan(w, dt)))
      continue;
    if (bad++ == 0) {
      uint64_t gb = 0, wb = 0;
      memcpy(&gb, g, es);
      memcpy(&wb, w, es);
      fprintf(stderr, "FAIL %s: element %zu: gpu 0x%llx cpu 0x%llx\n", what, i,
              (unsigned long long)gb, (unsigned long long)wb);
    }
  }
  return bad;
}

#define CU(call)                                                              \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                  \
      fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,      \
              cudaGetErrorString(e_));                                        \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

typedef struct bufs {
  unsigned char *h_dst, *h_src, *ref, *out;
  unsigned char *d_dst, *d_src;
  cudaStream_t st;
} bufs_t;

/* one (dt, op, n, off) case: GPU result == CPU result */
static void one_case(bufs_t *b, rm_dtype_t dt, rm_op_t op, size_t n, size_t off,
                     int in_place)
{
  size_t es = rm_dtype_size(dt), bytes = n * es;
  unsigned char *dd = b->d_dst + off * es, *ds = in_place ? dd : b->d_src + off * es;
  char what[96];
  rm_status_t st;
  snprintf(what, sizeof what, "%s %s n=%zu off=%zu%s", rm_dtype_name(dt), rm_op_name(op), n,
           off, in_place ? " in-place" : "");
  fill(b->h_dst, n, dt);
  fill(b->h_src, n, dt);
  if (in_place)
    memcpy(b->h_src, b->h_dst, bytes);
  memcpy(b->ref, b->h_dst, bytes);
  rm__reduce_fn(dt, op)(b->ref, b->h_src, n);
  if (op == RM_AVG)
    rm__scale_avg(b->ref, n, dt, AVG_WORLD);
  CU(cudaMemcpy(dd, b->h_dst, bytes, cudaMemcpyHostToDevice));
  if (!in_place)
    CU(cudaMemcpy(ds, b->h_src, bytes, cudaMemcpyHostToDevice));
  st = rm__reduce_cuda(dd, ds, n, dt, op, b->st);
  if (st == RM_OK && op == RM_AVG)
    st = rm__scale_avg_cuda(dd, n, dt, AVG_WORLD, b->st);
  if (st != RM_OK) {
    fprintf(stderr, "FAIL %s: %s\n", what, rm_status_name(st));
    failures++;
    return;
  }
  CU(cudaStreamSynchronize(b->st));
  CU(cudaMemcpy(b->out, dd, bytes, cudaMemcpyDeviceToHost));
  if (compare(what, b->out, b->ref, n, dt))
    failures++;
}

static void edge_cases(bufs_t *b)
{
  unsigned char sentinel[8] = {1, 2, 3, 4, 5, 6, 7, 8}, back[8];
  CU(cudaMemcpy(b->d_dst, sentinel, 8, cudaMemcpyHostToDevice));
  if (rm__reduce_cuda(b->d_dst, b->d_src, 0, RM_F32, RM_SUM, b->st) != RM_OK ||
      rm__scale_avg_cuda(b->d_dst, 0, RM_F32, 4, b->st) != RM_OK) {
    fprintf(stderr, "FAIL count 0 not RM_OK\n");
    failures++;
  }
  CU(cudaStreamSynchronize(b->st));
  CU(cudaMemcpy(back, b->d_dst, 8, cudaMemcpyDeviceToHost));
  if (memcmp(back, sentinel, 8) != 0) {
    fprintf(stderr, "FAIL count 0 wrote memory\n");
    failures++;
  }
  if (rm__reduce_cuda(b->d_dst, b->d_src, 4, (rm_dtype_t)99, RM_SUM, b->st) !=
          RM_ERR_INVALID_ARG ||
      rm__reduce_cuda(b->d_dst, b->d_src, 4, RM_F32, (rm_op_t)99, b->st) !=
          RM_ERR_INVALID_ARG ||
      rm__reduce_cuda(NULL, b->d_src, 4, RM_F32, RM_SUM, b->st) != RM_ERR_INVALID_ARG ||
      rm__scale_avg_cuda(b->d_dst, 4, RM_F32, 0, b->st) != RM_ERR_INVALID_ARG) {
    fprintf(stderr, "FAIL invalid arguments not refused\n");
    failures++;
  }
}

static int run_matrix(void)
{
  static const size_t counts[] = {1, 7, 1000, 4099, MAXN};
  size_t cap = (MAXN + 16) * 8;
  bufs_t b;
  int cases = 0;
  memset(&b, 0, sizeof b);
  b.h_dst = malloc(cap);
  b.h_src = malloc(cap);
  b.ref = malloc(cap);
  b.out = malloc(cap);
  if (!b.h_dst || !b.h_src || !b.ref || !b.out) {
    fprintf(stderr, "FAIL out of host memory\n");
    return 1;
  }
  CU(cudaMalloc((void **)&b.d_dst, cap));
  CU(cudaMalloc((void **)&b.d_src, cap));
  CU(cudaStreamCreate(&b.st));
  for (int dt = 0; dt < RM_DTYPE_COUNT; dt++)
    for (int op = 0; op < RM_OP_COUNT; op++) {
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (size_t off = 0; off < 2; off++, cases++)
          one_case(&b, (rm_dtype_t)dt, (rm_op_t)op, counts[c], off, 0);
      one_case(&b, (rm_dtype_t)dt, (rm_op_t)op, 1000, 0, 1);
      cases++;
    }
  edge_cases(&b);
  CU(cudaStreamDestroy(b.st));
  CU(cudaFree(b.d_dst));
  CU(cudaFree(b.d_src));
  free(b.h_dst);
  free(b.h_src);
  free(b.ref);
  free(b.out);
  printf("%d cases, %d failed\n", cases, failures);
  return failures ? 1 : 0;
}

static int cmp_float(const void *a, const void *b)
{
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* The device's device-to-device copy bandwidth, GB/s (2 x bytes / time). */
static double copy_gbs(size_t bytes, void *d_dst, void *d_src, cudaStream_t st)
{
  enum { ITERS = 20 };
  float ms[ITERS];
  cudaEvent_t e0, e1;
  CU(cudaEventCreate(&e0));
  CU(cudaEventCreate(&e1));
  CU(cudaMemcpyAsync(d_dst, d_src, bytes, cudaMemcpyDeviceToDevice, st)); /* warm up */
  for (int i = 0; i < ITERS; i++) {
    CU(cudaEventRecord(e0, st));
    CU(cudaMemcpyAsync(d_dst, d_src, bytes, cudaMemcpyDeviceToDevice, st));
    CU(cudaEventRecord(e1, st));
    CU(cudaEventSynchronize(e1));
    CU(cudaEventElapsedTime(&ms[i], e0, e1));
  }
  qsort(ms, ITERS, sizeof ms[0], cmp_float);
  double gbs = 2.0 * (double)bytes / (ms[ITERS / 2] * 1e-3) / 1e9;
  printf("cudaMemcpy D2D       %6zu MiB: %9.1f us  %7.1f GB/s (2 x bytes / time)\n",
         bytes >> 20, ms[ITERS / 2] * 1e3, gbs);
  CU(cudaEventDestroy(e0));
  CU(cudaEventDestroy(e1));
  return gbs;
}

static void bench_one(rm_dtype_t dt, size_t bytes, void *d_dst, void *d_src, cudaStream_t st,
                      double copy)
{
  enum { ITERS = 20 };
  float ms[ITERS];
  size_t n = bytes / rm_dtype_size(dt);
  cudaEvent_t e0, e1;
  CU(cudaEventCreate(&e0));
  CU(cudaEventCreate(&e1));
  rm__reduce_cuda(d_dst, d_src, n, dt, RM_SUM, st); /* warm up */
  for (int i = 0; i < ITERS; i++) {
    CU(cudaEventRecord(e0, st));
    if (rm__reduce_cuda(d_dst, d_src, n, dt, RM_SUM, st) != RM_OK) {
      fprintf(stderr, "FAIL launch\n");
      exit(1);
    }
    CU(cudaEventRecord(e1, st));
    CU(cudaEventSynchronize(e1));
    CU(cudaEventElapsedTime(&ms[i], e0, e1));
  }
  qsort(ms, ITERS, sizeof ms[0], cmp_float);
  double gbs = 3.0 * (double)bytes / (ms[ITERS / 2] * 1e-3) / 1e9;
  printf("reduce_cuda %-4s sum %6zu MiB: %9.1f us  %7.1f GB/s (3 x bytes / time), "
         "%.0f%% of the D2D copy's\n", rm_dtype_name(dt), bytes >> 20, ms[ITERS / 2] * 1e3,
         gbs, 100.0 * gbs / copy);
  CU(cudaEventDestroy(e0));
  CU(cudaEventDestroy(e1));
}

static int run_bench(size_t mib)
{
  size_t bytes = mib << 20;
  void *d_dst, *d_src;
  cudaStream_t st;
  CU(cudaMalloc(&d_dst, bytes));
  CU(cudaMalloc(&d_src, bytes));
  CU(cudaMemset(d_dst, 0, bytes));
  CU(cudaMemset(d_src, 0, bytes));
  CU(cudaStreamCreate(&st));
  double copy = copy_gbs(bytes, d_dst, d_src, st);
  bench_one(RM_F32, bytes, d_dst, d_src, st, copy);
  bench_one(RM_BF16, bytes, d_dst, d_src, st, copy);
  bench_one(RM_U8, bytes, d_dst, d_src, st, copy);
  CU(cudaStreamDestroy(st));
  CU(cudaFree(d_dst));
  CU(cudaFree(d_src));
  return 0;
}

int main(int argc, char **argv)
{
  char list[512], why[256];
  if (rm__cuda_devices(list, sizeof list, why, sizeof why) == 0) {
    printf("SKIPPED: no CUDA device (%s)\n", why);
    return SKIP_CODE;
  }
  printf("cuda devices: %s\n", list);
  CU(cudaSetDevice(0));
  if (argc > 1 && strcmp(argv[1], "bench") == 0)
    return run_bench(argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 256);
  return run_matrix();
}
#endif
