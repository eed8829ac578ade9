/*
 * job.c - the job state machine, rendezvous and liveness.
 *
 *                  first Join           group complete
 *   submit -> PENDING --------> FORMING ---------------> RUNNING
 *                |                 ^                      |   |
 *                |                 +----------------------+   | every member
 *                |                  coordinator restart        | left ok
 *                |                  (rm__job_resume)           v
 *                |                                         SUCCEEDED
 *                +--(any non-terminal)-- cancel ----------> CANCELLED
 *                +--(any non-terminal)-- member lost/failed,
 *                                        re-formation deadline,
 *                                        launcher failure ----> FAILED
 *
 * Transition -> function: every one goes through rm__job_set_state(), which
 * stores the job row and writes a "job_state" event in the same transaction.
 * FORMING -> RUNNING is rm__job_try_form(); RUNNING -> FORMING is
 * rm__job_resume(); member loss goes through on_member_down(), which hands
 * it to rm__recovery_member_down() (recovery.c: fail, shrink, replace;
 * RUNNING -> FORMING -> RUNNING at the next generation).
 *
 * Invariants:
 *  1. A worker is a member of the current generation iff state == RUNNING and
 *     generation == job generation; members[rank] indexes it in w[].
 *  2. Workers are appended in id order (ids come from SQLite's rowid), so
 *     rm__job_worker() is a binary search.
 *  3. A terminal job answers every parked call (joins: not formed + state;
 *     barriers: broken; watchers: end of stream after the last event).
 *  4. Counters instead of scans (model.h): j->n_joining ==
 *     #{w : in_group && state == JOINING} (changed beside every worker
 *     transition here and in rpc.c on_join, recounted by every
 *     rm__job_info_refresh, after recovery and in rm__job_resume, so it is
 *     rebuilt from the stored rows after a restart); w->joins_parked == the
 *     number of w's Join calls in j->parked (rm__park_link/unlink);
 *     j->watchers lists exactly the WATCH entries of j->parked.
 *
 * RANKS (assign_ranks): when every candidate carries a distinct launcher hint
 * (SLURM_PROCID, completion index) in [0, world), the hints are the ranks.
 * Otherwise, when re-forming, workers keep their previous order; otherwise
 * workers are grouped by host in order of each host's first join, join order
 * within a host, so a ring crosses hosts as few times as possible.
 */
#define _GNU_SOURCE /* qsort_r */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"
#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"

#define ELASTIC_SETTLE_NS (1000LL * 1000000LL)

rm__job_t *rm__job_new(rm_coord_t *c, const rm_job_spec_t *spec)
{
  rm__job_t *j = rm__xcalloc(1, sizeof *j);
  j->info.spec = *spec;
  j->info.state = RM_JOB_PENDING;
  j->result_rank = -1;
  j->stored_state = -1;
  j->parked.next = j->parked.prev = &j->parked;
  j->watchers.wnext = j->watchers.wprev = &j->watchers;
  j->ring_max = (size_t)c->opt.step_window;
  if (c->njobs == c->capjobs) {
    c->capjobs = c->capjobs ? 2 * c->capjobs : 16;
    c->jobs = rm__xrealloc(c->jobs, c->capjobs * sizeof *c->jobs);
  }
  c->jobs[c->njobs++] = j;
  return j;
}

/* Capacity of the samples ring at least min(want, ring_max), oldest first
 * from index 0 afterwards (head = n). */
void rm__job_ring_reserve(rm__job_t *j, size_t want)
{
  if (want > j->ring_max) want = j->ring_max;
  if (want <= j->ring_cap) return;
  rm_step_sample_t *r = rm__xcalloc(want, sizeof *r);
  for (size_t i = 0; i < j->ring_n; i++)
    r[i] = j->ring[(j->ring_head + j->ring_cap - j->ring_n + i) % j->ring_cap];
  free(j->ring);
  j->ring = r;
  j->ring_cap = want;
  j->ring_head = j->ring_n % want;
}

/* ---- retention ----
 * A finished job stays loaded for RINGMASTER_JOB_RETENTION_MS (default
 * 10 min: late calls of its workers, the dashboard's last looks), and at
 * most RINGMASTER_JOB_RETAIN finished jobs (default 1,000, the newest) stay
 * loaded at all, whatever their age (Slurm's MinJobAge and MaxJobCount in
 * one), then it is freed and served from SQLite like a job of an earlier
 * coordinator run (public.c falls back to the store for every read), so
 * memory holds the active jobs and a bounded set of finished ones, not
 * every job ever run: a coordinator that runs for months keeps the memory
 * of its work in flight. A job with parked calls stays until they are
 * answered. Called from the tick (age) and before each submission (count,
 * so a burst of short jobs cannot outgrow it between ticks). */
