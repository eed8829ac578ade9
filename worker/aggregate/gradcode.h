/*
 * gradcode.h - gradient coding, fractional repetition scheme (module tier).
 *
 * Straggler policy `coded`: N workers, s tolerated stragglers,
 * (s+1) | N. The data of a step is cut into N partitions; workers form
 * N/(s+1) groups of s+1 consecutive ranks; every worker of group g computes
 * the gradients of the same s+1 partitions (group g's block) and sends their
 * SUM. Any N - s arrived workers include at least one worker of every group,
 * so the full-batch gradient sum_p grad(p) is the plain 0/1 sum of one message
 * per group. The math, the invariants and the reference are at the top of
 * gradcode.c.
 *
 * Typical use on every rank of one step (all ranks must agree on `arrived`,
 * which the coordinator fixes for the step, like the backup participant set):
 *
 *   rm__gradcode_t gc;  rm__gradcode_init(&gc, world, s);
 *   rm__gradcode_assignment(&gc, rank, parts);      // s+1 partition indices
 *   ... compute sum of grads of parts into msg ...
 *   rm__gradcode_decode_plan(&gc, arrived, coeff, NULL);  // 0/1 per rank
 *   rm__masked_allreduce(comm, msg, out, count, dt, RM_SUM, coeff, 0, NULL)
 *
 * or, when the messages are in one process (tests, a parameter server),
 * rm__gradcode_decode(&gc, coeff, msgs, out, count, dt).
 *
 * All functions are pure (no I/O, no allocation) and thread-safe.
 */
#ifndef RM_WORKER_AGGREGATE_GRADCODE_H
#define RM_WORKER_AGGREGATE_GRADCODE_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"

typedef struct rm__gradcode {
  int n;      /* workers = partitions */
  int s;      /* tolerated stragglers */
  int group;  /* s + 1: workers per group = partitions per worker */
  int groups; /* n / (s + 1) */
} rm__gradcode_t;

/* n >= 1, 0 <= s < n, (s+1) divides n; RM_ERR_INVALID_ARG otherwise. */
rm_status_t rm__gradcode_init(rm__gradcode_t *gc, int n, int s);

/* Group of `worker` (0 <= worker < n): worker / (s+1). -1 if out of range. */
int rm__gradcode_group_of(const rm__gradcode_t *gc, int worker);

/* OUT parts[0..s]: the partitions `worker` computes, ascending
 * (g*(s+1) .. g*(s+1)+s for its group g). */
rm_status_t rm__gradcode_assignment(const rm__gradcode_t *gc, int worker,
                                    int *parts);

/* Sample range [*begin, *end) of partition p when `samples` samples are cut
 * into n near-equal contiguous partitions (the first samples % n get one
 * more). Every rank computes the same cut. */
rm_status_t rm__gradcode_partition_range(const rm__gradcode_t *gc, int p,
                                         uint64_t samples, uint64_t *begin,
                                         uint64_t *end);

/* Decode plan. arrived[w] != 0 when worker w's message is available.
 * OUT coeff[0..n-1] (usable as a member mask): 1 for exactly one arrived worker per group (the lowest
 * rank that arrived, so every rank that sees the same set picks the same
 * workers), 0 for all others. Returns RM_ERR_UNAVAILABLE when some group has
 * no arrived worker (the pattern is not decodable: s+1 losses in one group);
 * then *bad_group (if not NULL) names the first such group and coeff is left
 * untouched. */
rm_status_t rm__gradcode_decode_plan(const rm__gradcode_t *gc,
                                     const uint8_t *arrived, uint8_t *coeff,
                                     int *bad_group);

/* out = sum_w coeff[w] * msgs[w] for coeff in {0,1}; msgs[w] may be NULL
 * where coeff[w] == 0. count elements of dtype dt (any dtype; sums use the
 * library's reduction kernels). out must not alias a message. */
rm_status_t rm__gradcode_decode(const rm__gradcode_t *gc, const uint8_t *coeff,
                                const void *const *msgs, void *out,
                                size_t count, rm_dtype_t dt);

#endif
