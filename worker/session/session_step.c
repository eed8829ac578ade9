/*
 * session_step.c - steps, the straggler gate and named barriers of a session.
 *
 * STEP TIMING. rm_session_step_begin notes the wall clock and the
 * communicator's cumulative all-reduce time and bytes (comm/comm_int.h);
 * rm_session_step_end reports
 *   comm    = all-reduce time during the step
 *   wait    = time parked in the straggler gate (rm_session_allreduce_step)
 *   compute = wall time - comm - wait
 *   bytes   = payload all-reduced during the step
 * with ReportStep, whose answer also tells whether the coordinator moved on.
 * Reports are queued and delivered in order by a reporter thread, kept
 * while the coordinator is away (REPORT BUFFER, above
 * rm_session_step_report): a step does not wait for the coordinator.
 *
 * STRAGGLER GATE (backup, deadline, auto; coordinator/core/step_gate.c;
 * the worker side is the step engine, session/step_engine.c). Step s is the
 * 0-based global step being computed = the steps completed so far. A rank
 * whose gradient is ready calls StepGate(s, ready) and waits (long-poll; the
 * deadline policy polls every 1 ms) for the member mask of step s, the same
 * on every rank; then every rank runs the masked average
 * (aggregate/aggregate.h rm__masked_allreduce): members contribute, late
 * ranks add zeros and still receive the result, so all ranks apply the same
 * update. The gradient is the mean over the contributors (the rescaling
 * contract in aggregate.h).
 *
 * BARRIERS (rm_session_barrier, rm__session_exchange). An arrival goes as
 * a message on the open Session stream when there is one, answered on it
 * (session_live.c BARRIERS AND GATES ON THE STREAM), else as the unary Barrier call;
 * either way its answer or refusal is the unary call's, read the same way
 * below, within one deadline: the barrier's plus 10 s, moved on by the time
 * the coordinator does not answer meanwhile (session_live.c COORDINATOR
 * AWAY: it moves the barrier's own deadline on by its stall). A stream that ends
 * without answering it, other than by refusing it, leaves the rest of that
 * deadline to the unary call (the coordinator takes a re-arrival at an
 * open barrier as the same arrival, barrier.c P3).
 *
 * RECOVERY LINE. The first step of a later generation after a failure logs
 *   <prefix>: recovered gen=G step=S detect_ms=T0 resume_ms=T1
 * (wall-clock ms), which tests and bench/recovery read.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aggregate/aggregate.h"
#include "comm/comm_int.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_metrics.h"
#include "session/session_int.h"
#include "session/step_engine.h"

static rm_status_t check(rm_session_t *s)
{
  if (!s) return RM_ERR_INVALID_ARG;
  if (s->ended) return RM_ERR_JOB_ENDED;
  return rm__session_moved_on(s);
}

rm_status_t rm_session_step_begin(rm_session_t *s)
{
  rm_status_t st = check(s);
  if (st != RM_OK) return st;
  s->in_step = 1;
  s->step_t0_ns = rm__now_ns();
  s->comm_ns0 = s->comm ? s->comm->allreduce_ns : 0;
  s->bytes0 = s->comm ? s->comm->allreduce_bytes : 0;
  s->step_wait_ms = 0;
  return RM_OK;
}

rm_status_t rm_session_step_end(rm_session_t *s, double loss, double accuracy)
{
  return rm_session_step_end_metrics(s, loss, accuracy, NULL, 0);
}

rm_status_t rm_session_step_end_metrics(rm_session_t *s, double loss, double accuracy,
                                        const rm_metric_t *metrics, size_t n_metrics)
{
  rm_step_report_t r;
  if (!s) return RM_ERR_INVALID_ARG;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  r.step = s->steps_done + 1;
  r.loss = loss;
  r.accuracy = accuracy;
  r.metrics = metrics;
  r.n_metrics = n_metrics;
  if (s->in_step) {
    double wall = (double)(rm__now_ns() - s->step_t0_ns) / 1e6;
    r.comm_ms = s->comm ? (double)(s->comm->allreduce_ns - s->comm_ns0) / 1e6 : 0;
    r.wait_ms = s->step_wait_ms;
    r.compute_ms = wall - r.comm_ms - r.wait_ms;
    if (r.compute_ms < 0) r.compute_ms = 0;
    r.allreduce_bytes = s->comm ? s->comm->allreduce_bytes - s->bytes0 : 0;
  }
  rm_status_t st = rm_session_step_report(s, &r);
  if (st != RM_ERR_INVALID_ARG) s->in_step = 0; /* refused metrics: the step may be ended again */
  return st;
}

