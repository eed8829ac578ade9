/*
 * recovery.c - what the coordinator does when a member is lost:
 * the on_failure policies, data-plane failure reports from survivors,
 * checkpoint bookkeeping and straggler flags.
 *
 * DETECTION. Four sources, all ending in rm__job_worker_lost():
 *   1. heartbeats: no call or Session message from a member for
 *      heartbeat_timeout_ms (job.c);
 *   2. the control stream: a member's long-lived call cancelled by its
 *      client's transport (rpc/server_group.c drops the park; rm__park_drop): the
 *      agent's session stream (a Session carrying its heartbeats, open for
 *      its whole life; a Watch carrying its worker id from an agent that
 *      talks to an older coordinator), a StepGate long-poll, a Join
 *      long-poll while forming.
 *      A process that dies has its TCP connection closed by its kernel, so
 *      this takes about one round trip, whatever the heartbeat timeout;
 *   3. the data plane: a survivor's collective fails; its agent calls
 *      ReportFailure(failed_rank, status, error):
 *        peer_lost  the peer's sockets were closed by its kernel (process
 *                   dead) or an ABORT frame named it: lost at once;
 *        timeout    lost only when the peer has also been silent on the
 *                   control plane for half the heartbeat timeout; otherwise
 *                   an event (a slow peer is a straggler, not a loss);
 *        other      an event; the heartbeat decides.
 *   4. the launcher: the local launcher reaps a worker process that died
 *      and reports it (relaunch.c, within its 200 ms poll).
 *   Detection time is therefore ~0 for a killed process (TCP reset/EOF on
 *   the survivors' sockets), data_timeout for a hung one that still
 *   heartbeats (never lost: straggler), heartbeat_timeout for a hung host.
 *
 * LOSS -> POLICY (rm__recovery_member_down), job RUNNING at generation G:
 *
 *   fail     RUNNING -> FAILED, reason "rank r (host) lost: ..."
 *   shrink   survivors >= min_workers (1 for a fixed-size job):
 *              RUNNING -> FORMING -> RUNNING at G+1 with the survivors,
 *              formed at once (all survivors are known), ranks compacted in
 *              their previous order; else FAILED. Also FAILED when the
 *              survivors cannot hold the job's aggregation rule (e.g.
 *              krum with f = 1 needs n > 4, so 5 -> 4 fails; the reason
 *              quotes rm_agg_check's rule).
 *   replace  restarts < max_restarts:
 *              RUNNING -> FORMING; the target stays world_size: survivors
 *              plus a standby (a worker that joined beyond world_size and
 *              waits in its Join long-poll) or, when none completes the
 *              group at once, a worker the job's launcher relaunches
 *              (relaunch.c) joining afresh; RUNNING at G+1 once
 *              complete. FAILED when
 *              max_restarts is reached, or at the re-formation deadline
 *              (max(barrier timeout, 3 heartbeat timeouts)) with no one.
 *
 * THE NOTICE. Survivors learn that G is over (FORMING, or the job's end)
 * the moment the job leaves RUNNING: job.c rm__job_set_state pushes a
 * SessionResponse with moved_on (generation G, the new state, the reason:
 * "rank r (host) lost: ...") on the Session of every worker that asked
 * for it (SessionRequest.moved_on_push), queued with the transition's
 * COMMIT like any answer. The agent aborts its communicator with that
 * cause (the in-flight collective returns RM_ERR_RECONFIGURED), drops the
 * step, re-joins, builds a communicator from the new peer list on the
 * same data endpoint and resumes after start_step (worker/session/
 * session.c, RE-FORMATION TIMELINE). A worker killed by SIGKILL is usually
 * declared lost through its broken Session (source 2) within a few ms,
 * before its peers' data plane has failed: the notice is then the first
 * signal they get. Without it (an older agent, a lost push: it is best
 * effort) they learn at their next heartbeat or step report, as before.
 *
 * Invariants:
 *  R1 start_step of a new generation = min steps_done over its members that
 *     were members before (prev_rank >= 0). A survivor one step ahead rolls
 *     back (the trainer keeps the previous state), so every member resumes
 *     from the same bytes. Workers new to the job do not lower it: they load
 *     the last complete checkpoint and then receive the live parameters from
 *     a survivor (rm__trainer_resync). With no previous member at all (every
 *     worker new), start_step = the last complete checkpoint.
 *  R2 ckpt_step only grows: the min over the generation's members of the
 *     newest checkpoint each reported. Each increase is a row of table
 *     checkpoints, committed with the report that completed it (durable
 *     before the reply), and reloaded after a coordinator restart.
 *  R3 restarts counts re-formations after a member loss (not coordinator
 *     restarts, which lose no worker: job.c rm__job_resume); replace
 *     refuses the (max_restarts+1)-th loss.
 *
 * LINK FAILURES. A timeout naming a peer that still answers the coordinator
 * is not a loss on its own (a slow peer is a straggler). But when the named
 * peer's own data plane failed in the same generation too (it sent its own
 * ReportFailure: it is not busy computing, it cannot reach its peers), the
 * link between them is broken (a cut, a firewall, a dead NIC queue): that
 * peer is lost, with both ranks in the reason, as soon as both reports are
 * in, whichever came first. One loss re-forms the group (shrink) or fails
 * the job (fail); the other end stays. Found by the fault campaign's link
 * cuts: before, a survivor told by an ABORT frame that it was the one
 * blamed reported the ABORT's sender as peer_lost, and an innocent worker
 * was dropped (tcp_progress.c on_abort_frame now reports a timeout naming
 * nobody in that case).
 *
 * STALLS. The straggler detector flags a worker slow in M of W
 * steps; a worker that stops once for seconds is not that. A step report
 * whose compute_ms exceeds max(RINGMASTER_STALL_MS (default 1000), 10 x
 * the median of the other members' last compute_ms) is a "stall" event in
 * words (rank, host, step, both times): one per report, so one per stall.
 *
 * SECURE AGGREGATION. A secure job's sum is revealed only over
 * its whole membership (the pairwise masks cancel there and nowhere else),
 * so a member lost at any point of a step aborts that step on every
 * survivor: nothing of it is revealed. The job then re-forms as any other
 * (shrink or replace), and the new generation redoes the step with fresh
 * keys and masks over its own members: a secure_recovered event, "generation
 * G: step S redone with fresh masks over N members after D dropouts" (S =
 * the generation's start step + 1, D = members of the generation before
 * that are not back), counted on the job (secure_recovered_steps,
 * secure_dropouts). The threshold is the floor: a re-formation with fewer
 * than secagg_threshold members fails the job ("secure aggregation: 2
 * members left, threshold 3: no sum over fewer inputs is revealed"; also a
 * secure_threshold event), checked when the loss is seen (shrink) and when
 * a group forms (job.c rm__job_try_form: members lost while forming).
 *
 * GLOBAL BATCH under shrink: it stays B. The trainer shards the global
 * batch over the current world (rank r of N: rows [B r/N, B (r+1)/N)), so
 * after shrinking to N' ranks each survivor computes about B/N' rows: every
 * step is still the mean gradient over the same B rows a single process
 * would use (same data order, learning rate unchanged); only the time per
 * step grows by about N/N'.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"
#include "straggler.h"

enum { POL_FAIL = 0, POL_SHRINK = 1, POL_REPLACE = 2 };
#define STANDBY_MAX 8

static int policy(const rm__job_t *j)
{
  const char *p = j->info.spec.on_failure;
  return !strcmp(p, "shrink") ? POL_SHRINK : !strcmp(p, "replace") ? POL_REPLACE : POL_FAIL;
}

int rm__recovery_target(const rm__job_t *j)
{
  const rm_job_spec_t *s = &j->info.spec;
  if (j->reform_target > 0) return j->reform_target;
  return s->world_size ? s->world_size : s->max_workers;
}

int rm__recovery_standby_cap(const rm__job_t *j)
{
  int m = j->info.spec.max_restarts;
  if (policy(j) != POL_REPLACE) return 0;
  return m < STANDBY_MAX ? m : STANDBY_MAX;
}

uint64_t rm__recovery_start_step(const rm__job_t *j, const int *idx, int n)
{
  uint64_t start = UINT64_MAX;
  for (int i = 0; i < n; i++) {
    const rm__worker_t *w = &j->w[idx[i]];
    if (w->prev_rank >= 0 && w->steps_done < start) start = w->steps_done;
  }
  return start == UINT64_MAX ? j->ckpt_step : start;
}

static void reform(rm_coord_t *c, rm__job_t *j, rm__worker_t *gone, int pol,
                   int survivors, const char *why)
{
  int64_t now = rm__now_ns();
  int wait_ms = rm__job_barrier_ms(c, j), hb = rm__job_heartbeat_ms(c, j);
  for (size_t i = 0; i < j->nw; i++) {
    rm__worker_t *x = &j->w[i];
    if (x == gone || !rm__worker_member(j, x)) continue;
    x->state = RM_WORKER_JOINING;
    x->in_group = 1;
    x->last_ns = now;
    rm__store_worker_update(c->store, j, x);
  }
  gone->in_group = 0;
  j->info.restarts++;
  j->reform_target = pol == POL_SHRINK ? survivors : 0;
  if (wait_ms < 3 * hb) wait_ms = 3 * hb;
  j->reform_deadline_ns = now + (int64_t)wait_ms * 1000000;
  rm__event(c, j, "recovery", gone->rank, "%s; on_failure %s: re-forming "
            "generation %llu with %d survivor%s%s (restart %d)", why,
            j->info.spec.on_failure, (unsigned long long)j->info.generation + 1,
            survivors, survivors == 1 ? "" : "s",
            pol == POL_REPLACE ? " + a replacement (standby or relaunched)" : "",
            j->info.restarts);
  rm__job_set_state(c, j, RM_JOB_FORMING, why);
  rm__job_try_form(c, j);
  if (pol == POL_REPLACE && j->info.state == RM_JOB_FORMING &&
      strcmp(j->info.spec.launcher, "none"))
    rm__recovery_queue_relaunch(c, j); /* no standby: ask the launcher */
}

