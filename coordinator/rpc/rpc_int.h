/*
 * rpc_int.h - the RPC adapter's insides (module-private tier): the gRPC
 * server (server.c, server_group.c, server_out.c), the Worker and Jobs
 * handlers (rpc*.c), protobuf <-> core conversion (rpc_conv.c), and the
 * answers to parked calls (waiters.c, the table the core holds: core/waiters.h). The only layer that
 * knows protobuf and gRPC; it calls down into core/ under the coordinator
 * lock, and the core reaches it only through that table.
 */
#ifndef RM_COORDINATOR_RPC_INT_H
#define RM_COORDINATOR_RPC_INT_H

#include "core/core_int.h"
#include "ringmaster/v1/messages.pb-c.h"

/* ---- the answer side the core calls through its table (core/waiters.h:
 *      each function's contract is beside its slot there) ---- */
extern const rm__answer_ops_t rm__rpc_answer_ops; /* waiters.c */
void rm__rpc_answer_join(rm_coord_t *c, rm__job_t *j, rm__park_t *p);           /* rpc.c */
void rm__rpc_answer_barrier(rm_coord_t *c, const rm__job_t *j, const rm__barrier_t *b,
                            rm__park_t *p);                                      /* waiters.c */
void rm__rpc_answer_gate(rm_coord_t *c, rm__park_t *p, uint64_t step, const uint8_t *members,
                         int world, int dropped, int arrivals_decide, rm__blob_t **cache);
void rm__rpc_push_gate(rm_coord_t *c, rm__park_t *p, uint64_t gen, uint64_t step,
                       const uint8_t *members, int world, rm__blob_t **cache);
void rm__rpc_push_moved_on(rm_coord_t *c, rm__park_t *p, uint64_t gen, rm_job_state_t st,
                           const char *why);                             /* waiters.c */
void rm__rpc_answer_stale(rm_coord_t *c, rm__park_t *p, const char *why);
void rm__rpc_answer_storage(rm_coord_t *c, rm__park_t *p, int full, const char *why);
void rm__rpc_watch_kick(rm_coord_t *c, rm__job_t *j);                          /* rpc.c */
void rm__rpc_out_fail(rm_coord_t *c, int full, const char *why);           /* server_out.c */
void rm__rpc_out_flush(rm_coord_t *c);                                     /* server_out.c */

/* ---- the RPC layer's state (the core holds it opaque: c->rpc) ---- */
typedef struct rm__server rm__server_t;
typedef struct rm__out {
  rm__call_t *call;
  int code;                     /* grpc_status_code; -1 = stream message */
  char *details;
  void *bb;                     /* grpc_byte_buffer *, may be NULL (always
                                 * for a relay lane: relay.c PENDING) */
} rm__out_t;
struct rm__rpc {
  rm__out_t *out;               /* replies waiting for COMMIT (server_out.c) */
  size_t nout, capout;
  /* RELAYS (relay.c): the Relay calls not yet ended, and those whose
   * batches rm__rpc_out_flush must start */
  rm__call_t *relays;
  rm__call_t **relay_kick;
  size_t nrelay_kick, caprelay_kick;
  rm__server_t *srv;            /* server.c; NULL when not started */
};
/* Made by the wiring (coord.c) before the first call and freed after the
 * last commit (waiters.c). */
rm__rpc_t *rm__rpc_open(void);
void rm__rpc_close(rm__rpc_t *r);

/* ---- server.c: the gRPC server's lifecycle ---- */
rm_status_t rm__server_start(rm_coord_t *c, char *err, size_t errlen);
void rm__server_stop(rm_coord_t *c);

/* ---- server_out.c: answers, queued under the lock, sent after COMMIT ---- */
/* Queue the final answer of a call (code = grpc_status_code; resp may be
 * NULL on error). Unparks it. Sent after COMMIT. Under lock. */
void rm__reply(rm_coord_t *c, rm__call_t *call, int code, const char *details,
               const ProtobufCMessage *resp);
/* Pack m once into a reference-counted buffer that many answers can end
 * with (protobuf: concatenated encodings merge, so a per-call head followed
 * by a shared tail is one message). */
rm__blob_t *rm__blob_pack(const ProtobufCMessage *m);
void rm__blob_unref(rm__blob_t *b);
/* rm__reply with status OK whose message is head's encoding + tail's
 * (an empty head: tail's bytes alone, shared, not copied). */
void rm__reply_tail(rm_coord_t *c, rm__call_t *call,
                    const ProtobufCMessage *head, rm__blob_t *tail);
/* GZIP ANSWERS (server_out.c): the call's client decodes grpc-encoding
 * gzip (JoinRequest / StepGateRequest.accept_gzip); rm__reply_tail_gz then
 * sends head + tail as
 * one gzip member whose tail part is deflated once per blob (gz_answer.c),
 * else exactly what rm__reply_tail sends. Under lock. */
void rm__call_accept_gzip(rm__call_t *call, int yes);
void rm__reply_tail_gz(rm_coord_t *c, rm__call_t *call, const ProtobufCMessage *head,
                       rm__blob_t *tail);
/* Queue one message of a server stream. Under lock. */
void rm__stream_send(rm_coord_t *c, rm__call_t *call,
                     const ProtobufCMessage *msg);
rm__park_t *rm__call_park(rm__call_t *call);
/* SESSIONS (server_group.c): a Session call's second park, where its barrier
 * arrival or its step-gate call waits (one at a time: rpc.c on_session;
 * the park's kind says which): NULL until its first such wait; made then
 * (kept until the call is freed); is p that park? */
