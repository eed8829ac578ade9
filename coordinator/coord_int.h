/*
 * coord_int.h - coordinator internals shared by its files (module-private
 * tier, STYLE.md 2). Not for api/.
 *
 * LOCKING. One mutex, c->mu, guards everything below (jobs, workers,
 * barriers, parked calls, counters, the SQLite connection). Every entry
 * point takes it with rm__lock() and leaves with rm__unlock():
 *
 *   rm__lock(c)    mutex + "BEGIN"
 *   ... mutate memory, write SQLite, queue replies with rm__reply() ...
 *   rm__unlock(c)  "COMMIT", THEN send the queued gRPC replies (so every
 *                  answer a client sees is durable), release the mutex, then
 *                  run event callbacks and launcher starts with no lock held.
 *
 * PARKED CALLS. Long-polling calls (Join waiting for the group, Barrier,
 * Watch) are rm__park_t entries linked into their job; whoever changes the
 * state they wait for (a gRPC handler, the 100 ms tick, an API thread) answers
 * them with rm__reply(). A call cancelled by its client is unparked by the
 * server (rm__park_drop) before its memory goes.
 */
#ifndef RM_COORDINATOR_COORD_INT_H
#define RM_COORDINATOR_COORD_INT_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>

#include "coord.h"
#include "store.h"
#include "ringmaster/v1/messages.pb-c.h"

typedef struct rm__call rm__call_t; /* server.c */
typedef struct rm__blob rm__blob_t; /* server.c: shared packed bytes */
typedef struct rm__server rm__server_t;

enum { RM__PARK_NONE = 0, RM__PARK_JOIN, RM__PARK_BARRIER, RM__PARK_WATCH,
       RM__PARK_GATE };

typedef struct rm__park {
  struct rm__park *prev, *next; /* in job->parked (circular, sentinel) */
  rm__call_t *call;
  int kind;
  uint64_t job_id;
  uint64_t worker_id;
  int64_t deadline_ns;          /* JOIN: end of the long poll */
  struct rm__barrier *barrier;  /* BARRIER */
  int64_t arrived_ns;           /* BARRIER: for wait-time counters */
  uint64_t watch_seq;           /* WATCH: last seq sent */
  int watch_sending;            /* WATCH: a message is in flight */
  int watch_done;               /* WATCH: final status queued */
  uint64_t gate_step;           /* GATE: step asked about */
} rm__park_t;

typedef struct rm__worker {
  uint64_t id;
  int rank;                     /* -1 until assigned */
  int prev_rank;                /* rank before a re-formation, -1 */
  char host[128];
  char data_addr[160];
  char devices[256];
  rm_worker_state_t state;
  int in_group;                 /* joining set or current member */
  uint64_t generation;
  int64_t last_ns;              /* monotonic, last call */
  int64_t last_wall_ms;
  int64_t joined_ms;
  int rank_hint, world_hint;
  int launch_index;             /* launcher's index (its log worker-N.log), -1 */
  uint64_t step, steps_done;
  double step_ms, compute_ms, comm_ms, wait_ms;
  int straggler;
  /* step summary accumulator, flushed to SQLite every 16 reports */
  uint64_t acc_first, acc_last, acc_count, acc_bytes;
  double acc_step, acc_max, acc_compute, acc_comm, acc_wait, acc_loss, acc_acc;
  uint64_t ckpt_step;           /* newest checkpoint it reported (recovery.c) */
  char *result;                 /* heap: the JSON object its Leave carried
                                   (result.c), NULL if none */
} rm__worker_t;

typedef struct rm__barrier {
  struct rm__barrier *next;
  char name[RM_COORD_NAME_MAX];
  uint64_t generation;
  rm_barrier_state_t state;
  int64_t opened_ms, deadline_ms, closed_ms; /* wall */
  int64_t deadline_ns;
  int expected, arrived;
  uint8_t *here;                /* [expected], by rank */
  char reason[160];
  int n_missing;
  rm_barrier_member_t *missing; /* snapshot when closed */
} rm__barrier_t;