void rm__recovery_member_down(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                              const char *reason)
{
  char why[RM_COORD_TEXT_MAX], msg[RM_COORD_TEXT_MAX + 320], rule[160];
  const rm_job_spec_t *s = &j->info.spec;
  int pol = policy(j), n = 0;
  snprintf(why, sizeof why, "rank %d (%s) %s", w->rank, w->host, reason);
  rm__barrier_break_all(c, j, why);
  rm__recovery_forget(c, j, w);
  for (size_t i = 0; i < j->nw; i++) n += &j->w[i] != w && rm__worker_member(j, &j->w[i]);
  int min = pol == POL_SHRINK ? (s->min_workers > 0 ? s->min_workers : 1) : 0;
  if (pol == POL_FAIL) {
    rm__job_set_state(c, j, RM_JOB_FAILED, why);
  } else if (pol == POL_REPLACE && j->info.restarts >= s->max_restarts) {
    snprintf(msg, sizeof msg, "%s; on_failure replace: max_restarts (%d) "
             "reached", why, s->max_restarts);
    rm__job_set_state(c, j, RM_JOB_FAILED, msg);
  } else if (pol == POL_SHRINK && !rm__recovery_secure_holds(j, n, rule, sizeof rule)) {
    snprintf(msg, sizeof msg, "%s; %s", why, rule);
    rm__event(c, j, "secure_threshold", -1, "%s", msg);
    rm__job_set_state(c, j, RM_JOB_FAILED, msg);
  } else if (pol == POL_SHRINK && (n < min || n == 0)) {
    snprintf(msg, sizeof msg, "%s; on_failure shrink: %d survivor%s, fewer "
             "than min_workers %d", why, n, n == 1 ? "" : "s", min);
    rm__job_set_state(c, j, RM_JOB_FAILED, msg);
  } else if (pol == POL_SHRINK && !rm__recovery_agg_holds(j, n, rule, sizeof rule)) {
    snprintf(msg, sizeof msg, "%s; on_failure shrink: %d survivor%s cannot "
             "hold aggregation %s with f = %d: %s", why, n, n == 1 ? "" : "s",
             s->aggregation, s->aggregation_f, rule);
    rm__job_set_state(c, j, RM_JOB_FAILED, msg);
  } else {
    reform(c, j, w, pol, n, why);
  }
}

