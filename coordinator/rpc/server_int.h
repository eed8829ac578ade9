/*
 * server_int.h - what the gRPC server's files share (server.c: lifecycle
 * and queues; server_group.c: a group of completions; server_out.c: the
 * outbox) and what they share with relay.c (RELAYS): a call's record, the
 * completion tags, a group's entries and the outbox. Module-private to
 * rpc/.
 */
#ifndef RM_COORDINATOR_RPC_SERVER_INT_H
#define RM_COORDINATOR_RPC_SERVER_INT_H

#include <grpc/grpc.h>
#include <stdint.h>

#include "rpc/rpc_int.h"

#define SESSION_QUEUE 8 /* SESSIONS: answers queued behind one in flight */

/* What every call has, a gRPC call's and a relay lane's (RELAYS: a lane
 * is this record alone, no gRPC state: a lane's bytes are a
 * worker's). */
struct rm__call {
  rm_coord_t *c;
  int refs; /* atomic */
  int cancelled; /* T_CLOSE: the client went away (a lane: never); gRPC writes it */
  int8_t method;
  uint8_t cq; /* index of the queue the call lives on (SHARDS) */
  uint8_t answered; /* final status queued; under c->mu */
  uint8_t streaming; /* a Session call (SESSIONS): its messages are heartbeats */
  /* RELAYS (relay.c): for a lane (a Session or a Join carried by a
   * relay), its relay and number; for a Relay call, its lanes and outbox */
  uint32_t lane;
  rm__park_t park;
  /* SESSIONS: its barrier arrival's or step-gate call's wait, one at a
   * time (its kind says which); under c->mu. Made at the Session's first
   * such wait and kept until the call is freed (rm__call_wpark_make): a
   * Join lane never has one, so the lane every worker holds while its job
   * forms is 144 bytes, not 224. */
  rm__park_t *wpark;
  struct rm__relay *mux;
  rm__call_t *up;
  int rl_idx;        /* RELAYS: its last entry's index in ... */
  uint32_t rl_batch; /* ... its relay's pending entries, by generation */
} __attribute__((aligned(8)));
_Static_assert(sizeof(struct rm__call) <= 144, "rm__call_t grew"); /* a relay lane */

/* A call with a grpc_call: the record above, then gRPC's state and the
 * sending side's. rm__gcall(k) for a call whose k->up is NULL. */
typedef struct rm__gcall {
  rm__call_t k; /* first */
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array md;
  grpc_byte_buffer *recv;
  gpr_timespec deadline; /* registered requests fill it; unused */
  int registered; /* REGISTERED METHODS: the request brought the payload */
  int gzip_ok; /* the client decodes gzip (Join/StepGateRequest.accept_gzip) */
  int gzip; /* its answer is a gzip member (GZIP ANSWERS); under c->mu */
  int md_sent;  /* initial metadata started; under c->mu */
  int close_started; /* RECV_CLOSE_ON_SERVER started; under c->mu */
  int close_deferred; /* parked barrier: the park holds a ref; under c->mu */
  int sending;      /* SESSIONS: a batch of it in flight; under c->mu */
  int final_started; /* SESSIONS: its final batch started; under c->mu */
  rm__out_t *later; /* SESSIONS: queued batches, in order (SESSION_QUEUE,
                     * allocated at the first: most calls never queue) */
  int nlater;
  int has_status_slice;
  grpc_byte_buffer *send_bb;
  grpc_slice status_slice;
} rm__gcall_t;

static inline rm__gcall_t *rm__gcall(rm__call_t *k) { return (rm__gcall_t *)k; }

/* A completion's tag: the call's address with the op kind in the low 2
 * bits (server.c "Call lifecycle"). */
enum { T_REQUEST = 0, T_RECV = 1, T_CLOSE = 2, T_SEND = 3 };
static inline void *rm__tag(rm__call_t *k, int kind) { return (char *)k + kind; }

