/*
 * reduce_cuda.h - CUDA reduction kernels (reduce_cuda.cu), the device twin of
 * reduce.h: same (dtype, op) matrix, same semantics, same bits.
 *
 *   rm__reduce_cuda(dst, src, count, RM_F32, RM_SUM, stream);
 *                         dst[i] = dst[i] op src[i], on DEVICE pointers
 *   rm__scale_avg_cuda(buf, count, RM_F32, world, stream);
 *                         buf[i] /= world for RM_AVG's final step
 *
 * Both only enqueue work on `stream` (a cudaStream_t passed as void * so C
 * callers need no CUDA header; NULL = the legacy default stream) and return
 * as soon as the launch is queued; synchronise the stream before reading the
 * result. RM_AVG reduces as RM_SUM (the caller scales once at the end), as
 * on the CPU. f16/bf16 widen to f32, combine, round back to nearest-even once
 * with the exact algorithm of half.h, so a GPU result equals the CPU kernel's
 * bit for bit (NaN payloads aside: both give a NaN).
 *
 * Only compiled when RM_HAVE_CUDA (rm_config.h); callers must check it. The
 * collectives reach them through the runtime table (device/gpu_cuda.c) for
 * every reduction of a collective on device buffers.
 *
 * Returns RM_OK; RM_ERR_INVALID_ARG for an invalid dtype/op or NULL pointer
 * with count > 0; RM_ERR_UNSUPPORTED when no CUDA device/driver is usable;
 * RM_ERR_SYSTEM for another launch failure (logged with the CUDA error name).
 * count == 0 launches nothing and returns RM_OK.
 */
#ifndef RM_WORKER_REDUCE_CUDA_H
#define RM_WORKER_REDUCE_CUDA_H

#include <stddef.h>

#include "ringmaster/ringmaster.h"

#ifdef __cplusplus
extern "C" {
#endif

rm_status_t rm__reduce_cuda(void *dst, const void *src, size_t count,
                            rm_dtype_t dt, rm_op_t op, void *stream);
rm_status_t rm__scale_avg_cuda(void *buf, size_t count, rm_dtype_t dt,
                               int world, void *stream);

#ifdef __cplusplus
}
#endif

#endif
