/*
 * server_out.c - the outbox: every answer and stream message a handler or
 * the core queues (rm__reply, rm__reply_tail(_gz), rm__park_answer,
 * rm__stream_send, rm__session_push*), and how each leaves after COMMIT
 * (rm__rpc_out_flush) or becomes the storage failure when the section was
 * rolled back (rm__rpc_out_fail). Also the packed answers many calls
 * share (rm__blob_t) and their deflated tails.
 *
 * Invariants: an entry is queued only under c->mu and holds a reference
 * of its call; a call gets one final answer (claim_answer: the first
 * wins, and unlinks its parks); a Session carries one batch at a time,
 * in the order the flush saw them (later[], rm__session_next; SESSIONS in
 * server_group.c), its final one last; a relay lane's entries go to its
 * relay (relay.c PENDING), never to a grpc_call.
 *
 * DURABILITY. Nothing here changes what is durable or when an answer
 * leaves: every answer is still queued under c->mu and started by
 * rm__rpc_out_flush after COMMIT (core/commit.c), whatever queue or batch
 * carries it, so a coordinator SIGKILL loses no acknowledged event.
 *
 * GZIP ANSWERS. A formed JoinResponse carries all N peers,
 * so a join wave sends O(N^2) bytes (16,384 workers: 9.4 GB, most of the
 * wave); a decided StepGateResponse carries N member bytes, so every step
 * of a gated job sends O(N^2) bytes too (16,384: 268 MB a step). A client
 * that says it decodes gzip (JoinRequest / StepGateRequest.accept_gzip:
 * the C-core server cannot read grpc-accept-encoding) gets such an answer
 * as one gzip member (rm__reply_tail_gz): the per-call head in a stored
 * block (a StepGate answer's head is empty), the shared part (the
 * generation's peer list and spec; the step's decided answer) deflated
 * ONCE (the blob's zslice,
 * made by the first such answer, shared by reference by every later one)
 * and an 8-byte trailer (format and proof of validity: gz_answer.c). It is
 * sent as a compressed byte buffer (grpc_raw_compressed_byte_buffer_create:
 * the core flags it compressed and does not compress it again) with
 * grpc-internal-encoding-request: gzip in the initial metadata (the
 * compression filter turns it into grpc-encoding: gzip). Every other
 * answer, and every answer to a client that did not ask, is exactly what
 * it was. Durability is unchanged: it is queued and sent like any answer.
 * zlib level 1 (GZ_LEVEL), deflated under the lock once per generation:
 * 16,384 peers of rm-coord-load (571 KB) give 109 KB in 3 ms (level 6: 95
 * KB in 22 ms); a table with random IPv4 addresses, ports and
 * shared-memory nonces (1.4 MB) gives 2.1x in 19 ms (level 6: 2.2x in 70
 * ms); 65,536 such peers: 83 ms. A StepGate answer of 16,384 members
 * (N - 1 ones) deflates to about 50 bytes.
 *
 * RELAYS (relay.c, the design there). A Relay call is a stream
 * like a Session (streaming, the same RECV loop and end), but its
 * messages carry many lanes: each lane is an rm__call_t without a
 * grpc_call (`up` its relay), handled by the Session's or Join's own
 * handler. rm__rpc_out_flush hands a lane's answers and the relay's own end to
 * relay.c (rm__relay_out), which batches them into the relay's next
 * message after the flush (rm__relay_kick_all); on_send of a relay
 * continues its batches (rm__relay_on_send).
 */
#include <grpc/compression.h>
#include <grpc/grpc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/gz_answer.h"
#include "rpc/rpc_int.h"
#include "rpc/server_int.h"
#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_pbwire.h"

#define GZ_LEVEL 1 /* zlib level of the shared tail (GZIP ANSWERS) */
#define SESSION_PUSH_BELOW 4 /* SESSIONS: a push only when fewer are queued */

/* Outbox entries whose room outlives the flush that emptied it; a group
 * that answered more (a released barrier of thousands) frees its room. */
#define OUTBOX_KEEP 256


/* GZIP ANSWERS: the call's encoding, asked of gRPC's compression
 * filter in the initial metadata (it sets grpc-encoding and leaves a
 * message sent as a compressed byte buffer as it is). */
static grpc_metadata gzip_md;

