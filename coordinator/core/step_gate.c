/*
 * step_gate.c - the StepGate long-poll: per-step participant sets for the
 * straggler policies backup, deadline and coded, stale and auto
 * on top of the rm_gate decision machine (straggler/decide.c) and
 * auto's state machine (straggler/auto.c).
 *
 * One gate per job, rebuilt when the generation changes:
 *   backup    RM_GATE_FIRST_K, k = world - backup_workers (>= 1)
 *   deadline  RM_GATE_DEADLINE: the deadline is the median arrival + a
 *             slack proportional to the step: at every step start
 *               slack = max(RINGMASTER_DEADLINE_SLACK_MIN_MS (default 1),
 *                           RINGMASTER_DEADLINE_SLACK_PCT (default 10) % of
 *                           the median over the members of their last
 *                           reported compute_ms)
 *             (20 ms before any member reported a step). A fixed slack of
 *             its own: RINGMASTER_DEADLINE_SLACK_MS=N (N >= 0 ms). Why
 *             proportional: a fixed 20 ms is a whole step when steps take
 *             20 ms (deadline then pays ~1.6x with one slow worker); 10 %
 *             keeps the wait for the fast half within ~1.1x of the
 *             no-straggler step at any step length, while still absorbing
 *             ordinary jitter between the fast ranks.
 *   coded     RM_GATE_CODED, s = backup_workers when (s+1) | world, else
 *             RM_GATE_ALL (after a shrink broke divisibility; documented
 *             fallback: no straggler is tolerated, results stay exact)
 *   stale     RM_GATE_DEADLINE exactly as deadline: the worker keeps a
 *             gradient that missed the deadline and folds it into a later
 *             step (at most max_staleness late); the coordinator only
 *             decides who is in each step
 *   auto      RM_GATE_ALL while synchronous (every member, once every
 *             member arrived: a step of straggler_policy none, but workers
 *             call StepGate as under deadline), and while mitigating
 *             RM_GATE_FIRST_K with k = world - backup_workers (b >= 1) or
 *             RM_GATE_DEADLINE with deadline's slack (b = 0)
 *
 * AUTO. The gate records each member's ready arrival (ms) for
 * the step under way. When the next step starts, the previous one is
 * surely decided and every member has arrived (a step's all-reduce needs
 * every rank, a dropped one too), so its verdicts are fed then
 * (auto_feed): rm_auto_verdicts with the threshold max(1 ms, 0.5 x the
 * median of the members' last compute_ms; no verdicts before any member
 * reported one), then rm_auto_observe. A switch recreates the rm_gate with
 * the new mode's config before the new step is reset, so it holds from
 * that step on, and is an event "straggler_auto" in words; the job's
 * info.mitigation / mitigation_step (REST straggler_mitigation) follow.
 * W and M: RINGMASTER_AUTO_WINDOW (default 10) and
 * RINGMASTER_AUTO_MIN_LATE (default 6), read once; out of range (W 1..64,
 * M 1..W) -> the defaults with a warning. A new generation rebuilds the
 * gate and starts synchronous with empty windows (its ranks may be other
 * workers); leaving RUNNING shows "off" at once.
 *
 * Per step (the 0-based global step), state machine of the job's gate:
 *
 *   IDLE --first StepGate(step > current)--> COLLECTING(step)
 *   COLLECTING --arrivals / deadline tick--> DECIDED(step, members)
 *   DECIDED --StepGate(step' > step)--> COLLECTING(step')
 *
 * Every parked call for the step is answered when it is DECIDED, with the
 * same member mask; a worker not in the mask is told dropped=true (it must
 * still take part in the masked all-reduce, contributing zeros). A call for
 * an older step than the current one is answered with dropped=true and no
 * mask (cannot happen with well-behaved workers: a step cannot advance
 * before every rank joined the previous step's all-reduce). A parked call
 * is answered "not decided" at its wait_ms deadline.
 *
 * When the job leaves RUNNING (a member lost, re-formation, end), every
 * parked call is answered FAILED_PRECONDITION at once (rm__gate_release,
 * from rm__job_set_state): the agent treats it as "stale, re-join", so no
 * survivor waits out its wait_ms in a gate that will never decide.
 *
 * TIMED DEADLINES. A deadline of tens of ms needs finer time
 * than the 100 ms tick. Every poll of an undecided gate (each call, each
 * tick) asks rm_gate_poll when a poll could decide it (the deadline, once
 * the median arrival is known) and keeps that as gs->wake_ns; the earliest
 * over all jobs is c->gate_wake_ns, and queue 0's thread of rpc/server.c
 * wakes then and runs rm__gate_timers: each gate whose time came is
 * polled and, decided, walked (its parked calls answered, its pushes
 * sent), as a tick would. Before the median is known only an arrival can
 * decide (each one polls). So a parked call is answered as soon as its
 * step is decided, by an arrival or by the clock, and every "not decided"
 * answer says so (StepGateResponse.arrivals_decide, set for every gate):
 * waiting workers long-poll instead of calling every 1 ms. Workers of an
 * older coordinator (which set it only when no deadline runs) still poll.
 * Memory only, like the rest of the gate: a SIGKILL loses the timers with
 * the gate, and a restart re-forms the group anyway.
 *
 * Cost: one call per worker per step (a StepGate, or a gate call on the
 * worker's Session: rpc/server_group.c SESSIONS), answered from memory under the
 * coordinator lock; nothing is written to SQLite (a step's participant set
 * is not state a restart needs: a restart re-forms the group anyway).
 *
 * PUSHES. A worker that computes asked "was I dropped?" every 2
 * ms, about 400 calls per worker-second. Now, when a step becomes decided,
 * the walk that answers its parked calls (PARKED WALKS: it visits every
 * park then anyway) also sends each member out of the step whose Session
 * asked for it (SessionRequest.gate_push) the answer its gate call would
 * get (rm__push_gate: the step's shared stream-form bytes, with the
 * generation), once per (generation, step) (p->pushed_gen, pushed_step):
 * O(dropped) messages a step, and the worker answers the question from the
 * last push (worker/session/session_live.c GATE PUSHES). Best effort: a
 * push that is lost costs that worker's wasted compute, not a wrong step
 * (its ready call is answered as always).
 *
 * PARKED WALKS. Answering parked calls walks j->parked, which
 * also holds every member's Watch stream: doing it on every StepGate call
 * made a step O(N^2) (16,384 workers: 268M visits a step). A walk is now
 * made only when it can answer something: the gate is new (gate_for), its
 * step moved on (calls parked at the old one are dropped), it became
 * decided since the last walk (on a call, or the tick's deadline poll), or
 * the earliest deadline of a parked gate call (next_due_ns, kept on park
 * and recomputed by each walk) has passed. Every other call is O(1). The
 * answers are the same ones at the same moments: a parked call is
 * answerable exactly when one of those happened (decided, another step,
 * its own deadline).
 *
 * SHARED ANSWERS. A decided answer is the same for every member
 * of the step (step, the world-byte mask) and for every dropped worker:
 * rpc/waiters.c packs each kind (and wire form: a StepGate call's mask,
 * a Session message's ranks out) once per step into gs->answer[][] (freed at
 * the next step and with the gate), and every waiter's answer shares those
 * bytes (rm__reply_tail), not O(world) bytes packed per waiter.
 * Neither writes a row or moves an answer before its COMMIT: answers are
 * still queued under the lock and sent by the post-commit queue, and a
 * coordinator SIGKILL loses the same memory-only gate state as before (a
 * restart re-forms the group).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auto.h"
#include "core/core_int.h"
#include "decide.h"
#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"

RM_PARAM(auto_window, "RINGMASTER_AUTO_WINDOW", 10)
RM_PARAM(auto_min_late, "RINGMASTER_AUTO_MIN_LATE", 6)

typedef struct rm__gate_state {
  rm_gate_t *g;
  uint64_t generation;
  int world;
  int started;     /* a step is under way */
  int64_t wake_ns; /* TIMED DEADLINES: when a poll could decide it; 0 none */
  /* straggler_policy auto only (NULL otherwise) */
  rm_auto_t *autom;
  double *arrive_ms; /* world: this step's ready arrivals, NaN = not yet */
  uint8_t *late;     /* world: verdict scratch */
  /* PARKED WALKS: j->parked may hold a gate call to answer now: the gate
   * is new, its step moved on or was decided since the last walk */
  int walk;
  int64_t next_due_ns; /* the earliest deadline of a parked gate call; 0 none */
  /* SHARED ANSWERS: the packed decided answer for a member [0] and for a
   * dropped worker [1] of step answer_step (rpc/waiters.c fills them) */
  rm__blob_t *answer[2][2]; /* [dropped][wire form] (waiters.h) */
  uint64_t answer_step;
} rm__gate_state_t;

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median over the members (the first 64) of their last reported
 * compute_ms; NaN before any member reported a step. */
