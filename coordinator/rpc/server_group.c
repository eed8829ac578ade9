/*
 * server_group.c - a group of completions handled as one section
 * (GROUP COMMIT): what each completion of a queue means (a request, a
 * message read, a send finished, a close) and the handler it reaches.
 * server.c's threads gather the group (rm__group_run); this file prepares
 * each completion without the lock, runs every handler under one
 * rm__lock ... rm__commit, then frees what the group held.
 *
 * Invariants: a handler runs only under c->mu, in queue order; a call's
 * memory outlives every completion of the group that names it (references
 * are dropped after COMMIT); a call left open after its dispatch has its
 * close started (or deferred) before the lock is released, so whoever
 * answers it later knows whether the close rides with the answer.
 *
 * GROUP COMMIT. A thread takes the completion it waited for and,
 * when it is busy, every completion already queued (zero deadline), up to
 * group_max (RINGMASTER_COORD_GROUP, default 128, read once), and handles
 * them as one section. Busy: the wait for the first one took under 50 us
 * (completions were queued or came at once) and it is not the end of one
 * of our own sends (those come right after every answer): a zero-deadline
 * poll that finds nothing costs an epoll_wait and gRPC's poll work, which
 * doubled the polls per heartbeat at 4,096 a second when every group
 * ended in one. The section: parse the payloads without the lock, then rm__lock (BEGIN;
 * rm__lock_ro when none of them writes a row: heartbeats, finished sends,
 * normal closes), every handler in queue order, rm__commit (COMMIT, then
 * every answer they queued, commit.c), then free requests and drop call
 * references. A join wave of N used to be N transactions (about 10 WAL
 * page writes each); a group of G arrivals is one. Why it stays correct
 * after a coordinator SIGKILL: an answer is still queued under the lock
 * and started only by rm__rpc_out_flush after the COMMIT that made every row
 * of its group durable, so nothing acknowledged is lost; a SIGKILL before
 * that COMMIT loses the group's rows and no client has been answered for
 * any of them (each retries, as after a SIGKILL before a single-call
 * COMMIT). Handlers see the same state they would one call at a time (the
 * lock is held across the group, so no other thread interleaves; within
 * the group they run in queue order). The cost: an answer of a group's
 * first call waits for the rest of the group (bounded by group_max
 * handlers, ~1 ms), and the lock is held that long (REST callers wait at
 * most as long).
 *
 * CLOSE WITH THE ANSWER. A call answered before it was parked
 * (Heartbeat, ReportStep, every error, the last arrival of a barrier) has
 * nothing to unpark, so its RECV_CLOSE_ON_SERVER rides in its final batch
 * (rm__rpc_out_flush, close_started = 0): one batch and one completion fewer
 * per unary call, and no outstanding tag while it is handled. Its on_close
 * would have been a no-op: an answered call is unlinked (rm__reply), so
 * rm__park_drop returns at once, and answered is already 1. A call parked
 * or streaming has its T_CLOSE started before the lock is released, i.e.
 * before any other thread can answer it, so whoever answers it later sees
 * close_started = 1 and sends a batch without it, as before; a client that
 * went away before that still completes T_CLOSE (cancelled = 1) at once.
 *
 * A parked BARRIER call defers its close the same way (close_deferred):
 * its park holds one more reference instead of a T_CLOSE batch, and its
 * answer's batch carries the RECV_CLOSE. A barrier round then leaves no
 * outstanding tag per waiter (the debug tag walk of SHARDS was ~30% of a
 * round with one queue), whatever the number of queues. What a barrier
 * park's T_CLOSE did is only unlinking it (rm__park_drop: nothing else for
 * RM__PARK_BARRIER); a waiter whose client went away now stays linked
 * until its barrier closes, and its answer's batch fails at once. Every
 * BARRIER park is answered: RELEASED or BROKEN (its deadline, a member
 * lost, a new generation, the job ending, rm__server_stop), barrier.c,
 * and a park is unlinked only by its answer or its close (model.c), so the
 * extra reference always comes back (on_send). The cost: a cancelled
 * waiter's memory lives until its barrier's deadline at the latest, and
 * its wait counts in barrier_wait_seconds. Join, Watch and StepGate parks
 * keep their T_CLOSE: their cancellation frees a slot or declares a
 * worker lost (recovery.c detection source 2).
 *
 * SESSIONS. Session (service.proto) is the one bidirectional
 * stream: each agent keeps one open for its life in the job, and its
 * heartbeats are messages on it, not calls: no call set up, answered and
 * torn down per heartbeat (measured: a unary heartbeat ~19-23 us of
 * coordinator CPU at 16,384 a second, a stream message ~11 us with naps),
 * and one parked call per worker instead of a session Watch plus a
 * heartbeat call. Its first message arrives with the call (REGISTERED
 * METHODS; or by T_RECV on the generic path); each message is parsed in
 * step 1 (session_in: EV_SESSION, or EV_SESSION_END when the client
 * half-closed or the call broke) and handled under the lock
 * (on_session_msg -> rpc.c on_session), which starts the next
 * RECV_MESSAGE while the call is open. The pending RECV_MESSAGE is also
 * how its end is seen, so a session holds ONE outstanding tag (no T_CLOSE:
 * the debug tag walk of SHARDS is per outstanding tag). A message may
 * carry a barrier arrival: it waits in the call's second park (wpark,
 * linked only while the call is open, so a RECV or the dispatch holds the
 * call's memory; claim_answer and on_session_end unlink it) and is
 * answered by a message of the stream (rm__park_answer: the released
 * barrier's shared packed answer framed as SessionResponse.barrier, not
 * copied). A step-gate call waits the same way in the same park (one of
 * the two at a time, rpc.c on_session: then a RM__PARK_GATE in j->parked,
 * which the gate's walks answer like any parked StepGate), answered as
 * SessionResponse.gate: a decided step's answer is packed once per step
 * in the stream's form (the ranks out of the step, not a mask: no gzip on
 * a stream) and shared; where the unary
 * call would get FAILED_PRECONDITION (rm__rpc_answer_stale) the stream ends
 * with it. gRPC allows one message in flight per call, so a stream's
 * batches queue on the call (later[], in the order rm__rpc_out_flush saw them,
 * all after their COMMIT) and start one at a time (rm__session_next, server_out.c: from
 * rm__rpc_out_flush, and from on_send when the one before completed); the
 * final one (rm__reply: a failed check, the job ended, shutdown) is last.
 * When the client ends it
 * (on_session_end), the final OK goes with RECV_CLOSE_ON_SERVER, and the
 * park stays linked until that batch completes: on_send then drops it with
 * the batch's `cancelled`, so a process that died (its transport cancelled
 * the call) declares its worker lost (rm__park_drop), one that
 * half-closed does not. That close and a barrier arrival (its barrier's
 * row when it closes it) are the session events that write rows
 * (ev_writes), and a gate call (it may write an event, as the unary
 * call may). Naps
 * count Session messages as heartbeats, but for barrier arrivals and gate
 * calls (a round's arrivals are never napped between). Each open session keeps one tag
 * outstanding on its queue, so every completion there walks them (SHARDS:
 * the debug cq_check_tag), as each session Watch's T_CLOSE did before
 * (rm-coord-load, 4,096 workers, unary barriers: barrier-phase CPU 0.69 s
 * without streams, 0.85 s with a session each; with the barriers on the
 * sessions 0.63 s: no parked call, fewer completions). Sessions on a queue and thread of
 * their own were measured and left out: 22.5 -> 35.2 us a heartbeat (a
 * futex wake-up per completion polled on the other thread), 26 -> 30 KB
 * of RSS per worker, and no shorter barrier rounds.
 *
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rpc/rpc_int.h"
#include "rpc/server_int.h"
#include "rm_log.h"
#include "rm_token.h"

/* A call's gRPC part (only for a call whose k->up is NULL: a lane has
 * none, RELAYS). */
