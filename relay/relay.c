/*
 * relay.c - `ringmaster relay`: a host's relay. The workers of a
 * host open their Session (service.proto) here instead of at the
 * coordinator (RINGMASTER_RELAY in their environment, worker/session/
 * session_live.c); the relay carries them all as the lanes of one Relay
 * stream to the coordinator (coordinator/rpc/relay.c), so the coordinator
 * holds one gRPC stream, and reads and writes one message, per host
 * instead of per worker. Their Join calls come here too, each a lane of
 * its own (RelayIn.join), its formed answer's peer list sent once per
 * RelayResponse for all the lanes it answers (RelayResponse.shared). Every
 * other call (ReportStep, Leave, ...) still goes from the worker to the
 * coordinator directly.
 *
 * One thread and one completion queue serve both sides: a gRPC server on
 * --listen (unix:PATH or HOST:PORT) that answers only Worker/Session and
 * Worker/Join (a Join lane: its request queued as the lane's opening,
 * CLOSE posted, its answer the lane's one message and end), and
 * the client of the coordinator. Tags are a record's address with the
 * event kind in the low 3 bits.
 *
 * LOCAL SESSION (lc_t), a worker's Session call here:
 *   REQUEST  the call arrives with its first message (registered method):
 *            it becomes lane n of the newest upstream stream (UP), and the
 *            message is queued for it; RECV_CLOSE_ON_SERVER (CLOSE) and
 *            RECV_MESSAGE (RECV) are posted.
 *   RECV     a message: queued for the lane; none (the worker half-closed):
 *            `end` is queued; failed: nothing (CLOSE says why).
 *   CLOSE    cancelled (the worker's process or connection went away)
 *            while its lane is open: `broken` is queued, and the
 *            coordinator declares the worker lost at once, as it would for
 *            its own broken Session; else the call ended normally.
 *   SEND     one message in flight; what the coordinator sends the lane is
 *            queued behind it (SessionResponse bytes, then the lane's end
 *            with its status), started in order.
 *
 * UPSTREAM (up_t), one Relay stream: created when a Session arrives and
 * there is none, or the newest ended, or its 65,535 lane numbers are used
 * (lane numbers are never reused on a stream; one that is no longer the
 * newest is half-closed once its last lane ended: up_maybe_close). Its
 * RelayRequests carry the
 * queued RelayIns, hand-framed (the workers' SessionRequest bytes as they
 * came), one message in flight: everything queued while one is in flight
 * goes in the next. Heartbeats may wait BEAT_MS to travel with others;
 * anything else (an opening, a barrier arrival, a gate call, an end) goes
 * at once. Its RelayResponses are read as they come: each RelayOut's
 * message is packed once and queued on every lane it names; its end ends
 * those lanes' Sessions with its status. When the stream ends, every lane
 * still open on it ends UNAVAILABLE ("the relay's stream to the
 * coordinator ended: ..."): the workers re-open their Sessions (here, on
 * a new stream; or, if the relay is gone, at the coordinator), and the
 * coordinator declares none of them lost for it.
 *
 * Nothing here reads or checks tokens: each lane's messages carry the
 * worker's own job token, and the coordinator checks them as on a
 * Session. The coordinator side takes the same mutual-TLS files as the
 * worker (--tls-ca, --tls-cert, --tls-key). LISTEN SIDE:
 *   unix:PATH        plaintext: only this host's processes reach it
 *   HOST:PORT + TLS  mutual TLS with the same files: every client must
 *                    present a certificate signed by the CA, and the
 *                    relay's certificate must name HOST (the workers dial
 *                    it as they dial the coordinator). So a relay can
 *                    serve the workers of many hosts (a rack's), and the
 *                    coordinator holds one stream for all of them.
 *   HOST:PORT        plaintext, only on a loopback host (127.0.0.0/8,
 *                    ::1, localhost); any other address is refused.
 * A worker with TLS files dials a HOST:PORT relay with them, a unix:
 * relay in plaintext (worker/session/session.c).
 *
 * Every wait has a deadline: the loop polls with at most TICK_MS, and
 * SIGINT / SIGTERM end it: every lane ends UNAVAILABLE, every stream is
 * cancelled, and the queue is drained before exit.
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "relay.h"
#include "rm_channel.h"
#include "ringmaster/v1/messages.pb-c.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_pbwire.h"
#include "rm_signal.h"

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

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { stop_flag = sig; }

static void *tag(void *p, int kind) { return (char *)p + kind; }

static grpc_slice bb_slice(grpc_byte_buffer *bb)
{
  grpc_byte_buffer_reader rd;
  if (!bb || !grpc_byte_buffer_reader_init(&rd, bb)) return grpc_empty_slice();
  grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  return s;
}

/* ---- upstream ---- */
static void up_unref(relay_t *r, up_t *u)
{
  if (--u->refs) return;
  for (up_t **p = &r->ups; *p; p = &(*p)->next)
    if (*p == u) {
      *p = u->next;
      break;
    }
  if (r->cur == u) r->cur = NULL;
  grpc_call_unref(u->call);
  grpc_metadata_array_destroy(&u->md1);
  grpc_metadata_array_destroy(&u->md2);
  grpc_slice_unref(u->details);
  for (int i = 0; i < u->nin; i++) grpc_slice_unref(u->in[i]);
  free(u->in);
  free(u->lane);
  free(u);
}

