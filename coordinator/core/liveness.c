/*
 * liveness.c - whose absence a silence is. The coordinator never blames the
 * workers for its own absence.
 *
 * THE RULE. A worker is lost for silence only when it was silent for a
 * whole heartbeat timeout WHILE THE COORDINATOR WAS LISTENING. Silence is
 * counted from silent_from(w) = max(w->last_ns, j->listen_from_ns), where
 * listen_from_ns is the end of the job's last period in which the
 * coordinator could not hear its workers. A decision (a member lost, a new
 * generation, a failed job) is never taken on evidence gathered while the
 * coordinator itself was stalled or cut off: after such a period every
 * worker first gets a fresh heartbeat window.
 *
 * THE CASES.
 *  1. The coordinator's own loop stopped (SIGSTOP, CPU starvation, a long
 *     fsync holding the lock, a suspended VM): rm__liveness_check, run under
 *     the lock at the top of every tick and before any decision on a
 *     transport's word, sees the time since it last ran exceed the stall
 *     threshold: min(RINGMASTER_STALL_MS (1000), half the job's heartbeat
 *     timeout), never under three ticks (300 ms). Every open job then gets
 *     listen_from = now (a fresh window; a later RECONNECT WINDOW, case
 *     2, is kept), its re-formation and barrier
 *     deadlines move on by the gap, and the event
 *       coordinator_unavailable "coordinator was unavailable for 20.0 s;
 *       heartbeat deadlines extended by 10 s"
 *     Every deadline expiring in the same instant is this case seen from
 *     the deadlines' side: the gap is what made them all expire.
 *     CLOCK: CLOCK_MONOTONIC (rm__now_ns), the clock every deadline here
 *     uses. It advances during SIGSTOP and CPU starvation, so those gaps
 *     are measured. It does not advance while the whole machine (VM) is
 *     suspended; then the deadlines did not advance either, so no deadline
 *     expires because of the suspension and nothing needs extending: the
 *     two agree by construction. (CLOCK_BOOTTIME would count the suspension
 *     as a gap and extend deadlines that did not expire.)
 *  2. The coordinator runs but cannot hear the workers (a network partition,
 *     a broken switch): its loop has no gap, but most of a job's workers
 *     fall silent together. When more than half of the live workers of a
 *     job are overdue in the same tick, the job enters a HUSH: nobody is
 *     declared lost, event
 *       heartbeats_silent "K of N workers silent together: ..."
 *     The hush ends when the overdue ones are no longer a majority (the
 *     workers are heard again). RECONNECT WINDOW: every worker still
 *     silent then gets a heartbeat timeout plus as long as the coordinator
 *     was unreachable (U = now - hush start + a timeout) before it counts
 *     as silent: listen_from = now + U (silent_from is then in the future
 *     for all of them). A worker's connection comes back only at its next
 *     TCP retransmission or gRPC reconnect attempt, both on exponential
 *     backoff (doubling, 1.6x), so up to about U after the link is back;
 *     one timeout alone lost healthy workers that were heard again a
 *     moment later (bench/results/2026-12-06-coordinator-pause.md). Event
 *       coordinator_unreachable "coordinator was unreachable from its
 *       workers for 20.0 s; heartbeat deadlines extended by 30.0 s"
 *     A hush is bounded: after RINGMASTER_SILENCE_HOLD_MS (default 5x the
 *     job's heartbeat timeout, at least 30 s: reconnecting takes gRPC's
 *     backoff after the link is back) of it the overdue workers are declared lost
 *     as usual, so a job whose workers all really died without their
 *     connections breaking still ends. A one-worker job's silent worker is
 *     "all of them": a hush too.
 *  3. A minority silent while the others are heard: the usual timeout, the
 *     silent ones are lost ("no heartbeat for X ms (timeout T ms)").
 *     "Heard": at most half of the live workers quiet for more than half a
 *     timeout (two heartbeat intervals). Otherwise the decision waits: the
 *     others are either heard again (then case 3) or run out too (case 2).
 *     Workers beat at different phases, so at a cut one of them always runs
 *     out first, alone; it is lost only if the others speak after all.
 *  4. A control stream cancelled by its transport (recovery.c detection
 *     source 2) during a hush or within the fresh window after a gap is not
 *     trusted: it may be the workers' side giving up on a coordinator that
 *     did not answer. The worker then has to heartbeat within the window;
 *     one that really died stays silent and is declared lost by case 3 once
 *     the window ends (rm__liveness_doubt).
 * Failure reports of a survivor's data plane (recovery.c) are evidence the
 * coordinator did not gather itself, and stand.
 */
#include <stdio.h>

#include "core/core_int.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"

RM_PARAM(stall_ms, "RINGMASTER_STALL_MS", 1000)
RM_PARAM(silence_hold_ms, "RINGMASTER_SILENCE_HOLD_MS", 0)

#define MIN_STALL_NS (300LL * 1000000LL) /* three ticks */
/* A hush lasts at least this long by default: after a partition heals the
 * workers' channels reconnect with gRPC's backoff (1 s, growing 1.6x), so
 * they are heard again seconds after the link is back. */
#define HOLD_MIN_NS (30000LL * 1000000LL)

static int64_t hb_ns(const rm_coord_t *c, const rm__job_t *j)
{
  return (int64_t)rm__job_heartbeat_ms(c, j) * 1000000;
}