static double median_compute(const rm__job_t *j)
{
  double v[64];
  int n = 0;
  for (int r = 0; r < j->nmembers && n < 64; r++) {
    double c = j->w[j->members[r]].compute_ms;
    if (c == c && c >= 0) v[n++] = c; /* NaN until its first report */
  }
  if (!n) return NAN;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The deadline slack for the next step (see the top of the file). */
static double deadline_slack(const rm__job_t *j)
{
  int64_t fixed = rm__env_int("RINGMASTER_DEADLINE_SLACK_MS", -1);
  double pct = (double)rm__env_int("RINGMASTER_DEADLINE_SLACK_PCT", 10);
  double floor_ms = (double)rm__env_int("RINGMASTER_DEADLINE_SLACK_MIN_MS", 1);
  double med, slack;
  if (fixed >= 0) return (double)fixed;
  med = median_compute(j);
  if (isnan(med)) return 20.0;
  slack = med * pct / 100.0;
  return slack > floor_ms ? slack : floor_ms;
}

static int is_policy(const rm__job_t *j, const char *name)
{
  return !strcmp(j->info.spec.straggler_policy, name);
}

/* The gate of the job's policy; mode: auto's (ignored for the others). */
static rm_gate_config_t gate_config(const rm__job_t *j, rm_auto_mode_t mode)
{
  const rm_job_spec_t *s = &j->info.spec;
  rm_gate_config_t cfg = {RM_GATE_ALL, j->nmembers, j->nmembers, 0, 0};
  int b = s->backup_workers;
  int autom = is_policy(j, "auto");
  if (is_policy(j, "backup") || (autom && mode == RM_AUTO_BACKUP)) {
    cfg.policy = RM_GATE_FIRST_K;
    cfg.k = j->nmembers - b >= 1 ? j->nmembers - b : 1;
  } else if (is_policy(j, "deadline") || is_policy(j, "stale") ||
             (autom && mode == RM_AUTO_DEADLINE)) {
    cfg.policy = RM_GATE_DEADLINE;
    cfg.slack_ms = deadline_slack(j);
  } else if (!strcmp(s->straggler_policy, "coded") && b >= 0 &&
             b < j->nmembers && j->nmembers % (b + 1) == 0) {
    cfg.policy = RM_GATE_CODED;
    cfg.s = b;
  }
  return cfg;
}

/* auto (join answers, a fresh gate): synchronous, so quorum = world, s = 0 */
void rm__gate_join_fields(const rm__job_t *j, uint32_t *quorum, uint32_t *s)
{
  rm_gate_config_t cfg = gate_config(j, RM_AUTO_SYNC);
  *quorum = (uint32_t)(cfg.policy == RM_GATE_FIRST_K ? cfg.k : j->nmembers);
  *s = (uint32_t)(cfg.policy == RM_GATE_CODED ? cfg.s : 0);
}

static void set_mitigation(rm__job_t *j, rm_auto_mode_t mode, uint64_t step)
{
  j->info.mitigation = mode == RM_AUTO_BACKUP     ? RM_MITIGATION_BACKUP
                       : mode == RM_AUTO_DEADLINE ? RM_MITIGATION_DEADLINE
                                                  : RM_MITIGATION_OFF;
  j->info.mitigation_step = mode == RM_AUTO_SYNC ? 0 : step;
}

/* auto's state for a new gate (gs->world members); NULL-safe on failure:
 * the job then runs synchronous steps only (logged). */
static void auto_create(rm__job_t *j, rm__gate_state_t *gs)
{
  rm_auto_config_t cfg;
  rm_auto_config_init(&cfg, gs->world, j->info.spec.backup_workers);
  int64_t w = rm__param_auto_window(), m = rm__param_auto_min_late();
  if (w >= 1 && w <= RM_AUTO_WINDOW_MAX && m >= 1 && m <= w) {
    cfg.window = (int)w;
    cfg.min_late = (int)m;
  } else {
    RM_WARN("RINGMASTER_AUTO_WINDOW=%lld / RINGMASTER_AUTO_MIN_LATE=%lld out of "
            "range (1 <= M <= W <= %d): using W %d, M %d", (long long)w,
            (long long)m, RM_AUTO_WINDOW_MAX, cfg.window, cfg.min_late);
  }
  if (rm_auto_create(&cfg, &gs->autom) != RM_OK) {
    RM_WARN("job %llu: straggler_policy auto: no state machine for %d ranks; "
            "synchronous steps only", (unsigned long long)j->info.id, gs->world);
    return;
  }
  gs->arrive_ms = rm__xcalloc((size_t)gs->world, sizeof *gs->arrive_ms);
  gs->late = rm__xcalloc((size_t)gs->world, 1);
  for (int r = 0; r < gs->world; r++) gs->arrive_ms[r] = NAN;
}

static rm__gate_state_t *gate_for(rm_coord_t *c, rm__job_t *j)
{
  rm__gate_state_t *gs = j->gate;
  if (gs && gs->generation == j->info.generation && gs->world == j->nmembers)
    return gs;
  if (gs && gs->autom && rm_auto_mode(gs->autom) != RM_AUTO_SYNC)
    rm__event(c, j, "straggler_auto", -1, "straggler_policy auto: generation "
              "%llu (%d workers) starts with synchronous steps; lateness is "
              "counted afresh", (unsigned long long)j->info.generation,
              j->nmembers);
  rm__gate_free(j);
  set_mitigation(j, RM_AUTO_SYNC, 0);
  rm_gate_config_t cfg = gate_config(j, RM_AUTO_SYNC);
  gs = calloc(1, sizeof *gs);
  if (!gs || rm_gate_create(&cfg, &gs->g) != RM_OK) {
    free(gs);
    return NULL;
  }
  gs->generation = j->info.generation;
  gs->world = j->nmembers;
  gs->walk = 1; /* calls parked at an older gate's steps */
  if (is_policy(j, "auto")) auto_create(j, gs);
  j->gate = gs;
  return gs;
}

/* SHARED ANSWERS: drop the packed answers of the step they were for. */
static void answers_clear(rm__gate_state_t *gs)
{
  for (int d = 0; d < 2; d++)
    for (int f = 0; f < 2; f++) {
      rm__blob_release(gs->answer[d][f]);
      gs->answer[d][f] = NULL;
    }
}

void rm__gate_free(rm__job_t *j)
{
  if (!j->gate) return;
  rm_gate_destroy(j->gate->g);
  rm_auto_destroy(j->gate->autom);
  free(j->gate->arrive_ms);
  free(j->gate->late);
  answers_clear(j->gate);
  free(j->gate);
  j->gate = NULL;
}

/* The words of auto's mitigation in mode m, for events. */
static void mitigation_words(const rm__job_t *j, const rm__gate_state_t *gs,
                             rm_auto_mode_t m, char *buf, size_t len)
{
  rm_gate_config_t cfg = gate_config(j, m);
  if (m == RM_AUTO_BACKUP)
    snprintf(buf, len, "a step takes the first %d of %d workers (backup)", cfg.k,
             gs->world);
  else
    snprintf(buf, len, "a step waits for the median arrival + %.1f ms (deadline)",
             cfg.slack_ms);
}

/* Step `step` starts: feed the previous step's verdicts to auto's state
 * machine and switch the gate's config when it says so (top of the file).
 * Before rm_gate_reset. */
static void auto_feed(rm_coord_t *c, rm__job_t *j, rm__gate_state_t *gs, uint64_t step)
{
  rm_auto_event_t ev = {RM_AUTO_SAME, RM_AUTO_SYNC, -1, 0, 0};
  const uint8_t *m = gs->started ? rm_gate_members(gs->g, NULL) : NULL;
  double thr = rm_auto_threshold(median_compute(j));
  char words[96];
  if (m && !isnan(thr)) {
    rm_auto_verdicts(gs->autom, gs->arrive_ms, m, thr, gs->late);
    rm_auto_observe(gs->autom, gs->late, &ev);
  }
  for (int r = 0; r < gs->world; r++) gs->arrive_ms[r] = NAN;
  if (ev.transition == RM_AUTO_SAME) return;
  rm_gate_config_t cfg = gate_config(j, ev.mode);
  rm_gate_t *g;
  if (rm_gate_create(&cfg, &g) != RM_OK) { /* cannot happen: k, slack valid */
    RM_WARN("job %llu: straggler_policy auto: cannot build the gate of mode "
            "%d; keeping the old one", (unsigned long long)j->info.id, ev.mode);
    return;
  }
  rm_gate_destroy(gs->g);
  gs->g = g;
  gs->started = 0;
  set_mitigation(j, ev.mode, step);
  if (ev.transition == RM_AUTO_ON) {
    const rm__worker_t *w = ev.rank < j->nmembers ? &j->w[j->members[ev.rank]] : NULL;
    mitigation_words(j, gs, ev.mode, words, sizeof words);
    rm__event(c, j, "straggler_auto", ev.rank, "straggler_policy auto: rank %d "
              "(%s) late in %d of the last %d steps; from step %llu %s", ev.rank,
              w ? w->host : "?", ev.late, ev.of, (unsigned long long)step, words);
  } else {
    rm__event(c, j, "straggler_auto", -1, "straggler_policy auto: every worker "
              "on time (late in at most %d of the last %d steps); synchronous "
              "steps again from step %llu", ev.late, ev.of,
              (unsigned long long)step);
  }
}

static double now_ms(void) { return (double)rm__now_ns() / 1e6; }

/* TIMED DEADLINES: c->gate_wake_ns = the earlier of it and ns (0 = none). */
static void wake_fold(rm_coord_t *c, int64_t ns)
{
  int64_t cur = __atomic_load_n(&c->gate_wake_ns, __ATOMIC_RELAXED);
  if (ns && (!cur || ns < cur)) __atomic_store_n(&c->gate_wake_ns, ns, __ATOMIC_RELEASE);
}

/* TIMED DEADLINES: poll the undecided gate at now_ns and keep when a poll
 * could decide it (gs->wake_ns, folded into c->gate_wake_ns). */
static void poll_gate(rm_coord_t *c, rm__gate_state_t *gs, int64_t now_ns)
{
  rm_gate_state_t state;
  double wake = -1;
  rm_gate_poll(gs->g, (double)now_ns / 1e6, &state, &wake);
  gs->wake_ns = !rm_gate_members(gs->g, NULL) && wake >= 0 ? (int64_t)ceil(wake * 1e6) : 0;
  wake_fold(c, gs->wake_ns);
}

/* SHARED ANSWERS: the packed answers of `step` ([dropped][wire form]),
 * those of an older step dropped first. */
static rm__blob_t *(*step_answers(rm__gate_state_t *gs, uint64_t step))[2]
{
  if (gs->answer_step != step) {
    answers_clear(gs);
    gs->answer_step = step;
  }
  return gs->answer;
}

/* Answer the call parked (or about to be) in p about `step`: the member
 * mask when the step is decided, "dropped" for an older step, else "not
 * decided" (rpc/waiters.c formats it). */
static void answer(rm_coord_t *c, rm__job_t *j, rm__park_t *p, uint64_t step)
{
  rm__gate_state_t *gs = j->gate;
  rm__worker_t *w = rm__job_worker(j, p->worker_id);
  int k = 0, dropped = 0;
  const uint8_t *m = gs && rm_gate_step(gs->g) == step && gs->started
                         ? rm_gate_members(gs->g, &k) : NULL;
  int arrivals = 0;
  if (m) dropped = !w || w->rank < 0 || w->rank >= gs->world || !m[w->rank];
  else if (gs && gs->started && step < rm_gate_step(gs->g)) dropped = 1;
  /* TIMED DEADLINES: an arrival or the deadline's timer decides it, and a
   * long poll is answered at once when either does (answer_parked) */
  if (!m && !dropped && gs && gs->started && step == rm_gate_step(gs->g))
    arrivals = 1;
  rm__answer_gate(c, p, step, m, gs ? gs->world : 0, dropped, arrivals,
                  m ? step_answers(gs, step)[dropped] : NULL);
}

/* PUSHES: session park p of a member out of the decided step under way
 * is told so unasked, once per (generation, step) (rm__push_gate). */
static void push(rm_coord_t *c, rm__job_t *j, rm__gate_state_t *gs, rm__park_t *p)
{
  uint64_t step = rm_gate_step(gs->g);
  const uint8_t *m = rm_gate_members(gs->g, NULL);
  rm__worker_t *w = rm__job_worker(j, p->worker_id);
  if (!m || !w || w->rank < 0 || w->rank >= gs->world || m[w->rank]) return;
  if (p->pushed_gen == j->info.generation && p->pushed_step == step + 1) return;
  p->pushed_gen = j->info.generation;
  p->pushed_step = step + 1;
  rm__push_gate(c, p, j->info.generation, step, m, gs->world, step_answers(gs, step)[1]);
}

/* Does j->parked hold a gate call to answer now (PARKED WALKS)? */
static int decided(const rm__gate_state_t *gs)
{
  return gs && gs->started && rm_gate_members(gs->g, NULL);
}

static void answer_parked(rm_coord_t *c, rm__job_t *j, int64_t now_ns)
{
  rm__gate_state_t *gs = j->gate;
  int64_t due = 0;
  if (gs && !gs->walk && (!gs->next_due_ns || now_ns < gs->next_due_ns)) return;
  int dec = decided(gs);
  for (rm__park_t *p = j->parked.next, *n; p != &j->parked; p = n) {
    n = p->next;
    if (p->kind == RM__PARK_SESSION && p->gate_push && dec && gs) push(c, j, gs, p);
    if (p->kind != RM__PARK_GATE) continue;
    int mine = gs && p->gate_step == rm_gate_step(gs->g);
    if ((mine && dec) || !mine || now_ns >= p->deadline_ns)
      answer(c, j, p, p->gate_step);
    else if (!due || p->deadline_ns < due)
      due = p->deadline_ns;
  }
  if (gs) {
    gs->walk = 0;
    gs->next_due_ns = due;
  }
}

void rm__gate_request(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                      uint64_t step, int ready, uint32_t wait_ms, rm__park_t *p)
{
  rm_gate_state_t state;
  rm__gate_state_t *gs = rm_job_state_terminal(j->info.state) ? NULL : gate_for(c, j);
  p->worker_id = w->id;
  if (!gs) {
    rm__answer_stale(c, p, "no step gate: job finished or out of memory");
    return;
  }
  int was = decided(gs);
  if (!gs->started || step > rm_gate_step(gs->g)) {
    if (gs->autom) auto_feed(c, j, gs, step);
    rm_gate_reset(gs->g, step);
    rm_gate_set_slack(gs->g, deadline_slack(j)); /* no-op for the others */
    gs->started = 1;
    gs->walk = 1; /* calls parked at the older step: dropped */
    was = 0;
  }
  if (ready && step == rm_gate_step(gs->g)) {
    double t = now_ms();
    rm_gate_arrive(gs->g, w->rank, t, &state);
    if (gs->autom && w->rank >= 0 && w->rank < gs->world && isnan(gs->arrive_ms[w->rank]))
      gs->arrive_ms[w->rank] = t;
  }
  if (!rm_gate_members(gs->g, NULL)) /* deadline: every call is a clock tick */
    poll_gate(c, gs, rm__now_ns());
  if (!was && decided(gs)) gs->walk = 1;
  if (rm_gate_members(gs->g, NULL) || step < rm_gate_step(gs->g) || !wait_ms) {
    answer(c, j, p, step);
    answer_parked(c, j, rm__now_ns());
    return;
  }
  uint32_t wait = wait_ms > 60000 ? 60000 : wait_ms;
  p->kind = RM__PARK_GATE;
  p->job_id = j->info.id;
  p->gate_step = step;
  p->deadline_ns = rm__now_ns() + (int64_t)wait * 1000000;
  rm__park_link(j, p);
  if (!gs->next_due_ns || p->deadline_ns < gs->next_due_ns) gs->next_due_ns = p->deadline_ns;
}

void rm__gate_release(rm_coord_t *c, rm__job_t *j)
{
  if (j->info.state != RM_JOB_RUNNING) set_mitigation(j, RM_AUTO_SYNC, 0);
  for (rm__park_t *p = j->parked.next, *n; p != &j->parked; p = n) {
    n = p->next;
    if (p->kind != RM__PARK_GATE) continue;
    rm__worker_t *w = rm__job_worker(j, p->worker_id);
    if (j->info.state == RM_JOB_RUNNING && w &&
        rm__worker_member(j, w))
      continue;
    rm__answer_stale(c, p, j->info.state == RM_JOB_RUNNING ||
                               j->info.state == RM_JOB_FORMING
                           ? "step gate: the generation moved on (a member was "
                             "lost); re-join"
                           : "step gate: the job is over");
  }
}

void rm__gate_tick(rm_coord_t *c, rm__job_t *j, int64_t now_ns)
{
  rm__gate_state_t *gs = j->gate;
  if (!gs) return;
  if (gs->started && !rm_gate_members(gs->g, NULL)) {
    poll_gate(c, gs, now_ns);
    if (decided(gs)) gs->walk = 1;
  }
  answer_parked(c, j, now_ns);
}

void rm__gate_timers(rm_coord_t *c, int64_t now_ns)
{
  __atomic_store_n(&c->gate_wake_ns, 0, __ATOMIC_RELAXED); /* refolded below */
  for (size_t i = 0; i < c->njobs; i++) {
    rm__job_t *j = c->jobs[i];
    if (!j->gate || !j->gate->wake_ns) continue;
    if (j->info.state != RM_JOB_RUNNING) { /* its gate decides nothing more */
      j->gate->wake_ns = 0;
      continue;
    }
    if (now_ns >= j->gate->wake_ns) rm__gate_tick(c, j, now_ns); /* re-polls it */
    if (j->gate) wake_fold(c, j->gate->wake_ns);
  }
}