RM_PARAM(job_retention_ms, "RINGMASTER_JOB_RETENTION_MS", 600000)
RM_PARAM(job_retain, "RINGMASTER_JOB_RETAIN", 1000)

void rm__job_evict(rm_coord_t *c, int64_t now_ms)
{
  int64_t keep = (int64_t)rm__param_job_retention_ms();
  int64_t retain = (int64_t)rm__param_job_retain();
  int64_t finished = 0;
  size_t k = 0;
  for (size_t i = 0; i < c->njobs; i++) finished += rm_job_state_terminal(c->jobs[i]->info.state);
  for (size_t i = 0; i < c->njobs; i++) {
    rm__job_t *j = c->jobs[i];
    if (rm_job_state_terminal(j->info.state) && j->parked.next == &j->parked &&
        (now_ms - j->info.finished_ms >= keep || finished > retain)) {
      RM_DEBUG("job %llu: finished %lld ms ago, unloaded (served from the store)",
               (unsigned long long)j->info.id, (long long)(now_ms - j->info.finished_ms));
      rm__job_free(j);
      finished--;
      continue;
    }
    c->jobs[k++] = j; /* order kept: rm__job_find bisects by id, oldest first */
  }
  c->njobs = k;
}

void rm__job_free(rm__job_t *j)
{
  rm__barrier_t *b = j->barriers;
  while (b) {
    rm__barrier_t *next = b->next;
    rm__barrier_free(b);
    b = next;
  }
  rm__blob_release(j->join_tail);
  rm__recovery_free(j);
  for (size_t i = 0; i < j->nw; i++) rm__worker_free(&j->w[i]);
  free(j->result);
  free(j->w);
  free(j->members);
  free(j->links);
  free(j->ring);
  free(j);
}



int rm__job_heartbeat_ms(const rm_coord_t *c, const rm__job_t *j)
{
  int v = j->info.spec.heartbeat_timeout_ms;
  return v > 0 ? v : c->opt.heartbeat_timeout_ms;
}

int rm__job_barrier_ms(const rm_coord_t *c, const rm__job_t *j)
{
  int v = j->info.spec.barrier_timeout_ms;
  return v > 0 ? v : c->opt.barrier_timeout_ms;
}

/* JOINING COUNT (model.h): the O(N) recount, where a pass over w[] is made
 * anyway or a transition outside this file (recovery.c) may have moved it. */
static int joining_recount(const rm__job_t *j)
{
  int n = 0;
  for (size_t i = 0; i < j->nw; i++) n += rm__worker_joining(&j->w[i]);
  return n;
}

void rm__job_info_refresh(rm__job_t *j)
{
  int joined = 0, alive = 0, joining = 0;
  uint64_t minstep = UINT64_MAX;
  for (size_t i = 0; i < j->nw; i++) {
    const rm__worker_t *w = &j->w[i];
    joined += w->in_group;
    joining += rm__worker_joining(w);
    alive += w->in_group && w->state <= RM_WORKER_RUNNING;
    /* members, and members of this generation that finished (LEFT): once
     * the last one leaves nobody is a member, and the job's step must still
     * be where they all ended, not the last value a reader refreshed */
    if ((rm__worker_member(j, w) || (w->state == RM_WORKER_LEFT &&
                             w->generation == j->info.generation)) &&
        w->step < minstep)
      minstep = w->step;
  }
  j->info.workers_joined = joined;
  j->info.workers_alive = alive;
  j->n_joining = joining;
  if (j->info.state == RM_JOB_RUNNING && minstep != UINT64_MAX)
    j->info.step = minstep;
}

/* PROGRESS THAT SURVIVES A RESTART. A step a reader is shown is in the
 * jobs row before the reader's answer (the same transaction), so a
 * restarted coordinator never shows less: at most one row write per read
 * that sees a new step. While re-forming the job keeps that step; the new
 * generation starts at min steps_done of its members (recovery.c R1), which
 * is never below it for the workers that were shown. */
