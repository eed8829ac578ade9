/*
 * core_int.h - the coordinator core's insides (module-private tier,
 * conventions 2 in docs/architecture.md): the coordinator struct, the lock and post-commit queue, and the
 * functions of the job and membership state machine (job.c), barriers,
 * recovery, results, the step gate and command jobs. No SQL (store/store.h
 * is the store's interface) and no protobuf (rpc/ answers parked calls
 * through core/waiters.h). Not for api/.
 *
 * LOCKING. One mutex, c->mu, guards everything below (jobs, workers,
 * barriers, parked calls, counters, the store). Every entry point takes it
 * with rm__lock() and leaves with rm__commit(), whose post-commit queue
 * (commit.c) sends answers only after COMMIT and runs callbacks and
 * launcher work with no lock held.
 *
 * PARKED CALLS. Long-polling calls (Join waiting for the group, Barrier,
 * Watch) are rm__park_t entries linked into their job; whoever changes the
 * state they wait for (a gRPC handler, the 100 ms tick, an API thread) answers
 * them through the port of core/waiters.h. A call cancelled by its client is
 * unparked by the server (rm__park_drop) before its memory goes.
 */
#ifndef RM_COORDINATOR_CORE_INT_H
#define RM_COORDINATOR_CORE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "coord.h"
#include "core/waiters.h"
#include "model.h"
#include "store/store.h"

/* The RPC layer's own state (rpc/rpc_int.h: its outbox, relays and
 * server), opaque to the core: the core holds it only so that one
 * rm_coord_t carries everything, and never looks inside. */
typedef struct rm__rpc rm__rpc_t;

/* The post-commit queue's launcher work (commit.c). */
typedef enum { RM__AFTER_START, RM__AFTER_STOP, RM__AFTER_RELAUNCH } rm__after_kind_t;
typedef struct rm__after {
  rm__after_kind_t kind;
  rm_coord_launcher_t launcher; /* copied from the registry when queued */
  rm_job_info_t job;            /* the job when queued */
} rm__after_t;

struct rm_coord {
  rm_coord_options_t opt;       /* strings owned (strdup) */
  pthread_mutex_t mu;
  rm__store_t *store;           /* store/: the SQLite file */
  rm__job_t **jobs;             /* loaded jobs (all active + recent) */
  size_t njobs, capjobs;
  uint64_t last_seq;
  pthread_cond_t ev_cond;
  char *cbq;                    /* events waiting for callbacks, packed
                                   (events.c CALLBACK QUEUE): bytes */
  size_t ncbq, capcbq;
  rm__after_t *after;           /* launcher work after COMMIT (commit.c) */
  size_t nafter, capafter;
  pthread_mutex_t sub_mu;
  struct { rm_coord_event_cb cb; void *ctx; int id; } subs[64];
  int next_sub_id;
  rm_coord_launcher_t launchers[8];
  int nlaunchers;
  rm_coord_counters_t ctr;      /* counters; gauges filled on read */
  int64_t gate_wake_ns;         /* TIMED DEADLINES (core/step_gate.c): the
                                 * earliest time a step gate's poll could
                                 * decide (monotonic ns), 0 none; written
                                 * under mu, read atomically by the timer
                                 * thread (rpc/server.c) */
  int64_t live_ns;              /* core/liveness.c: when the coordinator was
                                 * last seen running (monotonic ns), under mu */
  rm__rpc_t *rpc;               /* rpc/'s (rm__rpc_open/close, by the wiring) */
  char grpc_addr[160];
  int closing;
  const rm__answer_ops_t *answer; /* the answer side (waiters.h), set by the
                                   * wiring before the first call */
};