static void up_batch(up_t *u, const grpc_op *ops, size_t n, int kind)
{
  u->refs++;
  if (grpc_call_start_batch(u->call, ops, n, tag(u, kind), NULL) != GRPC_CALL_OK) {
    RM_ERROR("relay: a batch on the coordinator stream could not start");
    u->refs--;
  }
}

static void up_recv(up_t *u, int first)
{
  grpc_op ops[2];
  size_t n = 0;
  memset(ops, 0, sizeof ops);
  if (first) {
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = &u->md1;
  }
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n++].data.recv_message.recv_message = &u->recv;
  up_batch(u, ops, n, U_RECV);
}

static up_t *up_open(relay_t *r)
{
  up_t *u = calloc(1, sizeof *u);
  grpc_op op;
  if (!u) abort();
  u->call = grpc_channel_create_call(r->ch, NULL, GRPC_PROPAGATE_DEFAULTS, r->cq,
                                     grpc_slice_from_static_string(RELAY_PATH), NULL,
                                     gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
  grpc_metadata_array_init(&u->md1);
  grpc_metadata_array_init(&u->md2);
  u->details = grpc_empty_slice();
  u->next_lane = 1;
  u->refs = 1; /* until it ends (U_STATUS) */
  u->next = r->ups;
  r->ups = u;
  up_recv(u, 1);
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  op.data.recv_status_on_client.trailing_metadata = &u->md2;
  op.data.recv_status_on_client.status = &u->st;
  op.data.recv_status_on_client.status_details = &u->details;
  up_batch(u, &op, 1, U_STATUS);
  u->id = ++r->ups_total;
  RM_INFO("relay: stream %llu to the coordinator opened", u->id);
  return u;
}

/* Queue a RelayIn (lane; msg: a SessionRequest's bytes, or (join) a
 * JoinRequest's, or NULL; end; broken), framed as a RelayRequest's `in`
 * entry. */
static void up_queue(up_t *u, uint32_t lane, grpc_slice *msg, int join, int end, int broken,
                     int urgent)
{
  uint8_t h[32];
  size_t mlen = msg ? GRPC_SLICE_LENGTH(*msg) : 0;
  size_t inner = 1 + rm__pb_varint_len(lane);
  if (msg) inner += 1 + rm__pb_varint_len(mlen) + mlen;
  if (end) inner += 2;
  if (broken) inner += 2;
  size_t n = 0;
  n = rm__pb_varint(h, n, 1 << 3 | 2); /* RelayRequest.in */
  n = rm__pb_varint(h, n, inner);
  n = rm__pb_varint(h, n, 1 << 3); /* RelayIn.lane */
  n = rm__pb_varint(h, n, lane);
  if (msg) {
    n = rm__pb_varint(h, n, (uint64_t)(join ? 5 : 2) << 3 | 2); /* RelayIn.join / .message */
    n = rm__pb_varint(h, n, mlen);
  }
  if (u->nin + 3 > u->capin) {
    u->capin = u->capin ? 2 * u->capin : 32;
    u->in = realloc(u->in, (size_t)u->capin * sizeof *u->in);
    if (!u->in) abort();
  }
  u->in[u->nin++] = grpc_slice_from_copied_buffer((const char *)h, n);
  if (msg) u->in[u->nin++] = grpc_slice_ref(*msg);
  n = 0;
  if (end) { /* RelayIn.end = true */
    n = rm__pb_varint(h, n, 3 << 3);
    n = rm__pb_varint(h, n, 1);
  }
  if (broken) { /* RelayIn.broken = true */
    n = rm__pb_varint(h, n, 4 << 3);
    n = rm__pb_varint(h, n, 1);
  }
  if (n) u->in[u->nin++] = grpc_slice_from_copied_buffer((const char *)h, n);
  if (urgent) u->urgent = 1;
  else if (!u->beat_ns) u->beat_ns = rm__now_ns();
}

/* Send what is queued when it should go and nothing is in flight. */
static void up_flush(relay_t *r, up_t *u, int64_t now)
{
  if (u->sending || u->ended || !u->nin) return;
  if (!u->urgent && now - u->beat_ns < BEAT_MS * 1000000LL) return;
  grpc_op ops[2];
  size_t n = 0;
  memset(ops, 0, sizeof ops);
  if (!u->md_sent) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    u->md_sent = 1;
  }
  u->send_bb = grpc_raw_byte_buffer_create(u->in, (size_t)u->nin);
  for (int i = 0; i < u->nin; i++) grpc_slice_unref(u->in[i]);
  u->nin = 0;
  u->urgent = 0;
  u->beat_ns = 0;
  ops[n].op = GRPC_OP_SEND_MESSAGE;
  ops[n++].data.send_message.send_message = u->send_bb;
  u->sending = 1;
  up_batch(u, ops, n, U_SEND);
}