void rm__job_progress(rm_coord_t *c, rm__job_t *j)
{
  rm__job_info_refresh(j);
  if (j->info.step != j->stored_step && !rm_job_state_terminal(j->info.state))
    rm__store_job_update(c->store, j);
}

void rm__job_set_state(rm_coord_t *c, rm__job_t *j, rm_job_state_t st,
                       const char *reason)
{
  rm_job_state_t old = j->info.state;
  if (old == st || rm_job_state_terminal(old)) return;
  rm__job_info_refresh(j);
  j->info.state = st;
  j->info.updated_ms = rm__wall_ms();
  snprintf(j->info.reason, sizeof j->info.reason, "%s", reason ? reason : "");
  if (rm_job_state_terminal(st)) j->info.finished_ms = j->info.updated_ms;
  if (old == RM_JOB_RUNNING) rm__gate_release(c, j); /* no gate waits on */
  rm__store_job_update(c->store, j);
  rm__event(c, j, "job_state", -1, "%s -> %s%s%s", rm_job_state_name(old),
            rm_job_state_name(st), reason && *reason ? ": " : "",
            reason ? reason : "");
  /* the generation is over: every open Session that asked hears it now
   * (recovery.c THE NOTICE), not at its next heartbeat or data-plane error */
  if (old == RM_JOB_RUNNING)
    for (rm__park_t *p = j->parked.next; p != &j->parked; p = p->next)
      if (p->kind == RM__PARK_SESSION && p->moved_on_push)
        rm__push_moved_on(c, p, j->info.generation, st, j->info.reason);
  if (!rm_job_state_terminal(st)) return;
  /* Worker states follow the job's end: a worker still joining or running
   * is told to stop (its next call learns the job ended; the launcher stops
   * the processes it started) and is no longer counted alive. */
  for (size_t i = 0; i < j->nw; i++) {
    rm__worker_t *w = &j->w[i];
    if (w->state > RM_WORKER_RUNNING) continue;
    w->state = RM_WORKER_STOPPED;
    rm__store_worker_update(c->store, j, w);
  }
  rm__job_info_refresh(j); /* workers_alive: 0, n_joining: 0 */
  rm__after_commit(c, j, RM__AFTER_STOP); /* launcher stop() after COMMIT */
  for (size_t i = 0; i < j->nw; i++) rm__store_step_summary(c->store, j, &j->w[i]);
  char why[200];
  snprintf(why, sizeof why, "job %s: %s", rm_job_state_name(st),
           reason ? reason : "");
  rm__barrier_break_all(c, j, why);
  for (rm__park_t *p = j->parked.next, *n; p != &j->parked; p = n) {
    n = p->next;
    if (p->kind == RM__PARK_JOIN) rm__job_answer_join(c, j, p);
  }
}

/* ---- rendezvous ---- */
static int cmp_hint(const void *a, const void *b, void *ctx)
{
  const rm__worker_t *w = ctx;
  int x = *(const int *)a, y = *(const int *)b;
  return w[x].rank_hint - w[y].rank_hint;
}

static int cmp_prev(const void *a, const void *b, void *ctx)
{
  const rm__worker_t *w = ctx;
  int x = *(const int *)a, y = *(const int *)b;
  int px = w[x].prev_rank < 0 ? 1 << 30 : w[x].prev_rank;
  int py = w[y].prev_rank < 0 ? 1 << 30 : w[y].prev_rank;
  return px != py ? (px < py ? -1 : 1) : (x < y ? -1 : 1);
}

static int hints_usable(const rm__worker_t *w, const int *idx, int n)
{
  uint8_t *seen = rm__xcalloc((size_t)n, 1);
  int ok = 1;
  for (int i = 0; i < n && ok; i++) {
    int h = w[idx[i]].rank_hint;
    if (h < 0 || h >= n || seen[h]) ok = 0;
    else seen[h] = 1;
  }
  free(seen);
  return ok;
}

static int group_by_host(const rm__worker_t *w, int *idx, int n)
{
  int *out = rm__xmalloc((size_t)n * sizeof *out), k = 0;
  uint8_t *done = rm__xcalloc((size_t)n, 1);
  for (int i = 0; i < n; i++) {
    if (done[i]) continue;
    for (int m = i; m < n; m++) /* every worker on host of i, join order */
      if (!done[m] && !strcmp(w[idx[m]].host, w[idx[i]].host)) {
        out[k++] = idx[m];
        done[m] = 1;
      }
  }
  memcpy(idx, out, (size_t)n * sizeof *idx);
  free(out);
  free(done);
  return 0;
}

