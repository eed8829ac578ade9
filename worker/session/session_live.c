/*
 * session_live.c - how the coordinator knows a session is alive, and how a
 * session learns that the coordinator moved on.
 *
 * HEARTBEATS. A thread sends a heartbeat every heartbeat_interval_ms (the
 * coordinator's figure from Join) from the first formed generation until
 * leave or close, also while the caller waits for a decision or re-joins
 * (await_decision sends more from the caller's thread). Where it goes:
 *  - a message on the open Session stream (below), under mu, so it never
 *    races the stream's free; nothing comes back unless something is wrong.
 *    Only one message may be in flight on a call: a beat that finds the
 *    previous one still in flight is skipped (that one stands for it), and
 *    one that finds it in flight past HB_DEADLINE_MS (the unary call's
 *    deadline) goes as a unary call, the stream left as it is: a busy
 *    coordinator reads it late, a broken connection ends it (REOPEN).
 *    Never a cancel: the coordinator cannot tell one from a dead process
 *    and would declare the worker lost;
 *  - a unary Heartbeat call (HB_DEADLINE_MS) whenever no Session is open:
 *    between re-opens, with the Watch fallback, or with the stream off.
 *
 * SESSION STREAM. After the first Join answer a thread keeps a Session call
 * open (service.proto), re-opened when it ends (REOPEN), cancelled only at
 * close. Its messages are SessionRequests: the first is the session's
 * ids and step (a heartbeat whose generation the coordinator does not
 * check); every later one is a heartbeat, checked like the unary call, and
 * may also be a barrier arrival or a step-gate call (BARRIERS AND GATES ON
 * THE STREAM). If
 * this process dies its kernel closes the connection and the coordinator
 * sees the call cancelled by the transport: the worker is lost at once
 * (coordinator/recovery.c detection source 2), without waiting for the
 * heartbeat timeout. How its end and answers are read:
 *
 *   event                              -> as the unary heartbeat's
 *   answer with `barrier` or `gate`    -> none: the owed request's (below)
 *   other answer (the job ended; OK)   -> answer, about stream_hb_gen
 *   the owed request's refusal         -> none: the request's (below)
 *   FAILED_PRECONDITION / NOT_FOUND /  -> refusal, about the generation of
 *   UNAUTHENTICATED                       the heartbeat that failed (below)
 *   UNIMPLEMENTED (older coordinator)  -> none: for the rest of the session
 *                                         a Watch call (asking for no
 *                                         events, opened at once) and
 *                                         unary heartbeats
 *   anything else                      -> none (logged at DEBUG)
 *
 * Which heartbeat failed: none when only the opening message was sent (it
 * checks no generation: ignored); the one "stale generation N" names, for
 * FAILED_PRECONDITION; else stream_hb_gen when every heartbeat sent on this
 * stream named that one generation; else (a re-join in between) ignored,
 * and the re-opened stream's next heartbeat says it again.
 *
 * BARRIERS AND GATES ON THE STREAM (rm__session_ask_on_stream, for
 * session_step.c barrier_call and rm__session_gate). While a Session is
 * open, a barrier arrival is a SessionRequest with the barrier's ids,
 * step and `barrier` (name, timeout, payload), and a step-gate call one
 * with the gate's ids, step and `gate` (ready, wait_ms); either is queued
 * in the call's pending slot when another message is in flight (control.c
 * PENDING SLOT: heartbeats skip, a request waits its turn). The caller
 * waits on cv under mu, up to the unary call's deadline, for what the
 * stream thread leaves in the ow_* fields (session_int.h) and broadcasts:
 *  - an answer with `barrier` or `gate` set: that BarrierResponse or
 *    StepGateResponse is the unary call's answer (its job_state and
 *    generation are 0: it never reaches hb_answer); a decided gate answer
 *    names the ranks out of the step, not a mask (messages.proto);
 *  - the stream's end with FAILED_PRECONDITION / NOT_FOUND /
 *    UNAUTHENTICATED / INVALID_ARGUMENT when the last message it carried
 *    was the request (it left, and a "stale generation N" names its
 *    generation): the request's refusal, the unary call's status and
 *    words. Only the request's reading of it applies (session_step.c marks
 *    stale as for the unary call), not a heartbeat's, and the stream
 *    re-opens at once (REOPEN); a gate call waiting when the job leaves
 *    RUNNING ends its stream this way ("step gate: ...");
 *  - any other end (UNAVAILABLE, CANCELLED, a coordinator restart, a
 *    heartbeat's refusal after the request, a request that never left):
 *    the caller makes it again as the unary call with the time left (the
 *    coordinator takes a barrier's as the same arrival, barrier.c P3; a
 *    gate call is a question, asked again).
 * One request is owed per stream at a time (the coordinator ends a stream
 * INVALID_ARGUMENT on a second): one made while another is owed (its
 * caller gave up at its deadline; the late answer is dropped), with no
 * Session open, or with the Watch fallback goes as the unary call.
 *
 * GATE PUSHES. The opening message asks for them (gate_push): a
 * coordinator that answers gate calls on the stream (JoinResponse.
 * session_gate) sends every decided step this worker is out of, unasked
 * (SessionResponse.gate_pushed, with the generation it was decided in).
 * The stream thread keeps the last one (s->pushed); a gate question that
 * only asks whether this worker was dropped while it computes (not ready,
 * no wait: step_engine.c rm__sp_spend, rm_session_step_dropped) is then
 * answered from it without a call (rm__session_pushed, session_step.c):
 * decided and dropped when it is this generation's and step's, else not
 * decided. Only while a Session is open (pushes come on it); else the
 * call as before. A push that is lost (the stream re-opening when the step
 * was decided) costs the compute the worker then spends in vain: it
 * arrives ready and its gate call's answer says it was dropped.
 *
 * THE NOTICE. The opening message also asks for it (moved_on_push): a
 * coordinator that sends it (coordinator/core/recovery.c THE NOTICE)
 * pushes a SessionResponse with moved_on the moment the job leaves
 * RUNNING at a generation (a member lost, a re-formation, the job's end),
 * naming that generation, the new state and why. The stream thread marks
 * the session stale for it (rm__session_mark_stale_gen: ignored when it
 * names a generation this session already left), which aborts the
 * communicator with that cause (RM_ERR_RECONFIGURED, or RM_ERR_JOB_ENDED,
 * "...: notice on the session stream: generation G is over: rank r (host)
 * lost: ...") and wakes a re-form waiting for the decision. So a survivor
 * leaves a collective blocked on a dead or stopped peer when the
 * coordinator knows, whichever of the coordinator and the data plane knew
 * first; the stream itself goes on (its next heartbeat, of the old
 * generation, is refused and it re-opens at once: REOPEN).
 *
 * REOPEN. 500 ms after it ended (the coordinator may be unreachable: no
 * busy loop), but at once after UNIMPLEMENTED (the Watch instead) and
 * after a heartbeat's or the owed request's refusal (it carried them,
 * so at most one re-open per message): that is how every recovery ends a
 * survivor's stream, and a process that died in a 500 ms gap would be
 * seen only by its heartbeat timeout or a peer's report.
 *
 * RELAY. With RINGMASTER_RELAY=ADDR (a host's `ringmaster relay`,
 * relay/relay.c) the Session is opened there instead, and the relay
 * carries it to the coordinator as a lane of its one stream: the same
 * messages, answers and ends (coordinator/rpc/relay.c). Join calls go
 * there too (session.c join: one that finds the relay UNAVAILABLE is made
 * again at once at the coordinator); every other call goes to the
 * coordinator. A Session through
 * the relay that ends UNAVAILABLE (the relay is gone, or its stream to
 * the coordinator ended) makes the next open go to the coordinator
 * directly; when that one ends, the next tries the relay again. A relay
 * that goes away therefore costs a re-open, and loses no heartbeat: while
 * no Session is open they are unary calls.
 *
 * COORDINATOR AWAY (rm__away_*, rm__cwait_*). The worker's own measure of
 * a coordinator that does not answer (stopped, stalled on its disk, cut off
 * by the network), for the waits that need it. The calls that it answers
 * at once when it runs - unary heartbeats and step reports - are
 * bracketed: aw_since is set when one starts while it is 0; an answer (any
 * status but UNAVAILABLE / DEADLINE_EXCEEDED) resets it, to "now" when
 * other calls are still outstanding, else to 0; a transport failure leaves
 * it set. The coordinator is AWAY while aw_since is more than AWAY_NS (1 s)
 * old. The AWAY CLOCK A(t), the total length of the away periods up to t
 * (aw_total plus the current one), only grows.
 * WAITS ON THE COORDINATOR - a barrier arrival, a ready step-gate call:
 * what the coordinator must answer before the step can go on (plain steps
 * do not wait for it: session_step.c REPORT BUFFER) - have their own
 * deadline d0 and wait until d0 + A(now) - A(begin): time the coordinator
 * did not answer during the wait does not count against it (it moves its
 * barrier deadlines on by its own stall the same way:
 * coordinator/core/liveness.c), up to connect_timeout_ms in all (the
 * worker's patience with a coordinator that does not answer, as for Join).
 * Within that deadline a unary call that fails with a transport status is
 * made again (session_step.c ask). A wait that finds the coordinator away
 * for over AWAY_NS of it logs once
 *   waiting for the coordinator at barrier 'x': it did not answer for
 *   1.2 s of this wait; the wait's deadline moves on by the time it does
 *   not answer (at most 30 s)
 * and, when the wait ends, how long it took and how much of it the
 * coordinator was away. While a wait is in progress heartbeats go as unary
 * calls (one on the stream has no answer to time), so the away clock runs
 * during every wait.
 *
 * RINGMASTER_SESSION_STREAM=0 turns the stream off (unary heartbeats and
 * barriers only, to measure the other detection sources).
 *
 * STALE (session_int.h invariant 2). Any answer saying the job's generation
 * moved on, the job ended, or FAILED_PRECONDITION / NOT_FOUND /
 * UNAUTHENTICATED about the CURRENT generation marks the session stale (a
 * heartbeat sent before a re-join and answered after it is about the old
 * one and ignored: it would abort the new communicator for nothing) and aborts the communicator with
 * RM_ERR_RECONFIGURED (RM_ERR_JOB_ENDED when the job ended), so a
 * collective blocked on peers returns at once with a status that says so.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_int.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"
#include "session/session_int.h"

void rm__session_mark_stale(rm_session_t *s, int job_state, const char *why)
{
  pthread_mutex_lock(&s->mu);
  rm__session_mark_stale_locked(s, job_state, why);
  pthread_mutex_unlock(&s->mu);
}

void rm__session_mark_stale_gen(rm_session_t *s, uint64_t gen, int job_state,
                                const char *why)
{
  pthread_mutex_lock(&s->mu);
  /* an answer about a generation we already left (a heartbeat sent before
   * the re-join, answered after it) says nothing about this one */
  if (gen == s->generation) rm__session_mark_stale_locked(s, job_state, why);
  pthread_mutex_unlock(&s->mu);
}