typedef struct rm__job {
  rm_job_info_t info;
  rm__worker_t *w;              /* every worker of the job, in id order */
  size_t nw, capw;
  int *members;                 /* index into w, by rank, current generation */
  int nmembers;
  rm__park_t parked;            /* sentinel */
  rm__barrier_t *barriers;      /* newest first */
  rm_step_sample_t *ring;       /* recent step reports */
  size_t ring_cap, ring_head, ring_n;
  int64_t last_join_ns;
  int64_t reform_deadline_ns;   /* 0 = none */
  uint64_t start_step;
  int launch_pending;
  rm__blob_t *join_tail;        /* packed peers + spec of this generation,
                                   shared by every Join answer (rpc.c) */
  uint64_t join_tail_gen;
  /* recovery.c / gate.c (issue 6) */
  int reform_target;            /* members wanted by a re-formation; 0 = spec */
  uint64_t ckpt_step;           /* last checkpoint every member completed */
  struct rm_straggler *strag;   /* detector, created on the first report */
  struct rm__gate_state *gate;  /* per-step participant gate, per generation */
  int stored_state;             /* state in the jobs row (store.c counts) */
  /* result.c: the job's result, chosen when it succeeds */
  char *result;                 /* heap JSON object text, NULL = none */
  int result_rank;              /* rank whose result it is, -1 */
  /* command.c (issue 9): the torchrun rendezvous of the first generation,
   * launch index 0's host and the free port its agent found; memory only
   * ("" / 0 until it attached; a restarted coordinator learns it again) */
  char master_addr[128];
  uint32_t master_port;
} rm__job_t;

#define RM__STMT_CACHE 64

typedef struct rm__out {
  rm__call_t *call;
  int code;                     /* grpc_status_code; -1 = stream message */
  char *details;
  void *bb;                     /* grpc_byte_buffer *, may be NULL */
} rm__out_t;

struct rm_coord {
  rm_coord_options_t opt;       /* strings owned (strdup) */
  pthread_mutex_t mu;
  sqlite3 *db;
  int in_txn;
  rm__job_t **jobs;             /* loaded jobs (all active + recent) */
  size_t njobs, capjobs;
  rm__out_t *out;               /* replies waiting for COMMIT */
  size_t nout, capout;
  uint64_t last_seq;
  pthread_cond_t ev_cond;
  rm_event_t *cbq;              /* events waiting for callbacks */
  size_t ncbq, capcbq;
  uint64_t *launch_q;           /* job ids to launch after unlock */
  size_t nlaunch, caplaunch;
  uint64_t *stop_q;             /* terminal job ids: launcher stop() after unlock */
  size_t nstop, capstop;
  uint64_t *relaunch_q;         /* job ids: launcher relaunch() after unlock */
  size_t nrelaunch, caprelaunch;
  pthread_mutex_t sub_mu;
  struct { rm_coord_event_cb cb; void *ctx; int id; } subs[64];
  int next_sub_id;
  rm_coord_launcher_t launchers[8];
  int nlaunchers;
  rm_coord_counters_t ctr;      /* counters; gauges filled on read */
  rm__server_t *srv;
  char grpc_addr[160];
  int closing;
  /* store.c: prepared statements, keyed by the address of their SQL text
   * (each call site passes a string literal), prepared once with
   * SQLITE_PREPARE_PERSISTENT and reset after each use */
  struct { const char *sql; sqlite3_stmt *st; } stmts[RM__STMT_CACHE];
  int nstmts;
  /* store.c: rows of the jobs table by state, kept in step with every
   * INSERT/UPDATE of a job's state (rm__job_t.stored_state), so the job
   * list's total and /metrics need no count(*) */
  uint64_t job_counts[RM_JOB_STATE_COUNT];
};

/* ---- lock.c-ish helpers (coord.c) ---- */
void rm__lock(rm_coord_t *c);
void rm__unlock(rm_coord_t *c);
/* Record an event (SQLite + callbacks + watchers). Under lock. */
void rm__event(rm_coord_t *c, rm__job_t *j, const char *kind, int rank,
               const char *fmt, ...) __attribute__((format(printf, 5, 6)));
rm__job_t *rm__job_find(rm_coord_t *c, uint64_t id); /* loaded jobs only */

/* ---- api.c: the public functions, for callers already under lock ---- */
rm_status_t rm__submit_locked(rm_coord_t *c, const rm_job_spec_t *spec,
                              rm_job_info_t *out, rm_coord_error_t *err);
rm_status_t rm__job_get_locked(rm_coord_t *c, uint64_t id, rm_job_info_t *out);
rm_status_t rm__job_list_locked(rm_coord_t *c, const rm_job_filter_t *f,
                                rm_job_info_t **out, size_t *n, size_t *total);
rm_status_t rm__job_stop_locked(rm_coord_t *c, uint64_t id,
                                rm_job_state_t to, const char *reason);

/* ---- store.c: SQLite ---- */
/* The cached prepared statement for sql, which MUST be a string literal (the
 * cache is keyed by its address); prepared on first use, aborts on a bad
 * SQL text (a bug). Bind, step, then rm__stmt_done. Never two uses of the
 * same text at once (no caller nests them). */
sqlite3_stmt *rm__stmt(rm_coord_t *c, const char *sql);
/* Reset and clear the bindings of a statement from rm__stmt (finalize one
 * prepared outside the full cache). */
void rm__stmt_done(rm_coord_t *c, sqlite3_stmt *st);
/* Step once (an INSERT/UPDATE/BEGIN/COMMIT), log a failure, then done.
 * Returns the sqlite3_step code. */
