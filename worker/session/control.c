/*
 * control.c - unary gRPC calls from the agent (C core client API).
 *
 * One batch per call: SEND_INITIAL_METADATA, SEND_MESSAGE,
 * SEND_CLOSE_FROM_CLIENT, RECV_INITIAL_METADATA, RECV_MESSAGE,
 * RECV_STATUS_ON_CLIENT, plucked from a queue created for the call, with the
 * call's deadline as the only wait.
 *
 * SESSION STREAMS (rm__ctl_stream_*, rm__ctl_session_*): a call without a
 * deadline on a queue of its own (created for next), so it ends only when
 * the server ends it, the connection breaks, or rm__ctl_stream_cancel. Its
 * batches, one tag each (at most one of each outstanding):
 *
 *   tag     ops                                         posted
 *   STATUS  [SEND_INITIAL_METADATA, SEND_MESSAGE,       Watch: at open, all
 *           SEND_CLOSE_FROM_CLIENT,] RECV_INITIAL_      in one batch; Session:
 *           METADATA, RECV_STATUS_ON_CLIENT             the bracketed part
 *                                                       goes in SEND
 *   SEND    [SEND_INITIAL_METADATA,] SEND_MESSAGE       Session: at open (with
 *                                                       the first message),
 *                                                       then by stream_send
 *   RECV    RECV_MESSAGE                                Session: at open,
 *                                                       re-posted by next
 *
 * PENDING SLOT. gRPC allows one message in flight per call. A send that
 * finds one in flight either gives up (rm__ctl_stream_send: a heartbeat,
 * which the one in flight stands for) or takes the call's one pending slot
 * (rm__ctl_stream_send_queued: a barrier arrival, which must go): the owner
 * starts it when it sees the in-flight one complete, so messages leave in
 * the order they were sent or queued and a later heartbeat cannot overtake
 * a queued one. A slot already taken, or a call that ended before the
 * queued message started, is reported to no one: the message is dropped
 * with the call (the caller learns of the end from next).
 *
 * Invariants:
 *  1. `sending` is 1 from the moment a SEND batch is started (by a sender
 *     or open) until the owner sees its tag complete with nothing pending
 *     (else it starts the pending one and `sending` stays 1); `out` is the
 *     message in flight, `pending` the one queued behind it, send_t0_ms the
 *     in-flight one's start (what a busy sender is told). All four change
 *     under `mu` only, which is never held while waiting on the queue.
 *  2. The owner (the one thread in next/wait/free) alone reads the queue,
 *     so recv_posted, status_done and `in` need no lock; `ended` is set by
 *     the owner and read by senders, under mu (so no
 *     pending message starts once it is set).
 *  3. free cancels the call, sets `ended`, shuts the queue down and takes
 *     events until GRPC_QUEUE_SHUTDOWN: every outstanding batch has then
 *     completed, its buffers are released as its tag comes out, and a
 *     pending message is released unsent.
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "rm_channel.h"
#include "rm_log.h"
#include "rm_clock.h"

/* The coordinator's disk is full (RESOURCE_EXHAUSTED whose words start
 * "storage:", coordinator/core/commit.c): nothing was stored and the call
 * may be made again, so it counts as UNAVAILABLE here and every caller's
 * retry with back-off (the one it has for a coordinator restart) applies;
 * a message over the size limit keeps RESOURCE_EXHAUSTED. */
static int storage_retry(grpc_status_code status, grpc_slice details)
{
  if (status == GRPC_STATUS_RESOURCE_EXHAUSTED && GRPC_SLICE_LENGTH(details) >= 8 &&
      !memcmp(GRPC_SLICE_START_PTR(details), "storage:", 8))
    return GRPC_STATUS_UNAVAILABLE;
  return (int)status;
}

struct rm__ctl {
  grpc_channel *ch;
};

rm__ctl_t *rm__ctl_open(const char *addr, const char *ca, const char *cert,
                        const char *key, char *err, size_t errlen)
{
  rm__ctl_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  grpc_init();
  if (!(c->ch = rm__channel_open(addr, ca, cert, key, err, errlen))) {
    grpc_shutdown();
    free(c);
    return NULL;
  }
  return c;
}