static void recovered_line(rm_session_t *s, uint64_t step)
{
  if (!s->broke_wall_ms || s->generation <= s->broke_gen) return;
  printf("%s: recovered gen=%llu step=%llu detect_ms=%lld resume_ms=%lld\n",
         s->log_prefix, (unsigned long long)s->generation,
         (unsigned long long)step, (long long)s->broke_wall_ms,
         (long long)rm__wall_ms());
  fflush(stdout);
  s->broke_wall_ms = 0;
}

/* ---- step reports and the report buffer ---- */
static void report_of(rm_session_t *s, const rm_step_report_t *rep, rm__report_t *e)
{
  memset(e, 0, sizeof *e);
  e->generation = s->generation;
  e->step = rep->step;
  e->compute_ms = rep->compute_ms;
  e->comm_ms = rep->comm_ms;
  e->wait_ms = rep->wait_ms;
  e->loss = rep->loss;
  e->accuracy = rep->accuracy;
  e->allreduce_bytes = rep->allreduce_bytes;
  e->param_checksum = rep->param_checksum;
  e->checkpoint_step = rep->checkpoint_step;
  if (rep->struct_size >= offsetof(rm_step_report_t, n_excluded) + sizeof rep->n_excluded &&
      rep->n_excluded && rep->excluded_ranks) {
    e->n_excluded = rep->n_excluded < RM__REPORT_EXCLUDED_MAX ? (uint32_t)rep->n_excluded
                                                              : RM__REPORT_EXCLUDED_MAX;
    memcpy(e->excluded, rep->excluded_ranks, e->n_excluded * sizeof e->excluded[0]);
  }
  if (rep->struct_size >= sizeof *rep && rep->metrics) { /* checked: report_metrics_check */
    e->n_metrics = (uint32_t)rep->n_metrics;
    for (size_t i = 0; i < rep->n_metrics; i++) {
      snprintf(e->metric_name[i], sizeof e->metric_name[i], "%s", rep->metrics[i].name);
      e->metric_value[i] = rep->metrics[i].value;
    }
  }
}

/* The named metrics of rep obey rm_metrics.h's rules; else last_error says
 * which broke and the report is refused (RM_ERR_INVALID_ARG), so a program
 * hears of it at its own call rather than from a dropped report later. */
static rm_status_t report_metrics_check(rm_session_t *s, const rm_step_report_t *rep)
{
  const char *names[RM_METRICS_MAX];
  double values[RM_METRICS_MAX];
  char why[160];
  if (rep->struct_size < sizeof *rep || !rep->n_metrics) return RM_OK;
  if (!rep->metrics) {
    snprintf(s->last_error, sizeof s->last_error, "RM_ERR_INVALID_ARG: step %llu: "
             "n_metrics is %zu but metrics is NULL", (unsigned long long)rep->step,
             rep->n_metrics);
    return RM_ERR_INVALID_ARG;
  }
  size_t n = rep->n_metrics < RM_METRICS_MAX ? rep->n_metrics : RM_METRICS_MAX;
  for (size_t i = 0; i < n; i++) {
    names[i] = rep->metrics[i].name;
    values[i] = rep->metrics[i].value;
  }
  /* too many: the count is the rule broken, whatever the first n say */
  if (rm__metrics_check(names, values, rep->n_metrics > RM_METRICS_MAX ? rep->n_metrics : n,
                        why, sizeof why)) {
    snprintf(s->last_error, sizeof s->last_error, "RM_ERR_INVALID_ARG: step %llu: %s",
             (unsigned long long)rep->step, why);
    return RM_ERR_INVALID_ARG;
  }
  return RM_OK;
}

/* what one ReportStep call came to; BAD: this report alone refused (its
 * content: INVALID_ARGUMENT), the queue behind it still good */
enum { SENT, RETRY, REFUSED, BAD };

/* One ReportStep call for e, with its own deadline; acts on the answer the
 * way every call does (invariant 2). RETRY: a transport status, the report
 * is worth keeping. */
