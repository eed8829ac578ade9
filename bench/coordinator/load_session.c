/*
 * load_session.c - a client process's streams: each worker's Session
 * (--session 1) or Watch (--session 2), opened after the Join wave and
 * held through the later phases (sess_t, load_client_int.h).
 *
 * SESSIONS (--session 1).  After the Join wave (OPEN) every worker
 * holds one Session stream (service.proto) on its channel, as the worker
 * library does for its whole life, through the barrier, gate and heartbeat
 * phases: created on the client's completion queue with no deadline, its
 * first message (job, token, generation, worker id, step 0) sent with the
 * initial metadata, a RECV_INITIAL_METADATA + RECV_MESSAGE batch and a
 * RECV_STATUS_ON_CLIENT batch posted for its whole life (sess_t).  The
 * coordinator sends nothing but barrier answers while all is well and the
 * job never ends during a run, so any other message received (and a
 * barrier answer outside a BARRIER phase or for no arrival waiting) and any
 * status before the CLOSE phase is a failure, counted (n_bad / n_err, first
 * reason noted) in the result of the phase during which it arrived
 * (sess_fold).  The stream's messages are SessionRequest / SessionResponse
 * (messages.proto: HeartbeatRequest / HeartbeatResponse plus a barrier
 * arrival and its answer).  In the HEARTBEAT
 * phase worker g's beats are messages on its stream at the same schedule as
 * the unary calls, one SEND_MESSAGE batch in flight per stream: a beat due
 * while the previous send is in flight is sent when it completes (n_late).
 * Its latency is send start -> send completion (nothing is answered), n_ok
 * counts the messages sent.  CLOSE half-closes every stream; each must end
 * with status OK (n_ok; else n_err) and no message received (else n_bad).  A
 * stream's call is unreffed once its status and every batch on it completed
 * (sess_release).  Tags: an op's is its index i >= 0, a stream's batch is
 * SESS_TAG(w, kind) < 0, so one queue serves both and next_done() handles
 * stream events arriving during the unary phases.  CLOSE first handles the
 * stream events already queued (a status that came before it is a failure).
 *
 * SESSION BARRIERS AND GATES (--session 1).  BARRIER k sends every worker's arrival as
 * a message on its stream, at once (phase_barrier_sess): a SessionRequest
 * with job, token, generation, worker id, its last step and barrier {name
 * "round-k", timeout_ms T * 1000}, in place of the unary Barrier call.  Its
 * answer is the SessionResponse with `barrier` set that the coordinator
 * sends on the stream at the release, checked as the unary answer; latency
 * = the arrival's send start -> the answer received.  One SEND_MESSAGE in
 * flight per stream still: an arrival due while a send is in flight (none
 * is: heartbeats do not run during the rounds) goes out when it completes
 * (sess_t.bar BS_DUE).  A worker's arrival is settled (s_done) once its
 * answer came (or the stream ended, or the send failed: a failure) and its
 * send completed; the phase waits for all, at most T + 10 s (the unary
 * call's deadline), and counts the rest as errors.  GATE s does the same
 * with a gate call (SessionRequest.gate {ready, wait_ms T * 1000}, step s)
 * in place of the arrival and the SessionResponse.gate its answer
 * (gate_sess_check); the same state (sess_t.bar) tracks it: one owed
 * request per stream, as the coordinator allows.  The opening message asks
 * for pushed decisions (gate_push), as the worker library does, so the
 * worker out of a step also gets the decision unasked, whenever it comes
 * (SessionResponse.gate_pushed): it must be decided, dropped, of this
 * generation, world N with the worker's own rank among those out (else a
 * failure); it settles nothing (every worker here asks, ready).  --session
 * 0 and 2 keep the unary calls.
 *
 * WATCHES (--session 2): the worker library before the Session RPC, for a
 * fair before/after.  OPEN: every worker opens a server-streaming Watch
 * (service.proto) on its channel, no deadline, its one request
 * (WatchRequest: job, token, its worker id, after_seq UINT64_MAX / 2, so no
 * event is ever due) sent with SEND_INITIAL_METADATA and
 * SEND_CLOSE_FROM_CLIENT in one batch (the SK_SEND of sess_t; its
 * completion is "opened"), RECV_INITIAL_METADATA + RECV_MESSAGE and
 * RECV_STATUS_ON_CLIENT posted as for a Session (RECV_INITIAL_METADATA is
 * not in the send batch: the coordinator sends no metadata before a message
 * or the status, so that batch would complete only at the end).  No sends
 * later: heartbeats are the unary calls of --session 0.  As for a Session,
 * any message and any status before CLOSE is a failure.  CLOSE cancels
 * every Watch (grpc_call_cancel: what the worker library did at its close);
 * each must end CANCELLED with no message received.  The coordinator
 * declares a worker whose Watch is cancelled lost and (the job's default
 * on_failure fail) fails the job at the first, and then ends every Watch
 * still open with status OK: one whose OK came before its own cancel took
 * effect ends OK, which after the close is no failure (n_ended counts
 * them).  Nothing the coordinator does after the close is checked.
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "load_client_int.h"
#include "ringmaster/v1/messages.pb-c.h"
#include "rm_clock.h"


/* ---- SESSIONS (see the file comment) ---- */