void rm__session_mark_stale_locked(rm_session_t *s, int job_state, const char *why)
{
  if (!s->broke_wall_ms) {
    s->broke_wall_ms = rm__wall_ms();
    s->broke_gen = s->generation;
  }
  if (!s->stale) RM_INFO("coordinator moved on: %s", why ? why : "");
  s->stale = 1;
  pthread_cond_broadcast(&s->cv); /* a re-form waiting for the decision */
  if (job_state >= 0) s->job_state = job_state;
  if (why && !s->reason[0]) snprintf(s->reason, sizeof s->reason, "%s", why);
  rm__session_abort_comms_locked(s);
}

int rm__session_is_stale(rm_session_t *s)
{
  pthread_mutex_lock(&s->mu);
  int stale = s->stale;
  pthread_mutex_unlock(&s->mu);
  return stale;
}

/* ---- coordinator away ---- */
#define AWAY_NS (1000LL * 1000000LL) /* no answer for this long: away */

static int transport_rc(int rc) { return rc == RM__G_UNAVAILABLE || rc == RM__G_DEADLINE; }

void rm__away_begin(rm_session_t *s)
{
  pthread_mutex_lock(&s->mu);
  if (!s->aw_since_ns) s->aw_since_ns = rm__now_ns();
  s->aw_out++;
  pthread_mutex_unlock(&s->mu);
}