/* A stream that is no longer the newest (its lane numbers ran out) is
 * half-closed once its last lane ended and everything queued went: the
 * coordinator then ends it OK. */
static void up_maybe_close(relay_t *r, up_t *u)
{
  grpc_op op;
  if (!u || u == r->cur || u->ended || u->closing || u->open || u->nin || u->sending) return;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  u->closing = 1;
  up_batch(u, &op, 1, U_CLOSE);
}

/* ---- local sessions ---- */
static void lc_unref(relay_t *r, lc_t *l)
{
  if (--l->refs) return;
  if (l->call) grpc_call_unref(l->call);
  grpc_metadata_array_destroy(&l->md);
  if (l->recv) grpc_byte_buffer_destroy(l->recv);
  for (int i = 0; i < l->nq; i++)
    for (int k = 0; k < l->q[i].n; k++) grpc_slice_unref(l->q[i].part[k]);
  free(l->q);
  free(l->final_details);
  if (l->up) up_unref(r, l->up);
  free(l);
}

static void lc_batch(lc_t *l, const grpc_op *ops, size_t n, int kind)
{
  l->refs++;
  if (grpc_call_start_batch(l->call, ops, n, tag(l, kind), NULL) != GRPC_CALL_OK) {
    RM_ERROR("relay: a batch on a worker's Session could not start");
    l->refs--;
  }
}

static void lc_recv(lc_t *l)
{
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &l->recv;
  lc_batch(l, &op, 1, L_RECV);
}

/* Start the next queued message, or the final status once none is left. */
static void lc_next(lc_t *l)
{
  grpc_op ops[3];
  size_t n = 0;
  if (l->sending || l->final_started || (!l->nq && !l->has_final)) return;
  memset(ops, 0, sizeof ops);
  if (!l->md_sent) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    l->md_sent = 1;
  }
  if (l->nq) {
    l->send_bb = grpc_raw_byte_buffer_create(l->q[0].part, (size_t)l->q[0].n);
    for (int k = 0; k < l->q[0].n; k++) grpc_slice_unref(l->q[0].part[k]);
    memmove(&l->q[0], &l->q[1], (size_t)--l->nq * sizeof l->q[0]);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = l->send_bb;
  } else {
    l->status_slice = grpc_slice_from_copied_string(l->final_details ? l->final_details : "");
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)l->final_code;
    ops[n++].data.send_status_from_server.status_details = &l->status_slice;
    l->final_started = 1;
  }
  l->sending = 1;
  lc_batch(l, ops, n, L_SEND);
}