static int report_send(rm_session_t *s, const rm__report_t *e)
{
  Ringmaster__V1__ReportStepRequest q = RINGMASTER__V1__REPORT_STEP_REQUEST__INIT;
  Ringmaster__V1__ReportStepResponse *r = NULL;
  char msg[256];
  int rc;

  RM__SESSION_IDS(q, s);
  q.generation = e->generation;
  q.step = e->step;
  q.compute_ms = e->compute_ms;
  q.comm_ms = e->comm_ms;
  q.wait_ms = e->wait_ms;
  q.loss = e->loss;
  q.accuracy = e->accuracy;
  q.allreduce_bytes = e->allreduce_bytes;
  q.param_checksum = e->param_checksum;
  q.checkpoint_step = e->checkpoint_step;
  if (e->n_excluded) {
    q.n_excluded_ranks = e->n_excluded;
    q.excluded_ranks = (uint32_t *)e->excluded;
  }
  q.use_known = e->use_known != 0;
  q.use_aggregation = (char *)e->use_agg;
  q.use_secure_sums = e->use_secure;
  q.use_gated = e->use_gated;
  q.use_plain_bytes = e->use_plain;
  q.total_steps = e->total_steps;
  Ringmaster__V1__StepMetric mv[RM_METRICS_MAX], *mp[RM_METRICS_MAX];
  for (uint32_t i = 0; i < e->n_metrics; i++) {
    ringmaster__v1__step_metric__init(&mv[i]);
    mv[i].name = (char *)e->metric_name[i];
    mv[i].value = e->metric_value[i];
    mp[i] = &mv[i];
  }
  q.n_metrics = e->n_metrics;
  q.metrics = mp;
  rm__away_begin(s); /* session_live.c COORDINATOR AWAY */
  rc = rm__ctl_call(s->ctl, "/ringmaster.v1.Worker/ReportStep", &q.base,
                    &ringmaster__v1__report_step_response__descriptor,
                    (ProtobufCMessage **)&r, 5000, msg, sizeof msg);
  rm__away_end(s, rc);
  if (rc == RM__G_OK) {
    if (r->job_state >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED)
      rm__session_mark_stale(s, r->job_state, "job finished");
    else if (r->generation != s->generation)
      rm__session_mark_stale(s, -1, "new generation");
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return SENT;
  }
  if (rc == RM__G_FAILED_PRECONDITION || rc == RM__G_NOT_FOUND) {
    rm__session_mark_stale(s, -1, msg);
    return REFUSED;
  }
  if (rc == RM__G_INVALID_ARGUMENT) {
    RM_WARN("ReportStep step %llu refused: %s", (unsigned long long)e->step, msg);
    return BAD;
  }
  RM_DEBUG("ReportStep step %llu: status %d: %s", (unsigned long long)e->step, rc, msg);
  return rc == RM__G_UNAVAILABLE || rc == RM__G_DEADLINE ? RETRY : REFUSED;
}

/* Under rmu. */
static void rbuf_push(rm_session_t *s, const rm__report_t *e)
{
  if (s->rbuf_n == RM__REPORT_BUF_MAX) { /* full: the oldest goes */
    s->rbuf_head = (s->rbuf_head + 1) % RM__REPORT_BUF_MAX;
    s->rbuf_n--;
    if (s->rbuf_overflow++ == 0)
      RM_WARN("ReportStep: coordinator unreachable for more than %d steps; the oldest "
              "undelivered step reports are dropped", RM__REPORT_BUF_MAX);
  }
  s->rbuf[(s->rbuf_head + s->rbuf_n++) % RM__REPORT_BUF_MAX] = *e;
}

/* Buffered reports the coordinator will refuse (FAILED_PRECONDITION: not
 * the generation it runs) are dropped with one line. Under rmu. */
static void rbuf_drop(rm_session_t *s, const char *why)
{
  if (s->rbuf_n == 0) return;
  RM_WARN("ReportStep: dropping %zu undelivered step report%s of generation %llu "
          "(steps %llu..%llu): %s", s->rbuf_n, s->rbuf_n == 1 ? "" : "s",
          (unsigned long long)s->rbuf[s->rbuf_head].generation,
          (unsigned long long)s->rbuf[s->rbuf_head].step,
          (unsigned long long)s->rbuf[(s->rbuf_head + s->rbuf_n - 1) % RM__REPORT_BUF_MAX].step,
          why);
  s->rbuf_stale += s->rbuf_n;
  s->rbuf_head = s->rbuf_n = 0;
}

/* Wait on rcv up to ms (or until stopped). Under rmu. */
static void rwait(rm_session_t *s, int ms)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(&s->rcv, &s->rmu, &ts);
}

/* REPORTER. The thread that delivers s->rbuf, oldest first, one ReportStep
 * call at a time (each with its own 5 s deadline), so a step never waits
 * for the coordinator: while it is away (stopped, stalled, restarting,
 * cut off) the reports queue here and training goes on over the data
 * plane. After a transport failure it tries again every RETRY_MS. A call
 * that fails or takes over SLOW_NS (a stopped coordinator holds it until
 * it resumes) is logged once ("did not answer for N ms ... training goes
 * on"), and once the queue is empty again, how many reports it delivered
 * since: the steps trained while the coordinator was away. */