void rm__away_end(rm_session_t *s, int rc)
{
  int64_t now = rm__now_ns();
  pthread_mutex_lock(&s->mu);
  s->aw_out--;
  if (!transport_rc(rc) && s->aw_since_ns) { /* heard: an away period ends */
    if (now - s->aw_since_ns > AWAY_NS) s->aw_total_ns += now - s->aw_since_ns;
    s->aw_since_ns = s->aw_out ? now : 0;
  }
  pthread_mutex_unlock(&s->mu);
}

/* The AWAY CLOCK at now; under mu. */
static int64_t away_clock_locked(const rm_session_t *s, int64_t now)
{
  int64_t a = s->aw_total_ns;
  if (s->aw_since_ns && now - s->aw_since_ns > AWAY_NS) a += now - s->aw_since_ns;
  return a;
}

void rm__cwait_begin(rm_session_t *s, rm__cwait_t *w, const char *what, int64_t d0)
{
  snprintf(w->what, sizeof w->what, "%s", what ? what : "");
  w->t0 = rm__now_ns();
  w->d0 = d0;
  w->logged = 0;
  w->fixed = !what;
  if (w->fixed) return;
  pthread_mutex_lock(&s->mu);
  w->a0 = away_clock_locked(s, w->t0);
  s->aw_waits++;
  pthread_mutex_unlock(&s->mu);
}

