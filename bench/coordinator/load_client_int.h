/*
 * load_client_int.h - a client process's state and the helpers its files
 * share: load_client.c (calls, the process), load_join.c (JOIN),
 * load_unary.c (unary phases), load_session.c (SESSIONS, WATCHES) and
 * load_relay.c (RELAYS). Bench only.
 */
#ifndef RM_BENCH_LOAD_CLIENT_INT_H
#define RM_BENCH_LOAD_CLIENT_INT_H

#include <grpc/grpc.h>
#include <stdint.h>

#include "load_int.h"
#include "ringmaster/v1/messages.pb-c.h"

typedef struct {
  grpc_call *call;
  grpc_byte_buffer *send, *recv;
  grpc_metadata_array md1, md2;
  grpc_status_code st;
  grpc_slice details;
  int64_t t0, t1;
  int busy;
} op_t;

/* GZIP StepGate: one of this step's verified compressed answers (one per
 * value of `dropped`; r NULL: none yet) */
typedef struct {
  uint8_t *z;                          /* the member as received */
  size_t zlen;
  Ringmaster__V1__StepGateResponse *r; /* what it inflates to */
  int ok;                              /* its step-wide facts hold (gate_step_ok) */
} gate_kept_t;

/* SESSIONS: one worker's Session stream, or (WATCHES) its Watch call
 * (load_session.c). */
typedef struct {
  grpc_call *call;             /* NULL: not open, or released */
  grpc_byte_buffer *send;      /* the message of the send in flight */
  grpc_byte_buffer *recv;      /* RECV_MESSAGE's */
  grpc_metadata_array md1, md2;
  grpc_status_code st;
  grpc_slice details;
  int64_t t_send, t_close;     /* start of the send in flight; of the close */
  uint32_t step;               /* beats sent */
  int backlog;                 /* HEARTBEAT: beats due while a send was in flight */
  uint8_t sending, recving, closing; /* a batch of that kind outstanding */
  uint8_t ended;               /* its status came */
  uint8_t closed;              /* CLOSE: half-closed or (WATCHES) cancelled (its
                                * status is the verdict) */
  int got_msg;                 /* messages received, barrier answers aside */
  /* SESSION BARRIERS AND GATES: this round's arrival or gate call (BS_*) */
  uint8_t bar;                 /* BS_NONE: no request of this phase outstanding */
  uint8_t send_bar;            /* the send in flight is that request */
  int64_t t_bar;               /* start of the request's send */
} sess_t;

/* sess_t.bar: the arrival is due (sent when the send in flight completes),
 * sent and unanswered, or answered (or failed) with its send in flight. */
enum { BS_NONE = 0, BS_DUE = 1, BS_SENT = 2, BS_SETTLING = 3 };

enum { SK_SEND = 0, SK_RECV = 1, SK_STATUS = 2, SK_CLOSE = 3 };
#define WATCH(c) ((c)->cfg->session == 2) /* sess_t is a Watch call (WATCHES) */
#define HEARTBEAT_DEADLINE_S 10
#define SESS_TAG(w, k) ((void *)(intptr_t)(-1 - ((intptr_t)(w) * 4 + (k))))

typedef struct {
  const load_client_cfg_t *cfg;
  int n;                       /* workers here: hi - lo */
  grpc_completion_queue *cq;
  grpc_channel **ch;
  op_t *ops;
  uint64_t *wid;               /* worker ids, from the Join answers */
  uint32_t *rank_of;           /* rank of local worker i (UINT32_MAX: none);
                                * sent to the parent after the Join wave */
  int64_t *lat;
  uint64_t gen;
  /* the verified reference Join answer */
  Ringmaster__V1__JoinResponse *ref;
  uint64_t *ref_wid;           /* worker id by rank */
  uint8_t *ref_peers;          /* its contiguous field-6 bytes, or NULL */
  size_t ref_peers_len;
  /* GZIP: the reference's deflate stream of the shared tail, and the CRC
   * and length of the tail it inflates to (ref_z NULL: none) */
  uint8_t *ref_z;
  size_t ref_zlen, ref_tail_len;
  uint32_t ref_tail_crc;
  gate_kept_t gate[2];         /* GZIP StepGate: indexed by dropped != 0 */
  /* SESSIONS */
  sess_t *sess;                /* n streams (--session 1) or Watch calls (--session
                                * 2), or NULL (--session 0 / not opened) */
  int n_live;                  /* streams not released */
  int s_phase;                 /* LOAD_CMD_OPEN / BARRIER / HEARTBEAT / CLOSE while that
                                * phase counts stream events in s_res; else 0 */
  load_res_t *s_res;
  int s_done;                  /* OPEN, HEARTBEAT: sends done; BARRIER: arrivals
                                * settled (sess_bar_settle); CLOSE: statuses */
  const char *s_bar_name;      /* BARRIER (--session 1): "round-k" */
  int s_round;                 /* BARRIER: k; GATE: step s */
  int p_err, p_bad;            /* stream failures not yet reported (sess_fold) */
  char p_msg[LOAD_MSG_MAX];
  /* RELAYS (load_relay.c, --relay K): the relay streams, and each local
   * worker's owed request (BS_*) and its send start / beat due time */
  struct relay *rl;
  int n_rl;
  uint8_t *lane_st;
  int64_t *lane_t;
  uint32_t *lane_of;           /* RELAYS: each local worker's Session lane */
  int64_t join_dl;             /* RELAYS: the Join wave's deadline */
} client_t;

typedef struct {
  int formed;
  uint64_t worker_id, generation;
  uint32_t rank, world;
  int seen_peer, span_match, contig;
  size_t n_peer_fields; /* field-6 entries not inside the matched span */
  size_t first_peer, peers_end;
} join_scan_t;