rm__park_t *rm__call_wpark(rm__call_t *call);
rm__park_t *rm__call_wpark_make(rm__call_t *call);
int rm__park_on_stream(const rm__park_t *p);
/* Answer parked call p with status OK and resp, or with shared's packed
 * bytes (not copied). A call's own park: its final answer (rm__reply);
 * a Session's barrier or gate park (SESSIONS): a message of its stream, unlinked
 * here, nothing when the stream is over. Under lock. */
void rm__park_answer(rm_coord_t *c, rm__park_t *p, const ProtobufCMessage *resp,
                     rm__blob_t *shared);
/* SESSIONS: a message of Session call k, unasked: a SessionResponse with
 * gate_pushed, generation gen and `gate` = shared's bytes (not copied).
 * Best effort: nothing when the stream is over or too far behind. Under
 * lock. */
void rm__session_push(rm_coord_t *c, rm__call_t *k, uint64_t gen, rm__blob_t *shared);
/* SESSIONS: message m of Session call k, unasked, packed here; best effort
 * as rm__session_push (the same bound on what is queued). Under lock. */
void rm__session_push_msg(rm_coord_t *c, rm__call_t *k, const ProtobufCMessage *m);

/* ---- rpc.c: handlers (under lock) ---- */
enum {
  RM__M_JOIN, RM__M_HEARTBEAT, RM__M_BARRIER, RM__M_REPORT_STEP, RM__M_WATCH,
  RM__M_LEAVE, RM__M_SUBMIT, RM__M_GET, RM__M_LIST, RM__M_CANCEL,
  RM__M_REPORT_FAILURE, RM__M_STEP_GATE, RM__M_ATTACH, RM__M_REPORT_EXIT,
  RM__M_SESSION, RM__M_RELAY, RM__M_COUNT
};
typedef struct rm__method {
  const char *path;                         /* "/ringmaster.v1.Worker/Join" */
  const ProtobufCMessageDescriptor *req;
  int admin;                                /* job service: 1 mutation (API token),
                                               2 read (API or read token) */
} rm__method_t;
extern const rm__method_t rm__methods[RM__M_COUNT];
/* Handle one parsed request: answer with rm__reply or park. Under lock.
 * admin_ok: RM__AUTH_ADMIN when the call carried the API token (or none is
 * configured), RM__AUTH_READ the read token, 0 neither. */
#define RM__AUTH_READ 1
#define RM__AUTH_ADMIN 2
void rm__rpc_dispatch(rm_coord_t *c, rm__call_t *call, int method,
                      const ProtobufCMessage *req, int admin_ok);

/* The other Worker calls' handlers (rpc_failure.c, rpc_gate.c,
 * rpc_command.c). */
void rm__rpc_report_failure(rm_coord_t *c, rm__call_t *call,
                            const Ringmaster__V1__ReportFailureRequest *q);
void rm__rpc_step_gate(rm_coord_t *c, rm__call_t *call,
                       const Ringmaster__V1__StepGateRequest *q);
void rm__rpc_attach(rm_coord_t *c, rm__call_t *call,
                    const Ringmaster__V1__AttachRequest *q);
void rm__rpc_report_exit(rm_coord_t *c, rm__call_t *call,
                         const Ringmaster__V1__ReportExitRequest *q);
/* A watcher's message was sent: send the next event or end it. */
void rm__watch_next(rm_coord_t *c, rm__park_t *p);

/* o's strings point into s; its command/env tables are heap: call
 * rm__pb_spec_free(o) once packed (rm__pb_job_from: on its spec). */
/* The spec for an answer; env values masked "***" (every read, Join). */
void rm__pb_spec_from(Ringmaster__V1__JobSpec *o, rm_job_spec_t *s);
/* The same with the env values: only for Attach, whose agent hands them to
 * the job's program (it proved the job's token). */
void rm__pb_spec_from_secret(Ringmaster__V1__JobSpec *o, rm_job_spec_t *s);
void rm__pb_spec_free(Ringmaster__V1__JobSpec *o);
void rm__pb_job_from(Ringmaster__V1__Job *o, Ringmaster__V1__JobSpec *spec,
                     rm_job_info_t *in, int with_token);
int rm__pb_str(char *dst, size_t len, const char *src);
const char *rm__pb_spec_to(rm_job_spec_t *s, const Ringmaster__V1__JobSpec *in);
/* rpc.c's checks of a worker call (job, token, worker, generation); 0 ok,
 * else the call is answered. For rpc_failure.c and rpc_gate.c. */
int rm__rpc_check_worker(rm_coord_t *c, rm__call_t *call, uint64_t job_id,
                         const char *token, uint64_t gen, uint64_t worker_id,
                         rm__job_t **jp, rm__worker_t **wp);
/* rpc.c's job and token check alone; 0 ok, else the call is answered. */
int rm__rpc_check_job(rm_coord_t *c, rm__call_t *call, uint64_t job_id,
                      const char *token, rm__job_t **jp);
/* The job service handlers (rpc_jobs.c). */
void rm__rpc_jobs(rm_coord_t *c, rm__call_t *call, int method,
                  const ProtobufCMessage *req, int admin_ok);

/* gRPC status codes we use (values from grpc/status.h, kept here so the
 * handlers do not depend on gRPC headers). */
enum {
  RM__GRPC_OK = 0, RM__GRPC_INVALID_ARGUMENT = 3, RM__GRPC_NOT_FOUND = 5,
  RM__GRPC_RESOURCE_EXHAUSTED = 8, RM__GRPC_FAILED_PRECONDITION = 9,
  RM__GRPC_UNAUTHENTICATED = 16, RM__GRPC_UNAVAILABLE = 14
};

#endif