static const char *assign_ranks(rm__job_t *j, int *idx, int n)
{
  int any_prev = 0;
  for (int i = 0; i < n; i++) any_prev |= j->w[idx[i]].prev_rank >= 0;
  if (hints_usable(j->w, idx, n)) {
    qsort_r(idx, (size_t)n, sizeof *idx, cmp_hint, j->w);
    return "launcher hints";
  }
  if (any_prev) {
    qsort_r(idx, (size_t)n, sizeof *idx, cmp_prev, j->w);
    return "previous ranks";
  }
  group_by_host(j->w, idx, n);
  return "hosts grouped";
}

static void form(rm_coord_t *c, rm__job_t *j, int *idx, int n)
{
  const char *how = assign_ranks(j, idx, n);
  uint64_t start = rm__recovery_start_step(j, idx, n); /* recovery.c R1 */
  int prev_world = j->info.world, survivors = 0;
  for (int r = 0; r < n; r++) survivors += j->w[idx[r]].prev_rank >= 0;
  j->info.generation++;
  c->ctr.generations_total++;
  free(j->members);
  j->members = rm__xmalloc((size_t)n * sizeof *j->members);
  j->nmembers = n;
  for (int r = 0; r < n; r++) {
    rm__worker_t *w = &j->w[idx[r]];
    j->n_joining -= rm__worker_joining(w);
    j->members[r] = idx[r];
    w->rank = w->prev_rank = r;
    w->step = start; /* a survivor ahead rolls back to it (R1) */
    w->state = RM_WORKER_RUNNING;
    w->generation = j->info.generation;
    w->last_ns = rm__now_ns();
    rm__store_worker_update(c->store, j, w);
  }
  j->start_step = start;
  j->reform_target = 0;
  j->info.world = n;
  j->info.step = j->start_step;
  j->reform_deadline_ns = 0;
  if (!j->info.started_ms) j->info.started_ms = rm__wall_ms();
  rm__store_generation(c->store, j);
  rm__event(c, j, "generation", -1, "generation %llu formed: %d workers "
            "(ranks: %s), starting after step %llu",
            (unsigned long long)j->info.generation, n, how,
            (unsigned long long)j->start_step);
  rm__recovery_secure_formed(c, j, prev_world, survivors); /* before the row is stored */
  rm__job_set_state(c, j, RM_JOB_RUNNING, NULL);
  for (rm__park_t *p = j->parked.next, *nx; p != &j->parked; p = nx) {
    nx = p->next;
    if (p->kind == RM__PARK_JOIN) rm__job_answer_join(c, j, p);
  }
}

/* Ready to form with n candidates? (n capped at target) */
static int form_ready(const rm__job_t *j, int n, int target)
{
  const rm_job_spec_t *s = &j->info.spec;
  int settled = !s->world_size && n >= s->min_workers &&
                rm__now_ns() - j->last_join_ns >= ELASTIC_SETTLE_NS;
  return n > 0 && (n == target || settled);
}

/* Called on every Join and tick while forming: O(1) until the JOINING
 * COUNT (model.h) says the group is complete, then one O(N) pass builds
 * the candidate list (a join wave of N costs O(N), not O(N^2)). */
void rm__job_try_form(rm_coord_t *c, rm__job_t *j)
{
  const rm_job_spec_t *s = &j->info.spec;
  if (j->info.state != RM_JOB_PENDING && j->info.state != RM_JOB_FORMING) return;
  int target = rm__recovery_target(j);
  if (!form_ready(j, j->n_joining < target ? j->n_joining : target, target))
    return;
#ifndef NDEBUG
  /* O(N): checked here, once the count says ready, and on every tick while
   * forming (rm__job_tick), not on every Join: asserts stay on in
   * RelWithDebInfo, and a per-Join recount made a join wave O(N^2). */
  assert(j->n_joining == joining_recount(j));
#endif
  int *idx = rm__xmalloc((j->nw ? j->nw : 1) * sizeof *idx), n = 0;
  /* previous members first (survivors of a loss), then standbys/new ones */
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < j->nw; i++)
      if (j->w[i].in_group && j->w[i].state == RM_WORKER_JOINING && n < target &&
          (j->w[i].prev_rank >= 0) == (pass == 0))
        idx[n++] = (int)i;
  if (form_ready(j, n, target)) {
    char rule[160], why[320];
    /* A shrinking re-formation that lost more members while
     * forming can fall below the aggregation rule */
    if (!rm__recovery_secure_holds(j, n, why, sizeof why)) {
      rm__event(c, j, "secure_threshold", -1, "re-formation: %s", why);
      rm__job_set_state(c, j, RM_JOB_FAILED, why);
    } else if (rm__recovery_agg_holds(j, n, rule, sizeof rule)) {
      form(c, j, idx, n);
    } else {
      snprintf(why, sizeof why, "re-formation with %d worker%s cannot hold "
               "aggregation %s with f = %d: %s", n, n == 1 ? "" : "s",
               s->aggregation, s->aggregation_f, rule);
      rm__job_set_state(c, j, RM_JOB_FAILED, why);
    }
  }
  free(idx);
}