/* Queue a message of n (1 or 2) parts (each referenced, not copied). */
static void lc_send(lc_t *l, const grpc_slice *part, int n)
{
  if (l->has_final) return;
  if (l->nq == l->capq) {
    l->capq = l->capq ? 2 * l->capq : 2;
    l->q = realloc(l->q, (size_t)l->capq * sizeof *l->q);
    if (!l->q) abort();
  }
  lmsg_t *m = &l->q[l->nq++];
  m->n = n;
  for (int k = 0; k < n; k++) m->part[k] = grpc_slice_ref(part[k]);
  lc_next(l);
}

/* Is the lane still in its stream's table (neither the coordinator nor
 * this relay ended it)? */
static int lc_laned(const lc_t *l)
{
  return l->up && l->lane < l->up->cap && l->up->lane[l->lane] == l;
}

/* Take the lane out of its stream's table: nothing more goes to it. */
static void lc_unlane(lc_t *l)
{
  if (lc_laned(l)) {
    l->up->lane[l->lane] = NULL;
    l->up->open--;
  }
}

/* The worker's Session ends with code after what is queued: the lane is
 * over (the coordinator ended it, or its stream ended), or (keep_lane) the
 * worker half-closed and CLOSE will say whether it went away. */
static void lc_final_ex(lc_t *l, int code, const char *details, int keep_lane)
{
  if (l->has_final) return;
  if (!keep_lane) lc_unlane(l);
  l->has_final = 1;
  l->final_code = code;
  l->final_details = strdup(details ? details : "");
  lc_next(l);
}

static void lc_final(lc_t *l, int code, const char *details)
{
  lc_final_ex(l, code, details, 0);
}

static void post_request(relay_t *r, int join)
{
  lc_t *l = calloc(1, sizeof *l);
  if (!l) abort();
  grpc_metadata_array_init(&l->md);
  l->refs = 1;
  l->join = join;
  if (grpc_server_request_registered_call(r->server, join ? r->reg_join : r->reg, &l->call,
                                          &l->deadline, &l->md, &l->recv, r->cq, r->cq,
                                          tag(l, L_REQUEST)) !=
      GRPC_CALL_OK) {
    RM_ERROR("relay: grpc_server_request_registered_call failed");
    lc_unref(r, l);
  }
}

/* SessionRequest's barrier and gate fields as rm__pb_fields bits (6 and 7;
 * set in rm_relay_main from the descriptor). */
static uint64_t asks_fields;

/* Does a SessionRequest's bytes carry a barrier arrival or a gate call?
 * Then it goes at once; a heartbeat alone may wait BEAT_MS. Read from the
 * wire, not unpacked (this runs for every heartbeat); malformed bytes go
 * at once too, and the coordinator ends the Session over them. */
static int asks(grpc_slice s)
{
  uint64_t f = rm__pb_fields(GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s));
  return (f & 1) || (f & asks_fields);
}

static void on_request(relay_t *r, lc_t *l, int ok)
{
  grpc_op op;
  if (!ok) { /* shutting down */
    lc_unref(r, l);
    return;
  }
  if (!r->stopping) post_request(r, l->join);
  if (!r->cur || r->cur->ended || r->cur->next_lane > r->lanes_max) {
    up_t *old = r->cur;
    r->cur = up_open(r);
    up_maybe_close(r, old); /* its lanes may all have ended already */
  }
  up_t *u = r->cur;
  l->up = u;
  u->refs++;
  l->lane = u->next_lane++;
  if (l->lane >= u->cap) {
    uint32_t cap = u->cap ? u->cap : 64;
    while (cap <= l->lane) cap *= 2;
    u->lane = realloc(u->lane, cap * sizeof *u->lane);
    if (!u->lane) abort();
    memset(u->lane + u->cap, 0, (cap - u->cap) * sizeof *u->lane);
    u->cap = cap;
  }
  u->lane[l->lane] = l;
  u->open++;
  r->lanes_total++;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &l->cancelled;
  lc_batch(l, &op, 1, L_CLOSE);
  if (l->recv) { /* its first message (a Join: its request) opens the lane */
    grpc_slice s = bb_slice(l->recv);
    grpc_byte_buffer_destroy(l->recv);
    l->recv = NULL;
    up_queue(u, l->lane, &s, l->join, 0, 0, 1);
    grpc_slice_unref(s);
    if (!l->join) lc_recv(l); /* a Join's client sent all it will */
  } else { /* it half-closed before a message: nothing to open */
    lc_final(l, GRPC_STATUS_INVALID_ARGUMENT, "a Session opens with a message");
  }
  RM_DEBUG("relay: lane %u of stream %llu opened", l->lane, u->id);
  lc_unref(r, l); /* the request's */
}

