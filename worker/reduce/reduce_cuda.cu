/*
 * reduce_cuda.cu - CUDA reduction kernels: dst[i] = dst[i] OP src[i] on
 * device memory, one instantiation per (dtype, op); see reduce_cuda.h.
 *
 * Design
 *  1. Semantics are those of the CPU kernels (reduce.c, reduce_half.c), and
 *     the expressions are the same, so results agree bit for bit:
 *       - signed sum/prod wrap modulo 2^bits, computed on the unsigned view;
 *         u8 wraps modulo 256;
 *       - min is `b < a ? b : a`, max `b > a ? b : a` (NaN and -0/+0 pick
 *         the same operand as on the CPU);
 *       - f16/bf16 widen exactly to f32, combine in f32, and round back to
 *         nearest-even with the branch-free algorithm of half.h, ported with
 *         __fadd_rn/__fmul_rn so nvcc cannot fuse or reassociate a step;
 *       - floating point uses the _rn intrinsics (no FMA contraction, no
 *         flush-to-zero: this file is built without --use_fast_math);
 *       - avg: reduced as sum; rm__scale_avg_cuda divides once (IEEE
 *         division for floats, truncating division for integers).
 *  2. Memory access: the kernels are bandwidth bound (2 loads + 1 store per
 *     element, no reuse). When dst and src are both 16-byte aligned, each
 *     thread moves 16-byte packs (uint4: 4 f32, 8 f16, 16 u8, ...) in a
 *     grid-stride loop, and the < 16-byte tail goes element by element in
 *     the same kernel. Unaligned pointers take the element loop for all of
 *     it (correct, slower; cudaMalloc memory is 256-byte aligned).
 *  3. Launch: 256 threads per block, at most 4096 blocks (grid-stride loop
 *     beyond that), on the caller's stream; nothing is synchronised here.
 *     dst == src is allowed (no __restrict__).
 */
#include <stdint.h>

#include <cuda_runtime.h>

#include "reduce/reduce_cuda.h"

extern "C" {
#include "rm_log.h"
}