/* A call's gRPC part (only for a call whose k->up is NULL: a lane has
 * none, RELAYS). */
#define G(k) rm__gcall(k)

rm__park_t *rm__call_park(rm__call_t *call) { return &call->park; }

static grpc_slice packed(const ProtobufCMessage *m)
{
  size_t len = protobuf_c_message_get_packed_size(m);
  if (!len) return grpc_empty_slice();
  uint8_t *buf = rm__xmalloc(len);
  protobuf_c_message_pack(m, buf);
  return grpc_slice_new(buf, len, free);
}

static grpc_byte_buffer *pack(const ProtobufCMessage *m)
{
  grpc_slice s = packed(m);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

void rm__out_push(rm_coord_t *c, rm__call_t *k, int code,
                     const char *details, grpc_byte_buffer *bb)
{
  if (k->up) { /* RELAYS: into its relay's pending entries (relay.c PENDING) */
    rm__relay_push(c, k, code, details, bb);
    if (code < 0) return;
    details = NULL, bb = NULL; /* an end: its entry here retires the lane at the flush */
  }
  if (c->rpc->nout == c->rpc->capout) {
    c->rpc->capout = c->rpc->capout ? 2 * c->rpc->capout : 16;
    c->rpc->out = rm__xrealloc(c->rpc->out, c->rpc->capout * sizeof *c->rpc->out);
  }
  rm__out_t *o = &c->rpc->out[c->rpc->nout++];
  o->call = k;
  o->code = code;
  o->details = details ? rm__xstrdup(details) : NULL;
  o->bb = bb;
  __atomic_add_fetch(&k->refs, 1, __ATOMIC_ACQ_REL); /* held by the outbox */
}

/* The call's one final answer starts here: 0 if it already has one. */
static int claim_answer(rm__call_t *k)
{
  if (k->answered) return 0;
  k->answered = 1;
  rm__park_unlink(&k->park);
  if (k->wpark) rm__park_unlink(k->wpark); /* SESSIONS: a barrier or step gate it waited on */
  return 1;
}

int rm__call_claim(rm__call_t *k) { return claim_answer(k); }

void rm__reply(rm_coord_t *c, rm__call_t *k, int code, const char *details,
               const ProtobufCMessage *resp)
{
  if (!claim_answer(k)) return;
  if (code != GRPC_STATUS_OK) c->ctr.grpc_errors_total++;
  rm__out_push(c, k, code, details ? details : "",
           code == GRPC_STATUS_OK && resp ? pack(resp) : NULL);
}

struct rm__blob {
  rm__blob_release_fn release; /* first: rm__blob_release (model.h) */
  grpc_slice slice;
  /* GZIP ANSWERS: slice deflated, made by the first gzip answer */
  int gz_state;       /* 0 not yet, 1 made, -1 failed (answers go plain) */
  grpc_slice zslice;  /* the raw deflate stream, shared */
  rm__gz_tail_t gz;   /* its length and CRC (gz.z is owned by zslice) */
};

rm__blob_t *rm__blob_pack(const ProtobufCMessage *m)
{
  rm__blob_t *b = rm__xcalloc(1, sizeof *b);
  b->release = rm__blob_unref;
  b->slice = packed(m);
  return b;
}

void rm__blob_unref(rm__blob_t *b)
{
  if (!b) return;
  grpc_slice_unref(b->slice);
  if (b->gz_state == 1) grpc_slice_unref(b->zslice);
  free(b);
}

/* The blob's deflate stream, made once (under c->mu, like every use of a
 * blob); 0 when it cannot be had. */
static int blob_gz(rm__blob_t *b)
{
  if (!b->gz_state) {
    int64_t t0 = rm__now_ns();
    b->gz_state = rm__gz_tail_make(GRPC_SLICE_START_PTR(b->slice),
                                   GRPC_SLICE_LENGTH(b->slice), GZ_LEVEL, &b->gz)
                      ? -1 : 1;
    if (b->gz_state == 1) {
      b->zslice = grpc_slice_new(b->gz.z, b->gz.zlen, free);
      b->gz.z = NULL;
      RM_DEBUG("shared answer tail: %zu bytes deflated to %zu in %.1f ms",
               b->gz.len, b->gz.zlen, (double)(rm__now_ns() - t0) / 1e6);
    } else {
      RM_WARN("deflating a shared answer tail failed: its answers go uncompressed");
    }
  }
  return b->gz_state == 1;
}

/* A relay lane's answer is never gzip: it travels inside a RelayResponse
 * (relay.c), whose Join answers share their tail by reference instead. */
void rm__call_accept_gzip(rm__call_t *k, int yes)
{
  if (!k->up) G(k)->gzip_ok = yes;
}

/* One message: head's bytes (taken; an empty slice: none) then body's
 * (referenced, not copied: a shared answer). */
static grpc_byte_buffer *head_then(grpc_slice head, grpc_slice body)
{
  grpc_slice parts[2] = {head, grpc_slice_ref(body)};
  int skip = GRPC_SLICE_LENGTH(head) == 0;
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(parts + skip, 2 - (size_t)skip);
  grpc_slice_unref(parts[0]);
  grpc_slice_unref(parts[1]);
  return bb;
}

void rm__reply_tail(rm_coord_t *c, rm__call_t *k, const ProtobufCMessage *head,
                    rm__blob_t *tail)
{
  if (!claim_answer(k)) return;
  rm__out_push(c, k, GRPC_STATUS_OK, "", head_then(packed(head), tail->slice));
}

/* GZIP ANSWERS: the answer as one gzip member (gz_answer.c): the
 * head in a stored block, the shared deflated tail, an 8-byte trailer, sent
 * with grpc-encoding gzip (gzip, rm__rpc_out_flush). Plain rm__reply_tail
 * for a relay lane, when the client did not ask, when its initial
 * metadata is already out (the encoding rides in it), or when the tail
 * cannot be deflated. */
void rm__reply_tail_gz(rm_coord_t *c, rm__call_t *k, const ProtobufCMessage *head,
                       rm__blob_t *tail)
{
  size_t hlen = protobuf_c_message_get_packed_size(head);
  if (k->up || !G(k)->gzip_ok || G(k)->md_sent || hlen > RM__GZ_HEAD_MAX || !blob_gz(tail)) {
    rm__reply_tail(c, k, head, tail);
    return;
  }
  if (!claim_answer(k)) return;
  uint8_t *buf = rm__xmalloc(RM__GZ_HEAD_OVERHEAD + hlen), trailer[RM__GZ_TRAILER];
  protobuf_c_message_pack(head, buf + RM__GZ_HEAD_OVERHEAD);
  rm__gz_head(buf, hlen);
  rm__gz_trailer(trailer, buf + RM__GZ_HEAD_OVERHEAD, hlen, &tail->gz);
  grpc_slice parts[3] = {grpc_slice_new(buf, RM__GZ_HEAD_OVERHEAD + hlen, free),
                         grpc_slice_ref(tail->zslice),
                         grpc_slice_from_copied_buffer((const char *)trailer, sizeof trailer)};
  grpc_byte_buffer *bb = grpc_raw_compressed_byte_buffer_create(parts, 3, GRPC_COMPRESS_GZIP);
  for (int i = 0; i < 3; i++) grpc_slice_unref(parts[i]);
  G(k)->gzip = 1;
  rm__out_push(c, k, GRPC_STATUS_OK, "", bb);
}

/* SESSIONS: SessionResponse.barrier's, .gate's, .gate_pushed's and
 * .generation's field numbers (rm__out_init). */
static int session_barrier_field, session_gate_field, session_pushed_field,
    session_generation_field;

static int session_field(const char *name)
{
  return (int)protobuf_c_message_descriptor_get_field_by_name(
             &ringmaster__v1__session_response__descriptor, name)->id;
}

void rm__out_init(void)
{
  gzip_md.key = grpc_slice_from_static_string(GRPC_COMPRESSION_REQUEST_ALGORITHM_MD_KEY);
  gzip_md.value = grpc_slice_from_static_string("gzip");
  session_barrier_field = session_field("barrier");
  session_gate_field = session_field("gate");
  session_pushed_field = session_field("gate_pushed");
  session_generation_field = session_field("generation");
}

rm__park_t *rm__call_wpark(rm__call_t *k) { return k->wpark; }
rm__park_t *rm__call_wpark_make(rm__call_t *k)
{
  if (!k->wpark) k->wpark = rm__xcalloc(1, sizeof *k->wpark);
  return k->wpark;
}
int rm__park_on_stream(const rm__park_t *p)
{
  return p == p->call->wpark;
}

/* A SessionResponse: (pushed_gen > 0: generation = pushed_gen and
 * gate_pushed = true, then) body's bytes as field `field`, framed by its
 * key and length (body referenced, not copied). */
static grpc_byte_buffer *framed(uint64_t pushed_gen, int field, grpc_slice body)
{
  uint8_t head[40];
  size_t n = 0;
  if (pushed_gen) {
    n = rm__pb_varint(head, n, (uint64_t)session_generation_field << 3); /* wire type varint */
    n = rm__pb_varint(head, n, pushed_gen);
    n = rm__pb_varint(head, n, (uint64_t)session_pushed_field << 3);
    n = rm__pb_varint(head, n, 1);
  }
  n = rm__pb_varint(head, n, (uint64_t)field << 3 | 2); /* length-delimited */
  n = rm__pb_varint(head, n, GRPC_SLICE_LENGTH(body));
  return head_then(grpc_slice_from_copied_buffer((const char *)head, n), body);
}

/* The call's own park ends the call with the answer; a Session's barrier
 * or gate park (SESSIONS) gets it as a message of the stream: a
 * SessionResponse whose `barrier` or `gate` is the answer's bytes, framed
 * by its key and length, so a shared answer is not copied. */
void rm__park_answer(rm_coord_t *c, rm__park_t *p, const ProtobufCMessage *resp,
                     rm__blob_t *shared)
{
  rm__call_t *k = p->call;
  if (!rm__park_on_stream(p)) {
    if (!claim_answer(k)) return;
    rm__out_push(c, k, GRPC_STATUS_OK, "",
             shared ? head_then(grpc_empty_slice(), shared->slice) : pack(resp));
    return;
  }
  rm__park_unlink(p);
  if (k->answered) return; /* the stream is over */
  grpc_slice body = shared ? grpc_slice_ref(shared->slice) : packed(resp);
  rm__out_push(c, k, -1, NULL,
           framed(0, p->kind == RM__PARK_BARRIER ? session_barrier_field : session_gate_field,
                  body));
  grpc_slice_unref(body);
}

void rm__session_push(rm_coord_t *c, rm__call_t *k, uint64_t gen, rm__blob_t *shared)
{
  if (k->answered || (k->up ? !rm__relay_room(k) : G(k)->nlater >= SESSION_PUSH_BELOW))
    return;
  rm__out_push(c, k, -1, NULL, framed(gen, session_gate_field, shared->slice));
}

void rm__session_push_msg(rm_coord_t *c, rm__call_t *k, const ProtobufCMessage *m)
{
  if (k->answered || (k->up ? !rm__relay_room(k) : G(k)->nlater >= SESSION_PUSH_BELOW))
    return;
  rm__out_push(c, k, -1, NULL, pack(m));
}

void rm__stream_send(rm_coord_t *c, rm__call_t *k, const ProtobufCMessage *msg)
{
  if (k->answered) return;
  k->park.watch_sending = 1;
  rm__out_push(c, k, -1, NULL, pack(msg));
}

/* Start one queued answer's batch (the outbox reference becomes the
 * batch's); frees its details. */
void rm__start_out(rm__call_t *k, rm__out_t *o)
{
  rm__gcall_t *g = G(k);
  grpc_op ops[4];
  size_t n = 0;
  memset(ops, 0, sizeof ops);
  if (!g->md_sent) {
    if (g->gzip) { /* GZIP ANSWERS: grpc-encoding gzip */
      ops[n].data.send_initial_metadata.count = 1;
      ops[n].data.send_initial_metadata.metadata = &gzip_md;
    }
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    g->md_sent = 1;
  }
  if (o->bb) {
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = o->bb;
    g->send_bb = o->bb;
  }
  if (o->code >= 0) {
    g->status_slice = grpc_slice_from_copied_string(o->details);
    g->has_status_slice = 1;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)o->code;
    ops[n++].data.send_status_from_server.status_details = &g->status_slice;
    if (!g->close_started) { /* CLOSE WITH THE ANSWER */
      g->close_started = 1;
      ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
      ops[n++].data.recv_close_on_server.cancelled = &k->cancelled;
    }
  }
  if (grpc_call_start_batch(g->call, ops, n, rm__tag(k, T_SEND), NULL) != GRPC_CALL_OK) {
    RM_WARN("grpc_call_start_batch (reply) failed");
    g->sending = 0;
    if (g->close_deferred) { /* no batch will give the park's back */
      g->close_deferred = 0;
      rm__call_unref(k);
    }
    rm__call_unref(k);
  }
  free(o->details);
}