static void on_lc_recv(lc_t *l, int ok)
{
  if (!ok) return; /* the call broke: CLOSE says so */
  if (l->recv) {
    grpc_slice s = bb_slice(l->recv);
    grpc_byte_buffer_destroy(l->recv);
    l->recv = NULL;
    if (lc_laned(l) && !l->has_final) {
      up_queue(l->up, l->lane, &s, 0, 0, 0, asks(s));
      lc_recv(l);
    }
    grpc_slice_unref(s);
  } else if (lc_laned(l) && !l->has_final) {
    /* the worker half-closed, or its process went away: its Session ends
     * OK here, and CLOSE then says which (cancelled: it went away), as
     * the coordinator tells the two apart on a Session of its own */
    lc_final_ex(l, GRPC_STATUS_OK, "", 1);
  }
}

/* The call is over. Its lane still open (the coordinator did not end it):
 * `broken` when the worker went away (the coordinator declares it lost),
 * else `end` (it half-closed). */
static void on_lc_close(lc_t *l)
{
  if (lc_laned(l) && !l->up->ended) {
    up_queue(l->up, l->lane, NULL, 0, !l->cancelled, l->cancelled, 1);
    if (l->cancelled)
      RM_INFO("relay: lane %u: the worker's Session was cancelled (reported broken)", l->lane);
  }
  lc_unlane(l);
  l->has_final = 1; /* nobody to send to */
}

static void on_lc_send(lc_t *l)
{
  l->sending = 0;
  if (l->send_bb) grpc_byte_buffer_destroy(l->send_bb);
  l->send_bb = NULL;
  if (l->final_started) {
    grpc_slice_unref(l->status_slice);
    return;
  }
  lc_next(l);
}

/* ---- what the coordinator sends ---- */
static void up_lanes_end(up_t *u, int code, const char *why)
{
  for (uint32_t n = 1; n < u->cap && u->open; n++)
    if (u->lane[n]) lc_final(u->lane[n], code, why);
}