int64_t rm__cwait_deadline_locked(rm_session_t *s, rm__cwait_t *w)
{
  if (w->fixed) return w->d0;
  int64_t now = rm__now_ns();
  int64_t cap = (int64_t)s->connect_timeout_ms * 1000000;
  int64_t ext = away_clock_locked(s, now) - w->a0;
  if (ext > cap) ext = cap;
  if (ext > AWAY_NS && !w->logged) { /* not for the tail of an away period */
    w->logged = 1;
    RM_WARN("waiting for the coordinator at %s: it did not answer for %.1f s of this "
            "wait; the wait's deadline moves on by the time it does not answer (at most "
            "%d s)", w->what, (double)ext / 1e9, s->connect_timeout_ms / 1000);
  }
  return w->d0 + ext;
}

int64_t rm__cwait_deadline(rm_session_t *s, rm__cwait_t *w)
{
  pthread_mutex_lock(&s->mu);
  int64_t d = rm__cwait_deadline_locked(s, w);
  pthread_mutex_unlock(&s->mu);
  return d;
}

void rm__cwait_end(rm_session_t *s, rm__cwait_t *w)
{
  if (w->fixed) return;
  int64_t now = rm__now_ns();
  pthread_mutex_lock(&s->mu);
  s->aw_waits--;
  int64_t ext = away_clock_locked(s, now) - w->a0;
  pthread_mutex_unlock(&s->mu);
  if (w->logged)
    RM_WARN("waiting for the coordinator at %s: done after %.1f s, %.1f s of it with the "
            "coordinator away", w->what, (double)(now - w->t0) / 1e9, (double)ext / 1e9);
}

/* ---- heartbeats ---- */
#define HB_DEADLINE_MS 5000
#define G_UNIMPLEMENTED 12 /* gRPC status: an older coordinator */

/* A heartbeat's answer (unary, or a heartbeat-type one on the stream:
 * job_state, generation, reason), about generation gen. */
static void hb_answer(rm_session_t *s, uint64_t gen, int job_state, uint64_t generation,
                      const char *reason)
{
  if (job_state >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED)
    rm__session_mark_stale_gen(s, gen, job_state, reason[0] ? reason : "job finished");
  else if (generation != gen)
    rm__session_mark_stale_gen(s, gen, -1, "new generation");
}

static int hb_refusal(int rc)
{
  return rc == RM__G_FAILED_PRECONDITION || rc == RM__G_NOT_FOUND ||
         rc == RM__G_UNAUTHENTICATED;
}

/* Under mu: q as a message on the open Session. 1 done (sent, or the one
 * in flight stands for it), 0 send it as a unary call. */
static int hb_on_stream_locked(rm_session_t *s, const Ringmaster__V1__HeartbeatRequest *q)
{
  int64_t busy = 0;
  if (!s->stream || !s->stream_session) return 0;
  /* a HeartbeatRequest is a SessionRequest without a barrier or gate
   * (messages.proto) */
  int rc = rm__ctl_stream_send(s->stream, &q->base, &busy);
  if (rc == 1) {
    s->stream_last_owed = 0;
    if (!s->stream_hb_sent) s->stream_hb_sent = 1;
    else if (s->stream_hb_gen != q->generation) s->stream_hb_sent = 2;
    s->stream_hb_gen = q->generation;
    return 1;
  }
  if (rc == 0 && busy <= HB_DEADLINE_MS) return 1;
  if (rc == 0)
    RM_DEBUG("session stream: a heartbeat in flight for %lld ms; this one goes unary",
             (long long)busy);
  return 0;
}

