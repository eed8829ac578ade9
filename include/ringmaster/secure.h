/*
 * secure.h - secure aggregation for session programs (public; included by
 * ringmaster.h). The protocol and its security argument are at the
 * top of worker/secagg/secagg.c, the user's view in docs/secure-aggregation.md.
 *
 * A job whose spec has "secure_aggregation" sums its gradients so that no
 * worker and not the coordinator sees an individual contribution: each
 * member clips its vector to L2 norm `clip`, quantizes it to fixed point
 * (stochastic rounding, `scale`), adds pairwise masks that cancel only over
 * the whole membership, and the masked vectors are summed by ringmaster's
 * own all-reduce over integers. Only the sum is revealed, and only once
 * every member holds it (the coordinator's commit round): a member lost
 * earlier makes the call return RM_ERR_RECONFIGURED (or the data plane's
 * RM_ERR_PEER_LOST / RM_ERR_TIMEOUT naming it); rm_session_reform and the
 * same call again redo it over the survivors with fresh keys and masks.
 * A membership below the spec's threshold is refused (RM_ERR_INVALID_ARG,
 * words in rm_session_last_error): no sum over fewer inputs is revealed.
 *
 * Cost per call: the bytes of a plain 32-bit all-reduce (64-bit with "bits":
 * 64), two coordinator round trips per generation (keys) and one per call
 * (commit), and ChaCha20 keystream of (neighbours + guards + 1) x the vector
 * on each member; see docs/secure-aggregation.md. */
#ifndef RINGMASTER_SECURE_H
#define RINGMASTER_SECURE_H

#include <stddef.h>

#include "ringmaster/status.h"
#include "ringmaster/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rm_session rm_session_t;

typedef struct rm_secure_info {
  size_t struct_size; /* sizeof(rm_secure_info_t), set by the caller */
  int members;        /* inputs in the sum */
  double norm;        /* this member's L2 norm before clipping */
  int clipped;        /* this member's vector was clipped (or not finite:
                       * it contributed zeros) */
  int neighbours;     /* members this one masked with */
  int guard;          /* this member added a self-mask */
  double scale;       /* the fixed-point scale used */
  size_t bytes_sent;  /* data-plane payload bytes of this call */
  double ms_keys;     /* key agreement (first call of a generation), else 0 */
  double ms_mask, ms_reduce, ms_open, ms_unmask;
} rm_secure_info_t;

/* Collective over this generation's members, every member with the same
 * count: recv = the sum (op RM_SUM) or the mean over members (RM_AVG) of
 * the members' clipped float vectors, to within members / scale per
 * coordinate (quantization; unbiased). send == recv is in place. The job's
 * spec must have secure_aggregation (RM_ERR_INVALID_ARG otherwise). info
 * may be NULL. Statuses as the session's other calls: RM_ERR_RECONFIGURED,
 * RM_ERR_PEER_LOST, RM_ERR_TIMEOUT (reform, then call again),
 * RM_ERR_JOB_ENDED, RM_ERR_PROTOCOL (a public key did not verify: words in
 * rm_session_last_error). RM_OK is final, even if the job re-forms right
 * after: every member holds that sum, so resume after the step, never redo
 * it (a redo over fewer members would reveal the difference: the lost
 * member's input). */
RM_EXTERN rm_status_t rm_session_secure_allreduce(rm_session_t *s,
                                                  const float *send,
                                                  float *recv, size_t count,
                                                  rm_op_t op,
                                                  rm_secure_info_t *info);
/* 1 when the job's spec asks for secure aggregation, else 0. */
RM_EXTERN int rm_session_secure(const rm_session_t *s);

#ifdef __cplusplus
}
#endif
#endif /* RINGMASTER_SECURE_H */