static void on_up_recv(up_t *u, int ok)
{
  if (!ok || !u->recv) return; /* its end: U_STATUS */
  grpc_slice s = bb_slice(u->recv);
  grpc_byte_buffer_destroy(u->recv);
  u->recv = NULL;
  Ringmaster__V1__RelayResponse *m = ringmaster__v1__relay_response__unpack(
      NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
  grpc_slice_unref(s);
  if (!m) {
    RM_ERROR("relay: a malformed RelayResponse from the coordinator: the stream is cancelled");
    grpc_call_cancel(u->call, NULL);
    return;
  }
  /* SHARED TAIL: a Join answer is its head + a tail of RelayResponse.shared
   * (the peer list, the same for every Join this response answers). Each
   * tail is copied once here and referenced by every lane's message, not
   * copied into each: a relay of K workers would otherwise hold K copies
   * of an O(K)-byte peer list, O(K^2) (4,096 workers: 345 MiB). */
  grpc_slice *tail = m->n_shared ? calloc(m->n_shared, sizeof *tail) : NULL;
  if (m->n_shared && !tail) abort();
  for (size_t i = 0; i < m->n_shared; i++) tail[i] = grpc_empty_slice();
  for (size_t k = 0; k < m->n_out; k++) {
    const Ringmaster__V1__RelayOut *o = m->out[k];
    grpc_slice body[2] = {grpc_empty_slice(), grpc_empty_slice()};
    int nb = 1;
    int has = o->message != NULL || o->join.len || o->join_tail;
    if (o->join_tail && o->join_tail > m->n_shared) {
      RM_ERROR("relay: a Join answer names shared tail %u of %zu: the stream is cancelled",
               o->join_tail, m->n_shared);
      grpc_call_cancel(u->call, NULL);
      break;
    }
    if (o->join.len || o->join_tail) { /* a Join's answer: its bytes + the shared tail */
      body[0] = grpc_slice_from_copied_buffer((const char *)o->join.data, o->join.len);
      if (o->join_tail) {
        grpc_slice *t = &tail[o->join_tail - 1];
        const ProtobufCBinaryData *b = &m->shared[o->join_tail - 1];
        if (!GRPC_SLICE_LENGTH(*t) && b->len)
          *t = grpc_slice_from_copied_buffer((const char *)b->data, b->len);
        body[1] = grpc_slice_ref(*t);
        nb = 2;
      }
    } else if (o->message) {
      size_t len = ringmaster__v1__session_response__get_packed_size(o->message);
      uint8_t *buf = malloc(len ? len : 1);
      if (!buf) abort();
      ringmaster__v1__session_response__pack(o->message, buf);
      body[0] = grpc_slice_new(buf, len, free);
    }
    for (size_t j = 0; j < o->n_lanes; j++) {
      uint32_t n = o->lanes[j];
      lc_t *l = n < u->cap ? u->lane[n] : NULL;
      if (!l) continue; /* reported broken here, or ended already */
      if (has) lc_send(l, body, nb);
      if (o->end) lc_final(l, o->code, o->details);
    }
    grpc_slice_unref(body[0]);
    grpc_slice_unref(body[1]);
  }
  for (size_t i = 0; i < m->n_shared; i++) grpc_slice_unref(tail[i]);
  free(tail);
  ringmaster__v1__relay_response__free_unpacked(m, NULL);
  up_recv(u, 0);
}

static void on_up_status(relay_t *r, up_t *u)
{
  char why[320];
  u->ended = 1;
  snprintf(why, sizeof why, "the relay's stream to the coordinator ended: status %d %.*s",
           (int)u->st, (int)GRPC_SLICE_LENGTH(u->details),
           (const char *)GRPC_SLICE_START_PTR(u->details));
  if (u->closing && u->st == GRPC_STATUS_OK)
    RM_INFO("relay: stream %llu ended: its lane numbers ran out and its last lane ended",
            u->id);
  else if (u->open || !r->stopping)
    RM_WARN("relay: stream %llu: %s (%d lanes open)", u->id, why, u->open);
  up_lanes_end(u, GRPC_STATUS_UNAVAILABLE, why);
  if (r->cur == u) r->cur = NULL;
  up_unref(r, u); /* its own reference */
}

static void on_up_send(relay_t *r, up_t *u)
{
  u->sending = 0;
  if (u->send_bb) grpc_byte_buffer_destroy(u->send_bb);
  u->send_bb = NULL;
  up_flush(r, u, rm__now_ns());
  up_maybe_close(r, u);
}

/* ---- the loop ---- */
static void dispatch(relay_t *r, const grpc_event *e)
{
  int kind = (int)((uintptr_t)e->tag & 7);
  void *p = (void *)((uintptr_t)e->tag & ~(uintptr_t)7);
  if (kind <= L_SEND) {
    lc_t *l = p;
    switch (kind) {
    case L_REQUEST: on_request(r, l, e->success); return; /* its reference taken there */
    case L_RECV: on_lc_recv(l, e->success); break;
    case L_CLOSE: on_lc_close(l); break;
    case L_SEND: on_lc_send(l); break;
    }
    if (l->up && !l->up->ended) {
      up_flush(r, l->up, rm__now_ns());
      up_maybe_close(r, l->up);
    }
    lc_unref(r, l);
    return;
  }
  up_t *u = p;
  switch (kind) {
  case U_SEND: on_up_send(r, u); break;
  case U_RECV: on_up_recv(u, e->success); break;
  case U_STATUS: on_up_status(r, u); break;
  case U_CLOSE: break; /* its status ends it */
  }
  up_unref(r, u); /* the batch's */
}

/* Does something accept connections on unix socket path? */
static int unix_alive(const char *path)
{
  struct sockaddr_un sa;
  if (strlen(path) >= sizeof sa.sun_path) return 0;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path, strlen(path) + 1);
  int alive = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  close(fd);
  return alive;
}

/* HOST:PORT names a loopback host (LISTEN SIDE: plaintext only there). */
static int loopback(const char *listen)
{
  char host[256];
  const char *colon = strrchr(listen, ':');
  size_t hl = colon ? (size_t)(colon - listen) : strlen(listen);
  if (!strncmp(listen, "ipv4:", 5) || !strncmp(listen, "ipv6:", 5)) return 0;
  snprintf(host, sizeof host, "%.*s", (int)(hl < sizeof host ? hl : sizeof host - 1), listen);
  return !strncmp(host, "127.", 4) || !strcmp(host, "[::1]") || !strcmp(host, "localhost");
}

