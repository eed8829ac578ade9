/*
 * relay_int.h - what the relay's files share (relay.c: the command and
 * the loop; local.c: the workers' calls here; upstream.c: the streams to
 * the coordinator): the records of both sides, the completion tags and
 * each side's functions. Module-private to relay/.
 */
#ifndef RM_RELAY_RELAY_INT_H
#define RM_RELAY_RELAY_INT_H

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <stdint.h>

#include "rm_log.h"

#define LANES_MAX 65535u
#define BEAT_MS 100      /* a heartbeat waits at most this to travel with others */
#define TICK_MS 100      /* the loop's longest wait */
#define REQUESTS 8       /* Session requests kept posted */
#define SESSION_PATH "/ringmaster.v1.Worker/Session"
#define JOIN_PATH "/ringmaster.v1.Worker/Join"
#define RELAY_PATH "/ringmaster.v1.Worker/Relay"

enum { L_REQUEST, L_RECV, L_CLOSE, L_SEND, U_SEND, U_RECV, U_STATUS, U_CLOSE };

typedef struct up up_t;

/* A message to send a worker: one slice, or (a Join's answer) its own head
 * and the peer list's tail shared by every lane it answers (SHARED TAIL). */
typedef struct {
  grpc_slice part[2];
  int n;
} lmsg_t;

typedef struct lc {
  grpc_call *call;
  grpc_metadata_array md;
  gpr_timespec deadline;
  grpc_byte_buffer *recv;
  up_t *up;
  uint32_t lane;
  int join;                  /* a Join call (one answer), not a Session */
  int refs;                  /* batches outstanding */
  int cancelled;             /* CLOSE's verdict */
  lmsg_t *q;                 /* messages to send, in order */
  int nq, capq;
  int has_final, final_code;
  char *final_details;
  int sending, md_sent, final_started;
  grpc_byte_buffer *send_bb;
  grpc_slice status_slice;
} __attribute__((aligned(8))) lc_t;

struct up {
  grpc_call *call;
  grpc_byte_buffer *send_bb, *recv;
  grpc_metadata_array md1, md2;
  grpc_status_code st;
  grpc_slice details;
  unsigned long long id;     /* 1, 2, ... in the order opened (logs) */
  uint32_t next_lane;
  lc_t **lane;               /* by lane number: open lanes */
  uint32_t cap;
  int open;
  grpc_slice *in;            /* framed RelayIns to send */
  int nin, capin;
  int urgent;                /* one of them must go now */
  int64_t beat_ns;           /* when the oldest waiting heartbeat came */
  int sending, md_sent, ended, closing;
  int refs;                  /* batches outstanding + lanes naming it */
  up_t *next;                /* in r->ups */
} __attribute__((aligned(8)));

typedef struct {
  grpc_server *server;
  grpc_completion_queue *cq;
  void *reg, *reg_join;
  grpc_channel *ch;
  up_t *cur, *ups;
  uint32_t lanes_max;        /* lane numbers a stream (LANES_MAX; a test knob) */
  int stopping;
  unsigned long long lanes_total, ups_total;
} relay_t;

/* A completion's tag: a record's address with the event kind in the low
 * 3 bits. */
static inline void *rm__relay_tag(void *p, int kind) { return (char *)p + kind; }

/* Start a batch on call, tagged rec with kind, holding one of rec's
 * references (*refs) until it completes; `what` names the call when the
 * batch cannot start (then it holds none). */
static inline void rm__relay_batch(grpc_call *call, void *rec, int *refs, const grpc_op *ops,
                                   size_t n, int kind, const char *what)
{
  (*refs)++;
  if (grpc_call_start_batch(call, ops, n, rm__relay_tag(rec, kind), NULL) != GRPC_CALL_OK) {
    RM_ERROR("relay: a batch on %s could not start", what);
    (*refs)--;
  }
}

/* A received message's bytes as one slice (empty when none). */
static inline grpc_slice rm__relay_bb_slice(grpc_byte_buffer *bb)
{
  grpc_byte_buffer_reader rd;
  if (!bb || !grpc_byte_buffer_reader_init(&rd, bb)) return grpc_empty_slice();
  grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  return s;
}

/* ---- local.c (LOCAL SESSION) ---- */
/* SessionRequest's field numbers, once, before the first request. */
void rm__lc_init(void);
/* Post the next Session (join 0) or Join (join 1) request. */
void rm__lc_post_request(relay_t *r, int join);
/* Drop a reference of l; the last frees it (and its stream's reference). */
void rm__lc_unref(relay_t *r, lc_t *l);
/* Queue a message of n (1 or 2) parts for the worker (referenced). */
void rm__lc_send(lc_t *l, const grpc_slice *part, int n);
/* End the worker's call with code after what is queued; the lane is over. */
void rm__lc_final(lc_t *l, int code, const char *details);
/* Its completions (L_*); the loop drops the batch's reference after
 * each but L_REQUEST's, whose reference rm__lc_on_request takes. */
void rm__lc_on_request(relay_t *r, lc_t *l, int ok);
void rm__lc_on_recv(lc_t *l, int ok);
void rm__lc_on_close(lc_t *l);
void rm__lc_on_send(lc_t *l);

/* ---- upstream.c (UPSTREAM) ---- */
/* A new Relay stream to the coordinator, r->ups' first. */
up_t *rm__up_open(relay_t *r);
void rm__up_unref(relay_t *r, up_t *u);
/* Queue a RelayIn for lane (msg: its SessionRequest's bytes, or (join)
 * JoinRequest's, or NULL; end; broken); urgent: it goes at once, else it
 * may wait BEAT_MS. */
void rm__up_queue(up_t *u, uint32_t lane, grpc_slice *msg, int join, int end, int broken,
                  int urgent);
/* Send what is queued when it should go and nothing is in flight. */
void rm__up_flush(relay_t *r, up_t *u, int64_t now);
/* Half-close a stream that is no longer the newest once it is idle. */
void rm__up_maybe_close(relay_t *r, up_t *u);
/* Every lane still open on u ends with code and why. */
void rm__up_lanes_end(up_t *u, int code, const char *why);
/* Its completions (U_*). */
void rm__up_on_recv(up_t *u, int ok);
void rm__up_on_status(relay_t *r, up_t *u);
void rm__up_on_send(relay_t *r, up_t *u);

#endif