namespace {

const unsigned kThreads = 256;
const unsigned kMaxBlocks = 4096;

/* ---- half precision: the algorithms of half.h, on the device ---- */
__device__ __forceinline__ float h2f(uint16_t h)
{
  uint32_t w = (uint32_t)h << 16;
  uint32_t sign = w & 0x80000000u;
  uint32_t two_w = w + w;
  float norm = __fmul_rn(__uint_as_float((two_w >> 4) + (0xE0u << 23)), 0x1.0p-112f);
  float denorm = __fsub_rn(__uint_as_float((two_w >> 17) | (126u << 23)), 0.5f);
  uint32_t mag = two_w < (1u << 27) ? __float_as_uint(denorm) : __float_as_uint(norm);
  return __uint_as_float(sign | mag);
}

__device__ __forceinline__ uint16_t f2h(float f)
{
  uint32_t w = __float_as_uint(f);
  float a = __uint_as_float(w & 0x7FFFFFFFu);
  float base = __fmul_rn(__fmul_rn(a, 0x1.0p+112f), 0x1.0p-110f);
  uint32_t shl1_w = w + w;
  uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = __fadd_rn(__uint_as_float((bias >> 1) + 0x07800000u), base);
  uint32_t bits = __float_as_uint(base);
  uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

__device__ __forceinline__ float b2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ uint16_t f2b(float f)
{
  uint32_t w = __float_as_uint(f);
  uint32_t rounded = (w + 0x7FFFu + ((w >> 16) & 1u)) >> 16;
  uint32_t quiet = (w >> 16) | 0x40u;
  return (uint16_t)((w & 0x7FFFFFFFu) > 0x7F800000u ? quiet : rounded);
}

/* ---- element types: storage S, compute C, load/store between them ---- */
template <class T> struct Plain {
  typedef T S;
  typedef T C;
  __device__ static C ld(S x) { return x; }
  __device__ static S st(C x) { return x; }
};
struct F16 {
  typedef uint16_t S;
  typedef float C;
  __device__ static C ld(S x) { return h2f(x); }
  __device__ static S st(C x) { return f2h(x); }
};
struct BF16 {
  typedef uint16_t S;
  typedef float C;
  __device__ static C ld(S x) { return b2f(x); }
  __device__ static S st(C x) { return f2b(x); }
};

/* ---- arithmetic: IEEE-exact floats, wrapping integers ---- */
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ int32_t add(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
__device__ __forceinline__ int64_t add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
__device__ __forceinline__ uint8_t add(uint8_t a, uint8_t b) { return (uint8_t)(a + b); }
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ int32_t mul(int32_t a, int32_t b) { return (int32_t)((uint32_t)a * (uint32_t)b); }
__device__ __forceinline__ int64_t mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
__device__ __forceinline__ uint8_t mul(uint8_t a, uint8_t b) { return (uint8_t)(a * b); }
__device__ __forceinline__ float divw(float a, int w) { return __fdiv_rn(a, (float)w); }
__device__ __forceinline__ double divw(double a, int w) { return __ddiv_rn(a, (double)w); }
__device__ __forceinline__ int32_t divw(int32_t a, int w) { return a / (int32_t)w; }
__device__ __forceinline__ int64_t divw(int64_t a, int w) { return a / (int64_t)w; }
__device__ __forceinline__ uint8_t divw(uint8_t a, int w) { return (uint8_t)(a / (unsigned)w); }

struct OpSum { template <class C> __device__ static C f(C a, C b) { return add(a, b); } };
struct OpProd { template <class C> __device__ static C f(C a, C b) { return mul(a, b); } };
struct OpMin { template <class C> __device__ static C f(C a, C b) { return b < a ? b : a; } };
struct OpMax { template <class C> __device__ static C f(C a, C b) { return b > a ? b : a; } };

template <class Ty> union Pack {
  uint4 v;
  typename Ty::S e[sizeof(uint4) / sizeof(typename Ty::S)];
};

/* nvec 16-byte packs first (0 when unaligned), then elements [nvec*V, n). */
template <class Ty, class Op>
__global__ void reduce_kernel(typename Ty::S *d, const typename Ty::S *s, size_t n, size_t nvec)
{
  const size_t V = sizeof(uint4) / sizeof(typename Ty::S);
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (size_t i = tid; i < nvec; i += stride) {
    Pack<Ty> a, b;
    a.v = reinterpret_cast<uint4 *>(d)[i];
    b.v = reinterpret_cast<const uint4 *>(s)[i];
#pragma unroll
    for (size_t k = 0; k < V; k++)
      a.e[k] = Ty::st(Op::f(Ty::ld(a.e[k]), Ty::ld(b.e[k])));
    reinterpret_cast<uint4 *>(d)[i] = a.v;
  }
  for (size_t i = nvec * V + tid; i < n; i += stride)
    d[i] = Ty::st(Op::f(Ty::ld(d[i]), Ty::ld(s[i])));
}

template <class Ty>
__global__ void scale_kernel(typename Ty::S *p, size_t n, size_t nvec, int world)
{
  const size_t V = sizeof(uint4) / sizeof(typename Ty::S);
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (size_t i = tid; i < nvec; i += stride) {
    Pack<Ty> a;
    a.v = reinterpret_cast<uint4 *>(p)[i];
#pragma unroll
    for (size_t k = 0; k < V; k++)
      a.e[k] = Ty::st(divw(Ty::ld(a.e[k]), world));
    reinterpret_cast<uint4 *>(p)[i] = a.v;
  }
  for (size_t i = nvec * V + tid; i < n; i += stride)
    p[i] = Ty::st(divw(Ty::ld(p[i]), world));
}

unsigned grid_for(size_t work)
{
  size_t b = (work + kThreads - 1) / kThreads;
  if (b == 0)
    b = 1;
  return b > kMaxBlocks ? kMaxBlocks : (unsigned)b;
}

size_t packs(const void *a, const void *b, size_t n, size_t elem)
{
  if ((((uintptr_t)a | (uintptr_t)b) & (sizeof(uint4) - 1)) != 0)
    return 0;
  return n / (sizeof(uint4) / elem);
}

typedef void (*launch_fn)(void *d, const void *s, size_t n, cudaStream_t st);

template <class Ty, class Op>
void launch_reduce(void *d, const void *s, size_t n, cudaStream_t st)
{
  typedef typename Ty::S S;
  size_t nvec = packs(d, s, n, sizeof(S));
  reduce_kernel<Ty, Op><<<grid_for(nvec ? nvec : n), kThreads, 0, st>>>(
      static_cast<S *>(d), static_cast<const S *>(s), n, nvec);
}

template <class Ty>
void launch_scale(void *p, size_t n, int world, cudaStream_t st)
{
  typedef typename Ty::S S;
  size_t nvec = packs(p, p, n, sizeof(S));
  scale_kernel<Ty><<<grid_for(nvec ? nvec : n), kThreads, 0, st>>>(static_cast<S *>(p), n,
                                                                     nvec, world);
}

#define RM__CUDA_ROW(Ty)                                                      \
  {launch_reduce<Ty, OpSum>, launch_reduce<Ty, OpProd>,                       \
   launch_reduce<Ty, OpMin>, launch_reduce<Ty, OpMax>,                        \
   launch_reduce<Ty, OpSum>}

static_assert(RM_F32 == 0 && RM_F64 == 1 && RM_F16 == 2 && RM_BF16 == 3 && RM_I32 == 4 &&
                  RM_I64 == 5 && RM_U8 == 6 && RM_DTYPE_COUNT == 7,
              "tables below follow rm_dtype_t's order");
static_assert(RM_SUM == 0 && RM_PROD == 1 && RM_MIN == 2 && RM_MAX == 3 && RM_AVG == 4,
              "rows below follow rm_op_t's order");

/* indexed [dtype][op] like reduce.c's table; RM_AVG reduces as sum */
const launch_fn reduce_table[RM_DTYPE_COUNT][RM_OP_COUNT] = {
    RM__CUDA_ROW(Plain<float>),   /* RM_F32 */
    RM__CUDA_ROW(Plain<double>),  /* RM_F64 */
    RM__CUDA_ROW(F16),            /* RM_F16 */
    RM__CUDA_ROW(BF16),           /* RM_BF16 */
    RM__CUDA_ROW(Plain<int32_t>), /* RM_I32 */
    RM__CUDA_ROW(Plain<int64_t>), /* RM_I64 */
    RM__CUDA_ROW(Plain<uint8_t>), /* RM_U8 */
};

typedef void (*scale_fn)(void *p, size_t n, int world, cudaStream_t st);
const scale_fn scale_table[RM_DTYPE_COUNT] = {
    launch_scale<Plain<float> >,   launch_scale<Plain<double> >, launch_scale<F16>,
    launch_scale<BF16>,            launch_scale<Plain<int32_t> >,
    launch_scale<Plain<int64_t> >, launch_scale<Plain<uint8_t> >,
};

rm_status_t launch_status(const char *what)
{
  cudaError_t err = cudaGetLastError();
  switch (err) {
  case cudaSuccess:
    return RM_OK;
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
  case cudaErrorNoKernelImageForDevice:
  case cudaErrorInvalidDeviceFunction:
    RM_WARN("%s: no usable CUDA device: %s (%s)", what, cudaGetErrorName(err),
            cudaGetErrorString(err));
    return RM_ERR_UNSUPPORTED;
  default:
    RM_WARN("%s: kernel launch failed: %s (%s)", what, cudaGetErrorName(err),
            cudaGetErrorString(err));
    return RM_ERR_SYSTEM;
  }
}

} /* namespace */

extern "C" rm_status_t rm__reduce_cuda(void *dst, const void *src, size_t count,
                                       rm_dtype_t dt, rm_op_t op, void *stream)
{
  if ((unsigned)dt >= RM_DTYPE_COUNT || (unsigned)op >= RM_OP_COUNT)
    return RM_ERR_INVALID_ARG;
  if (count == 0)
    return RM_OK;
  if (!dst || !src)
    return RM_ERR_INVALID_ARG;
  reduce_table[dt][op](dst, src, count, static_cast<cudaStream_t>(stream));
  return launch_status("rm__reduce_cuda");
}

extern "C" rm_status_t rm__scale_avg_cuda(void *buf, size_t count, rm_dtype_t dt,
                                          int world, void *stream)
{
  if ((unsigned)dt >= RM_DTYPE_COUNT || world < 1)
    return RM_ERR_INVALID_ARG;
  if (count == 0 || world == 1)
    return RM_OK;
  if (!buf)
    return RM_ERR_INVALID_ARG;
  scale_table[dt](buf, count, world, static_cast<cudaStream_t>(stream));
  return launch_status("rm__scale_avg_cuda");
}