/* ---- load_client.c: calls ---- */
grpc_byte_buffer *pack(const ProtobufCMessage *m);
/* The answer's bytes in one slice (new reference; empty if none). */
grpc_slice answer_bytes(grpc_byte_buffer *bb);
/* Start unary call op i on channel ch (deadline_s from now; auth: with the
 * API token); its tag is i. */
void call_start(client_t *c, int i, int ch, const char *method, const ProtobufCMessage *req,
                int deadline_s, int auth);
void call_finish(op_t *o);
/* A stream's RECV_MESSAGE batch into *recv (first: with its
 * RECV_INITIAL_METADATA into *md1), tagged tag (SESS_TAG); a batch that
 * cannot start aborts the client, as every stream batch does. */
void recv_start(grpc_call *call, int first, grpc_metadata_array *md1, grpc_byte_buffer **recv,
                void *tag);
/* Next completion of an op, or -1 when none came by deadline_ns.  SESSIONS:
 * stream events that come meanwhile are handled (sess_event). */
int next_done(client_t *c, int64_t deadline_ns);
/* Cancel every busy call and wait for their completions (bounded). */
void cancel_all(client_t *c, int nops);
/* The next answered op of a phase of one call a worker, `left` of them
 * unanswered, or -1 when none came by deadline_ns: then those `left`
 * count as errors (noted: "<left> <what> calls unanswered past the
 * deadline") and every busy call is cancelled. */
int next_answer(client_t *c, int64_t deadline_ns, int left, const char *what, load_res_t *res);
/* A call ended with a non-OK status: count it, note the first. */
void rpc_error(load_res_t *r, const op_t *o, const char *what, int g);

/* ---- load_join.c: JOIN, GZIP ---- */
void phase_join(client_t *c, load_res_t *res);
/* A compressed answer's bytes as received (reading it through a
 * grpc_byte_buffer_reader would inflate it). malloc'd, never NULL. */
uint8_t *raw_bytes(const grpc_byte_buffer *bb, size_t *len);
/* Inflate a gzip member in full; 0 and a malloc'd *out, or -1. */
int gz_inflate(const uint8_t *z, size_t zlen, uint8_t **out, size_t *outlen);
/* Scan a Join answer's top-level fields (ref: the reference's peer span to
 * compare, or NULL): 0 ok, 1 differs (slow path), -1 malformed. */
int scan_join(const uint8_t *b, size_t len, const uint8_t *ref, size_t ref_len, join_scan_t *s);
/* Check one formed answer of local worker i (the first one becomes the
 * verified reference); 0 = good. */
int check_join(client_t *c, int i, const uint8_t *b, size_t len, const join_scan_t *s,
               load_res_t *res);
/* Worker i's JoinRequest (host and data: 32 bytes each, filled). */
void join_req(client_t *c, int i, uint64_t worker_id, int64_t deadline_ns,
              Ringmaster__V1__JoinRequest *q, char *host, char *data);
ProtobufCMessage *unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d);
/* Next event of the queue, or type GRPC_QUEUE_TIMEOUT at deadline_ns. */
grpc_event cq_wait(client_t *c, int64_t deadline_ns);
/* Handle stream events (sess_event, or relay_event with --relay) until
 * c->s_done reaches want; -1 at the deadline. */
int stream_wait(client_t *c, int want, int64_t deadline_ns);
/* The first failure's words, kept in r->msg. */
void note(load_res_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A stream failure, counted in the stream phase under way or the next
 * result (load_session.c SESSIONS). */
void sess_fail(client_t *c, int bad, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* ---- load_unary.c: BARRIER, GATE, HEARTBEAT as unary calls ---- */
void phase_barrier(client_t *c, int k, load_res_t *res);
void phase_gate(client_t *c, int step, load_res_t *res);
void phase_heartbeat(client_t *c, int secs, load_res_t *res);
/* GZIP StepGate: forget the last step's kept answers. */
void gate_refs_clear(client_t *c);
void barrier_check(const client_t *c, const Ringmaster__V1__BarrierResponse *r, int g, int k,
                   const char *how, load_res_t *res);
void gate_sess_check(client_t *c, const Ringmaster__V1__StepGateResponse *r, int w,
                     load_res_t *res);
/* When beat s (local worker s % n's (s / n)-th) is due. */
int64_t beat_due(const client_t *c, int64_t t0, int s);

/* ---- load_session.c: SESSIONS, SESSION BARRIERS AND GATES, WATCHES ---- */
void phase_open(client_t *c, load_res_t *res);
/* BARRIER k or GATE s (kind) as a request on every worker's stream. */
void phase_owed_sess(client_t *c, int kind, int k, load_res_t *res);
void phase_heartbeat_sess(client_t *c, int secs, load_res_t *res);
void phase_close(client_t *c, load_res_t *res);
/* A stream's batch completed (tag < 0). */
void sess_event(client_t *c, intptr_t tag, int success);
/* Stream failures not yet reported go into res. */
void sess_fold(client_t *c, load_res_t *res);
/* Cancel every open stream and wait (bounded) until each is released. */
void sess_teardown(client_t *c);

/* ---- load_relay.c (RELAYS, --relay K) ---- */
void relay_phase_join(client_t *c, load_res_t *res);
void relay_phase_open(client_t *c, load_res_t *res);
void relay_phase_owed(client_t *c, int kind, int k, load_res_t *res);
void relay_phase_heartbeat(client_t *c, int secs, load_res_t *res);
void relay_phase_close(client_t *c, load_res_t *res);
/* A relay stream's batch completed (tag < 0, relay mode). */
void relay_event(client_t *c, intptr_t tag, int success);
/* Cancel every open relay stream; wait (bounded) for their ends. */
void relay_teardown(client_t *c);

#endif