/* ---- loss and departure ---- */
/* Policy hook: a member of the current generation is gone (lost or failed).
 * on_failure "fail" (the only policy this build accepts) fails the job.
 * "shrink" re-forms with the survivors (>= min_workers) at the next
 * generation; "replace" waits for a standby/relaunched worker (max_restarts). */
static void on_member_down(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                           const char *reason)
{
  rm__recovery_member_down(c, j, w, reason);
  j->n_joining = joining_recount(j); /* reform() moved survivors (rare) */
}

void rm__job_worker_lost(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                         const char *why)
{
  if (w->state >= RM_WORKER_LOST) return;
  int member = rm__worker_member(j, w);
  j->n_joining -= rm__worker_joining(w);
  w->state = RM_WORKER_LOST;
  c->ctr.workers_lost_total++;
  rm__store_worker_update(c->store, j, w);
  rm__event(c, j, "worker_lost", w->rank, "worker %llu (rank %d, %s) lost: %s",
            (unsigned long long)w->id, w->rank, w->host, why);
  if (!member) {
    w->in_group = 0; /* a forming slot frees up */
    if (j->reform_target > 0 && w->prev_rank >= 0) j->reform_target--;
    return;
  }
  if (j->info.state == RM_JOB_RUNNING) {
    char r[RM_COORD_TEXT_MAX];
    snprintf(r, sizeof r, "lost: %s", why);
    on_member_down(c, j, w, r);
  }
}

void rm__job_worker_left(rm_coord_t *c, rm__job_t *j, rm__worker_t *w, int ok,
                         const char *error)
{
  int member = rm__worker_member(j, w);
  if (w->state >= RM_WORKER_LOST) return;
  j->n_joining -= rm__worker_joining(w);
  w->state = ok ? RM_WORKER_LEFT : RM_WORKER_FAILED;
  rm__store_step_summary(c->store, j, w);
  rm__store_worker_update(c->store, j, w);
  rm__event(c, j, ok ? "worker_left" : "worker_failed", w->rank,
            "worker %llu (rank %d, %s) %s%s after step %llu",
            (unsigned long long)w->id, w->rank, w->host,
            ok ? "finished" : "failed: ", ok ? "" : error,
            (unsigned long long)w->step);
  if (!member) {
    w->in_group = 0;
    return;
  }
  if (!ok) {
    char r[RM_COORD_TEXT_MAX];
    snprintf(r, sizeof r, "failed: %s", error);
    on_member_down(c, j, w, r);
    return;
  }
  for (int r = 0; r < j->nmembers; r++)
    if (j->w[j->members[r]].state != RM_WORKER_LEFT) return;
  char why[128];
  snprintf(why, sizeof why, "all %d workers finished", j->nmembers);
  rm__job_info_refresh(j);
  rm__result_settle(c, j);
  rm__job_set_state(c, j, RM_JOB_SUCCEEDED, why);
}

/* After a coordinator restart: members must re-join; the job re-forms at the
 * next generation (same ranks when the same workers come back). */