#define RETRY_MS 250
#define SYNC_MS 1000 /* SYNC WHILE ANSWERED (rm_session_step_report) */
#define SLOW_NS (1000LL * 1000000LL) /* a call this long: the coordinator is away */
static void *reporter(void *arg)
{
  rm_session_t *s = arg;
  int failing = 0;
  uint64_t queued_at_fail = 0, sent_since = 0;
  int64_t fail_ns = 0;
  pthread_mutex_lock(&s->rmu);
  while (!s->r_stop || s->rbuf_n) {
    if (!s->rbuf_n) {
      rwait(s, 1000);
      continue;
    }
    rm__report_t e = s->rbuf[s->rbuf_head];
    s->r_busy = 1;
    pthread_mutex_unlock(&s->rmu);
    int64_t t0 = rm__now_ns();
    int out = report_send(s, &e);
    int64_t took = rm__now_ns() - t0;
    pthread_mutex_lock(&s->rmu);
    s->r_busy = 0;
    pthread_cond_broadcast(&s->rcv);
    if (!failing && (out == RETRY || took > SLOW_NS)) {
      RM_WARN("ReportStep: the coordinator did not answer for %lld ms (%s); step "
              "reports queue here (at most %d) and training goes on",
              (long long)(took / 1000000), out == RETRY ? "unreachable" : "slow",
              RM__REPORT_BUF_MAX);
      queued_at_fail = s->rbuf_n;
      failing = 1;
      fail_ns = t0;
    }
    if (out == RETRY) {
      s->r_away = 1;
      if (s->r_stop) break; /* closing: what is left is lost */
      rwait(s, RETRY_MS);
      continue;
    }
    /* the head may have moved (a full ring dropped its oldest meanwhile) */
    if (s->rbuf_n && s->rbuf[s->rbuf_head].step == e.step &&
        s->rbuf[s->rbuf_head].generation == e.generation) {
      s->rbuf_head = (s->rbuf_head + 1) % RM__REPORT_BUF_MAX;
      s->rbuf_n--;
    }
    if (out == REFUSED) {
      rbuf_drop(s, "the coordinator refused them (stale generation or unknown worker)");
      failing = 0;
      continue;
    }
    if (failing) sent_since++; /* this one included */
    if (failing && s->rbuf_n == 0) {
      RM_WARN("ReportStep: the coordinator answers again; %llu queued step reports "
              "delivered (%llu queued when it stopped answering, %lld ms ago)",
              (unsigned long long)sent_since, (unsigned long long)queued_at_fail,
              (long long)((rm__now_ns() - fail_ns) / 1000000));
      failing = 0;
      sent_since = 0;
    }
    if (s->rbuf_n == 0) s->r_away = 0; /* SYNC WHILE ANSWERED again */
  }
  pthread_mutex_unlock(&s->rmu);
  return NULL;
}

void rm__session_reports_flush(rm_session_t *s, int ms)
{
  int64_t until = rm__now_ns() + (int64_t)ms * 1000000;
  pthread_mutex_lock(&s->rmu);
  while ((s->rbuf_n || s->r_busy) && s->r_on && rm__now_ns() < until) rwait(s, 50);
  if (s->rbuf_n)
    RM_WARN("ReportStep: %zu step reports still undelivered after %d ms; leaving "
            "without them", s->rbuf_n, ms);
  pthread_mutex_unlock(&s->rmu);
}

void rm__session_reports_stop(rm_session_t *s)
{
  if (!s->r_on) return;
  pthread_mutex_lock(&s->rmu);
  s->r_stop = 1;
  pthread_cond_broadcast(&s->rcv);
  pthread_mutex_unlock(&s->rmu);
  pthread_join(s->rthread, NULL);
  s->r_on = 0;
}

/* REPORT BUFFER. Every report goes into s->rbuf, a ring of the last
 * RM__REPORT_BUF_MAX (oldest dropped and counted in rbuf_overflow; ~120
 * KiB inside the session, no allocation; excluded ranks kept up to
 * RM__REPORT_EXCLUDED_MAX), and the REPORTER thread delivers it. While the
 * coordinator answers, the step waits for that (SYNC WHILE ANSWERED, below:
 * it must know each member's step when it re-forms); once it does not
 * answer within SYNC_MS, steps stop waiting until the queue is empty again. A ReportStep that fails with a transport status
 * (UNAVAILABLE, DEADLINE_EXCEEDED: coordinator down, restarting, stalled or
 * unreachable; the data plane does not need it) keeps its report, and the
 * reporter tries again; a report is sent only after every older one, so
 * the coordinator sees steps in order. What the coordinator answers
 * (a new generation, the job's end) is acted on when the answer comes,
 * seen by the next step (rm__session_moved_on). Buffered reports carry
 * their generation. A restarted coordinator re-forms at the next
 * generation (job.c rm__job_resume) and accepts a report of an earlier
 * generation from a worker that was a member of it as a late report (rpc.c,
 * LATE STEP REPORTS: step history only), so the backlog is delivered also
 * after the session re-joined, before the new generation's reports (the
 * order holds). Reports the coordinator refuses (FAILED_PRECONDITION: a
 * worker it does not know as a member of that generation) are dropped with
 * one warning line (counted in rbuf_stale); one refused for its content
 * (INVALID_ARGUMENT) is dropped alone, with the coordinator's words. Leave waits (bounded) for the
 * queue to empty first (rm__session_reports_flush). */
