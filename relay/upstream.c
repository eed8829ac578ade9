/*
 * upstream.c - the relay's client side: the Relay streams to the
 * coordinator and what comes back on them. Owns an up_t from rm__up_open to
 * its last reference (batches outstanding + lanes naming it). Invariants:
 * one RelayRequest in flight per stream, carrying everything queued
 * meanwhile; lane numbers are never reused on a stream.
 *
 * UPSTREAM (up_t), one Relay stream: created when a Session arrives and
 * there is none, or the newest ended, or its 65,535 lane numbers are used
 * (lane numbers are never reused on a stream; one that is no longer the
 * newest is half-closed once its last lane ended: rm__up_maybe_close). Its
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
 */
#include <grpc/grpc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay_int.h"
#include "ringmaster/v1/messages.pb-c.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_pbwire.h"

void rm__up_unref(relay_t *r, up_t *u)
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
  rm__relay_batch(u->call, u, &u->refs, ops, n, kind, "the coordinator stream");
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

up_t *rm__up_open(relay_t *r)
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
void rm__up_queue(up_t *u, uint32_t lane, grpc_slice *msg, int join, int end, int broken,
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
void rm__up_flush(relay_t *r, up_t *u, int64_t now)
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
void rm__up_maybe_close(relay_t *r, up_t *u)
{
  grpc_op op;
  if (!u || u == r->cur || u->ended || u->closing || u->open || u->nin || u->sending) return;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  u->closing = 1;
  up_batch(u, &op, 1, U_CLOSE);
}

/* ---- what the coordinator sends ---- */
void rm__up_lanes_end(up_t *u, int code, const char *why)
{
  for (uint32_t n = 1; n < u->cap && u->open; n++)
    if (u->lane[n]) rm__lc_final(u->lane[n], code, why);
}

void rm__up_on_recv(up_t *u, int ok)
{
  if (!ok || !u->recv) return; /* its end: U_STATUS */
  grpc_slice s = rm__relay_bb_slice(u->recv);
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
      if (has) rm__lc_send(l, body, nb);
      if (o->end) rm__lc_final(l, o->code, o->details);
    }
    grpc_slice_unref(body[0]);
    grpc_slice_unref(body[1]);
  }
  for (size_t i = 0; i < m->n_shared; i++) grpc_slice_unref(tail[i]);
  free(tail);
  ringmaster__v1__relay_response__free_unpacked(m, NULL);
  up_recv(u, 0);
}

void rm__up_on_status(relay_t *r, up_t *u)
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
  rm__up_lanes_end(u, GRPC_STATUS_UNAVAILABLE, why);
  if (r->cur == u) r->cur = NULL;
  rm__up_unref(r, u); /* its own reference */
}

void rm__up_on_send(relay_t *r, up_t *u)
{
  u->sending = 0;
  if (u->send_bb) grpc_byte_buffer_destroy(u->send_bb);
  u->send_bb = NULL;
  rm__up_flush(r, u, rm__now_ns());
  rm__up_maybe_close(r, u);
}