void rm__job_resume(rm_coord_t *c, rm__job_t *j)
{
  int expected = 0, finished = 0;
  int64_t now = rm__now_ns();
  rm__recovery_load(c, j);
  j->n_joining = joining_recount(j); /* JOINING COUNT from the stored rows */
  if (j->info.state == RM_JOB_PENDING) return;
  for (size_t i = 0; i < j->nw; i++) {
    rm__worker_t *w = &j->w[i];
    w->in_group = 0;
    w->last_ns = now;
    finished += j->info.state == RM_JOB_RUNNING && w->state == RM_WORKER_LEFT &&
                w->generation == j->info.generation;
    if (w->state <= RM_WORKER_RUNNING) {
      expected++;
      w->prev_rank = w->state == RM_WORKER_RUNNING ? w->rank : -1;
      w->state = RM_WORKER_JOINING;
    }
  }
  int wait_ms = rm__job_barrier_ms(c, j);
  if (wait_ms < 3 * rm__job_heartbeat_ms(c, j)) wait_ms = 3 * rm__job_heartbeat_ms(c, j);
  j->reform_deadline_ns = now + (int64_t)wait_ms * 1000000;
  /* Not counted in restarts: max_restarts is the budget for replacing lost
   * workers (recovery.c R3); a coordinator restart loses no worker. */
  j->n_joining = 0; /* in_group 0 for all: the re-join counts them again */
  /* A generation that was finishing (members left after their last step,
   * the others' Leave not yet stored) re-forms with those that were
   * still in it: the finished ones never join again, so waiting for the
   * world size would fail a job whose training is over. */
  if (finished && expected > 0) j->reform_target = expected;
  rm__event(c, j, "coordinator_restarted", -1, "coordinator restarted: "
            "waiting up to %d ms for %d workers to re-join at the next "
            "generation%s", wait_ms, expected,
            finished ? " (the others finished before it)" : "");
  rm__job_set_state(c, j, RM_JOB_FORMING, "re-forming after coordinator restart");
}

/* The job's window of samples (arrival order) and the step counters. */
static void step_record(rm_coord_t *c, rm__job_t *j, const rm_step_sample_t *s, double ms)
{
  if (j->ring_n == j->ring_cap && j->ring_cap < j->ring_max)
    rm__job_ring_reserve(j, j->ring_cap ? 2 * j->ring_cap : 16);
  j->ring[j->ring_head] = *s;
  j->ring_head = (j->ring_head + 1) % j->ring_cap;
  if (j->ring_n < j->ring_cap) j->ring_n++;
  c->ctr.steps_reported_total++;
  c->ctr.step_seconds_sum += ms / 1000.0;
  c->ctr.allreduce_bytes_total += s->allreduce_bytes;
  c->ctr.allreduce_seconds_total += s->comm_ms / 1000.0;
  int b = 0;
  while (b < RM_COORD_STEP_BUCKETS && ms / 1000.0 > rm_coord_step_bucket_le[b]) b++;
  c->ctr.step_seconds_bucket[b]++;
}

/* A report of a generation that is over (rpc.c LATE STEP REPORTS): history
 * only - the window, the counters, its own summary row. No worker field,
 * no accumulator, nothing of the current generation changes. */
void rm__job_step_late(rm_coord_t *c, rm__job_t *j, const rm_step_sample_t *s)
{
  step_record(c, j, s, s->compute_ms + s->comm_ms + s->wait_ms);
  rm__store_step_late(c->store, j->info.id, s);
}

/* The sample's named metrics into w's window (the last value of each);
 * 0, nothing changed, when a name new to the window does not fit. */
static int metrics_merge(rm__worker_t *w, const rm_step_sample_t *s)
{
  uint32_t k, fresh = 0;
  if (!s->n_metrics) return 1;
  rm__worker_cold_t *m = rm__worker_cold(w);
  for (uint32_t i = 0; i < s->n_metrics; i++) {
    for (k = 0; k < m->acc_nm && strcmp(m->acc_m[k].name, s->metrics[i].name); k++) {}
    fresh += k == m->acc_nm;
  }
  if (m->acc_nm + fresh > RM_METRICS_MAX) return 0;
  for (uint32_t i = 0; i < s->n_metrics; i++) {
    for (k = 0; k < m->acc_nm && strcmp(m->acc_m[k].name, s->metrics[i].name); k++) {}
    m->acc_m[k] = s->metrics[i];
    if (k == m->acc_nm) m->acc_nm++;
  }
  return 1;
}

