/*
 * session_secure.h - the secure sum with its integers, for the built-in
 * workloads that check it (agent/wl_allreduce.c): rm_session_secure_allreduce
 * (ringmaster/secure.h) is this with my_q = sum_q = NULL, mean for RM_AVG.
 */
#ifndef RM_WORKER_SESSION_SECURE_H
#define RM_WORKER_SESSION_SECURE_H

#include "ringmaster/ringmaster.h"

/* recv = the secure SUM (ringmaster/secure.h), or with mean != 0 the mean
 * over the members (divided in the dequantization: no second pass over
 * recv). Optional, count lanes of secagg_bits / 8 bytes each: my_q = this
 * member's quantized input before masking, sum_q = the unmasked integer sum
 * (secagg/secagg.h). */
rm_status_t rm__session_secure_sum(rm_session_t *s, const float *send, float *recv,
                                   size_t count, int mean, void *my_q, void *sum_q,
                                   rm_secure_info_t *info);

#endif