int rm__stmt_run(rm_coord_t *c, sqlite3_stmt *st);
/* Recount job_counts from the jobs table (open, and after a ROLLBACK). */
void rm__store_count_jobs(rm_coord_t *c);
rm_status_t rm__store_open(rm_coord_t *c, const char *path, char *err,
                           size_t errlen);
void rm__store_close(rm_coord_t *c);
int rm__store_exec(rm_coord_t *c, const char *sql); /* 0 ok */
void rm__store_job_insert(rm_coord_t *c, rm__job_t *j);
void rm__store_job_update(rm_coord_t *c, rm__job_t *j);
void rm__store_worker_insert(rm_coord_t *c, rm__job_t *j, rm__worker_t *w);
void rm__store_worker_update(rm_coord_t *c, rm__job_t *j, rm__worker_t *w);
void rm__store_generation(rm_coord_t *c, rm__job_t *j);
void rm__store_barrier(rm_coord_t *c, rm__job_t *j, rm__barrier_t *b);
void rm__store_step_summary(rm_coord_t *c, rm__job_t *j, rm__worker_t *w);
uint64_t rm__store_event(rm_coord_t *c, const rm_event_t *ev);
/* Load every non-terminal job with its workers (restart). */
rm_status_t rm__store_load_active(rm_coord_t *c);
rm_status_t rm__store_job_get(rm_coord_t *c, uint64_t id, rm_job_info_t *out);
rm_status_t rm__store_job_list(rm_coord_t *c, const rm_job_filter_t *f,
                               rm_job_info_t **out, size_t *n, size_t *total);
rm_status_t rm__store_workers(rm_coord_t *c, uint64_t job_id,
                              rm_worker_info_t **out, size_t *n);
rm_status_t rm__store_events(rm_coord_t *c, uint64_t job_id, uint64_t after,
                             uint32_t limit, rm_event_t **out, size_t *n);
void rm__store_job_counts(rm_coord_t *c, uint64_t *by_state);

/* ---- job.c: state machine, rendezvous, liveness, barriers ---- */
rm__job_t *rm__job_new(rm_coord_t *c, const rm_job_spec_t *spec);
void rm__job_free(rm__job_t *j);
rm__worker_t *rm__job_worker(rm__job_t *j, uint64_t worker_id);
rm__worker_t *rm__job_worker_add(rm__job_t *j); /* appended; id set by caller */
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
int rm__job_heartbeat_ms(const rm_coord_t *c, const rm__job_t *j);
int rm__job_barrier_ms(const rm_coord_t *c, const rm__job_t *j);
void rm__job_info_refresh(rm__job_t *j);

/* ---- recovery.c (issue 6): loss policies, failure reports, checkpoints,
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
/* Queue a launcher relaunch() of one worker for j (run after unlock). */
void rm__recovery_queue_relaunch(rm_coord_t *c, rm__job_t *j);
/* After unlock, no lock held: call the launchers' relaunch() (coord.c). */
void rm__recovery_run_relaunches(rm_coord_t *c, uint64_t *ids, size_t n);
/* Reload the last complete checkpoint step from SQLite (restart). */
void rm__recovery_load(rm_coord_t *c, rm__job_t *j);
void rm__rpc_report_failure(rm_coord_t *c, rm__call_t *call,
                            const Ringmaster__V1__ReportFailureRequest *q);
/* ---- gate_rpc.c (issue 6): the StepGate long-poll ---- */
void rm__rpc_step_gate(rm_coord_t *c, rm__call_t *call,
                       const Ringmaster__V1__StepGateRequest *q);
void rm__gate_tick(rm_coord_t *c, rm__job_t *j, int64_t now_ns);
void rm__gate_free(rm__job_t *j);
/* Answer every parked StepGate call whose worker is no longer a member of
 * the running generation (loss, re-formation, job end), so no survivor
 * waits in the gate for a step that will never be decided. */
void rm__gate_release(rm_coord_t *c, rm__job_t *j);
/* Fill a JoinResponse's step_quorum / coded_s for the job's policy. */
void rm__gate_join_fields(const rm__job_t *j, uint32_t *quorum, uint32_t *s);

/* ---- command.c (issue 9): the agent's calls for command jobs ---- */
void rm__rpc_attach(rm_coord_t *c, rm__call_t *call,
                    const Ringmaster__V1__AttachRequest *q);
void rm__rpc_report_exit(rm_coord_t *c, rm__call_t *call,
                         const Ringmaster__V1__ReportExitRequest *q);

/* ---- json_check.c: strict JSON validation (no JSON library here) ---- */
/* Called for each top-level member: key without its quotes (escapes not
 * decoded), value exactly as written (a string value with its quotes). */