void rm__ctl_close(rm__ctl_t *c)
{
  if (!c) return;
  grpc_channel_destroy(c->ch);
  free(c);
  grpc_shutdown();
}

static grpc_byte_buffer *pack(const ProtobufCMessage *m)
{
  size_t len = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) return NULL;
  protobuf_c_message_pack(m, buf);
  grpc_slice s = grpc_slice_new(buf, len, free);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

static ProtobufCMessage *unpack(grpc_byte_buffer *bb,
                                const ProtobufCMessageDescriptor *d)
{
  grpc_byte_buffer_reader rd;
  ProtobufCMessage *m = NULL;
  if (!bb || !grpc_byte_buffer_reader_init(&rd, bb)) return NULL;
  grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
  m = protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
  grpc_slice_unref(s);
  grpc_byte_buffer_reader_destroy(&rd);
  return m;
}

int rm__ctl_call(rm__ctl_t *c, const char *method, const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *resp_desc,
                 ProtobufCMessage **resp, int timeout_ms, char *msg,
                 size_t msglen)
{
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
  grpc_slice path = grpc_slice_from_static_string(method);
  grpc_call *call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS,
                                             cq, path, NULL, dl, NULL);
  grpc_metadata_array md_in, md_trail;
  grpc_byte_buffer *send = pack(req), *recv = NULL;
  grpc_status_code status = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  grpc_op ops[6];
  int rc;
  grpc_metadata_array_init(&md_in);
  grpc_metadata_array_init(&md_trail);
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_in;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &md_trail;
  ops[5].data.recv_status_on_client.status = &status;
  ops[5].data.recv_status_on_client.status_details = &details;
  *resp = NULL;
  if (grpc_call_start_batch(call, ops, 6, (void *)1, NULL) == GRPC_CALL_OK)
    grpc_completion_queue_pluck(cq, (void *)1, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  rc = storage_retry(status, details);
  snprintf(msg, msglen, "%.*s", (int)GRPC_SLICE_LENGTH(details),
           (const char *)GRPC_SLICE_START_PTR(details));
  if (rc == GRPC_STATUS_OK) {
    *resp = unpack(recv, resp_desc);
    if (!*resp) {
      rc = GRPC_STATUS_INTERNAL;
      snprintf(msg, msglen, "malformed answer from the coordinator");
    }
  }
  grpc_slice_unref(details);
  grpc_metadata_array_destroy(&md_in);
  grpc_metadata_array_destroy(&md_trail);
  if (recv) grpc_byte_buffer_destroy(recv);
  if (send) grpc_byte_buffer_destroy(send);
  grpc_call_unref(call);
  grpc_completion_queue_shutdown(cq);
  grpc_completion_queue_destroy(cq);
  return rc;
}

/* ---- session streams ---- */
enum { T_STATUS = 1, T_SEND, T_RECV };
#define TAG(t) ((void *)(intptr_t)(t))

struct rm__ctl_stream {
  grpc_completion_queue *cq;
  grpc_call *call;
  pthread_mutex_t mu;           /* invariant 1 */
  grpc_byte_buffer *out;        /* the SEND in flight (invariant 1) */
  grpc_byte_buffer *pending;    /* PENDING SLOT: queued behind it */
  grpc_byte_buffer *in;         /* the RECV's message (owner) */
  grpc_metadata_array md_in, md_trail;
  grpc_status_code status;
  grpc_slice details;
  int bidi;
  int status_done, recv_posted; /* owner */
  int sending;                  /* invariant 1 */
  int64_t send_t0_ms;
  int ended;                    /* invariant 2 */
};

static rm__ctl_stream_t *stream_new(rm__ctl_t *c, const char *method)
{
  rm__ctl_stream_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->cq = grpc_completion_queue_create_for_next(NULL);
  s->call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq,
                                     grpc_slice_from_static_string(method), NULL,
                                     gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  pthread_mutex_init(&s->mu, NULL);
  s->status = GRPC_STATUS_UNKNOWN;
  s->details = grpc_empty_slice();
  grpc_metadata_array_init(&s->md_in);
  grpc_metadata_array_init(&s->md_trail);
  return s;
}