static void usage(FILE *f)
{
  fprintf(f,
          "usage: ringmaster relay --coordinator HOST:PORT [--listen ADDR]\n"
          "                        [--tls-ca PEM --tls-cert PEM --tls-key PEM]\n"
          "  A relay: workers open their Session here (RINGMASTER_RELAY=ADDR in\n"
          "  their environment) and it carries them all on one stream to the\n"
          "  coordinator. ADDR: unix:PATH (default unix:/tmp/ringmaster-relay.sock;\n"
          "  this host's workers) or HOST:PORT: mutual TLS with the TLS files (the\n"
          "  workers of many hosts; the certificate must name HOST), plaintext only\n"
          "  on a loopback HOST. The TLS files also serve the coordinator side, as a\n"
          "  worker's.\n"
          "  Prints \"ringmaster: relay listening on ADDR\" once it listens.\n");
}

int rm_relay_main(int argc, char **argv)
{
  const char *coord = getenv("RINGMASTER_COORDINATOR"), *listen = NULL;
  const char *ca = getenv("RINGMASTER_TLS_CA"), *cert = getenv("RINGMASTER_TLS_CERT"),
             *key = getenv("RINGMASTER_TLS_KEY");
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (!v) {
      usage(stderr);
      return 2;
    }
    if (!strcmp(a, "--coordinator")) coord = v;
    else if (!strcmp(a, "--listen")) listen = v;
    else if (!strcmp(a, "--tls-ca")) ca = v;
    else if (!strcmp(a, "--tls-cert")) cert = v;
    else if (!strcmp(a, "--tls-key")) key = v;
    else {
      usage(stderr);
      return 2;
    }
    i++;
  }
  if (!coord || !coord[0]) {
    usage(stderr);
    return 2;
  }
  if (!listen) listen = "unix:/tmp/ringmaster-relay.sock";
  if (!strncmp(listen, "unix:", 5)) {
    if (unix_alive(listen + 5)) { /* another relay listens there: do not take its socket */
      fprintf(stderr, "ringmaster relay: a relay already listens on %s\n", listen);
      return 1;
    }
    unlink(listen + 5); /* a stale socket of a dead relay */
  }
  if (strncmp(listen, "unix:", 5) && !(ca || cert || key) && !loopback(listen)) {
    fprintf(stderr, "ringmaster relay: --listen %s is not a loopback address: give the TLS "
            "files (--tls-ca, --tls-cert, --tls-key) to serve other hosts over mutual TLS, or "
            "listen on unix:PATH\n", listen);
    return 2;
  }
  rm__log_set_tag("relay");
  const ProtobufCMessageDescriptor *sd = &ringmaster__v1__session_request__descriptor;
  asks_fields = (uint64_t)1 << protobuf_c_message_descriptor_get_field_by_name(sd, "barrier")->id |
                (uint64_t)1 << protobuf_c_message_descriptor_get_field_by_name(sd, "gate")->id;
  relay_t r;
  memset(&r, 0, sizeof r);
  /* lane numbers a stream: LANES_MAX; fewer only to test the streams' turnover */
  const char *lm = getenv("RINGMASTER_RELAY_LANES");
  r.lanes_max = lm && atoi(lm) > 0 && atoi(lm) < (int)LANES_MAX ? (uint32_t)atoi(lm) : LANES_MAX;
  grpc_init();
  char err[160];
  r.ch = rm__channel_open(coord, ca, cert, key, err, sizeof err);
  if (!r.ch) {
    fprintf(stderr, "ringmaster relay: %s\n", err);
    grpc_shutdown();
    return 2;
  }
  r.cq = grpc_completion_queue_create_for_next(NULL);
  r.server = grpc_server_create(NULL, NULL);
  r.reg = grpc_server_register_method(r.server, SESSION_PATH, NULL,
                                      GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
  r.reg_join = grpc_server_register_method(r.server, JOIN_PATH, NULL,
                                           GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
  grpc_server_register_completion_queue(r.server, r.cq, NULL);
  int tls = strncmp(listen, "unix:", 5) && (ca || cert || key);
  grpc_server_credentials *sc = tls ? rm__server_creds_open(ca, cert, key, err, sizeof err)
                                    : grpc_insecure_server_credentials_create();
  int port = sc ? grpc_server_add_http2_port(r.server, listen, sc) : 0;
  if (sc) grpc_server_credentials_release(sc);
  if (!port) {
    if (!sc) fprintf(stderr, "ringmaster relay: %s\n", err);
    fprintf(stderr, "ringmaster relay: cannot listen on %s\n", listen);
    grpc_server_destroy(r.server);
    grpc_completion_queue_shutdown(r.cq);
    while (grpc_completion_queue_next(r.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(r.cq);
    grpc_channel_destroy(r.ch);
    grpc_shutdown();
    return 1;
  }
  grpc_server_start(r.server);
  for (int i = 0; i < REQUESTS; i++) {
    post_request(&r, 0);
    post_request(&r, 1);
  }
  rm__on_stop_signals(on_signal);
  signal(SIGPIPE, SIG_IGN);
  if (!strncmp(listen, "unix:", 5)) printf("ringmaster: relay listening on %s\n", listen);
  else {
    char host[256];
    const char *colon = strrchr(listen, ':');
    size_t hl = colon ? (size_t)(colon - listen) : strlen(listen);
    snprintf(host, sizeof host, "%.*s", (int)hl, listen);
    printf("ringmaster: relay listening on %s:%d\n", host, port);
  }
  fflush(stdout);
  RM_INFO("relay for coordinator %s on %s (%s)", coord, listen,
          tls ? "mutual TLS" : "plaintext");
  static int shutdown_tag;
  while (!stop_flag) {
    int64_t now = rm__now_ns(), wake = now + TICK_MS * 1000000LL;
    for (up_t *u = r.ups; u; u = u->next)
      if (u->nin && !u->sending && !u->ended && u->beat_ns &&
          u->beat_ns + BEAT_MS * 1000000LL < wake)
        wake = u->beat_ns + BEAT_MS * 1000000LL;
    int64_t left = wake - now;
    grpc_event e = grpc_completion_queue_next(
        r.cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                           gpr_time_from_nanos(left > 0 ? left : 0, GPR_TIMESPAN)),
        NULL);
    if (e.type == GRPC_OP_COMPLETE) dispatch(&r, &e);
    now = rm__now_ns();
    for (up_t *u = r.ups, *n; u; u = n) {
      n = u->next;
      up_flush(&r, u, now);
    }
  }
  /* stop: every lane ends UNAVAILABLE, the streams are cancelled, and the
   * queue drains (each wait bounded by the shutdown's own deadline) */
  RM_INFO("relay stopping: %llu lanes over %llu coordinator streams", r.lanes_total,
          r.ups_total);
  r.stopping = 1;
  for (up_t *u = r.ups; u; u = u->next) {
    up_lanes_end(u, GRPC_STATUS_UNAVAILABLE, "the relay is stopping");
    grpc_call_cancel(u->call, NULL);
  }
  grpc_server_shutdown_and_notify(r.server, r.cq, &shutdown_tag);
  int64_t dl = rm__now_ns() + 2000000000LL;
  for (int done = 0; !done;) {
    grpc_event e = grpc_completion_queue_next(
        r.cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(100, GPR_TIMESPAN)),
        NULL);
    if (e.type == GRPC_OP_COMPLETE && e.tag == &shutdown_tag) done = 1;
    else if (e.type == GRPC_OP_COMPLETE) dispatch(&r, &e);
    if (!done && rm__now_ns() > dl) {
      grpc_server_cancel_all_calls(r.server);
      dl = rm__now_ns() + 2000000000LL;
    }
  }
  grpc_server_destroy(r.server);
  grpc_channel_destroy(r.ch);
  grpc_completion_queue_shutdown(r.cq);
  for (;;) {
    grpc_event e = grpc_completion_queue_next(r.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (e.type == GRPC_QUEUE_SHUTDOWN) break;
    if (e.type == GRPC_OP_COMPLETE && e.tag != &shutdown_tag) dispatch(&r, &e);
  }
  grpc_completion_queue_destroy(r.cq);
  grpc_shutdown();
  if (!strncmp(listen, "unix:", 5)) unlink(listen + 5);
  return 0;
}