int rm__session_heartbeat(rm_session_t *s)
{
  Ringmaster__V1__HeartbeatRequest q = RINGMASTER__V1__HEARTBEAT_REQUEST__INIT;
  Ringmaster__V1__HeartbeatResponse *r = NULL;
  char msg[256];
  pthread_mutex_lock(&s->mu);
  RM__SESSION_IDS(q, s);
  q.step = s->steps_done;
  /* COORDINATOR AWAY: during a wait on the coordinator, unary (timed) */
  int sent = !s->aw_waits && hb_on_stream_locked(s, &q);
  pthread_mutex_unlock(&s->mu);
  if (sent) return RM__G_OK;
  rm__away_begin(s);
  int rc = rm__ctl_call(s->ctl, "/ringmaster.v1.Worker/Heartbeat", &q.base,
                        &ringmaster__v1__heartbeat_response__descriptor,
                        (ProtobufCMessage **)&r, HB_DEADLINE_MS, msg, sizeof msg);
  rm__away_end(s, rc);
  if (rc == RM__G_OK) {
    hb_answer(s, q.generation, r->job_state, r->generation, r->reason);
    protobuf_c_message_free_unpacked(&r->base, NULL);
  } else if (hb_refusal(rc)) {
    rm__session_mark_stale_gen(s, q.generation, -1, msg);
  } else {
    RM_DEBUG("heartbeat: status %d: %s", rc, msg);
  }
  return rc;
}

static void deadline_in(struct timespec *ts, int ms)
{
  clock_gettime(CLOCK_REALTIME, ts);
  int64_t ns = ts->tv_nsec + (int64_t)ms * 1000000;
  ts->tv_sec += ns / 1000000000;
  ts->tv_nsec = ns % 1000000000;
}