/* The STATUS batch; a Watch passes its request: its send ops lead. */
static int start_status(rm__ctl_stream_t *s, grpc_byte_buffer *send)
{
  grpc_op ops[5];
  size_t n = 0;
  memset(ops, 0, sizeof ops);
  if (send) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = send;
    ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  }
  ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[n++].data.recv_initial_metadata.recv_initial_metadata = &s->md_in;
  ops[n].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[n].data.recv_status_on_client.trailing_metadata = &s->md_trail;
  ops[n].data.recv_status_on_client.status = &s->status;
  ops[n++].data.recv_status_on_client.status_details = &s->details;
  return grpc_call_start_batch(s->call, ops, n, TAG(T_STATUS), NULL) == GRPC_CALL_OK ? 0 : -1;
}

/* Under mu (or before the call is shared): the SEND batch of bb (taken:
 * it becomes `out`, or is destroyed when the batch cannot start) with
 * `sending` set (invariant 1); first adds the initial metadata. */
static int start_send(rm__ctl_stream_t *s, grpc_byte_buffer *bb, int first)
{
  grpc_op ops[2];
  size_t n = 0;
  if (!bb) return -1;
  s->out = bb;
  memset(ops, 0, sizeof ops);
  if (first) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[n].op = GRPC_OP_SEND_MESSAGE;
  ops[n++].data.send_message.send_message = s->out;
  s->sending = 1;
  s->send_t0_ms = rm__now_ms();
  if (grpc_call_start_batch(s->call, ops, n, TAG(T_SEND), NULL) == GRPC_CALL_OK) return 0;
  grpc_byte_buffer_destroy(s->out);
  s->out = NULL;
  s->sending = 0;
  s->send_t0_ms = 0;
  return -1;
}

static int start_recv(rm__ctl_stream_t *s)
{
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &s->in;
  s->recv_posted = grpc_call_start_batch(s->call, &op, 1, TAG(T_RECV), NULL) == GRPC_CALL_OK;
  return s->recv_posted ? 0 : -1;
}

rm__ctl_stream_t *rm__ctl_stream_open(rm__ctl_t *c, const char *method,
                                      const ProtobufCMessage *req)
{
  rm__ctl_stream_t *s = stream_new(c, method);
  if (!s) return NULL;
  /* the request lives in `out` until free: the STATUS batch reads it */
  s->out = pack(req);
  if (!s->call || !s->out || start_status(s, s->out) < 0) {
    rm__ctl_stream_free(s); /* cancels; drains what did start */
    return NULL;
  }
  return s;
}

rm__ctl_stream_t *rm__ctl_session_open(rm__ctl_t *c, const char *method,
                                       const ProtobufCMessage *first)
{
  rm__ctl_stream_t *s = stream_new(c, method);
  if (!s) return NULL;
  s->bidi = 1;
  /* the first message is in flight until its SEND completes */
  if (!s->call || start_send(s, pack(first), 1) < 0 || start_status(s, NULL) < 0 ||
      start_recv(s) < 0) {
    rm__ctl_stream_free(s);
    return NULL;
  }
  return s;
}

