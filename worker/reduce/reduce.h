/*
 * reduce.h - type-erased reduction kernels, one per (dtype, op).
 *
 *   rm__reduce_fn_t f = rm__reduce_fn(RM_F32, RM_SUM);
 *   f(dst, src, count);          dst[i] = dst[i] op src[i]
 *
 * RM_AVG reduces as RM_SUM; the collective divides once at the end with
 * rm__scale_avg() (world size), so averaging is exact for integers up to
 * truncation and rounded once for floats.
 * f16/bf16 are widened to f32, combined, and rounded back to nearest-even
 * once per call; no overflow to inf beyond what the true result implies.
 * Kernels are plain loops over restrict pointers written for the compiler's
 * auto-vectoriser (-O3 on this file; see the build's -fopt-info-vec report).
 */
#ifndef RM_WORKER_REDUCE_H
#define RM_WORKER_REDUCE_H

#include <stddef.h>

#include "ringmaster/ringmaster.h"

typedef void (*rm__reduce_fn_t)(void *dst, const void *src, size_t count);

/* NULL for an invalid (dtype, op). */
rm__reduce_fn_t rm__reduce_fn(rm_dtype_t dt, rm_op_t op);

/* What an algorithm reduces with: the CPU kernel plus the (dtype, op) it
 * stands for, so a collective on device memory runs the same reduction on
 * the GPU (device/dev.h, rm__mreduce). NULL where a phase only moves data. */
typedef struct rm__reducer {
  rm__reduce_fn_t fn;
  rm_dtype_t dt;
  rm_op_t op;
} rm__reducer_t;

static inline rm__reducer_t rm__reducer(rm_dtype_t dt, rm_op_t op)
{
  rm__reducer_t r = {rm__reduce_fn(dt, op), dt, op};
  return r;
}
/* dst[i] /= world for RM_AVG (no-op for other ops). */
void rm__scale_avg(void *buf, size_t count, rm_dtype_t dt, int world);

/* Half-precision helpers (round-to-nearest-even). */
float rm__f16_to_f32(unsigned short h);
unsigned short rm__f32_to_f16(float f);
float rm__bf16_to_f32(unsigned short h);
unsigned short rm__f32_to_bf16(float f);

#endif