/* Does the job's aggregation rule hold for n members? why gets
 * rm_agg_check's words when not. */
int rm__recovery_agg_holds(const rm__job_t *j, int n, char *why, size_t len)
{
  rm_agg_config_t cfg;
  if (rm__spec_agg_config(&j->info.spec, &cfg) != RM_OK) {
    snprintf(why, len, "unknown aggregation method '%.15s'", j->info.spec.aggregation);
    return 0;
  }
  return rm_agg_check(&cfg, n, why, len) == RM_OK;
}

int rm__recovery_secure_holds(const rm__job_t *j, int n, char *why, size_t len)
{
  int t = j->info.spec.secagg_threshold;
  if (!j->info.spec.secagg_bits || n >= t) return 1;
  snprintf(why, len, "secure aggregation: %d member%s left, threshold %d: no sum over "
           "fewer inputs is revealed", n, n == 1 ? "" : "s", t);
  return 0;
}

void rm__recovery_secure_formed(rm_coord_t *c, rm__job_t *j, int prev_world, int survivors)
{
  int dropouts = prev_world - survivors;
  if (!j->info.spec.secagg_bits || j->info.generation < 2 || dropouts <= 0) return;
  j->info.secure_recovered_steps++;
  j->info.secure_dropouts += dropouts;
  rm__event(c, j, "secure_recovered", -1, "generation %llu: step %llu redone with fresh "
            "masks over %d members after %d dropout%s",
            (unsigned long long)j->info.generation, (unsigned long long)j->start_step + 1,
            j->nmembers, dropouts, dropouts == 1 ? "" : "s");
}