static void *hb_thread(void *arg)
{
  rm_session_t *s = arg;
  pthread_mutex_lock(&s->mu);
  while (!s->hb_stop) {
    struct timespec ts;
    deadline_in(&ts, s->hb_interval_ms);
    /* invariant 3 (session_int.h): a broadcast for someone else is no beat */
    while (!s->hb_stop && pthread_cond_timedwait(&s->cv, &s->mu, &ts) != ETIMEDOUT) {}
    if (s->hb_stop) break;
    pthread_mutex_unlock(&s->mu);
    rm__session_heartbeat(s);
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

void rm__session_hb_start(rm_session_t *s)
{
  if (s->hb_on) return;
  s->hb_stop = 0;
  s->hb_on = pthread_create(&s->hb, NULL, hb_thread, s) == 0;
}

void rm__session_hb_stop(rm_session_t *s)
{
  if (!s->hb_on) return;
  pthread_mutex_lock(&s->mu);
  s->hb_stop = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->hb, NULL);
  s->hb_on = 0;
}

/* ---- session stream ---- */
/* OUT gen: the generation the opening message named. */
static rm__ctl_stream_t *stream_open(rm_session_t *s, int watch, uint64_t *gen,
                                     int *via_relay)
{
  Ringmaster__V1__SessionRequest h = RINGMASTER__V1__SESSION_REQUEST__INIT;
  Ringmaster__V1__WatchRequest w = RINGMASTER__V1__WATCH_REQUEST__INIT;
  pthread_mutex_lock(&s->mu);
  RM__SESSION_IDS(h, s);
  RM__SESSION_IDS(w, s);
  h.step = s->steps_done;
  h.gate_push = 1; /* GATE PUSHES */
  h.moved_on_push = 1; /* THE NOTICE */
  pthread_mutex_unlock(&s->mu);
  *gen = h.generation;
  w.after_seq = UINT64_MAX / 2; /* a session: no events wanted */
  *via_relay = 0;
  if (watch)
    return rm__ctl_stream_open(s->ctl, "/ringmaster.v1.Worker/Watch", &w.base);
  if (s->relay_ctl && !s->relay_skip) { /* RELAY */
    *via_relay = 1;
    return rm__ctl_session_open(s->relay_ctl, "/ringmaster.v1.Worker/Session", &h.base);
  }
  return rm__ctl_session_open(s->ctl, "/ringmaster.v1.Worker/Session", &h.base);
}

/* The generation a refusal names ("stale generation N ...", the
 * coordinator's check_member): 1 and *gen, else 0. */
static int refused_gen(int rc, const char *msg, uint64_t *gen)
{
  unsigned long long g;
  if (rc != RM__G_FAILED_PRECONDITION || sscanf(msg, "stale generation %llu", &g) != 1)
    return 0;
  *gen = g;
  return 1;
}

/* Under mu, at the end: the generation the failing heartbeat named (see
 * "Which heartbeat failed"); 0 when it is not known. */
static int failed_gen_locked(rm_session_t *s, const char *msg, int rc, uint64_t *gen)
{
  if (!s->stream_hb_sent) return 0;
  if (refused_gen(rc, msg, gen)) return 1;
  if (s->stream_hb_sent != 1) return 0;
  *gen = s->stream_hb_gen;
  return 1;
}

/* The stream thread: the answer r (taken: a barrier's or a gate's) to
 * the request owed on stream st. */
static void owed_answer(rm_session_t *s, rm__ctl_stream_t *st,
                        Ringmaster__V1__SessionResponse *r)
{
  pthread_mutex_lock(&s->mu);
  if (s->ow_stream == st && s->ow_waiter) {
    s->ow_resp = r;
    s->ow_done = 1;
    r = NULL;
    pthread_cond_broadcast(&s->cv);
  }
  int owed = s->ow_stream == st;
  if (owed) s->ow_stream = NULL;
  pthread_mutex_unlock(&s->mu);
  if (r) {
    const char *what = r->barrier ? "barrier" : "step-gate";
    if (owed) RM_DEBUG("session stream: a %s answer after its caller gave up: dropped", what);
    else RM_WARN("session stream: a %s answer for no request: dropped", what);
    protobuf_c_message_free_unpacked(&r->base, NULL);
  }
}

/* Under mu, stream st ended with rc, msg: 1 when that is the refusal of
 * the request owed on it (BARRIERS AND GATES ON THE STREAM). */
static int owed_refused_locked(rm_session_t *s, rm__ctl_stream_t *st, int rc,
                               const char *msg)
{
  uint64_t g;
  if (s->ow_stream != st || !s->stream_last_owed) return 0;
  if (!hb_refusal(rc) && rc != RM__G_INVALID_ARGUMENT) return 0;
  if (rm__ctl_stream_unsent(st)) return 0; /* it never left */
  if (refused_gen(rc, msg, &g) && g != s->ow_gen)
    return 0; /* an earlier heartbeat's, of another generation */
  return 1;
}

/* Read the Session's answers until it ends; it is then unpublished and
 * freed. Returns its status; OUT carried: it carried heartbeats or a
 * barrier arrival or gate call that it refused. */
static int session_run(rm_session_t *s, rm__ctl_stream_t *st, int *carried)
{
  Ringmaster__V1__SessionResponse *r;
  int rc;
  uint64_t gen = 0;
  char msg[256];
  while (rm__ctl_stream_next(st, &ringmaster__v1__session_response__descriptor,
                             (ProtobufCMessage **)&r, &rc, msg, sizeof msg)) {
    if (r->gate_pushed && r->gate) { /* GATE PUSHES: kept, the last one */
      pthread_mutex_lock(&s->mu);
      if (s->pushed) protobuf_c_message_free_unpacked(&s->pushed->base, NULL);
      s->pushed = r->gate;
      s->pushed_gen = r->generation;
      r->gate = NULL;
      pthread_mutex_unlock(&s->mu);
      protobuf_c_message_free_unpacked(&r->base, NULL);
      continue;
    }
    if (r->moved_on) { /* THE NOTICE */
      char why[sizeof s->reason];
      snprintf(why, sizeof why, "notice on the session stream: generation %llu is over: %s",
               (unsigned long long)r->generation, r->reason ? r->reason : "");
      rm__session_mark_stale_gen(s, r->generation, (int)r->job_state, why);
      protobuf_c_message_free_unpacked(&r->base, NULL);
      continue;
    }
    if (r->barrier || r->gate) { /* never a heartbeat's answer: job_state 0 */
      owed_answer(s, st, r);
      continue;
    }
    pthread_mutex_lock(&s->mu);
    int sent = s->stream_hb_sent;
    gen = s->stream_hb_gen;
    pthread_mutex_unlock(&s->mu);
    /* "the job ended" is about every generation; anything else (not in
     * the contract) only when it is clear which heartbeat it answers */
    if (sent == 1 || r->job_state >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED)
      hb_answer(s, gen, r->job_state, r->generation, r->reason);
    protobuf_c_message_free_unpacked(&r->base, NULL);
  }
  pthread_mutex_lock(&s->mu);
  s->stream = NULL; /* no heartbeat is sent on it from here on */
  int refused = owed_refused_locked(s, st, rc, msg);
  if (s->ow_stream == st) { /* the request's waiter learns it here */
    if (s->ow_waiter) {
      s->ow_done = 2;
      s->ow_rc = refused ? rc : -1;
      snprintf(s->ow_msg, sizeof s->ow_msg, "%s", msg);
      pthread_cond_broadcast(&s->cv);
    }
    s->ow_stream = NULL;
  }
  int known = !refused && hb_refusal(rc) && failed_gen_locked(s, msg, rc, &gen);
  *carried = s->stream_hb_sent != 0 || refused;
  pthread_mutex_unlock(&s->mu);
  rm__ctl_stream_free(st);
  RM_DEBUG("session stream ended: status %d: %s%s", rc, msg,
           refused ? " (the owed request's refusal)" : "");
  if (known) rm__session_mark_stale_gen(s, gen, -1, msg);
  return rc;
}

/* ---- barriers and gates on the stream ---- */
int rm__session_ask_on_stream(rm_session_t *s, Ringmaster__V1__SessionRequest *m,
                              rm__cwait_t *w, Ringmaster__V1__SessionResponse **r,
                              char *msg, size_t msglen)
{
  int rc;
  const char *what = m->barrier ? "barrier arrival" : "step-gate call";
  *r = NULL;
  pthread_mutex_lock(&s->mu);
  if (!s->stream || !s->stream_session || s->ow_stream) {
    pthread_mutex_unlock(&s->mu);
    return -1;
  }
  int sent = rm__ctl_stream_send_queued(s->stream, &m->base);
  if (sent <= 0) {
    pthread_mutex_unlock(&s->mu);
    return -1;
  }
  s->ow_stream = s->stream;
  s->ow_waiter = 1;
  s->ow_done = 0;
  s->ow_gen = m->generation;
  s->stream_last_owed = 1;
  RM_DEBUG("%s (step %llu) %s on the session stream", what, (unsigned long long)m->step,
           sent == 1 ? "sent" : "queued");
  while (!s->ow_done) { /* the deadline moves on while the coordinator is away */
    int left = rm__ms_left(rm__cwait_deadline_locked(s, w));
    struct timespec ts;
    if (!left) break;
    deadline_in(&ts, left < 250 ? left : 250);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
  if (s->ow_done == 1 && (!s->ow_resp->barrier != !m->barrier)) {
    RM_WARN("session stream: a %s was answered as a %s: made again as the unary call", what,
            s->ow_resp->barrier ? "barrier arrival" : "step-gate call");
    protobuf_c_message_free_unpacked(&s->ow_resp->base, NULL);
    s->ow_resp = NULL;
    rc = -1;
  } else if (s->ow_done == 1) {
    *r = s->ow_resp;
    s->ow_resp = NULL;
    rc = RM__G_OK;
  } else if (s->ow_done == 2) {
    rc = s->ow_rc;
    snprintf(msg, msglen, "%s", s->ow_msg);
    RM_DEBUG("%s: the session stream ended (%s)%s", what, s->ow_msg,
             rc < 0 ? ": made again as the unary call" : "");
  } else { /* as the unary call's deadline; the answer, if it comes, is dropped */
    rc = RM__G_DEADLINE;
    snprintf(msg, msglen, "Deadline Exceeded");
  }
  s->ow_waiter = 0;
  s->ow_done = 0;
  pthread_mutex_unlock(&s->mu);
  return rc;
}

static void watch_run(rm_session_t *s, rm__ctl_stream_t *st)
{
  char msg[256];
  int rc = rm__ctl_stream_wait(st, msg, sizeof msg);
  RM_DEBUG("session stream ended: status %d: %s", rc, msg);
  pthread_mutex_lock(&s->mu);
  s->stream = NULL;
  pthread_mutex_unlock(&s->mu);
  rm__ctl_stream_free(st);
}

static void *stream_thread(void *arg)
{
  rm_session_t *s = arg;
  int watch = 0; /* the coordinator has no Session rpc */
  pthread_mutex_lock(&s->mu);
  while (!s->stream_stop) {
    pthread_mutex_unlock(&s->mu);
    uint64_t gen = 0;
    int via_relay = 0;
    rm__ctl_stream_t *st = stream_open(s, watch, &gen, &via_relay);
    pthread_mutex_lock(&s->mu);
    s->stream = st;
    s->stream_session = !watch;
    s->stream_hb_sent = 0;
    s->stream_hb_gen = gen;
    s->stream_last_owed = 0;
    if (st && s->stream_stop) rm__ctl_stream_cancel(st);
    pthread_mutex_unlock(&s->mu);
    int rc = -1, carried = 0;
    if (st && watch) watch_run(s, st);
    else if (st) rc = session_run(s, st, &carried);
    if (rc == G_UNIMPLEMENTED && via_relay) { /* not a relay: re-open at the coordinator */
      RM_WARN("relay %s answers no Session: Sessions go to the coordinator", s->relay);
      s->relay_skip = 2;
    } else if (rc == G_UNIMPLEMENTED) {
      RM_INFO("the coordinator has no Session rpc (older version): "
              "session Watch and unary heartbeats instead");
      watch = 1;
    }
    if (s->relay_ctl && s->relay_skip != 2) { /* RELAY: after its UNAVAILABLE, directly once */
      int skip = via_relay && (rc == RM__G_UNAVAILABLE || !st);
      if (skip && !s->relay_skip)
        RM_INFO("the Session through relay %s ended UNAVAILABLE: the next one goes to the "
                "coordinator", s->relay);
      s->relay_skip = skip;
    }
    pthread_mutex_lock(&s->mu);
    if (s->stream_stop) break;
    if (rc == G_UNIMPLEMENTED || (carried && hb_refusal(rc)))
      continue; /* REOPEN: at once */
    struct timespec ts;
    deadline_in(&ts, 500);
    while (!s->stream_stop && pthread_cond_timedwait(&s->cv, &s->mu, &ts) != ETIMEDOUT) {}
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

void rm__session_stream_start(rm_session_t *s)
{
  if (s->stream_on || !s->worker_id) return;
  if (!rm__env_int("RINGMASTER_SESSION_STREAM", 1)) return; /* bench knob */
  s->stream_stop = 0;
  s->stream_on = pthread_create(&s->stream_thread, NULL, stream_thread, s) == 0;
}

void rm__session_stream_stop(rm_session_t *s)
{
  if (!s->stream_on) return;
  pthread_mutex_lock(&s->mu);
  s->stream_stop = 1;
  if (s->stream) rm__ctl_stream_cancel(s->stream);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->stream_thread, NULL);
  s->stream_on = 0;
}

/* ---- failures ---- */
void rm__session_report_failure(rm_session_t *s, rm_status_t st)
{
  Ringmaster__V1__ReportFailureRequest q =
      RINGMASTER__V1__REPORT_FAILURE_REQUEST__INIT;
  Ringmaster__V1__ReportFailureResponse *r = NULL;
  char msg[256];
  RM__SESSION_IDS(q, s);
  q.failed_rank = s->comm ? rm_comm_failed_peer(s->comm) : -1;
  q.status = (char *)rm_status_name(st);
  q.error = (char *)(s->comm ? rm_comm_last_error(s->comm) : "");
  q.step = s->steps_done;
  int rc = rm__ctl_call(s->ctl, "/ringmaster.v1.Worker/ReportFailure", &q.base,
                        &ringmaster__v1__report_failure_response__descriptor,
                        (ProtobufCMessage **)&r, 5000, msg, sizeof msg);
  uint64_t gen;
  if (rc == RM__G_OK) {
    RM_INFO("reported %s naming rank %d: %s", q.status, q.failed_rank,
            r->accepted ? "declared lost" : "not declared lost");
    protobuf_c_message_free_unpacked(&r->base, NULL);
  } else {
    RM_INFO("ReportFailure: status %d: %s", rc, msg);
    /* the coordinator already moved on: that is the decision the re-form
     * would wait for (session.c), no heartbeat needs to ask again */
    if (refused_gen(rc, msg, &gen)) rm__session_mark_stale_gen(s, gen, -1, msg);
  }
}