rm_status_t rm_session_step_report(rm_session_t *s, const rm_step_report_t *rep)
{
  rm__report_t e;
  /* a struct without the metrics (an older header's) is taken without them */
  if (!s || !rep || rep->struct_size < offsetof(rm_step_report_t, metrics))
    return RM_ERR_INVALID_ARG;
  if (s->ended) return RM_ERR_JOB_ENDED;
  rm_status_t mst = report_metrics_check(s, rep);
  if (mst != RM_OK) return mst;
  pthread_mutex_lock(&s->mu);
  s->steps_done = rep->step;
  pthread_mutex_unlock(&s->mu);
  report_of(s, rep, &e);
  rm__session_use_fill(s, &e);
  recovered_line(s, rep->step);
  pthread_mutex_lock(&s->rmu);
  rbuf_push(s, &e);
  if (!s->r_on) {
    s->r_stop = 0;
    s->r_on = pthread_create(&s->rthread, NULL, reporter, s) == 0;
  }
  pthread_cond_broadcast(&s->rcv);
  /* SYNC WHILE ANSWERED: while the coordinator answers, the step waits for
   * its report to be delivered (up to SYNC_MS), so the coordinator knows
   * each member's step when it re-forms a generation; once a report is not
   * delivered in time the coordinator is away (r_away) and steps go on
   * without waiting until the reporter has emptied the queue again. */
  int64_t until = rm__now_ns() + SYNC_MS * 1000000LL;
  while (s->r_on && !s->r_away && (s->rbuf_n || s->r_busy) && rm__now_ns() < until)
    rwait(s, (int)((until - rm__now_ns()) / 1000000) + 1);
  if (s->r_on && (s->rbuf_n || s->r_busy)) s->r_away = 1;
  pthread_mutex_unlock(&s->rmu);
  if (!s->r_on) { /* no thread: deliver from this one, as best it can */
    pthread_mutex_lock(&s->rmu);
    rm__report_t h = s->rbuf[s->rbuf_head];
    pthread_mutex_unlock(&s->rmu);
    if (report_send(s, &h) != RETRY) {
      pthread_mutex_lock(&s->rmu);
      s->rbuf_head = (s->rbuf_head + 1) % RM__REPORT_BUF_MAX;
      s->rbuf_n--;
      pthread_mutex_unlock(&s->rmu);
    }
  }
  return rm__session_moved_on(s);
}

/* ---- barrier arrivals and gate calls: on the stream, else unary ---- */
/* m (a SessionRequest with `barrier` or `gate` set) on the open Session
 * when `stream` (session_live.c BARRIERS AND GATES ON THE STREAM), else (or
 * when the stream ended without answering) the unary call `path` with q
 * and the time left to w's deadline, which moves on while the coordinator
 * is away (session_live.c COORDINATOR AWAY). For a wait on the
 * coordinator, a unary call that ends UNAVAILABLE or DEADLINE_EXCEEDED
 * before that deadline is made again (after RETRY_MS when it failed at
 * once): a barrier's as the same arrival (barrier.c P3), a gate's as the
 * same question; a question that is no wait (w fixed) is asked once, as
 * the rank computes on meanwhile. Returns the call's
 * status; *r: its answer on RM__G_OK (the stream's BarrierResponse or
 * StepGateResponse, as m asked, or the unary call's), the caller's to
 * free. */
