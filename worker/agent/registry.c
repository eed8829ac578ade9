/*
 * registry.c - the workloads this ringmaster-worker knows, by name.
 * `train` and `synthetic` come from worker/train (target rm_train) and are
 * listed only when that library is built in (RM_HAVE_TRAIN).
 */
#include <string.h>

#include "workload.h"

extern const rm_workload_ops_t rm__workload_allreduce;
#if defined(RM_HAVE_TRAIN) && RM_HAVE_TRAIN
extern const rm_workload_ops_t rm__workload_train;
extern const rm_workload_ops_t rm__workload_synthetic;
#endif

static const rm_workload_ops_t *const workloads[] = {
    &rm__workload_allreduce,
#if defined(RM_HAVE_TRAIN) && RM_HAVE_TRAIN
    &rm__workload_train,
    &rm__workload_synthetic,
#endif
    NULL,
};

const rm_workload_ops_t *rm__workload_find(const char *name)
{
  for (int i = 0; name && workloads[i]; i++)
    if (!strcmp(workloads[i]->name, name)) return workloads[i];
  return NULL;
}
