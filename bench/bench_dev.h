/* bench_dev.h - device memory for the benchmarks (rm_bench -m device):
 * the library's own test hooks when it has them (a test-hook build: the
 * stand-in GPU, or CUDA on a GPU machine, whichever the library uses), else
 * the CUDA runtime of a build with CUDA, else none. Copies are synchronous.
 * Call rm_bench_dev_init in the rank's process (after fork: CUDA does not
 * survive one). */
#ifndef RM_BENCH_DEV_H
#define RM_BENCH_DEV_H

#include <stddef.h>

/* 0 when device memory is available; else -1 and why. */
int rm_bench_dev_init(char *why, size_t n);
void *rm_bench_dev_alloc(size_t n);
void rm_bench_dev_free(void *p);
int rm_bench_dev_copy(void *dst, const void *src, size_t n);

#endif
