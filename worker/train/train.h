/*
 * train.h - the workloads of the rm_train library, for ringmaster-worker.
 *
 *   rm__workload_train       data-parallel SGD of an MLP on the digits set
 *   rm__workload_synthetic   configurable gradient size and compute time
 *
 * Options of each are documented at the top of train_workload.c and
 * synthetic_workload.c.
 */
#ifndef RM_TRAIN_H
#define RM_TRAIN_H

#include "agent/workload.h"

extern const rm_workload_ops_t rm__workload_train;
extern const rm_workload_ops_t rm__workload_synthetic;

#endif
