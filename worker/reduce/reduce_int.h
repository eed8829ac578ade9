/* reduce_int.h - private to worker/reduce/: the half-precision kernels
 * (reduce_half.c) that reduce.c puts in its dispatch table. */
#ifndef RM_WORKER_REDUCE_INT_H
#define RM_WORKER_REDUCE_INT_H

#include <stddef.h>

void rm__sum_f16(void *dst, const void *src, size_t n);
void rm__prod_f16(void *dst, const void *src, size_t n);
void rm__min_f16(void *dst, const void *src, size_t n);
void rm__max_f16(void *dst, const void *src, size_t n);
void rm__sum_bf16(void *dst, const void *src, size_t n);
void rm__prod_bf16(void *dst, const void *src, size_t n);
void rm__min_bf16(void *dst, const void *src, size_t n);
void rm__max_bf16(void *dst, const void *src, size_t n);
void rm__div_f16(void *buf, size_t n, int world);
void rm__div_bf16(void *buf, size_t n, int world);

#endif