#define SESS_TEARDOWN (-1) /* s_phase: cancelling; nothing counts */
#define SESS_WHAT(c) (WATCH(c) ? "Watch" : "Session")
#define SESS_WHATS(c) (WATCH(c) ? "Watches" : "Sessions")

/* A stream failure (a message, or a status before the close): counted in
 * the session phase under way, else reported with the next result
 * (sess_fold), whatever phase that is. */
void sess_fail(client_t *c, int bad, const char *fmt, ...)
{
  int *n_err = c->s_res ? &c->s_res->n_err : &c->p_err;
  int *n_bad = c->s_res ? &c->s_res->n_bad : &c->p_bad;
  char *msg = c->s_res ? c->s_res->msg : c->p_msg;
  size_t len = c->s_res ? sizeof c->s_res->msg : sizeof c->p_msg;
  if (bad) (*n_bad)++;
  else (*n_err)++;
  if (msg[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, len, fmt, ap);
  va_end(ap);
}

void sess_fold(client_t *c, load_res_t *res)
{
  res->n_err += c->p_err;
  res->n_bad += c->p_bad;
  if (c->p_msg[0]) note(res, "%s", c->p_msg);
  c->p_err = c->p_bad = 0;
  c->p_msg[0] = 0;
}

/* Unref the call once its status and every batch on it completed. */
static void sess_release(client_t *c, sess_t *s)
{
  if (!s->call || !s->ended || s->sending || s->recving || s->closing) return;
  grpc_call_unref(s->call);
  s->call = NULL;
  if (s->recv) grpc_byte_buffer_destroy(s->recv);
  s->recv = NULL;
  grpc_metadata_array_destroy(&s->md1);
  grpc_metadata_array_destroy(&s->md2);
  grpc_slice_unref(s->details);
  s->details = grpc_empty_slice();
  c->n_live--;
}

static void sess_batch(sess_t *s, const grpc_op *ops, size_t n, int w, int kind)
{
  if (grpc_call_start_batch(s->call, ops, n, SESS_TAG(w, kind), NULL) != GRPC_CALL_OK) abort();
}

/* RECV_MESSAGE (with RECV_INITIAL_METADATA the first time). */
static void sess_recv(sess_t *s, int w, int first)
{
  s->recving = 1;
  recv_start(s->call, first, &s->md1, &s->recv, SESS_TAG(w, SK_RECV));
}

/* One message of local worker w (first: with the initial metadata; bar:
 * a barrier arrival, with step the last beat's; gate: a gate call, with
 * step the gate's; else a beat of step). */
static void sess_send_msg(client_t *c, int w, int first, uint32_t step,
                          Ringmaster__V1__SessionBarrier *bar, Ringmaster__V1__SessionGate *gate)
{
  sess_t *s = &c->sess[w];
  Ringmaster__V1__SessionRequest q = RINGMASTER__V1__SESSION_REQUEST__INIT;
  grpc_op ops[2];
  size_t k = 0;
  q.job_id = c->cfg->job_id;
  q.token = (char *)c->cfg->token;
  q.generation = c->gen;
  q.worker_id = c->wid[w];
  q.step = step;
  q.barrier = bar;
  q.gate = gate;
  q.gate_push = first; /* as the worker library asks (SESSION BARRIERS AND GATES) */
  s->send = pack(&q.base);
  if (!gate) s->step = step; /* beats sent */
  s->send_bar = bar || gate;
  memset(ops, 0, sizeof ops);
  if (first) ops[k++].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[k].op = GRPC_OP_SEND_MESSAGE;
  ops[k++].data.send_message.send_message = s->send;
  s->sending = 1;
  s->t_send = rm__now_ns();
  sess_batch(s, ops, k, w, SK_SEND);
}

static void sess_send(client_t *c, int w, int first, uint32_t step)
{
  sess_send_msg(c, w, first, step, NULL, NULL);
}

#define OWED(c) ((c)->s_phase == LOAD_CMD_GATE ? "gate call" : "barrier arrival")

/* SESSION BARRIERS AND GATES: local worker w's arrival at this round's
 * barrier (GATE: its gate call at step s_round, ready, long poll), as a
 * message on its stream (no send in flight); latency from here. */
static void sess_bar_send(client_t *c, int w)
{
  sess_t *s = &c->sess[w];
  Ringmaster__V1__SessionBarrier b = RINGMASTER__V1__SESSION_BARRIER__INIT;
  Ringmaster__V1__SessionGate g = RINGMASTER__V1__SESSION_GATE__INIT;
  int gate = c->s_phase == LOAD_CMD_GATE;
  b.name = (char *)c->s_bar_name;
  b.timeout_ms = (uint32_t)c->cfg->timeout_s * 1000u;
  g.ready = 1;
  g.wait_ms = (uint32_t)c->cfg->timeout_s * 1000u;
  s->bar = BS_SENT;
  s->t_bar = rm__now_ns();
  sess_send_msg(c, w, 0, gate ? (uint32_t)c->s_round : s->step, gate ? NULL : &b,
                gate ? &g : NULL);
}

/* SESSION BARRIERS: worker w's arrival is answered or failed (counted);
 * it is settled once its send completed too. */
static void sess_bar_settle(client_t *c, sess_t *s)
{
  if (s->sending && s->send_bar) {
    s->bar = BS_SETTLING;
    return;
  }
  s->bar = BS_NONE;
  c->s_done++;
}

/* WATCHES: local worker w's one request, with the initial metadata and the
 * half-close (no event is ever due after after_seq). */
static void watch_send(client_t *c, int w)
{
  sess_t *s = &c->sess[w];
  Ringmaster__V1__WatchRequest q = RINGMASTER__V1__WATCH_REQUEST__INIT;
  grpc_op ops[3];
  q.job_id = c->cfg->job_id;
  q.token = (char *)c->cfg->token;
  q.worker_id = c->wid[w];
  q.after_seq = UINT64_MAX / 2;
  s->send = pack(&q.base);
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = s->send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  s->sending = 1;
  s->t_send = rm__now_ns();
  sess_batch(s, ops, 3, w, SK_SEND);
}

/* Open local worker w's stream (WATCHES: its Watch call): no deadline; the
 * first message (the request), then the receive and status batches it
 * keeps posted. */
static void sess_open(client_t *c, int w)
{
  sess_t *s = &c->sess[w];
  grpc_op op;
  memset(s, 0, sizeof *s);
  s->call = grpc_channel_create_call(c->ch[w % c->cfg->channels], NULL, GRPC_PROPAGATE_DEFAULTS,
                                     c->cq,
                                     grpc_slice_from_static_string(
                                         WATCH(c) ? "/ringmaster.v1.Worker/Watch"
                                                  : "/ringmaster.v1.Worker/Session"),
                                     NULL, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
  grpc_metadata_array_init(&s->md1);
  grpc_metadata_array_init(&s->md2);
  s->details = grpc_empty_slice();
  c->n_live++;
  if (WATCH(c)) watch_send(c, w);
  else sess_send(c, w, 1, 0);
  sess_recv(s, w, 1);
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  op.data.recv_status_on_client.trailing_metadata = &s->md2;
  op.data.recv_status_on_client.status = &s->st;
  op.data.recv_status_on_client.status_details = &s->details;
  sess_batch(s, &op, 1, w, SK_STATUS);
}

/* A stream's batch completed (tag < 0). */
void sess_event(client_t *c, intptr_t tag, int success)
{
  intptr_t v = -1 - tag;
  int w = (int)(v >> 2), kind = (int)(v & 3);
  if (!c->sess || w < 0 || w >= c->n) abort();
  sess_t *s = &c->sess[w];
  load_res_t *r = c->s_res;
  int g = c->cfg->lo + w;
  int64_t now = rm__now_ns();
  if (kind == SK_SEND) {
    int was_bar = s->send_bar;
    s->sending = 0;
    s->send_bar = 0;
    grpc_byte_buffer_destroy(s->send);
    s->send = NULL;
    if (was_bar) { /* SESSION BARRIERS: counted by its answer */
      if (s->bar == BS_SETTLING) { /* answered (or failed) already */
        s->bar = BS_NONE;
        c->s_done++;
      } else if (!success) { /* BS_SENT: no answer will come; or left past a deadline */
        sess_fail(c, 0, "Session of worker %d round %d: the %s was not sent", g, c->s_round,
                  OWED(c));
        if (s->bar == BS_SENT) sess_bar_settle(c, s);
      }
    } else if (c->s_phase == LOAD_CMD_OPEN || c->s_phase == LOAD_CMD_HEARTBEAT) {
      c->s_done++;
      if (success) {
        r->n_ok++;
        c->lat[r->n_lat++] = now - s->t_send;
      } else {
        r->n_err++;
        note(r, "%s of worker %d: the %s was not sent", SESS_WHAT(c), g,
             WATCH(c) ? "request" : c->s_phase == LOAD_CMD_OPEN ? "first message"
                                                               : "heartbeat message");
      }
      if (now > r->t_last) r->t_last = now;
      if (c->s_phase == LOAD_CMD_HEARTBEAT && s->backlog > 0) {
        if (success && !s->ended) { /* the late beat, now */
          s->backlog--;
          sess_send(c, w, 0, s->step + 1);
        } else {
          r->n_err += s->backlog;
          c->s_done += s->backlog;
          note(r, "Session of worker %d: %d heartbeats not sent (stream broken)", g, s->backlog);
          s->backlog = 0;
        }
      }
    }
    if (s->bar == BS_DUE) { /* SESSION BARRIERS: the arrival waited for this send */
      if (success && !s->ended) {
        sess_bar_send(c, w);
      } else {
        sess_fail(c, 0, "Session of worker %d round %d: %s not sent (stream broken)", g,
                  c->s_round, OWED(c));
        s->bar = BS_NONE;
        c->s_done++;
      }
    }
  } else if (kind == SK_RECV) {
    s->recving = 0;
    if (s->recv && WATCH(c)) { /* no event is due after after_seq */
      Ringmaster__V1__Event *m = (void *)unpack(s->recv, &ringmaster__v1__event__descriptor);
      s->got_msg++;
      if (!s->closed) /* after the close, the call's verdict counts it */
        sess_fail(c, 1, "Watch of worker %d: an event came (seq %llu, kind %s)", g,
                  m ? (unsigned long long)m->seq : 0ULL, m && m->kind ? m->kind : "?");
      if (m) protobuf_c_message_free_unpacked(&m->base, NULL);
    } else if (s->recv) { /* nothing but barrier and gate answers while all is well */
      Ringmaster__V1__SessionResponse *m =
          (void *)unpack(s->recv, &ringmaster__v1__session_response__descriptor);
      const Ringmaster__V1__BarrierResponse *b = m ? m->barrier : NULL;
      const Ringmaster__V1__StepGateResponse *gt = m ? m->gate : NULL;
      if (gt && m->gate_pushed) { /* a pushed decision: checked, nothing to settle */
        int mine = 0;
        for (size_t k = 0; k < gt->n_out; k++) mine |= gt->out[k] == c->rank_of[w];
        if (!gt->decided || !gt->dropped || m->generation != c->gen ||
            gt->world != (uint32_t)c->cfg->world || !mine)
          sess_fail(c, 1, "Session of worker %d: a pushed gate decision not about it (step "
                    "%llu, decided %d, dropped %d, generation %llu, world %u, %zu out)", g,
                    (unsigned long long)gt->step, gt->decided, gt->dropped,
                    (unsigned long long)m->generation, gt->world, gt->n_out);
      } else if ((b && s->bar == BS_SENT && c->s_phase == LOAD_CMD_BARRIER) ||
          (gt && s->bar == BS_SENT && c->s_phase == LOAD_CMD_GATE)) { /* its answer */
        if (b) barrier_check(c, b, g, c->s_round, " (Session)", r);
        else gate_sess_check(c, gt, w, r);
        c->lat[r->n_lat++] = now - s->t_bar;
        if (now > r->t_last) r->t_last = now;
        sess_bar_settle(c, s);
      } else {
        s->got_msg++;
        if (s->closed) {
          /* after the close, the stream's verdict counts it */
        } else if (b) {
          sess_fail(c, 1, "Session of worker %d: a barrier answer with no arrival waiting "
                    "(released %d, arrived %u, reason %s)", g, b->released, b->arrived,
                    b->reason && b->reason[0] ? b->reason : "none");
        } else if (gt) {
          sess_fail(c, 1, "Session of worker %d: a gate answer with no call waiting "
                    "(step %llu, decided %d)", g, (unsigned long long)gt->step, gt->decided);
        } else {
          sess_fail(c, 1, "Session of worker %d: a message came (job_state %d, generation "
                    "%llu, reason %s)", g, m ? (int)m->job_state : -1,
                    m ? (unsigned long long)m->generation : 0ULL,
                    m && m->reason ? m->reason : "none");
        }
      }
      if (m) protobuf_c_message_free_unpacked(&m->base, NULL);
    }
    if (s->recv) {
      grpc_byte_buffer_destroy(s->recv);
      s->recv = NULL;
      if (!s->ended) sess_recv(s, w, 0);
    }
  } else if (kind == SK_STATUS) {
    s->ended = 1;
    if (!success && s->st == GRPC_STATUS_OK) s->st = GRPC_STATUS_UNKNOWN;
    const char *d = (const char *)GRPC_SLICE_START_PTR(s->details);
    int dl = (int)GRPC_SLICE_LENGTH(s->details);
    if (s->closed && c->s_phase == LOAD_CMD_CLOSE) { /* the verdict */
      /* WATCHES: CANCELLED, or OK when the coordinator ended it first */
      grpc_status_code want = WATCH(c) ? GRPC_STATUS_CANCELLED : GRPC_STATUS_OK;
      c->s_done++;
      if (s->st != want && !(WATCH(c) && s->st == GRPC_STATUS_OK)) {
        r->n_err++;
        note(r, "%s of worker %d: status %d %.*s after the close", SESS_WHAT(c), g, (int)s->st,
             dl, d);
      } else if (s->got_msg) {
        r->n_bad++;
        note(r, "%s of worker %d: %d messages received", SESS_WHAT(c), g, s->got_msg);
      } else {
        r->n_ok++;
        if (s->st != want) r->n_ended++;
      }
      c->lat[r->n_lat++] = now - s->t_close;
      if (now > r->t_last) r->t_last = now;
    } else if (c->s_phase != SESS_TEARDOWN) {
      sess_fail(c, 0, "%s of worker %d ended before the close: status %d %.*s", SESS_WHAT(c),
                g, (int)s->st, dl, d);
    }
    /* SESSION BARRIERS AND GATES: no answer will come (the failure is counted above) */
    if (s->bar == BS_DUE) {
      s->bar = BS_NONE;
      c->s_done++;
    } else if (s->bar == BS_SENT) {
      sess_bar_settle(c, s);
    }
  } else { /* SK_CLOSE */
    s->closing = 0;
  }
  sess_release(c, s);
}

/* Cancel every open stream and wait (bounded) until each is released. */
void sess_teardown(client_t *c)
{
  if (!c->sess) return;
  c->s_phase = SESS_TEARDOWN;
  c->s_res = NULL;
  for (int w = 0; w < c->n; w++)
    if (c->sess[w].call && !c->sess[w].ended) grpc_call_cancel(c->sess[w].call, NULL);
  int64_t dl = rm__now_ns() + 10 * 1000000000LL;
  while (c->n_live > 0) {
    grpc_event ev = cq_wait(c, dl);
    if (ev.type != GRPC_OP_COMPLETE) break;
    if ((intptr_t)ev.tag < 0) sess_event(c, (intptr_t)ev.tag, ev.success);
  }
  c->s_phase = 0;
  if (c->n_live > 0) { /* batches still write into it: keep it (the process ends) */
    fprintf(stderr, "rm-coord-load: client: %d %s not released\n", c->n_live, SESS_WHATS(c));
    return;
  }
  free(c->sess);
  c->sess = NULL;
}

void phase_open(client_t *c, load_res_t *res)
{
  if (c->sess) { /* opened already: the parent opens once */
    res->n_err++;
    note(res, "%s opened twice", SESS_WHATS(c));
    return;
  }
  c->sess = calloc((size_t)c->n, sizeof *c->sess);
  if (!c->sess) abort();
  c->s_phase = LOAD_CMD_OPEN;
  c->s_res = res;
  c->s_done = 0;
  res->t_first = rm__now_ns();
  for (int w = 0; w < c->n; w++) sess_open(c, w);
  if (stream_wait(c, c->n, rm__now_ns() + (int64_t)(c->cfg->timeout_s + 30) * 1000000000LL)) {
    note(res, "%d %s opens not sent past the deadline", c->n - c->s_done, SESS_WHAT(c));
    res->n_err += c->n - c->s_done;
  }
  c->s_phase = 0;
  c->s_res = NULL;
}

/* SESSION BARRIERS AND GATES: every worker's arrival at "round-k" (kind
 * LOAD_CMD_BARRIER; LOAD_CMD_GATE: its gate call at step k) as a message on
 * its stream at once (after the send in flight, if any), its answer a
 * message on the stream; the checks of phase_barrier (phase_gate), latency
 * send start -> answer, each answer due T + 10 s after the phase starts (a
 * unary call's deadline). */
void phase_owed_sess(client_t *c, int kind, int k, load_res_t *res)
{
  char name[32];
  snprintf(name, sizeof name, "round-%d", k);
  c->s_bar_name = name;
  c->s_round = k;
  c->s_phase = kind;
  c->s_res = res;
  c->s_done = 0;
  res->t_first = rm__now_ns();
  for (int w = 0; w < c->n; w++) {
    sess_t *s = &c->sess[w];
    if (!s->call || s->ended) {
      res->n_err++;
      c->s_done++;
      note(res, "worker %d round %d: %s not sent: its Session ended", c->cfg->lo + w, k,
           OWED(c));
    } else if (s->bar != BS_NONE) { /* cannot be: every round settles or resets */
      res->n_err++;
      c->s_done++;
      note(res, "worker %d round %d: a %s still outstanding", c->cfg->lo + w, k, OWED(c));
    } else if (s->sending) { /* one send in flight per stream: after it */
      s->bar = BS_DUE;
    } else {
      sess_bar_send(c, w);
    }
  }
  if (stream_wait(c, c->n, res->t_first + (int64_t)(c->cfg->timeout_s + 10) * 1000000000LL)) {
    int left = c->n - c->s_done;
    note(res, "%d %s answers not received on the Sessions past the deadline", left,
         c->s_phase == LOAD_CMD_GATE ? "gate" : "barrier");
    res->n_err += left;
    for (int w = 0; w < c->n; w++) /* a late answer is then a failure (sess_fail) */
      c->sess[w].bar = BS_NONE;
  }
  c->s_phase = 0;
  c->s_res = NULL;
  c->s_bar_name = NULL;
}

/* Beat s (0 <= s < S * n) is worker s % n's (s / n)-th, as in
 * phase_heartbeat, as a message on its stream. */
void phase_heartbeat_sess(client_t *c, int secs, load_res_t *res)
{
  int total = secs * c->n, sched = 0;
  int64_t t0 = rm__now_ns();
  int64_t end = t0 + (int64_t)(secs + HEARTBEAT_DEADLINE_S + 5) * 1000000000LL;
  res->t_first = t0;
  c->s_phase = LOAD_CMD_HEARTBEAT;
  c->s_res = res;
  c->s_done = 0;
  while (c->s_done < total) {
    int64_t now = rm__now_ns(), due = 0;
    while (sched < total) {
      int w = sched % c->n, g = c->cfg->lo + w;
      due = beat_due(c, t0, sched);
      if (due > now) break;
      sess_t *s = &c->sess[w];
      if (!s->call || s->ended) {
        res->n_err++;
        c->s_done++;
        note(res, "worker %d: heartbeat not sent: its Session ended", g);
      } else if (s->sending) { /* one send in flight per stream: after it */
        s->backlog++;
        res->n_late++;
      } else {
        sess_send(c, w, 0, (uint32_t)(sched / c->n));
      }
      sched++;
    }
    grpc_event ev = cq_wait(c, sched < total ? due : end);
    if (ev.type == GRPC_OP_COMPLETE) {
      if ((intptr_t)ev.tag < 0) sess_event(c, (intptr_t)ev.tag, ev.success);
    } else if (sched == total) {
      note(res, "%d heartbeat messages not sent past the deadline", total - c->s_done);
      res->n_err += total - c->s_done;
      for (int w = 0; w < c->n; w++) {
        c->sess[w].backlog = 0;
        if (c->sess[w].sending) grpc_call_cancel(c->sess[w].call, NULL);
      }
      break;
    }
  }
  c->s_phase = 0;
  c->s_res = NULL;
}

/* Half-close every open stream (WATCHES: cancel every Watch); each must
 * end OK (WATCHES: CANCELLED) with no message. */
void phase_close(client_t *c, load_res_t *res)
{
  int want = 0;
  /* what came before the close counts as before it (sess_fail) */
  c->s_res = res;
  for (;;) {
    grpc_event ev = cq_wait(c, 0);
    if (ev.type != GRPC_OP_COMPLETE) break;
    if ((intptr_t)ev.tag < 0) sess_event(c, (intptr_t)ev.tag, ev.success);
  }
  c->s_phase = LOAD_CMD_CLOSE;
  c->s_done = 0;
  res->t_first = rm__now_ns();
  for (int w = 0; c->sess && w < c->n; w++) {
    sess_t *s = &c->sess[w];
    if (!s->call || s->ended) continue; /* counted where it ended */
    if (s->sending) {                   /* cannot be: every send completed */
      res->n_err++;
      note(res, "%s of worker %d: a send in flight at the close", SESS_WHAT(c), c->cfg->lo + w);
      grpc_call_cancel(s->call, NULL);
      continue;
    }
    if (WATCH(c)) { /* the worker library's close: its transport cancels it */
      s->closed = 1;
      s->t_close = rm__now_ns();
      grpc_call_cancel(s->call, NULL);
      want++;
      continue;
    }
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    s->closed = 1;
    s->closing = 1;
    s->t_close = rm__now_ns();
    sess_batch(s, &op, 1, w, SK_CLOSE);
    want++;
  }
  if (stream_wait(c, want, rm__now_ns() + (int64_t)(HEARTBEAT_DEADLINE_S + 20) * 1000000000LL)) {
    note(res, "%d %s without a status %d s after the close", want - c->s_done, SESS_WHATS(c),
         HEARTBEAT_DEADLINE_S + 20);
    res->n_err += want - c->s_done;
  }
  sess_teardown(c); /* waits for the last receive batches; frees the streams */
  c->s_res = NULL;
}