/* ---- server_group.c (GROUP COMMIT) ----
 * Each completion is handled in three steps: before the lock (repost a
 * request, parse a payload), under the group's one rm__lock ... rm__commit
 * (the handler), and after COMMIT (free the request, drop references: a
 * call's memory outlives every completion of the group that names it).
 * server.c's thread fills k, kind (T_*), ok and msg = NULL per completion. */
typedef struct {
  rm__call_t *k;
  int kind;                 /* T_*, or EV_* below */
  int ok;
  ProtobufCMessage *msg;    /* EV_DISPATCH: the parsed request, or NULL */
  int unrefs;               /* references to drop after COMMIT */
} ev_t;

enum { EV_SKIP = 8, EV_DISPATCH, EV_UNKNOWN, EV_SESSION, EV_SESSION_END };

/* Handle n gathered completions as one section. Returns the group's
 * heartbeats (NAPS); *others |= it had other new calls. */
int rm__group_run(rm_coord_t *c, ev_t *ev, int n, int *others);

/* ---- server_out.c (the outbox) ---- */
/* The gzip metadata and SessionResponse's field numbers, once, after
 * grpc_init (rm__server_start). */
void rm__out_init(void);
/* SESSIONS: start k's next queued batch when none is in flight. */
void rm__session_next(rm__call_t *k);
/* Queue an answer or stream message of k (code -1: a message; bb taken).
 * Under c->mu; started by rm__rpc_out_flush after COMMIT. */
void rm__out_push(rm_coord_t *c, rm__call_t *k, int code, const char *details,
                  grpc_byte_buffer *bb);
/* Start one queued batch of k (o's reference becomes the batch's). */
void rm__start_out(rm__call_t *k, rm__out_t *o);
/* Drop a reference of k; the last frees it. */
void rm__call_unref(rm__call_t *k);

/* ---- relay.c (RELAYS) ---- */
/* A message of Relay call k (NULL: malformed), under the lock. */
void rm__relay_msg(rm_coord_t *c, rm__call_t *k, const Ringmaster__V1__RelayRequest *q);
/* Relay call k ended from the client's side (half-close or broken). */
void rm__relay_end(rm_coord_t *c, rm__call_t *k);
/* Does this parsed RelayRequest (NULL: malformed) write rows? (A broken
 * lane, a barrier arrival or a gate call may; a relay's end writes none.) */
int rm__relay_writes(const Ringmaster__V1__RelayRequest *q);
/* rm__rpc_out_flush's part: o is a lane's end (its entry is already pending:
 * the lane retires here) or a relay's own; the batches of every relay
 * touched start in rm__relay_kick_all, after the flush. */
void rm__relay_out(rm_coord_t *c, rm__out_t *o);
void rm__relay_kick_all(rm_coord_t *c);
/* rm__out_push's part for a lane: its message (bb taken, may be NULL)
 * and/or end (code >= 0) straight into its relay's pending entries, sent
 * after the COMMIT (relay.c PENDING). */
void rm__relay_push(rm_coord_t *c, rm__call_t *l, int code, const char *details,
                    grpc_byte_buffer *bb);
/* ROLLED BACK (relay.c): the failed section's pending lane entries become
 * each lane's end with code and details (rm__rpc_out_fail's part for lanes). */
void rm__relay_fail(rm_coord_t *c, int code, const char *details);
/* Mark call k answered (its park unlinked): 1, or 0 when it already was. */
int rm__call_claim(rm__call_t *k);
/* k's batch completed (on_send). */
void rm__relay_on_send(rm_coord_t *c, rm__call_t *k);
/* Is there room for a best-effort message to lane k (a push)? */
int rm__relay_room(const rm__call_t *k);
/* rm__server_stop: every relay ends UNAVAILABLE (its lanes already did). */
void rm__relay_stop_all(rm_coord_t *c);
/* call_unref's last: the relay's record. */
void rm__relay_free(rm__call_t *k);

#endif
