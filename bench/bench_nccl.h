/* bench_nccl.h - NCCL called directly on a device buffer (bench_nccl.c):
 * the reference cells "nccl-direct" of rm_bench -m device. 0 or -1. */
#ifndef RM_BENCH_NCCL_H
#define RM_BENCH_NCCL_H

#include <stddef.h>

#include "ringmaster/ringmaster.h"

int rm_bench_nccl_direct(rm_comm_t *c, void *dbuf, size_t count, rm_dtype_t dt);

#endif
