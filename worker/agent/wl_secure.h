/*
 * wl_secure.h - the allreduce workload's secure steps (wl_secure.c).
 */
#ifndef RM_AGENT_WL_SECURE_H
#define RM_AGENT_WL_SECURE_H

#include <stddef.h>
#include <stdint.h>

#include "workload.h"

typedef struct rm__ar_secure {
  float *x;                   /* this rank's input */
  void *my_q, *sum_q, *plain; /* verify=exact: quantized, unmasked, plain */
  size_t cap, lane;
  uint64_t steps, exact_steps;
  int members_min;
  double scale, max_err;
  double ms_keys, ms_mask, ms_reduce, ms_open, ms_unmask;
} rm__ar_secure_t;

/* One secure step into out[count] (verify: 0 none, 1 float bound, 2 also
 * exact integers). RM_ERR_INTERNAL / RM_ERR_INVALID_ARG with env->error
 * set: a failed check or a failure no re-forming clears; other statuses
 * are the session's (re-form). */
rm_status_t rm__ar_secure_step(rm__ar_secure_t *z, rm_workload_env_t *env,
                               size_t count, uint64_t step, int verify,
                               float *out);
/* `"secure":{...}` for the result line; returns snprintf's count. */
int rm__ar_secure_summary(const rm__ar_secure_t *z, char *buf, size_t len);
void rm__ar_secure_free(rm__ar_secure_t *z);

#endif