/* ---- the answer side, through the table the core holds (waiters.h) ---- */
static inline void rm__job_answer_join(rm_coord_t *c, rm__job_t *j, rm__park_t *p)
{
  c->answer->join(c, j, p);
}
static inline void rm__answer_barrier(rm_coord_t *c, const rm__job_t *j,
                                      const rm__barrier_t *b, rm__park_t *p)
{
  c->answer->barrier(c, j, b, p);
}
static inline void rm__answer_gate(rm_coord_t *c, rm__park_t *p, uint64_t step,
                                   const uint8_t *members, int world, int dropped,
                                   int arrivals_decide, rm__blob_t **cache)
{
  c->answer->gate(c, p, step, members, world, dropped, arrivals_decide, cache);
}
static inline void rm__push_gate(rm_coord_t *c, rm__park_t *p, uint64_t gen, uint64_t step,
                                 const uint8_t *members, int world, rm__blob_t **cache)
{
  c->answer->push_gate(c, p, gen, step, members, world, cache);
}
static inline void rm__push_moved_on(rm_coord_t *c, rm__park_t *p, uint64_t gen,
                                     rm_job_state_t st, const char *why)
{
  c->answer->push_moved_on(c, p, gen, st, why);
}
static inline void rm__answer_stale(rm_coord_t *c, rm__park_t *p, const char *why)
{
  c->answer->stale(c, p, why);
}
static inline void rm__answer_storage(rm_coord_t *c, rm__park_t *p, int full, const char *why)
{
  c->answer->storage(c, p, full, why);
}
static inline void rm__watch_kick(rm_coord_t *c, rm__job_t *j) { c->answer->watch_kick(c, j); }
static inline void rm__out_fail(rm_coord_t *c, int full, const char *why)
{
  c->answer->out_fail(c, full, why);
}
static inline void rm__out_flush(rm_coord_t *c) { c->answer->out_flush(c); }

/* ---- records.c: the stored state the RPC adapter reads and writes, through
 *      the core (it never calls store/). Under lock. ---- */
/* 1 when token matches the job's stored verifier (constant time). */
int rm__job_token_ok(const rm_job_info_t *info, const char *token);
/* A job that is not loaded, from its row. */
rm_status_t rm__job_info_stored(rm_coord_t *c, uint64_t id, rm_job_info_t *out);
/* The data-plane key of j's current generation. */
void rm__job_data_key(rm_coord_t *c, const rm__job_t *j, unsigned char key[RM__DATA_KEY_BYTES]);
/* w's row: inserted when fresh, else updated. */
void rm__worker_record(rm_coord_t *c, rm__job_t *j, rm__worker_t *w, int fresh);
/* worker_id's rank in generation gen of j, -1 when it was not a member. */
int rm__job_generation_rank(rm_coord_t *c, const rm__job_t *j, uint64_t gen, uint64_t worker_id);
/* Up to limit events of job_id after seq `after` (rm_coord_events's rows). */
rm_status_t rm__job_events_after(rm_coord_t *c, uint64_t job_id, uint64_t after, uint32_t limit,
                                 rm_event_t **out, size_t *n);

/* ---- commit.c: the lock and the post-commit queue (design there) ---- */
void rm__lock(rm_coord_t *c);
/* The mutex without BEGIN, for a section that writes no row (commit.c);
 * leave it with rm__commit as usual. */
void rm__lock_ro(rm_coord_t *c);
/* COMMIT, then answers, unlock, callbacks, launcher work. RM_OK, or
 * RM_ERR_UNAVAILABLE when the section was rolled back (commit.c). */
rm_status_t rm__commit(rm_coord_t *c);
/* Queue launcher work for j to run after COMMIT with no lock held: start
 * (submitted), stop (terminal), relaunch (replace). A job whose launcher is
 * not registered gets its event now instead ("launcher_missing",
 * "relaunch_unsupported"). Under lock. */
void rm__after_commit(rm_coord_t *c, rm__job_t *j, rm__after_kind_t kind);
void rm__after_commit_free(rm_coord_t *c); /* close */
/* The registered launcher called name, or NULL. Under lock. */
const rm_coord_launcher_t *rm__coord_launcher_find(const rm_coord_t *c, const char *name);
/* relaunch.c: record how a relaunch went (err NULL = started). Takes the
 * lock. */
