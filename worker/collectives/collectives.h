/*
 * collectives.h - algorithm entry points (one file per algorithm).
 *
 * Contract for every rm__allreduce_<algo>: called after rm__coll_begin on a
 * healthy communicator with world >= 2; `buf` already holds this rank's input
 * (the public wrapper copies send to recv for out-of-place calls), and holds
 * the fully reduced result on return with RM_OK (RM_AVG: the wrapper divides
 * afterwards). Uses only transport.h requests and reductions and copies
 * through device/dev.h (rm__mreduce, rm__mcopy, rm__mtmp), which run on
 * the CPU for host buffers and on the GPU for device buffers.
 */
#ifndef RM_WORKER_COLLECTIVES_H
#define RM_WORKER_COLLECTIVES_H

#include <stddef.h>

#include "comm/comm_int.h"
#include "device/dev.h"
#include "reduce/reduce.h"

rm_status_t rm__allreduce_ring(rm_comm_t *c, void *buf, size_t count,
                               rm_dtype_t dt, const rm__reducer_t *red);
rm_status_t rm__allreduce_hd(rm_comm_t *c, void *buf, size_t count,
                             rm_dtype_t dt, const rm__reducer_t *red);
/* hier.c: shared memory inside hosts, the network across */
rm_status_t rm__allreduce_hier(rm_comm_t *c, void *buf, size_t count,
                               rm_dtype_t dt, const rm__reducer_t *red);
/* 1 when the hierarchical layout applies (H >= 2 hosts of L >= 2 ranks
 * each); *hosts, *local = H, L. Computed once per communicator. */
int rm__hier_shape(rm_comm_t *c, int *hosts, int *local);
rm_status_t rm__allreduce_butterfly(rm_comm_t *c, void *buf, size_t count,
                                    rm_dtype_t dt, const rm__reducer_t *red);
rm_status_t rm__allreduce_tree(rm_comm_t *c, void *buf, size_t count,
                               rm_dtype_t dt, const rm__reducer_t *red);

/* rm_alltoall of host memory in bytes (blk per rank) that leaves the
 * caller's own block of recv untouched: for a caller that reads its own
 * block where it lies in send (rm_aggregate), one copy of 1/N of the
 * vector less. */
rm_status_t rm__alltoall_peers(rm_comm_t *c, const void *send, void *recv, size_t blk);
/* Cost model (select.c): predicted microseconds of algo for bytes. */
double rm__allreduce_predict(const rm_comm_t *c, rm_algo_t algo, size_t bytes);
/* Calibrate c->cost on the live links (called once by rm_comm_init). */
rm_status_t rm__cost_calibrate(rm_comm_t *c);

#endif
