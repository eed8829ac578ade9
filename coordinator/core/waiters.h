/*
 * waiters.h - the port through which the core answers the calls it keeps
 * parked (long-polls: Join waiting for the group, Barrier, StepGate,
 * Watch). The core decides when and with what state; the RPC adapter
 * implements the table below (rpc/waiters.c, rpc/rpc.c, rpc/server_out.c) and
 * formats the protobuf answers. Declared here, in the core, so the include
 * graph and the link both point one way (rpc -> core); the core never
 * includes rpc/ and never names an rpc/ function.
 *
 * Every function runs under the coordinator lock; an answer is queued and
 * sent after COMMIT by the post-commit queue (core/commit.c), so a client
 * never sees state that is not durable. Answering unlinks p.
 */
#ifndef RM_COORDINATOR_CORE_WAITERS_H
#define RM_COORDINATOR_CORE_WAITERS_H

#include <stdint.h>

#include "model.h"

/* The answer side of the coordinator, as a const table of function pointers
 * that the core holds (c->answer) and the RPC adapter fills
 * (rpc/waiters.c rm__rpc_answer_ops; the wiring, coord.c, hands it over at
 * open). The core calls it only through the rm__answer_* wrappers of
 * core_int.h, so no core object refers to a symbol of rpc/ (the layering
 * test, tests/coordinator/test_layers.py, reads the objects' symbols). */
typedef struct rm__answer_ops {
  /* A parked Join: the group formed (or the job ended). */
  void (*join)(rm_coord_t *c, rm__job_t *j, rm__park_t *p);
  /* A Barrier call: b was released or broken (b->missing says who). */
  void (*barrier)(rm_coord_t *c, const rm__job_t *j, const rm__barrier_t *b, rm__park_t *p);
  /* A StepGate call about `step`: members (world bytes) when decided, else
   * NULL ("not decided"); dropped: not a member, or an older step;
   * arrivals_decide: not decided, and a long poll is answered as soon as it
   * is (StepGateResponse; core/step_gate.c TIMED DEADLINES).
   * cache (required with members, else NULL): two slots where the packed
   * answers for this (step, dropped) are kept and found, one per wire form
   * (a StepGate call's, a Session message's), owned by the caller, shared by
   * every waiter answered with the same arguments. */
  void (*gate)(rm_coord_t *c, rm__park_t *p, uint64_t step, const uint8_t *members,
               int world, int dropped, int arrivals_decide, rm__blob_t **cache);
  /* Push step `step` of generation gen, decided, to session park p of a
   * member out of it (the answer its gate call would get: dropped), unasked;
   * cache as for gate. Best effort: nothing when its stream is over or too
   * far behind. */
  void (*push_gate)(rm_coord_t *c, rm__park_t *p, uint64_t gen, uint64_t step,
                    const uint8_t *members, int world, rm__blob_t **cache);
  /* Tell session park p, unasked, that generation gen is over: the job is
   * now in state st because of why (SessionResponse.moved_on; core/
   * recovery.c THE NOTICE). Best effort, as push_gate. */
  void (*push_moved_on)(rm_coord_t *c, rm__park_t *p, uint64_t gen, rm_job_state_t st,
                        const char *why);
  /* The call's generation or job is over: FAILED_PRECONDITION with why. */
  void (*stale)(rm_coord_t *c, rm__park_t *p, const char *why);
  /* The call's state was rolled back (core/commit.c): RESOURCE_EXHAUSTED
   * (full) or UNAVAILABLE with why; the client retries. */
  void (*storage)(rm_coord_t *c, rm__park_t *p, int full, const char *why);
  /* New events or state for j: answer its parked Joins, kick its watchers. */
  void (*watch_kick)(rm_coord_t *c, rm__job_t *j);
  /* The section was rolled back: every queued answer becomes the storage
   * failure (RESOURCE_EXHAUSTED when full, else UNAVAILABLE, with why); a
   * stream's queued messages end it with that status. */
  void (*out_fail)(rm_coord_t *c, int full, const char *why);
  /* Post-commit: send every queued answer. */
  void (*out_flush)(rm_coord_t *c);
} rm__answer_ops_t;

#endif