void rm__relaunch_outcome(rm_coord_t *c, uint64_t id, const char *launcher,
                          const char *err);

/* ---- events.c ---- */
/* Hand each event packed in q (len bytes, rm__event's CALLBACK QUEUE) to
 * every subscriber, in order; no lock held but sub_mu. */
void rm__event_callbacks(rm_coord_t *c, const char *q, size_t len);
/* Record an event (SQLite + callbacks + watchers). Under lock. */
void rm__event(rm_coord_t *c, rm__job_t *j, const char *kind, int rank,
               const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* ---- spec.c ---- */
/* The aggregation config of a spec; RM_ERR_INVALID_ARG for an
 * unknown method. */
rm_status_t rm__spec_agg_config(const rm_job_spec_t *s, rm_agg_config_t *cfg);

/* ---- job.c: loaded jobs ---- */
rm__job_t *rm__job_find(rm_coord_t *c, uint64_t id); /* loaded jobs only */
/* Load and resume every job the store has not finished (open). */
void rm__job_load_active(rm_coord_t *c);
/* Replace loaded job id by what the store has after a rolled-back section
 * (job.c RELOAD); its parked calls get the storage failure. 1 when a job
 * with that id was loaded (id 0: one of the jobs whose insert failed). */
int rm__job_reload(rm_coord_t *c, uint64_t id, int full, const char *why);

/* ---- api.c: the public functions, for callers already under lock ---- */
rm_status_t rm__submit_locked(rm_coord_t *c, const rm_job_spec_t *spec,
                              rm_job_info_t *out, rm_coord_error_t *err);
rm_status_t rm__job_get_locked(rm_coord_t *c, uint64_t id, rm_job_info_t *out);
rm_status_t rm__job_list_locked(rm_coord_t *c, const rm_job_filter_t *f,
                                rm_job_info_t **out, size_t *n, size_t *total);
rm_status_t rm__job_stop_locked(rm_coord_t *c, uint64_t id,
                                rm_job_state_t to, const char *reason);

/* ---- job.c: state machine, rendezvous, liveness, barriers ---- */
rm__job_t *rm__job_new(rm_coord_t *c, const rm_job_spec_t *spec);
void rm__job_free(rm__job_t *j);
void rm__job_set_state(rm_coord_t *c, rm__job_t *j, rm_job_state_t st,
                       const char *reason);
void rm__job_try_form(rm_coord_t *c, rm__job_t *j);
void rm__job_worker_lost(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                         const char *why);
void rm__job_worker_left(rm_coord_t *c, rm__job_t *j, rm__worker_t *w, int ok,
                         const char *error);
void rm__job_resume(rm_coord_t *c, rm__job_t *j); /* after restart */
void rm__job_tick(rm_coord_t *c, rm__job_t *j, int64_t now_ns);
void rm__job_step(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                  const rm_step_sample_t *s);
/* A step report of a generation that is over (rpc.c LATE STEP REPORTS),
 * s already carrying that generation and the rank the worker had then:
 * into the step history only, never into current-generation state. */
void rm__job_step_late(rm_coord_t *c, rm__job_t *j, const rm_step_sample_t *s);
int rm__job_heartbeat_ms(const rm_coord_t *c, const rm__job_t *j);
int rm__job_barrier_ms(const rm_coord_t *c, const rm__job_t *j);
void rm__job_info_refresh(rm__job_t *j);
/* Refresh, and persist the step when a reader is about to be shown a new one
 * (job.c: progress that survives a restart). */
void rm__job_progress(rm_coord_t *c, rm__job_t *j);
/* Grow the samples ring to at least min(want, ring_max). */
void rm__job_ring_reserve(rm__job_t *j, size_t want);
/* Free finished jobs past their retention (job.c: retention). */
void rm__job_evict(rm_coord_t *c, int64_t now_ms);

/* ---- liveness.c: whose absence a silence is (rule at its top) ---- */
/* The coordinator's own gaps: every open job gets a fresh heartbeat window
 * when the coordinator did not run for a while. Under lock; at the top of
 * every tick. */
void rm__liveness_check(rm_coord_t *c, int64_t now_ns);
/* The per-tick silence rule for j: who is lost, or a hush. */
void rm__liveness_job(rm_coord_t *c, rm__job_t *j, int64_t now_ns);
/* 1 when evidence gathered now on a transport's word about j's workers is
 * not to be trusted (a hush, or the fresh window after a gap). */
int rm__liveness_doubt(rm_coord_t *c, rm__job_t *j, int64_t now_ns);

/* ---- recovery.c: loss policies, failure reports, checkpoints,
 * straggler flags ---- */
/* A member of the current generation is gone: apply on_failure. */
void rm__recovery_member_down(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                              const char *reason);
/* Extra workers a job accepts beyond its target while running (standbys). */
int rm__recovery_standby_cap(const rm__job_t *j);
/* Members a re-formation waits for (reform_target or the spec's). */
int rm__recovery_target(const rm__job_t *j);
/* Step every member of the new generation resumes after (form()). */
uint64_t rm__recovery_start_step(const rm__job_t *j, const int *idx, int n);
/* An accepted step report: checkpoint bookkeeping + straggler detection. */
void rm__recovery_step(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                       const rm_step_sample_t *s, uint64_t ckpt_step);
/* A worker left the job's membership for good (straggler detector). */
void rm__recovery_forget(rm_coord_t *c, rm__job_t *j, rm__worker_t *w);
void rm__recovery_free(rm__job_t *j);
/* Queue a launcher relaunch() of one worker for j (run after COMMIT). */
void rm__recovery_queue_relaunch(rm_coord_t *c, rm__job_t *j);
/* Does the job's aggregation rule hold for n members? 1, or 0
 * with rm_agg_check's words in why. */
int rm__recovery_agg_holds(const rm__job_t *j, int n, char *why, size_t len);
/* Secure aggregation: may a generation of n members form? 1 (or
 * not a secure job), or 0 with "secure aggregation: n members left,
 * threshold t: ..." in why. */
int rm__recovery_secure_holds(const rm__job_t *j, int n, char *why, size_t len);
/* A generation of a secure job formed: when it lost members of the one
 * before (prev_world members, survivors of them back), count it on the
 * job and record the secure_recovered event. */
void rm__recovery_secure_formed(rm_coord_t *c, rm__job_t *j, int prev_world, int survivors);
/* Reload the last complete checkpoint step from SQLite (restart). */
void rm__recovery_load(rm_coord_t *c, rm__job_t *j);
/* A survivor's data plane named rank fr as failed (ReportFailure): record
 * it, declare fr lost when the rules at the top of recovery.c say so.
 * Returns 1 when it was declared lost. */
int rm__recovery_failure_report(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                                int fr, const char *status, const char *err,
                                uint64_t step);
/* ---- suspect.c: Byzantine suspects ---- */
/* A step report's excluded_ranks (ranks of the current generation): the
 * first report of each step feeds every member's window; flags / clears
 * with events "byzantine_suspect" / "byzantine_cleared". Under lock. */
void rm__suspect_step(rm_coord_t *c, rm__job_t *j, uint64_t step,
                      const uint32_t *ranks, size_t n);
/* M and W (RINGMASTER_SUSPECT_M / _W, read once). Either may be NULL. */
void rm__suspect_config(int *m, int *w);

/* ---- step_gate.c: the per-step participant gate ---- */
/* A StepGate request of member w about 0-based `step`: counts its arrival
 * when ready, answers p at once (decided, older step, or wait_ms 0) or
 * parks it until the step is decided or wait_ms passes. p->call is set. */
void rm__gate_request(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                      uint64_t step, int ready, uint32_t wait_ms, rm__park_t *p);
void rm__gate_tick(rm_coord_t *c, rm__job_t *j, int64_t now_ns);
/* TIMED DEADLINES (step_gate.c): poll every gate whose deadline came by
 * now_ns (as a tick would) and recompute c->gate_wake_ns. Under lock. */
void rm__gate_timers(rm_coord_t *c, int64_t now_ns);
void rm__gate_free(rm__job_t *j);
/* Answer every parked StepGate call whose worker is no longer a member of
 * the running generation (loss, re-formation, job end), so no survivor
 * waits in the gate for a step that will never be decided. */
void rm__gate_release(rm_coord_t *c, rm__job_t *j);
/* Fill a JoinResponse's step_quorum / coded_s for the job's policy. */
void rm__gate_join_fields(const rm__job_t *j, uint32_t *quorum, uint32_t *s);

/* ---- command.c: command jobs' agents ---- */
/* Attach: record launch index 0's rendezvous address (first come); returns
 * 1 when a worker with this launch index has joined the job. */
int rm__command_attach(rm__job_t *j, int launch_index, const char *host,
                       uint32_t master_port);
/* ReportExit: the program of launch index `index` ended (rules at the top
 * of command.c). */
rm_status_t rm__command_exited(rm_coord_t *c, rm__job_t *j, int index,
                               int code, int sig, const char *stderr_tail,
                               const char *reason);

/* ---- json_check.c: results are one JSON object (Jansson) ---- */
struct json_t;
/* The object s[0..n) as a new Jansson reference, or NULL with *at = byte
 * offset of the error and *why a phrase (either may be NULL; *why valid
 * until the next call on this thread). */
struct json_t *rm__json_object_parse(const char *s, size_t n, size_t *at,
                                     const char **why);
/* 0 when rm__json_object_parse accepts s, else -1. */
int rm__json_check_object(const char *s, size_t n, size_t *at, const char **why);

/* ---- result.c: workers' final results ---- */
/* A member left OK with its workload summary: validate, store per worker
 * (or record a "result_refused" event). Under lock. */
void rm__result_offer(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                      const char *text);
/* The job is about to succeed: choose its result (lowest rank of the final
 * generation that sent one), check the other ranks agree, store it, record
 * "job_result" (and "result_mismatch"). Under lock. */
void rm__result_settle(rm_coord_t *c, rm__job_t *j);

/* ---- barrier.c ---- */
/* Largest barrier payload, bytes (PAYLOADS in barrier.c). */
#define RM__BARRIER_PAYLOAD_MAX 1024
/* Arrive at barrier `name` for member w with payload[len] (len 0: none);
 * parks p or answers at once: RM_OK. RM_ERR_INVALID_ARG: refused by the
 * payload rules (barrier.c), why filled, p neither parked nor answered and
 * the barrier unchanged (the caller fails the call). */
rm_status_t rm__barrier_arrive(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                               const char *name, int timeout_ms, const uint8_t *payload,
                               size_t len, rm__park_t *p, char *why, size_t whylen);
/* Free a barrier (its payloads wiped first). */
void rm__barrier_free(rm__barrier_t *b);
/* Break every open barrier of j with reason (member lost, job stopped). */
void rm__barrier_break_all(rm_coord_t *c, rm__job_t *j, const char *reason);
void rm__barrier_tick(rm_coord_t *c, rm__job_t *j, int64_t now_ns);

/* ---- parked calls (job.c) ---- */
/* The RPC adapter: the call behind p is finished or cancelled (a cancelled
 * session stream or Join is a detection source, recovery.c). Under lock. */
void rm__park_drop(rm_coord_t *c, rm__park_t *p, int cancelled);

#endif