void rm__job_step(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                  const rm_step_sample_t *s)
{
  double ms = s->compute_ms + s->comm_ms + s->wait_ms;
  /* a window whose metric names would overflow is written first, so no
   * metric's value is left out of the stored history */
  if (w->acc_count && !metrics_merge(w, s)) rm__store_step_summary(c->store, j, w);
  w->step = s->step;
  w->steps_done = s->step;
  w->step_ms = ms;
  w->compute_ms = s->compute_ms;
  w->comm_ms = s->comm_ms;
  w->wait_ms = s->wait_ms;
  step_record(c, j, s, ms);
  if (!w->acc_count) {
    w->acc_first = s->step;
    w->acc_max = 0;
    if (w->cold) w->cold->acc_nm = 0;
    metrics_merge(w, s); /* fits: at most RM_METRICS_MAX, checked at rpc.c */
  }
  w->acc_last = s->step;
  w->acc_count++;
  w->acc_bytes += s->allreduce_bytes;
  w->acc_step += ms;
  if (ms > w->acc_max) w->acc_max = ms;
  w->acc_compute += s->compute_ms;
  w->acc_comm += s->comm_ms;
  w->acc_wait += s->wait_ms;
  w->acc_loss = s->loss;
  w->acc_acc = s->accuracy;
  if (w->acc_count >= 16) {
    rm__store_step_summary(c->store, j, w);
    rm__store_worker_update(c->store, j, w);
  }
}

/* ---- the 100 ms tick ---- */
void rm__job_tick(rm_coord_t *c, rm__job_t *j, int64_t now)
{
  if (rm_job_state_terminal(j->info.state)) return;
  rm__liveness_job(c, j, now); /* liveness.c: whose silence it is */
  if (j->info.state == RM_JOB_FORMING || j->info.state == RM_JOB_PENDING) {
#ifndef NDEBUG
    assert(j->n_joining == joining_recount(j)); /* see rm__job_try_form */
#endif
    rm__job_try_form(c, j);
    if (j->reform_deadline_ns && now > j->reform_deadline_ns &&
        j->info.state == RM_JOB_FORMING) {
      char why[160];
      rm__job_info_refresh(j);
      snprintf(why, sizeof why, "re-formation timed out: %d of %d workers "
               "re-joined", j->info.workers_joined,
               j->info.spec.world_size ? j->info.spec.world_size
                                       : j->info.spec.min_workers);
      rm__job_set_state(c, j, RM_JOB_FAILED, why);
    }
  }
  for (rm__park_t *p = j->parked.next, *n; p != &j->parked; p = n) {
    n = p->next;
    if (p->kind == RM__PARK_JOIN && now >= p->deadline_ns)
      rm__job_answer_join(c, j, p);
  }
  rm__barrier_tick(c, j, now);
  rm__gate_tick(c, j, now);
}

/* ---- parked calls ---- */


void rm__park_drop(rm_coord_t *c, rm__park_t *p, int cancelled)
{
  if (!p->next) return;
  rm__job_t *j = rm__job_find(c, p->job_id);
  rm__park_unlink(p);
  if (!j || !cancelled || c->closing) return; /* shutdown cancels them all */
  rm__worker_t *w = rm__job_worker(j, p->worker_id);
  if ((p->kind == RM__PARK_WATCH || p->kind == RM__PARK_SESSION) && p->worker_id && w &&
      !rm_job_state_terminal(j->info.state) &&
      rm__worker_live(j, w)) {
    if (rm__liveness_doubt(c, j, rm__now_ns())) { /* liveness.c case 4 */
      RM_INFO("job %llu: worker %llu's control stream broke while its heartbeats "
              "were not being heard; it must heartbeat within the fresh window",
              (unsigned long long)j->info.id, (unsigned long long)w->id);
      return;
    }
    /* recovery.c: detection source 2, the agent's session stream */
    rm__job_worker_lost(c, j, w, p->relayed
                                     ? "its control stream broke (its relay saw "
                                       "its Session cancelled by its transport)"
                                     : p->kind == RM__PARK_SESSION
                                     ? "its control stream broke (Session "
                                       "cancelled by its transport)"
                                     : "its control stream broke (session Watch "
                                       "cancelled by its transport)");
    return;
  }
  if (p->kind == RM__PARK_GATE && w && rm__worker_member(j, w) &&
      rm__now_ns() < p->deadline_ns &&
      !rm__liveness_doubt(c, j, rm__now_ns())) { /* recovery.c: detection source 2 */
    rm__job_worker_lost(c, j, w, "its control stream broke (StepGate call "
                        "cancelled by its transport)");
    return;
  }
  if (p->kind != RM__PARK_JOIN) return;
  if (w && w->state == RM_WORKER_JOINING && w->in_group &&
      !rm_job_state_terminal(j->info.state))
    rm__job_worker_lost(c, j, w, "its Join call was cancelled before the "
                        "group formed");
}

