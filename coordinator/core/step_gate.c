/*
 * step_gate.c - the StepGate long-poll: per-step participant sets for the
 * straggler policies backup, deadline and coded (issue 6), on top of the
 * rm_gate decision machine (straggler/gate.c).
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
 * The 100 ms coordinator tick also polls the deadline, but a deadline of
 * tens of ms needs finer time: under `deadline` the waiting workers call
 * with short wait_ms in a loop, and every call polls the gate.
 *
 * Cost: one unary call per worker per step, answered from memory under the
 * coordinator lock; nothing is written to SQLite (a step's participant set
 * is not state a restart needs: a restart re-forms the group anyway).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"
#include "gate.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"

typedef struct rm__gate_state {
  rm_gate_t *g;
  uint64_t generation;
  int world;
  int started;     /* a step is under way */
} rm__gate_state_t;

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The deadline slack for the next step (see the top of the file). */
static double deadline_slack(const rm__job_t *j)
{
  int64_t fixed = rm__env_int("RINGMASTER_DEADLINE_SLACK_MS", -1);
  double pct = (double)rm__env_int("RINGMASTER_DEADLINE_SLACK_PCT", 10);
  double floor_ms = (double)rm__env_int("RINGMASTER_DEADLINE_SLACK_MIN_MS", 1);
  double v[64], slack;
  int n = 0;
  if (fixed >= 0) return (double)fixed;
  for (int r = 0; r < j->nmembers && n < 64; r++) {
    double c = j->w[j->members[r]].compute_ms;
    if (c == c && c >= 0) v[n++] = c; /* NaN until its first report */
  }
  if (!n) return 20.0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  slack = (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) * pct / 100.0;
  return slack > floor_ms ? slack : floor_ms;
}

static rm_gate_config_t gate_config(const rm__job_t *j)
{
  const rm_job_spec_t *s = &j->info.spec;
  rm_gate_config_t cfg = {RM_GATE_ALL, j->nmembers, j->nmembers, 0, 0};
  int b = s->backup_workers;
  if (!strcmp(s->straggler_policy, "backup")) {
    cfg.policy = RM_GATE_FIRST_K;
    cfg.k = j->nmembers - b >= 1 ? j->nmembers - b : 1;
  } else if (!strcmp(s->straggler_policy, "deadline")) {
    cfg.policy = RM_GATE_DEADLINE;
    cfg.slack_ms = deadline_slack(j);
  } else if (!strcmp(s->straggler_policy, "coded") && b >= 0 &&
             b < j->nmembers && j->nmembers % (b + 1) == 0) {
    cfg.policy = RM_GATE_CODED;
    cfg.s = b;
  }
  return cfg;
}

void rm__gate_join_fields(const rm__job_t *j, uint32_t *quorum, uint32_t *s)
{
  rm_gate_config_t cfg = gate_config(j);
  *quorum = (uint32_t)(cfg.policy == RM_GATE_FIRST_K ? cfg.k : j->nmembers);
  *s = (uint32_t)(cfg.policy == RM_GATE_CODED ? cfg.s : 0);
}

static rm__gate_state_t *gate_for(rm__job_t *j)
{
  rm__gate_state_t *gs = j->gate;
  if (gs && gs->generation == j->info.generation && gs->world == j->nmembers)
    return gs;
  rm__gate_free(j);
  rm_gate_config_t cfg = gate_config(j);
  gs = calloc(1, sizeof *gs);
  if (!gs || rm_gate_create(&cfg, &gs->g) != RM_OK) {
    free(gs);
    return NULL;
  }
  gs->generation = j->info.generation;
  gs->world = j->nmembers;
  j->gate = gs;
  return gs;
}

void rm__gate_free(rm__job_t *j)
{
  if (!j->gate) return;
  rm_gate_destroy(j->gate->g);
  free(j->gate);
  j->gate = NULL;
}

static double now_ms(void) { return (double)rm__now_ns() / 1e6; }

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
  if (m) dropped = !w || w->rank < 0 || w->rank >= gs->world || !m[w->rank];
  else if (gs && gs->started && step < rm_gate_step(gs->g)) dropped = 1;
  rm__answer_gate(c, p, step, m, gs ? gs->world : 0, dropped);
}

static void answer_parked(rm_coord_t *c, rm__job_t *j, int64_t now_ns)
{
  rm__gate_state_t *gs = j->gate;
  int decided = gs && gs->started && rm_gate_members(gs->g, NULL);
  for (rm__park_t *p = j->parked.next, *n; p != &j->parked; p = n) {
    n = p->next;
    if (p->kind != RM__PARK_GATE) continue;
    int mine = gs && p->gate_step == rm_gate_step(gs->g);
    if ((mine && decided) || !mine || now_ns >= p->deadline_ns)
      answer(c, j, p, p->gate_step);
  }
}

void rm__gate_request(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                      uint64_t step, int ready, uint32_t wait_ms, rm__park_t *p)
{
  rm_gate_state_t state;
  rm__gate_state_t *gs = rm_job_state_terminal(j->info.state) ? NULL : gate_for(j);
  p->worker_id = w->id;
  if (!gs) {
    rm__answer_stale(c, p, "no step gate: job finished or out of memory");
    return;
  }
  if (!gs->started || step > rm_gate_step(gs->g)) {
    rm_gate_reset(gs->g, step);
    rm_gate_set_slack(gs->g, deadline_slack(j)); /* no-op for the others */
    gs->started = 1;
  }
  if (ready && step == rm_gate_step(gs->g))
    rm_gate_arrive(gs->g, w->rank, now_ms(), &state);
  if (!rm_gate_members(gs->g, NULL)) /* deadline: every call is a clock tick */
    rm_gate_poll(gs->g, now_ms(), &state, NULL);
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
}

void rm__gate_release(rm_coord_t *c, rm__job_t *j)
{
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
  rm_gate_state_t state;
  rm__gate_state_t *gs = j->gate;
  if (!gs) return;
  if (gs->started && !rm_gate_members(gs->g, NULL))
    rm_gate_poll(gs->g, (double)now_ns / 1e6, &state, NULL);
  answer_parked(c, j, now_ns);
}