typedef void (*rm__json_member_cb)(void *ctx, const char *key, size_t klen,
                                   const char *val, size_t vlen);
/* 0 when s[0..n) is one JSON object (whitespace around it allowed) that
 * Jansson's default flags accept; else -1 with *at = byte offset of the
 * error and *why a static phrase (either may be NULL). */
int rm__json_check_object(const char *s, size_t n, rm__json_member_cb cb,
                          void *ctx, size_t *at, const char **why);

/* ---- result.c: workers' final results ---- */
/* A member left OK with its workload summary: validate, store per worker
 * (or record a "result_refused" event). Under lock. */
void rm__result_offer(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                      const char *text);
/* The job is about to succeed: choose its result (lowest rank of the final
 * generation that sent one), check the other ranks agree, store it, record
 * "job_result" (and "result_mismatch"). Under lock. */
void rm__result_settle(rm_coord_t *c, rm__job_t *j);
void rm__store_worker_result(rm_coord_t *c, rm__worker_t *w);
void rm__store_job_result(rm_coord_t *c, rm__job_t *j);
/* The stored result of job id (from SQLite): heap text or NULL, rank. */
rm_status_t rm__store_job_result_get(rm_coord_t *c, uint64_t id, char **text,
                                     int *rank);

/* ---- barrier.c ---- */
/* Arrive at barrier `name` for member w; parks p or answers at once. */
void rm__barrier_arrive(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                        const char *name, int timeout_ms, rm__park_t *p);
/* Break every open barrier of j with reason (member lost, job stopped). */
void rm__barrier_break_all(rm_coord_t *c, rm__job_t *j, const char *reason);
void rm__barrier_tick(rm_coord_t *c, rm__job_t *j, int64_t now_ns);

/* ---- park list ---- */
void rm__park_link(rm__job_t *j, rm__park_t *p);
void rm__park_unlink(rm__park_t *p);
/* Server: the call behind p is finished or cancelled. Under lock. */
void rm__park_drop(rm_coord_t *c, rm__park_t *p, int cancelled);
/* Answer parked calls of j (joins get their answer, watchers are kicked). */
void rm__watch_kick(rm_coord_t *c, rm__job_t *j);
void rm__watch_next(rm_coord_t *c, rm__park_t *p); /* after a send completed */

/* ---- server.c: gRPC ---- */
rm_status_t rm__server_start(rm_coord_t *c, char *err, size_t errlen);
void rm__server_stop(rm_coord_t *c);
/* Queue the final answer of a call (code = grpc_status_code; resp may be
 * NULL on error). Unparks it. Sent after COMMIT. Under lock. */
void rm__reply(rm_coord_t *c, rm__call_t *call, int code, const char *details,
               const ProtobufCMessage *resp);
/* Pack m once into a reference-counted buffer that many answers can end
 * with (protobuf: concatenated encodings merge, so a per-call head followed
 * by a shared tail is one message). */
rm__blob_t *rm__blob_pack(const ProtobufCMessage *m);
void rm__blob_unref(rm__blob_t *b);
/* rm__reply with status OK whose message is head's encoding + tail's. */
void rm__reply_tail(rm_coord_t *c, rm__call_t *call,
                    const ProtobufCMessage *head, rm__blob_t *tail);
/* Queue one message of a server stream. Under lock. */
void rm__stream_send(rm_coord_t *c, rm__call_t *call,
                     const ProtobufCMessage *msg);
rm__park_t *rm__call_park(rm__call_t *call);
void rm__out_flush(rm_coord_t *c); /* after COMMIT, under lock */

/* ---- rpc.c: handlers (under lock) ---- */
enum {
  RM__M_JOIN, RM__M_HEARTBEAT, RM__M_BARRIER, RM__M_REPORT_STEP, RM__M_WATCH,
  RM__M_LEAVE, RM__M_SUBMIT, RM__M_GET, RM__M_LIST, RM__M_CANCEL,
  RM__M_REPORT_FAILURE, RM__M_STEP_GATE, RM__M_ATTACH, RM__M_REPORT_EXIT,
  RM__M_COUNT
};
typedef struct rm__method {
  const char *path;                         /* "/ringmaster.v1.Worker/Join" */
  const ProtobufCMessageDescriptor *req;
  int admin;                                /* job service: admin token */
} rm__method_t;
extern const rm__method_t rm__methods[RM__M_COUNT];
/* Handle one parsed request: answer with rm__reply or park. Under lock.
 * admin_ok: the call carried the admin token (or none is configured). */
/* Answer a parked Join (formed or not, by the job's state). rpc.c. */
void rm__job_answer_join(rm_coord_t *c, rm__job_t *j, rm__park_t *p);
void rm__rpc_dispatch(rm_coord_t *c, rm__call_t *call, int method,
                      const ProtobufCMessage *req, int admin_ok);

#endif