/* ---- loaded jobs ---- */
/* c->jobs is in ascending id order: resume loads ORDER BY id, submit
 * appends a newer (larger) id, nothing is removed. Binary search first (the
 * job list calls this once per listed job: a linear scan made it O(page x
 * jobs)); a linear scan is the fallback, so should the order ever break
 * (e.g. a job appended before its id is set), a lookup is slower, never
 * wrong. */
rm__job_t *rm__job_find(rm_coord_t *c, uint64_t id)
{
  size_t lo = 0, hi = c->njobs;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    uint64_t m = c->jobs[mid]->info.id;
    if (m == id) return c->jobs[mid];
    if (m < id) lo = mid + 1;
    else hi = mid;
  }
  for (size_t i = 0; i < c->njobs; i++)
    if (c->jobs[i]->info.id == id) return c->jobs[i];
  return NULL;
}

/* j (new, spec set) as the store has job id: row, workers, recent steps,
 * result. Reads only. */
static void load_stored(rm_coord_t *c, rm__job_t *j, const rm_job_info_t *info)
{
  j->info = *info;
  j->stored_state = (int)info->state;
  j->stored_step = info->step;
  rm__store_load_workers(c->store, j);
  /* the window of recent steps, from the stored summaries */
  rm__job_ring_reserve(j, j->ring_max);
  j->ring_n = rm__store_recent_steps(c->store, j->info.id, j->ring, j->ring_cap);
  j->ring_head = j->ring_n % j->ring_cap;
  if (rm__store_job_result_get(c->store, j->info.id, &j->result, &j->result_rank) != RM_OK)
    j->result_rank = -1;
}

void rm__job_load_active(rm_coord_t *c)
{
  uint64_t *ids = NULL;
  size_t n = 0;
  rm__store_active_jobs(c->store, &ids, &n);
  for (size_t i = 0; i < n; i++) {
    rm_job_info_t info;
    if (rm__store_job_get(c->store, ids[i], &info) != RM_OK) continue;
    rm__job_t *j = rm__job_new(c, &info.spec);
    load_stored(c, j, &info);
    rm__job_resume(c, j);
  }
  free(ids);
}

/* RELOAD (core/commit.c): a section that changed job id's rows was rolled
 * back, so its memory may hold what the store does not. Its parked calls
 * get the storage failure (their clients retry, as after a coordinator
 * restart), the record is freed and read again from the store in the same
 * place of c->jobs (a job the store lacks leaves memory); a job the store
 * has running resumes as after a restart (its workers re-join at the next
 * generation), in a transaction of its own. Outside any transaction. */
int rm__job_reload(rm_coord_t *c, uint64_t id, int full, const char *why)
{
  size_t at = c->njobs;
  rm_job_info_t info;
  rm__park_t *p;
  for (size_t i = 0; i < c->njobs && at == c->njobs; i++)
    if (c->jobs[i]->info.id == id) at = i;
  if (at == c->njobs) return 0;
  rm__job_t *old = c->jobs[at];
  while ((p = old->parked.next) != &old->parked) {
    rm__answer_storage(c, p, full, why);
    /* a park whose call was already answered in the section (a Session
     * ended while its barrier or gate wait stayed listed) gets no answer
     * and is not unlinked by one: unlinked here, or this loop never ends */
    rm__park_unlink(p);
  }
  rm__job_free(old);
  if (rm__store_job_get(c->store, id, &info) != RM_OK) {
    memmove(&c->jobs[at], &c->jobs[at + 1], (c->njobs - at - 1) * sizeof *c->jobs);
    c->njobs--;
    return 1;
  }
  rm__job_t *j = rm__job_new(c, &info.spec); /* appended: moved to old's place */
  c->njobs--;
  c->jobs[at] = j;
  load_stored(c, j, &info);
  RM_WARN("job %llu: reloaded from the database after a failed write (%s)",
          (unsigned long long)id, why);
  if (rm_job_state_terminal(info.state)) {
    rm__recovery_load(c, j);
    return 1;
  }
  rm__store_begin(c->store);
  rm__job_resume(c, j);
  if (rm__store_commit(c->store) != 0)
    RM_WARN("job %llu: its resumption was not stored either; it re-forms from the stored "
            "state, as after a restart", (unsigned long long)id);
  return 1;
}