/* Both sends: 1 started, 2 queued (queue only), 0 busy, -1 ended or failed. */
static int stream_send(rm__ctl_stream_t *s, const ProtobufCMessage *msg, int queue,
                       int64_t *busy_ms)
{
  int rc;
  if (!s->bidi) return -1;
  pthread_mutex_lock(&s->mu);
  if (s->ended) {
    rc = -1;
  } else if (!s->sending) {
    rc = start_send(s, pack(msg), 0) == 0 ? 1 : -1;
  } else if (queue && !s->pending) {
    rc = (s->pending = pack(msg)) ? 2 : -1;
  } else {
    if (busy_ms) *busy_ms = s->send_t0_ms ? rm__now_ms() - s->send_t0_ms : 0;
    rc = 0;
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int rm__ctl_stream_send(rm__ctl_stream_t *s, const ProtobufCMessage *msg,
                        int64_t *busy_ms)
{
  return stream_send(s, msg, 0, busy_ms);
}

int rm__ctl_stream_send_queued(rm__ctl_stream_t *s, const ProtobufCMessage *msg)
{
  return stream_send(s, msg, 1, NULL);
}

int rm__ctl_stream_unsent(rm__ctl_stream_t *s)
{
  pthread_mutex_lock(&s->mu);
  int unsent = s->pending != NULL;
  pthread_mutex_unlock(&s->mu);
  return unsent;
}

/* Owner: one event of the queue; releases what its batch held. Returns the
 * tag, 0 for GRPC_QUEUE_SHUTDOWN. */
static int take_event(rm__ctl_stream_t *s)
{
  grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  if (ev.type != GRPC_OP_COMPLETE) return 0;
  int tag = (int)(intptr_t)ev.tag;
  if (tag == T_STATUS) {
    s->status_done = 1;
    s->status = (grpc_status_code)storage_retry(s->status, s->details);
    pthread_mutex_lock(&s->mu);
    s->ended = 1;
    pthread_mutex_unlock(&s->mu);
  } else if (tag == T_SEND) {
    pthread_mutex_lock(&s->mu);
    grpc_byte_buffer_destroy(s->out);
    s->out = NULL;
    s->sending = 0;
    s->send_t0_ms = 0;
    if (s->pending && !s->ended) { /* PENDING SLOT: its turn */
      grpc_byte_buffer *bb = s->pending;
      s->pending = NULL;
      start_send(s, bb, 0);
    }
    pthread_mutex_unlock(&s->mu);
  } else if (tag == T_RECV) {
    s->recv_posted = 0;
    if (!ev.success && s->in) { /* not expected; never leak it */
      grpc_byte_buffer_destroy(s->in);
      s->in = NULL;
    }
  }
  return tag;
}

static void copy_details(rm__ctl_stream_t *s, char *msg, size_t msglen)
{
  snprintf(msg, msglen, "%.*s", (int)GRPC_SLICE_LENGTH(s->details),
           (const char *)GRPC_SLICE_START_PTR(s->details));
}

int rm__ctl_stream_next(rm__ctl_stream_t *s, const ProtobufCMessageDescriptor *resp_desc,
                        ProtobufCMessage **msg, int *status, char *detail,
                        size_t detaillen)
{
  /* the status may come out before the last message's RECV: the call has
   * ended, so that RECV completes at once; messages go first */
  while (!s->status_done || s->recv_posted) {
    if (take_event(s) != T_RECV || !s->in) continue;
    ProtobufCMessage *m = unpack(s->in, resp_desc);
    grpc_byte_buffer_destroy(s->in);
    s->in = NULL;
    if (!s->status_done) start_recv(s);
    if (!m) {
      RM_WARN("session stream: a message from the coordinator that is not a %s: dropped",
              resp_desc->name);
      continue;
    }
    *msg = m;
    return 1;
  }
  *status = (int)s->status;
  copy_details(s, detail, detaillen);
  return 0;
}

int rm__ctl_stream_wait(rm__ctl_stream_t *s, char *msg, size_t msglen)
{
  while (!s->status_done) take_event(s);
  copy_details(s, msg, msglen);
  return (int)s->status;
}

void rm__ctl_stream_cancel(rm__ctl_stream_t *s)
{
  if (s && s->call) grpc_call_cancel(s->call, NULL);
}

void rm__ctl_stream_free(rm__ctl_stream_t *s)
{
  if (!s) return;
  rm__ctl_stream_cancel(s); /* a no-op on an ended call */
  pthread_mutex_lock(&s->mu);
  s->ended = 1; /* invariant 3: nothing pending starts now */
  pthread_mutex_unlock(&s->mu);
  grpc_completion_queue_shutdown(s->cq);
  while (take_event(s)) {} /* invariant 3 */
  if (s->call) grpc_call_unref(s->call);
  grpc_completion_queue_destroy(s->cq);
  if (s->out) grpc_byte_buffer_destroy(s->out); /* a Watch's request */
  if (s->pending) grpc_byte_buffer_destroy(s->pending);
  if (s->in) grpc_byte_buffer_destroy(s->in);
  grpc_slice_unref(s->details);
  grpc_metadata_array_destroy(&s->md_in);
  grpc_metadata_array_destroy(&s->md_trail);
  pthread_mutex_destroy(&s->mu);
  free(s);
}