#define G(k) rm__gcall(k)

/* ---- events on the queue ---- */
static int find_method(const grpc_slice *m)
{
  for (int i = 0; i < RM__M_COUNT; i++) {
    size_t len = strlen(rm__methods[i].path);
    if (GRPC_SLICE_LENGTH(*m) == len &&
        !memcmp(GRPC_SLICE_START_PTR(*m), rm__methods[i].path, len))
      return i;
  }
  return -1;
}

static void start_ops(rm__call_t *k, grpc_op *ops, size_t n, int kind)
{
  __atomic_add_fetch(&k->refs, 1, __ATOMIC_ACQ_REL);
  if (grpc_call_start_batch(G(k)->call, ops, n, rm__tag(k, kind), NULL) !=
      GRPC_CALL_OK) {
    RM_WARN("grpc_call_start_batch failed");
    rm__call_unref(k);
  }
}

/* A call left open by its dispatch (parked, streaming) starts T_CLOSE
 * (CLOSE WITH THE ANSWER). Under c->mu. */
static void start_close(rm__call_t *k)
{
  grpc_op op;
  if (k->answered || G(k)->close_started || G(k)->close_deferred) return;
  if (k->park.next && k->park.kind == RM__PARK_BARRIER) {
    G(k)->close_deferred = 1; /* the park's reference, back in on_send */
    __atomic_add_fetch(&k->refs, 1, __ATOMIC_ACQ_REL);
    return;
  }
  G(k)->close_started = 1;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &k->cancelled;
  start_ops(k, &op, 1, T_CLOSE);
}