/* SESSIONS: a stream carries one batch at a time (gRPC allows one message
 * in flight), in the order they were queued: the next one starts when
 * none is in flight (after COMMIT: every queued one came through
 * rm__rpc_out_flush; or from on_send, after the one before it). */
void rm__session_next(rm__call_t *k)
{
  rm__gcall_t *g = G(k);
  if (g->sending || !g->nlater) return;
  rm__out_t o = g->later[0];
  memmove(&g->later[0], &g->later[1], (size_t)--g->nlater * sizeof o);
  g->sending = 1;
  if (o.code >= 0) g->final_started = 1;
  rm__start_out(k, &o);
}

/* The section was rolled back (core/commit.c): nothing it queued may go
 * out as it is. A final answer becomes the storage failure; a stream's
 * message (a Watch event, a Session push) ends the stream with it instead,
 * once (a stream that already has its final queued just loses the
 * message), so the client reconnects as after a coordinator restart and
 * reads only what is stored. Relay lanes' entries went to their relay's
 * pending entries when queued: rm__relay_fail ends each lane they name
 * with the same failure (relay.c ROLLED BACK); a lane's entry here (its
 * end's retirement) and a relay's own end stay as they are. */
void rm__rpc_out_fail(rm_coord_t *c, int full, const char *why)
{
  size_t k = 0;
  int code = full ? RM__GRPC_RESOURCE_EXHAUSTED : RM__GRPC_UNAVAILABLE;
  char msg[256];
  snprintf(msg, sizeof msg, "storage: %s (%s); nothing of this call was stored, retry later",
           full ? "the coordinator's disk is full" : "the coordinator cannot write its database",
           why && *why ? why : "write failed");
  for (size_t i = 0; i < c->rpc->nout; i++) {
    rm__out_t o = c->rpc->out[i];
    rm__call_t *call = o.call;
    if (call->up || call->method == RM__M_RELAY) {
      c->rpc->out[k++] = o;
      continue;
    }
    if (o.code < 0 && !claim_answer(call)) { /* its final is queued: drop the message */
      if (o.bb) grpc_byte_buffer_destroy(o.bb);
      free(o.details);
      rm__call_unref(call);
      continue;
    }
    if (o.bb) grpc_byte_buffer_destroy(o.bb);
    free(o.details);
    o.bb = NULL;
    o.code = code;
    o.details = rm__xstrdup(msg);
    c->ctr.grpc_errors_total++;
    c->rpc->out[k++] = o;
  }
  c->rpc->nout = k;
  rm__relay_fail(c, code, msg);
}

