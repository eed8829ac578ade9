/*
 * local.c - the relay's server side: a worker's Session or Join call
 * here, and its lane on the newest upstream stream (upstream.c). Owns an
 * lc_t from its request (rm__lc_post_request) to its last batch
 * (rm__lc_unref). Invariants: one message in flight per call, sent in the
 * order queued, the final status last; a lane is in its stream's table
 * only while neither side ended it (lc_laned).
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
 */
#include <grpc/grpc.h>
#include <stdlib.h>
#include <string.h>

#include "relay_int.h"
#include "ringmaster/v1/messages.pb-c.h"
#include "rm_log.h"
#include "rm_pbwire.h"

void rm__lc_unref(relay_t *r, lc_t *l)
{
  if (--l->refs) return;
  if (l->call) grpc_call_unref(l->call);
  grpc_metadata_array_destroy(&l->md);
  if (l->recv) grpc_byte_buffer_destroy(l->recv);
  for (int i = 0; i < l->nq; i++)
    for (int k = 0; k < l->q[i].n; k++) grpc_slice_unref(l->q[i].part[k]);
  free(l->q);
  free(l->final_details);
  if (l->up) rm__up_unref(r, l->up);
  free(l);
}

static void lc_batch(lc_t *l, const grpc_op *ops, size_t n, int kind)
{
  rm__relay_batch(l->call, l, &l->refs, ops, n, kind, "a worker's Session");
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
void rm__lc_send(lc_t *l, const grpc_slice *part, int n)
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

void rm__lc_final(lc_t *l, int code, const char *details)
{
  lc_final_ex(l, code, details, 0);
}

void rm__lc_post_request(relay_t *r, int join)
{
  lc_t *l = calloc(1, sizeof *l);
  if (!l) abort();
  grpc_metadata_array_init(&l->md);
  l->refs = 1;
  l->join = join;
  if (grpc_server_request_registered_call(r->server, join ? r->reg_join : r->reg, &l->call,
                                          &l->deadline, &l->md, &l->recv, r->cq, r->cq,
                                          rm__relay_tag(l, L_REQUEST)) !=
      GRPC_CALL_OK) {
    RM_ERROR("relay: grpc_server_request_registered_call failed");
    rm__lc_unref(r, l);
  }
}

/* SessionRequest's barrier and gate fields as rm__pb_fields bits (6 and 7;
 * set by rm__lc_init from the descriptor). */
static uint64_t asks_fields;

void rm__lc_init(void)
{
  const ProtobufCMessageDescriptor *sd = &ringmaster__v1__session_request__descriptor;
  asks_fields = (uint64_t)1 << protobuf_c_message_descriptor_get_field_by_name(sd, "barrier")->id |
                (uint64_t)1 << protobuf_c_message_descriptor_get_field_by_name(sd, "gate")->id;
}

/* Does a SessionRequest's bytes carry a barrier arrival or a gate call?
 * Then it goes at once; a heartbeat alone may wait BEAT_MS. Read from the
 * wire, not unpacked (this runs for every heartbeat); malformed bytes go
 * at once too, and the coordinator ends the Session over them. */
static int asks(grpc_slice s)
{
  uint64_t f = rm__pb_fields(GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s));
  return (f & 1) || (f & asks_fields);
}

void rm__lc_on_request(relay_t *r, lc_t *l, int ok)
{
  grpc_op op;
  if (!ok) { /* shutting down */
    rm__lc_unref(r, l);
    return;
  }
  if (!r->stopping) rm__lc_post_request(r, l->join);
  if (!r->cur || r->cur->ended || r->cur->next_lane > r->lanes_max) {
    up_t *old = r->cur;
    r->cur = rm__up_open(r);
    rm__up_maybe_close(r, old); /* its lanes may all have ended already */
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
    grpc_slice s = rm__relay_bb_slice(l->recv);
    grpc_byte_buffer_destroy(l->recv);
    l->recv = NULL;
    rm__up_queue(u, l->lane, &s, l->join, 0, 0, 1);
    grpc_slice_unref(s);
    if (!l->join) lc_recv(l); /* a Join's client sent all it will */
  } else { /* it half-closed before a message: nothing to open */
    rm__lc_final(l, GRPC_STATUS_INVALID_ARGUMENT, "a Session opens with a message");
  }
  RM_DEBUG("relay: lane %u of stream %llu opened", l->lane, u->id);
  rm__lc_unref(r, l); /* the request's */
}

void rm__lc_on_recv(lc_t *l, int ok)
{
  if (!ok) return; /* the call broke: CLOSE says so */
  if (l->recv) {
    grpc_slice s = rm__relay_bb_slice(l->recv);
    grpc_byte_buffer_destroy(l->recv);
    l->recv = NULL;
    if (lc_laned(l) && !l->has_final) {
      rm__up_queue(l->up, l->lane, &s, 0, 0, 0, asks(s));
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
void rm__lc_on_close(lc_t *l)
{
  if (lc_laned(l) && !l->up->ended) {
    rm__up_queue(l->up, l->lane, NULL, 0, !l->cancelled, l->cancelled, 1);
    if (l->cancelled)
      RM_INFO("relay: lane %u: the worker's Session was cancelled (reported broken)", l->lane);
  }
  lc_unlane(l);
  l->has_final = 1; /* nobody to send to */
}

void rm__lc_on_send(lc_t *l)
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