static int64_t silent_from(const rm__job_t *j, const rm__worker_t *w)
{
  return w->last_ns > j->listen_from_ns ? w->last_ns : j->listen_from_ns;
}

/* Case 1 for one job: a fresh window, its deadlines moved on by the gap. */
static void extend(rm_coord_t *c, rm__job_t *j, int64_t now, int64_t gap)
{
  if (j->listen_from_ns < now) j->listen_from_ns = now; /* a reconnect window runs on */
  if (j->reform_deadline_ns) j->reform_deadline_ns += gap;
  for (rm__barrier_t *b = j->barriers; b; b = b->next)
    if (b->state == RM_BARRIER_OPEN) {
      b->deadline_ns += gap;
      b->deadline_ms += gap / 1000000;
    }
  rm__event(c, j, "coordinator_unavailable", -1, "coordinator was unavailable "
            "for %.1f s; heartbeat deadlines extended by %g s", (double)gap / 1e9,
            (double)rm__job_heartbeat_ms(c, j) / 1000.0);
}

void rm__liveness_check(rm_coord_t *c, int64_t now)
{
  int64_t gap = c->live_ns ? now - c->live_ns : 0;
  if (now > c->live_ns) c->live_ns = now;
  if (gap <= MIN_STALL_NS) return;
  for (size_t i = 0; i < c->njobs; i++) {
    rm__job_t *j = c->jobs[i];
    if (rm_job_state_terminal(j->info.state)) continue;
    int64_t lim = rm__param_stall_ms() * 1000000;
    if (hb_ns(c, j) / 2 < lim) lim = hb_ns(c, j) / 2;
    if (lim < MIN_STALL_NS) lim = MIN_STALL_NS;
    if (gap > lim) extend(c, j, now, gap);
  }
}

int rm__liveness_doubt(rm_coord_t *c, rm__job_t *j, int64_t now)
{
  rm__liveness_check(c, now);
  return j->hush_since_ns != 0 ||
         (j->listen_from_ns && now - j->listen_from_ns <= hb_ns(c, j));
}

/* The workers whose silence counts: live, and not kept alive by a parked
 * Join (joins_parked, kept by rm__park_link/unlink). */
static int counted(const rm__job_t *j, const rm__worker_t *w)
{
  return rm__worker_live(j, w) && (rm__worker_member(j, w) || w->joins_parked == 0);
}

/* The rest get a heartbeat timeout plus as long as the coordinator was
 * unreachable (case 2's RECONNECT WINDOW). */
static void hush_end(rm_coord_t *c, rm__job_t *j, int64_t now)
{
  int64_t away = now - j->hush_since_ns + hb_ns(c, j);
  rm__event(c, j, "coordinator_unreachable", -1, "coordinator was unreachable "
            "from its workers for %.1f s; heartbeat deadlines extended by %.1f s",
            (double)away / 1e9, (double)(away + hb_ns(c, j)) / 1e9);
  j->hush_since_ns = 0;
  j->listen_from_ns = now + away;
}

void rm__liveness_job(rm_coord_t *c, rm__job_t *j, int64_t now)
{
  int64_t hb = hb_ns(c, j);
  int live = 0, late = 0;
  for (size_t i = 0; i < j->nw; i++) {
    rm__worker_t *w = &j->w[i];
    if (!counted(j, w)) continue;
    live++;
    late += now - silent_from(j, w) > hb;
  }
  if (late == 0 || 2 * late <= live) {
    if (j->hush_since_ns) { /* heard again: the rest get a fresh window */
      hush_end(c, j, now);
      return;
    }
    if (late == 0) return;
    /* case 3 needs the others heard: with most of the job quiet for two
     * heartbeat intervals the coordinator may be what is cut off, the
     * late one only the first to run out (the workers beat at different
     * phases, and one that was slow to beat before a cut runs out first) */
    int quiet = 0;
    for (size_t i = 0; i < j->nw; i++)
      if (counted(j, &j->w[i])) quiet += now - silent_from(j, &j->w[i]) > hb / 2;
    if (2 * quiet > live) return;
  } else { /* case 2: most of them at once */
    int64_t hold = rm__param_silence_hold_ms() * 1000000;
    if (hold <= 0) hold = 5 * hb > HOLD_MIN_NS ? 5 * hb : HOLD_MIN_NS;
    if (!j->hush_since_ns) {
      j->hush_since_ns = now;
      rm__event(c, j, "heartbeats_silent", -1, "%d of %d workers silent together: "
                "the coordinator or its network is suspect, not them; no worker "
                "is declared lost for up to %.1f s", late, live, (double)hold / 1e9);
    }
    if (now - j->hush_since_ns < hold) return;
  }
  for (size_t i = 0; i < j->nw && !rm_job_state_terminal(j->info.state); i++) {
    rm__worker_t *w = &j->w[i];
    if (!counted(j, w) || now - silent_from(j, w) <= hb) continue;
    char why[160];
    snprintf(why, sizeof why, "no heartbeat for %lld ms (timeout %d ms)%s",
             (long long)((now - w->last_ns) / 1000000), rm__job_heartbeat_ms(c, j),
             j->hush_since_ns ? ", silent with most of the job past the hold" : "");
    rm__job_worker_lost(c, j, w, why);
  }
  j->hush_since_ns = 0;
}