/* ---- checkpoints and stragglers, per accepted step report ---- */
void rm__recovery_load(rm_coord_t *c, rm__job_t *j)
{
  j->ckpt_step = rm__store_checkpoint_get(c->store, j->info.id);
}

static void checkpoint_seen(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                            uint64_t ckpt)
{
  uint64_t m = UINT64_MAX;
  if (ckpt <= w->ckpt_step) return;
  w->ckpt_step = ckpt;
  for (int r = 0; r < j->nmembers; r++) {
    const rm__worker_t *x = &j->w[j->members[r]];
    if (x->ckpt_step < m) m = x->ckpt_step;
  }
  if (m == UINT64_MAX || m <= j->ckpt_step) return;
  j->ckpt_step = m;
  rm__store_checkpoint(c->store, j);
  rm__event(c, j, "checkpoint", -1, "checkpoint of step %llu complete on all "
            "%d members", (unsigned long long)m, j->nmembers);
}

static int cmp_ms(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* A single step far slower than the peers' (STALLS above). */
static void stall_seen(rm_coord_t *c, rm__job_t *j, const rm__worker_t *w,
                       const rm_step_sample_t *s)
{
  double v[64], floor_ms = (double)rm__env_int("RINGMASTER_STALL_MS", 1000);
  int n = 0;
  if (s->compute_ms <= floor_ms) return;
  for (int r = 0; r < j->nmembers && n < 64; r++) {
    const rm__worker_t *x = &j->w[j->members[r]];
    if (x != w && x->compute_ms == x->compute_ms) v[n++] = x->compute_ms;
  }
  if (!n) return;
  qsort(v, (size_t)n, sizeof *v, cmp_ms);
  double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  if (s->compute_ms <= 10 * med) return;
  rm__event(c, j, "stall", w->rank, "rank %d (%s) stalled at step %llu: its "
            "compute took %.0f ms against the other workers' median %.1f ms "
            "(straggler_policy %s)", w->rank, w->host,
            (unsigned long long)s->step, s->compute_ms, med,
            j->info.spec.straggler_policy);
}

static void straggler_seen(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                           const rm_step_sample_t *s)
{
  rm_straggler_event_t ev;
  rm_straggler_report_t r = {w->id, s->step, s->compute_ms, s->comm_ms,
                             s->wait_ms, 0};
  if (!j->strag && rm_straggler_create(NULL, &j->strag) != RM_OK) return;
  if (rm_straggler_report(j->strag, &r, &ev) != RM_OK ||
      ev.transition == RM_STRAGGLER_NONE)
    return;
  w->straggler = ev.transition == RM_STRAGGLER_FLAGGED;
  if (w->straggler)
    rm__event(c, j, "straggler", w->rank, "rank %d (%s) flagged as a "
              "straggler at step %llu: compute %.1f ms vs peers' %.1f ms "
              "(x%.2f, %d slow of the last reports)", w->rank, w->host,
              (unsigned long long)s->step, ev.compute_ms, ev.reference_ms,
              ev.score, ev.slow_in_window);
  else
    rm__event(c, j, "straggler_cleared", w->rank, "rank %d (%s) no longer a "
              "straggler at step %llu (x%.2f)", w->rank, w->host,
              (unsigned long long)s->step, ev.score);
}

void rm__recovery_step(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                       const rm_step_sample_t *s, uint64_t ckpt_step)
{
  checkpoint_seen(c, j, w, ckpt_step);
  stall_seen(c, j, w, s);
  straggler_seen(c, j, w, s);
}

void rm__recovery_forget(rm_coord_t *c, rm__job_t *j, rm__worker_t *w)
{
  rm_straggler_event_t ev;
  if (!j->strag || rm_straggler_leave(j->strag, w->id, &ev) != RM_OK) return;
  if (ev.transition == RM_STRAGGLER_UNFLAGGED && w->straggler)
    rm__event(c, j, "straggler_cleared", w->rank, "rank %d (%s) left while "
              "flagged as a straggler", w->rank, w->host);
  w->straggler = 0;
}

void rm__recovery_free(rm__job_t *j)
{
  rm_straggler_destroy(j->strag);
  j->strag = NULL;
  rm__gate_free(j);
}

/* ---- failure reports (ReportFailure, rpc/rpc_failure.c) ---- */
/* LINK FAILURES above: v was named in a timeout and failed on its own. */
static int link_lost(rm_coord_t *c, rm__job_t *j, rm__worker_t *v)
{
  uint64_t g = j->info.generation + 1;
  const rm__worker_cold_t *x = rm__worker_cold_get(v);
  if (x->blamed_gen != g || x->dp_failed_gen != g || !rm__worker_member(j, v))
    return 0;
  char why[300];
  snprintf(why, sizeof why, "rank %d timed out on it and its own data plane "
           "failed too while both answer the coordinator: the link between "
           "ranks %d and %d is broken", x->blamed_by, x->blamed_by, v->rank);
  rm__job_worker_lost(c, j, v, why);
  return 1;
}

int rm__recovery_failure_report(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                                int fr, const char *status, const char *err,
                                uint64_t step)
{
  int accepted = 0;
  status = status ? status : "";
  err = err && err[0] ? err : "no detail";
  if (rm_job_state_terminal(j->info.state)) return 0;
  rm__event(c, j, "failure_report", w->rank, "rank %d reports a data-plane "
            "failure at step %llu naming rank %d: %s: %.160s", w->rank,
            (unsigned long long)step, fr, status, err);
  if (fr >= 0 && fr < j->nmembers && fr != w->rank) {
    rm__worker_t *v = &j->w[j->members[fr]];
    int64_t silent_ms = (rm__now_ns() - v->last_ns) / 1000000;
    int lost = !strcmp(status, rm_status_name(RM_ERR_PEER_LOST)) ||
               (!strcmp(status, rm_status_name(RM_ERR_TIMEOUT)) &&
                silent_ms * 2 >= rm__job_heartbeat_ms(c, j));
    if (lost && rm__worker_member(j, v)) {
      char why[300];
      size_t sl = strlen(status); /* libringmaster's text already starts with it */
      const char *e = !strncmp(err, status, sl) && err[sl] == ':' ? err + sl + 1 : err;
      while (*e == ' ') e++;
      snprintf(why, sizeof why, "reported by rank %d: %s: %.200s", w->rank,
               status, e);
      rm__job_worker_lost(c, j, v, why);
      accepted = 1;
    } else if (!strcmp(status, rm_status_name(RM_ERR_TIMEOUT)) &&
               rm__worker_cold_get(v)->blamed_gen != j->info.generation + 1) {
      rm__worker_cold_t *x = rm__worker_cold(v);
      x->blamed_gen = j->info.generation + 1;
      x->blamed_by = w->rank;
    }
  }
  if (!accepted && rm__worker_member(j, w)) {
    rm__worker_cold(w)->dp_failed_gen = j->info.generation + 1;
    if (fr >= 0 && fr < j->nmembers && fr != w->rank)
      accepted = link_lost(c, j, &j->w[j->members[fr]]);
    if (!accepted) accepted = link_lost(c, j, w);
  }
  return accepted;
}