void rm__rpc_out_flush(rm_coord_t *c)
{
  for (size_t i = 0; i < c->rpc->nout; i++) {
    rm__out_t *o = &c->rpc->out[i];
    rm__call_t *k = o->call;
    if (k->up || k->method == RM__M_RELAY) { /* RELAYS: a lane's, a relay's own */
      rm__relay_out(c, o);
      continue;
    }
    if (!k->streaming) {
      rm__start_out(k, o);
      continue;
    }
    if (G(k)->nlater == SESSION_QUEUE) { /* never: pushes stop at SESSION_PUSH_BELOW,
                                        * then a barrier, a gate, the end */
      RM_ERROR("session: %d answers queued behind one in flight; one dropped",
               SESSION_QUEUE);
      if (o->bb) grpc_byte_buffer_destroy(o->bb);
      free(o->details);
      rm__call_unref(k);
      continue;
    }
    if (!G(k)->later) G(k)->later = rm__xmalloc(SESSION_QUEUE * sizeof *G(k)->later);
    G(k)->later[G(k)->nlater++] = *o; /* with the outbox's reference */
    rm__session_next(k);
  }
  c->rpc->nout = 0;
  if (c->rpc->capout > OUTBOX_KEEP) { /* a fan-out's room goes with it (RSS) */
    free(c->rpc->out);
    c->rpc->out = NULL;
    c->rpc->capout = 0;
  }
  rm__relay_kick_all(c);
}