static int ask(rm_session_t *s, int stream, Ringmaster__V1__SessionRequest *m,
               const char *path, const ProtobufCMessage *q,
               const ProtobufCMessageDescriptor *rd, rm__cwait_t *w,
               ProtobufCMessage **r, char *msg, size_t msglen)
{
  Ringmaster__V1__SessionResponse *sr = NULL;
  int rc = stream ? rm__session_ask_on_stream(s, m, w, &sr, msg, msglen) : -1;
  *r = NULL;
  if (sr) { /* the field m's request set holds the answer */
    if (m->barrier) {
      *r = &sr->barrier->base;
      sr->barrier = NULL;
    } else {
      *r = &sr->gate->base;
      sr->gate = NULL;
    }
    protobuf_c_message_free_unpacked(&sr->base, NULL);
  }
  if (rc >= 0) return rc;
  for (;;) {
    int left = rm__ms_left(rm__cwait_deadline(s, w));
    if (left <= 0) {
      snprintf(msg, msglen, "Deadline Exceeded");
      return RM__G_DEADLINE;
    }
    int64_t t0 = rm__now_ns();
    rc = rm__ctl_call(s->ctl, path, q, rd, r, left, msg, msglen);
    if (w->fixed || (rc != RM__G_UNAVAILABLE && rc != RM__G_DEADLINE)) return rc;
    left = rm__ms_left(rm__cwait_deadline(s, w));
    if (left <= 0) return rc;
    if (rm__now_ns() - t0 < (int64_t)RETRY_MS * 1000000) {
      struct timespec ts = {0, (long)(left < RETRY_MS ? left : RETRY_MS) * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
}

/* ---- the straggler gate ---- */
/* A decided answer's member mask into members[world]: StepGate's
 * `members`, or a Session answer's world and ranks out (messages.proto).
 * 0 when it is not one for this world. */
static int gate_members(const Ringmaster__V1__StepGateResponse *r, int world,
                        uint8_t *members)
{
  if (r->members.len) {
    if (r->members.len != (size_t)world) return 0;
    memcpy(members, r->members.data, r->members.len);
    return 1;
  }
  if (r->world != (uint32_t)world) return 0;
  memset(members, 1, (size_t)world);
  for (size_t i = 0; i < r->n_out; i++) {
    if (r->out[i] >= (uint32_t)world) return 0;
    members[r->out[i]] = 0;
  }
  return 1;
}

/* GATE PUSHES (session_live.c): whether step was decided without this
 * worker, from the last pushed decision: 1 (members filled, *dropped = 1)
 * or 0 (not that it knows), without a call; -1 when pushes cannot be
 * relied on (no Session open, or a coordinator that does not push). */
static int pushed(rm_session_t *s, uint64_t step, uint8_t *members, int *dropped)
{
  int got = -1;
  pthread_mutex_lock(&s->mu);
  if (s->join && s->join->session_gate && s->stream && s->stream_session) {
    got = s->pushed && s->pushed_gen == s->generation && s->pushed->step == step &&
          s->pushed->decided && s->pushed->dropped &&
          gate_members(s->pushed, s->world, members);
    if (got) *dropped = 1;
  }
  pthread_mutex_unlock(&s->mu);
  return got;
}

/* GATES ON THE STREAM (session_live.c): the call as a Session message when
 * a Session is open and the coordinator said it answers them
 * (JoinResponse.session_gate), else (or when the stream ended without
 * answering) the unary StepGate with the time left. */
int rm__session_gate(rm_session_t *s, uint64_t step, int ready, int wait_ms,
                     uint8_t *members, int *dropped)
{
  Ringmaster__V1__StepGateRequest q = RINGMASTER__V1__STEP_GATE_REQUEST__INIT;
  Ringmaster__V1__StepGateResponse *r = NULL;
  Ringmaster__V1__SessionRequest m = RINGMASTER__V1__SESSION_REQUEST__INIT;
  Ringmaster__V1__SessionGate sg = RINGMASTER__V1__SESSION_GATE__INIT;
  char msg[256];
  int ret = -1;
  if (!ready && wait_ms <= 0) { /* GATE PUSHES: "was I dropped?" needs no call */
    int got = pushed(s, step, members, dropped);
    if (got >= 0) return got;
  }
  RM__SESSION_IDS(q, s);
  q.step = step;
  q.ready = ready != 0;
  q.wait_ms = (uint32_t)(wait_ms > 0 ? wait_ms : 0);
  /* a ready rank needs the decision to go on: a wait on the coordinator
   * (session_live.c COORDINATOR AWAY); "was I dropped?" is a question it
   * computes on without an answer to */
  rm__cwait_t w;
  char what[64];
  snprintf(what, sizeof what, "the step gate of step %llu", (unsigned long long)step);
  rm__cwait_begin(s, &w, ready ? what : NULL,
                  rm__now_ns() + ((int64_t)q.wait_ms + 5000) * 1000000);
  q.accept_gzip = 1; /* control.c's gRPC stack decodes gzip (messages.proto) */
  RM__SESSION_IDS(m, s);
  m.step = step;
  sg.ready = q.ready;
  sg.wait_ms = q.wait_ms;
  m.gate = &sg;
  int rc = ask(s, s->join && s->join->session_gate, &m, "/ringmaster.v1.Worker/StepGate",
               &q.base, &ringmaster__v1__step_gate_response__descriptor, &w,
               (ProtobufCMessage **)&r, msg, sizeof msg);
  rm__cwait_end(s, &w);
  if (rc == RM__G_OK) {
    ret = 0;
    if (r->decided && gate_members(r, s->world, members)) {
      *dropped = r->dropped;
      ret = 1;
    } else if (r->dropped) {
      ret = -1; /* a step behind the group: cannot happen when in sync */
    } else if (r->arrivals_decide) {
      ret = 2; /* not decided; a long poll will be answered in time */
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
  } else if (rc == RM__G_FAILED_PRECONDITION || rc == RM__G_NOT_FOUND) {
    rm__session_mark_stale(s, -1, msg);
  } else {
    RM_WARN("StepGate: status %d: %s", rc, msg);
  }
  return ret;
}

static int gate_cb(void *ctx, uint64_t step, int ready, int wait_ms,
                   uint8_t *members, int *dropped)
{
  return rm__session_gate(ctx, step, ready, wait_ms, members, dropped);
}

/* The step engine (step_engine.h) for this generation's policy; a policy a
 * session program cannot run (coded, stale) is refused at submit, so it is
 * an invalid argument here. */
static rm_status_t engine(rm_session_t *s, rm__sp_t *sp)
{
  memset(sp, 0, sizeof *sp);
  rm_status_t st = rm__sp_start(sp, rm_session_spec_string(s, "straggler_policy"),
                                s->rank, s->world, 0, 1, gate_cb, s);
  if (st == RM_OK && (sp->kind == RM__SP_CODED || sp->kind == RM__SP_STALE))
    st = RM_ERR_INVALID_ARG;
  if (st != RM_OK) rm__sp_free(sp);
  return st;
}

int rm_session_step_dropped(rm_session_t *s)
{
  rm__sp_t sp;
  int dropped = 0;
  if (!s || !s->comm || engine(s, &sp) != RM_OK) return 0;
  if (rm__sp_gated(&sp) &&
      rm__session_gate(s, s->steps_done, 0, 0, sp.members, &dropped) != 1)
    dropped = 0;
  rm__sp_free(&sp);
  return dropped;
}

rm_status_t rm_session_allreduce_step(rm_session_t *s, const void *send,
                                      void *recv, size_t count, rm_dtype_t dt,
                                      int *contributors)
{
  rm__sp_t sp;
  rm_status_t st = check(s);
  if (st != RM_OK) return st;
  if (dt != RM_F32 && dt != RM_F64 && dt != RM_F16 && dt != RM_BF16)
    return RM_ERR_INVALID_ARG;
  if ((st = engine(s, &sp)) != RM_OK) return st;
  if (!rm__sp_gated(&sp)) {
    /* no policy: a plain average, which the SPEC USE guard judges as the
     * program's own (a secure job refuses it) */
    st = rm_allreduce(s->comm, send, recv, count, dt, RM_AVG);
    if (st == RM_OK && contributors) *contributors = s->world;
  } else if (rm__sp_decide(&sp, s->steps_done) == RM_OK) {
    /* host or device buffers alike (aggregate/participants.c) */
    s->comm->use_internal++;
    st = rm__masked_allreduce(s->comm, send, recv, count, dt, RM_AVG, sp.members, 0,
                              contributors);
    s->comm->use_internal--;
    if (st == RM_OK) s->use_gated++;
  } else {
    st = rm__session_moved_on(s) != RM_OK ? rm__session_moved_on(s) : RM_ERR_UNAVAILABLE;
  }
  s->step_wait_ms += sp.wait_ms;
  rm__sp_free(&sp);
  return st;
}

/* ---- named barriers ---- */
static void missing_words(rm_session_t *s, const Ringmaster__V1__BarrierResponse *r,
                          const char *name)
{
  char buf[sizeof s->last_error];
  int n = snprintf(buf, sizeof buf, "RM_ERR_TIMEOUT: barrier '%s' broke (%s), "
                   "%u of %u arrived", name, r->reason, r->arrived, r->expected);
  for (size_t i = 0; i < r->n_missing && n > 0 && (size_t)n < sizeof buf; i++) {
    const Ringmaster__V1__MissingRank *m = r->missing[i];
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%s rank %u (%s) at step "
                  "%llu, silent %lld ms", i ? ";" : "; missing:", m->rank,
                  m->host, (unsigned long long)m->step,
                  (long long)m->ms_since_heartbeat);
  }
  snprintf(s->last_error, sizeof s->last_error, "%s", buf);
}

/* The payload of a released exchange: exactly world entries of len bytes
 * (barrier.c P2), copied into all[world * len]. */
static rm_status_t take_payloads(rm_session_t *s, const Ringmaster__V1__BarrierResponse *r,
                                 const char *name, size_t len, uint8_t *all)
{
  if (r->n_payloads != (size_t)s->world) {
    snprintf(s->last_error, sizeof s->last_error, "RM_ERR_PROTOCOL: barrier '%s' "
             "released with %zu payloads for a world of %d", name, r->n_payloads, s->world);
    return RM_ERR_PROTOCOL;
  }
  for (size_t i = 0; i < r->n_payloads; i++)
    if (r->payloads[i].len != len) {
      snprintf(s->last_error, sizeof s->last_error, "RM_ERR_PROTOCOL: barrier '%s': "
               "rank %zu's payload has %zu bytes, %zu expected", name, i,
               r->payloads[i].len, len);
      return RM_ERR_PROTOCOL;
    }
  for (size_t i = 0; i < r->n_payloads; i++) memcpy(all + i * len, r->payloads[i].data, len);
  return RM_OK;
}

/* One barrier arrival (BARRIERS); with len > 0 it carries mine[len] and, released,
 * fills all[world * len] (OUT only on RM_OK). The statuses and words of
 * rm_session_barrier, the exchange's rm__session_exchange. */
static rm_status_t barrier_call(rm_session_t *s, const char *name, int deadline_ms,
                                const void *mine, size_t len, void *all)
{
  Ringmaster__V1__BarrierRequest q = RINGMASTER__V1__BARRIER_REQUEST__INIT;
  Ringmaster__V1__BarrierResponse *r = NULL;
  char msg[256];
  rm_status_t st = check(s);
  if (st != RM_OK) return st;
  if (!name || !*name || strlen(name) >= 64) return RM_ERR_INVALID_ARG;
  RM__SESSION_IDS(q, s);
  q.name = (char *)name;
  q.timeout_ms = (uint32_t)(deadline_ms > 0 ? deadline_ms : 0);
  q.step = s->steps_done;
  q.payload.data = (uint8_t *)mine;
  q.payload.len = len;
  /* the coordinator answers at the barrier's deadline at the latest; give
   * the call that plus a margin (the job's own timeout when 0; one the spec
   * leaves to the coordinator's default is at most 24 h) */
  const Ringmaster__V1__JobSpec *spec = s->join ? s->join->spec : NULL;
  int dl = deadline_ms > 0 ? deadline_ms
           : spec && spec->barrier_timeout_ms ? (int)spec->barrier_timeout_ms : 86400000;
  rm__cwait_t w; /* session_live.c COORDINATOR AWAY */
  char what[96];
  snprintf(what, sizeof what, "barrier '%s'", name);
  rm__cwait_begin(s, &w, what, rm__now_ns() + ((int64_t)dl + 10000) * 1000000);
  /* BARRIERS: on the open Session stream when there is one, else (or when
   * it ended without answering) the unary call with the time left */
  Ringmaster__V1__SessionRequest m = RINGMASTER__V1__SESSION_REQUEST__INIT;
  Ringmaster__V1__SessionBarrier sb = RINGMASTER__V1__SESSION_BARRIER__INIT;
  RM__SESSION_IDS(m, s);
  m.step = q.step;
  sb.name = q.name;
  sb.timeout_ms = q.timeout_ms;
  sb.payload = q.payload;
  m.barrier = &sb;
  int rc = ask(s, 1, &m, "/ringmaster.v1.Worker/Barrier", &q.base,
               &ringmaster__v1__barrier_response__descriptor, &w,
               (ProtobufCMessage **)&r, msg, sizeof msg);
  rm__cwait_end(s, &w);
  if (rc != RM__G_OK) {
    if (rc == RM__G_FAILED_PRECONDITION || rc == RM__G_NOT_FOUND) {
      rm__session_mark_stale(s, -1, msg);
      return rm__session_moved_on(s);
    }
    if (rc == RM__G_INVALID_ARGUMENT) { /* barrier.c P1/P3: our payload refused */
      snprintf(s->last_error, sizeof s->last_error, "RM_ERR_INVALID_ARG: barrier '%s': %s",
               name, msg);
      return RM_ERR_INVALID_ARG;
    }
    snprintf(s->last_error, sizeof s->last_error, "RM_ERR_UNAVAILABLE: barrier "
             "'%s': %s (gRPC status %d)", name, msg, rc);
    return RM_ERR_UNAVAILABLE;
  }
  st = RM_OK;
  if (!r->released) {
    missing_words(s, r, name);
    st = RM_ERR_TIMEOUT;
  }
  if (st == RM_OK) st = rm__session_moved_on(s);
  if (st == RM_OK && len) st = take_payloads(s, r, name, len, all);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  return st;
}

rm_status_t rm_session_barrier(rm_session_t *s, const char *name, int deadline_ms)
{
  return barrier_call(s, name, deadline_ms, NULL, 0, NULL);
}

rm_status_t rm__session_exchange(rm_session_t *s, const char *name, const void *mine,
                                 size_t len, void *all, int deadline_ms, char *err,
                                 size_t errlen)
{
  rm_status_t st;
  if (!s || !mine || !all || len == 0 || len > RM__SESSION_EXCHANGE_MAX) {
    st = RM_ERR_INVALID_ARG;
    if (s)
      snprintf(s->last_error, sizeof s->last_error, "RM_ERR_INVALID_ARG: exchange '%s': "
               "a payload of 1..%d bytes is needed, got %zu", name ? name : "",
               RM__SESSION_EXCHANGE_MAX, len);
  } else {
    st = barrier_call(s, name, deadline_ms, mine, len, all);
  }
  if (st != RM_OK && err && errlen)
    snprintf(err, errlen, "%s", s && s->last_error[0] ? s->last_error : rm_status_name(st));
  return st;
}