/* Which token the call carried: RM__AUTH_ADMIN (the API token, or none is
 * configured, or a worker method, which checks its job's token itself),
 * RM__AUTH_READ (the read token), 0. */
static int admin_ok(rm_coord_t *c, rm__call_t *k)
{
  const char *tok = c->opt.admin_token, *rd = c->opt.read_token;
  if (!tok || !rm__methods[k->method].admin) return RM__AUTH_ADMIN;
  for (size_t i = 0; i < G(k)->md.count; i++) {
    const grpc_metadata *m = &G(k)->md.metadata[i];
    const char *v = (const char *)GRPC_SLICE_START_PTR(m->value);
    size_t vl = GRPC_SLICE_LENGTH(m->value);
    if (grpc_slice_str_cmp(m->key, "authorization") != 0 || vl <= 7 ||
        strncasecmp(v, "Bearer ", 7))
      continue;
    if (rm__ct_memeq(tok, v + 7, vl - 7)) return RM__AUTH_ADMIN;
    if (rd && *rd && rm__ct_memeq(rd, v + 7, vl - 7)) return RM__AUTH_READ;
  }
  return 0;
}

/* ---- GROUP COMMIT: a section per group of completions (ev_t,
 * server_int.h) ---- */
static ProtobufCMessage *parse(rm__call_t *k)
{
  ProtobufCMessage *msg = NULL;
  grpc_byte_buffer_reader rd;
  if (G(k)->recv && grpc_byte_buffer_reader_init(&rd, G(k)->recv)) {
    grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
    msg = protobuf_c_message_unpack(rm__methods[k->method].req, NULL, GRPC_SLICE_LENGTH(s),
                                    GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    grpc_byte_buffer_reader_destroy(&rd);
  }
  return msg;
}

/* SESSIONS: a message of the stream (parsed; its buffer freed, so the
 * next RECV_MESSAGE can take its place), or its end (the client
 * half-closed, or the call broke). */
static void session_in(rm__call_t *k, ev_t *e, int ok)
{
  if (ok && G(k)->recv) {
    e->kind = EV_SESSION;
    e->msg = parse(k);
  } else {
    e->kind = EV_SESSION_END;
  }
  if (G(k)->recv) grpc_byte_buffer_destroy(G(k)->recv);
  G(k)->recv = NULL;
}

/* Step 1, no lock (the request was reposted by gather). */
static void ev_prepare(rm_coord_t *c, ev_t *e)
{
  rm__call_t *k = e->k;
  rm__gcall_t *g = G(k); /* an event: a gRPC call */
  e->unrefs = 1; /* the completed batch's (or request's) reference */
  if (e->kind == T_REQUEST) {
    if (!e->ok) { /* server shutting down */
      e->kind = EV_SKIP;
      return;
    }
    if (!g->registered) k->method = find_method(&g->details.method);
    k->streaming = k->method == RM__M_SESSION || k->method == RM__M_RELAY;
    if (k->method < 0) {
      e->kind = EV_UNKNOWN;
    } else if (g->registered && k->streaming) { /* its first message came with it */
      session_in(k, e, 1);
    } else if (g->registered) { /* the payload came with the call */
      e->kind = EV_DISPATCH;
      e->msg = parse(k);
    } else { /* generic: read the message first (T_RECV) */
      grpc_op op;
      memset(&op, 0, sizeof op);
      op.op = GRPC_OP_RECV_MESSAGE;
      op.data.recv_message.recv_message = &g->recv;
      start_ops(k, &op, 1, T_RECV);
      e->kind = EV_SKIP;
    }
  } else if (e->kind == T_RECV && k->streaming) {
    session_in(k, e, e->ok);
  } else if (e->kind == T_RECV) {
    e->kind = EV_DISPATCH;
    if (e->ok) e->msg = parse(k);
    else if (g->recv) { /* no message after all */
      grpc_byte_buffer_destroy(g->recv);
      g->recv = NULL;
    }
  }
}

/* Does the group write rows? (A Heartbeat, a Session heartbeat, a
 * finished send and a normal close write none: the mutex without BEGIN,
 * commit.c.) */
/* A parsed Session message that asks for an answer (a barrier arrival or
 * a gate call), not a heartbeat alone; a Relay message that may write rows
 * (rm__relay_writes). */
static int stream_asks(const ev_t *e)
{
  const Ringmaster__V1__SessionRequest *q = (const void *)e->msg;
  if (e->kind == EV_SESSION && e->k->method == RM__M_RELAY) /* RELAYS */
    return rm__relay_writes((const void *)e->msg);
  return e->kind == EV_SESSION && q && (q->barrier || q->gate);
}

static int ev_writes(const ev_t *e)
{
  /* a Session message with a barrier arrival may close the barrier (its
   * row); one with a gate call may write an event (straggler_auto), as the
   * unary StepGate may */
  if (e->kind == EV_SESSION) return stream_asks(e);
  return (e->kind == EV_DISPATCH && e->k->method != RM__M_HEARTBEAT) ||
         ((e->kind == T_CLOSE || (e->kind == T_SEND && e->k->streaming)) &&
          e->k->cancelled);
}

static void on_dispatch(rm_coord_t *c, ev_t *e)
{
  rm__call_t *k = e->k;
  const rm__method_t *m = &rm__methods[k->method];
  c->ctr.grpc_calls_total++;
  if (!G(k)->recv) {
    rm__reply(c, k, GRPC_STATUS_INVALID_ARGUMENT, "no request message", NULL);
  } else if (!e->msg) {
    char why[160];
    snprintf(why, sizeof why, "malformed %s message", m->req->name);
    rm__reply(c, k, GRPC_STATUS_INVALID_ARGUMENT, why, NULL);
  } else if (c->closing) {
    rm__reply(c, k, GRPC_STATUS_UNAVAILABLE, "coordinator shutting down", NULL);
  } else {
    rm__rpc_dispatch(c, k, k->method, e->msg, admin_ok(c, k));
  }
  start_close(k); /* only when still open */
}

/* SESSIONS: one message, under the lock. Writes no row (a heartbeat's
 * checks, or linking the park). The next RECV_MESSAGE starts here, while
 * the call is open. */
static void on_session_msg(rm_coord_t *c, ev_t *e)
{
  rm__call_t *k = e->k;
  grpc_op op;
  if (k->answered) return; /* ended by an answer already */
  if (k->method == RM__M_RELAY) { /* RELAYS: its lanes' messages */
    rm__relay_msg(c, k, (const void *)e->msg);
  } else {
    if (k->park.kind == RM__PARK_SESSION) c->ctr.session_messages_total++;
    else c->ctr.grpc_calls_total++; /* its opening message */
    if (!e->msg) {
      rm__reply(c, k, GRPC_STATUS_INVALID_ARGUMENT, "malformed ringmaster.v1.SessionRequest "
                "message on a Session", NULL);
    } else if (c->closing) {
      rm__reply(c, k, GRPC_STATUS_UNAVAILABLE, "coordinator shutting down", NULL);
    } else {
      rm__rpc_dispatch(c, k, k->method, e->msg, admin_ok(c, k));
    }
  }
  if (k->answered) return;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &G(k)->recv;
  start_ops(k, &op, 1, T_RECV);
}

/* SESSIONS: the stream ended from the client's side (half-close: it
 * leaves; or the call broke). Its final status OK goes with its
 * RECV_CLOSE_ON_SERVER; the park stays linked until that batch says
 * whether the client went away (on_send), so a broken session still
 * declares its worker lost. */
static void on_session_end(rm_coord_t *c, ev_t *e)
{
  rm__call_t *k = e->k;
  if (k->method == RM__M_RELAY) {
    rm__relay_end(c, k);
    return;
  }
  if (k->answered) return;
  k->answered = 1;
  if (k->wpark) rm__park_unlink(k->wpark); /* a barrier or step gate it waited on: nobody to tell */
  rm__out_push(c, k, GRPC_STATUS_OK, "", NULL);
}

/* Writes no row (a Watch reads the next event), but for a broken
 * Session's close (SESSIONS). */
static void on_send(rm_coord_t *c, ev_t *e)
{
  rm__call_t *k = e->k;
  rm__gcall_t *g = G(k); /* an event: a gRPC call */
  if (g->send_bb) grpc_byte_buffer_destroy(g->send_bb);
  g->send_bb = NULL;
  if (g->has_status_slice) grpc_slice_unref(g->status_slice);
  g->has_status_slice = 0;
  if (k->park.kind == RM__PARK_WATCH && !k->answered) {
    k->park.watch_sending = 0;
    rm__watch_next(c, &k->park);
  }
  if (g->close_deferred && k->answered) { /* the park's reference */
    g->close_deferred = 0;
    e->unrefs++;
  }
  /* SESSIONS: the next queued batch; after the final one (its park is
   * still linked when the client ended it, on_session_end), the close */
  if (k->method == RM__M_RELAY) {
    rm__relay_on_send(c, k);
  } else if (k->streaming) {
    g->sending = 0;
    if (g->final_started) rm__park_drop(c, &k->park, k->cancelled);
    else rm__session_next(k);
  }
}

/* A normal close only unparks; a cancelled call may declare its worker
 * lost (rows). */
static void on_close(rm_coord_t *c, ev_t *e)
{
  rm__call_t *k = e->k;
  rm__park_drop(c, &k->park, k->cancelled);
  if (k->cancelled) k->answered = 1;
}

/* Step 2, under the group's lock. */
static void ev_locked(rm_coord_t *c, ev_t *e)
{
  switch (e->kind) {
  case EV_DISPATCH: on_dispatch(c, e); break;
  case EV_UNKNOWN:
    c->ctr.grpc_calls_total++;
    rm__reply(c, e->k, GRPC_STATUS_UNIMPLEMENTED, "unknown method", NULL);
    break;
  case T_SEND: on_send(c, e); break;
  case T_CLOSE: on_close(c, e); break;
  case EV_SESSION: on_session_msg(c, e); break;
  case EV_SESSION_END: on_session_end(c, e); break;
  default: break;
  }
}

/* NAPS (server.c): is a prepared completion a heartbeat (a Heartbeat call, a
 * Session message without a barrier arrival or gate call), another new
 * call or message (1 in *other), or neither? */
static int ev_heartbeat(const ev_t *e, int *other)
{
  int hb = (e->kind == EV_DISPATCH && e->k->method == RM__M_HEARTBEAT) ||
           (e->kind == EV_SESSION && e->msg && !stream_asks(e));
  *other |= !hb && (e->kind == EV_DISPATCH || e->kind == EV_SESSION || e->kind == EV_UNKNOWN);
  return hb;
}

/* One group: its completions in the order the queue gave them, every
 * handler inside one section, so their rows share one COMMIT and their
 * answers leave after it (DURABILITY, server_out.c). */
int rm__group_run(rm_coord_t *c, ev_t *ev, int n, int *others)
{
  int writes = 0, locked = 0, calls = 0;
  for (int i = 0; i < n; i++) {
    ev_prepare(c, &ev[i]);
    writes |= ev_writes(&ev[i]);
    locked |= ev[i].kind != EV_SKIP;
    calls += ev_heartbeat(&ev[i], others);
  }
  if (locked) {
    if (writes) rm__lock(c);
    else rm__lock_ro(c);
    for (int i = 0; i < n; i++) ev_locked(c, &ev[i]);
    rm__commit(c);
  }
  for (int i = 0; i < n; i++) {
    if (ev[i].msg) protobuf_c_message_free_unpacked(ev[i].msg, NULL);
    while (ev[i].unrefs-- > 0) rm__call_unref(ev[i].k);
  }
  return calls;
}
