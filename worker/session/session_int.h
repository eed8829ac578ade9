/*
 * session_int.h - the worker session's insides (module-private tier), shared
 * by session.c (join, reform, leave), session_live.c (heartbeats, session
 * stream, staleness) and session_step.c (steps, gate, barriers).
 *
 * Invariants:
 *  1. comm, join, rank, world and generation change only on the caller's
 *     thread, in form() (session.c); the heartbeat and stream threads read
 *     generation and comm under mu.
 *  2. stale is set (under mu) by any answer saying the coordinator moved on:
 *     a newer generation, a finished job, or FAILED_PRECONDITION; whoever
 *     sets it aborts comm with RM_ERR_RECONFIGURED (or RM_ERR_JOB_ENDED) so
 *     a collective blocked on peers returns at once. form() clears it.
 *  3. The heartbeat thread runs from the first formed generation until
 *     close or leave (it is how the coordinator sees us alive while we wait
 *     for its decision or re-join); the session stream runs from the first
 *     Join answer until close. Both sleep on cv until their own deadline:
 *     a broadcast (a barrier answer for the caller's thread) does not
 *     hurry them.
 *  4. last_error is written on the caller's thread only (status_from sets
 *     it from the communicator's words or the coordinator's reason).
 */
#ifndef RM_WORKER_SESSION_INT_H
#define RM_WORKER_SESSION_INT_H

#include <pthread.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"
#include "ringmaster/v1/messages.pb-c.h"
#include "session/control.h"

/* gRPC status codes the session acts on. */
/* Step reports the coordinator did not get (session_step.c, REPORT BUFFER):
 * at most RM__REPORT_BUF_MAX, embedded in the session (about 450 KiB, 320
 * of them the named metrics' room), of
 * which at most RM__REPORT_FLUSH_MAX are delivered per ReportStep call. */
#define RM__REPORT_BUF_MAX 1024
#define RM__ATTACH_MAX 64
#define RM__REPORT_FLUSH_MAX 64
#define RM__REPORT_EXCLUDED_MAX 8

typedef struct rm__report {
  uint64_t generation, step, allreduce_bytes, param_checksum, checkpoint_step;
  double compute_ms, comm_ms, wait_ms, loss, accuracy;
  uint32_t n_excluded, excluded[RM__REPORT_EXCLUDED_MAX];
  /* SPEC USE (session_use.c): what the step applied */
  int use_known;
  uint32_t use_secure, use_gated;
  uint64_t use_plain;
  char use_agg[16];
  uint64_t total_steps;
  /* the step's named metrics (checked before queueing: rm_metrics.h) */
  uint32_t n_metrics;
  char metric_name[RM_METRICS_MAX][RM_METRIC_NAME_MAX];
  double metric_value[RM_METRICS_MAX];
} rm__report_t;

enum { RM__G_OK = 0, RM__G_INVALID_ARGUMENT = 3, RM__G_DEADLINE = 4, RM__G_NOT_FOUND = 5,
       RM__G_FAILED_PRECONDITION = 9, RM__G_UNAVAILABLE = 14,
       RM__G_UNAUTHENTICATED = 16 };

struct rm_session {
  /* configuration, owned copies */
  char coordinator[256], token[128], data_addr[160], host[128];
  char devices[256], tls_ca[512], tls_cert[512], tls_key[512];
  uint64_t job_id;
  int rank_hint, world_hint, connect_timeout_ms, data_timeout_ms;
  char log_prefix[32];          /* "ringmaster" or "ringmaster-worker" */

  rm__ctl_t *ctl;
  rm_endpoint_t *ep;
  Ringmaster__V1__JoinResponse *join; /* this generation's answer */
  rm_comm_t *comm;                    /* this generation's communicator */
  uint64_t worker_id, generation, steps_done;
  int rank, world, hb_interval_ms;
  int left, ended;              /* Leave accepted; job over */

  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t hb, stream_thread;
  int hb_on, hb_stop, stream_on, stream_stop; /* under mu */
  rm__ctl_stream_t *stream;     /* under mu: the open session call */
  int stream_session;           /* under mu: it is a Session (0: a Watch) */
  /* RELAY (session_live.c): the host's relay (RINGMASTER_RELAY, read at
   * open; "" none) and its channel (NULL: none); whether the next Session
   * skips it (the stream thread's: 1 the next one, 2 every one: it answers
   * no Session) and whether the next Join does (the caller's) */
  char relay[256];
  rm__ctl_t *relay_ctl;
  int relay_skip, join_skip;
  uint64_t stream_hb_gen;       /* under mu: generation of the last heartbeat
                                 * sent on it (its opening message's until
                                 * one is; session_live.c) */
  int stream_hb_sent;           /* under mu: heartbeats sent on it since it
                                 * opened: 0 none, 1 all of stream_hb_gen,
                                 * 2 of more than one generation */
  int stream_last_owed;         /* under mu: the last message sent (or
                                 * queued) on it is the owed request */
  /* the barrier arrival or gate call carried by the Session stream whose
   * answer the coordinator owes (session_live.c BARRIERS AND GATES ON THE
   * STREAM); all under mu. ow_stream: the stream it went on while its
   * answer is owed (one at a time), else NULL; ow_waiter: its caller
   * still waits (0: it gave up at its deadline, the answer is dropped);
   * ow_done: 0 not yet, 1 answered (ow_resp, taken by the waiter), 2 the
   * stream ended first (ow_rc: the request's refusal, or -1: redo it as a
   * unary call; ow_msg the words) */
  rm__ctl_stream_t *ow_stream;
  int ow_waiter, ow_done, ow_rc;
  uint64_t ow_gen;              /* the generation the request named */
  Ringmaster__V1__SessionResponse *ow_resp;
  char ow_msg[256];
  /* GATE PUSHES (session_live.c): the last decided step pushed to this
   * session (it was out of it) and the generation it was decided in;
   * under mu; NULL none */
  Ringmaster__V1__StepGateResponse *pushed;
  uint64_t pushed_gen;
  /* COORDINATOR AWAY (session_live.c), all under mu: the start of the
   * time since the coordinator last answered one of the calls that
   * measure it while one was outstanding or had failed (0: none), the
   * calls of them outstanding, the total of the away periods that ended,
   * and the waits on the coordinator in progress */
  int64_t aw_since_ns, aw_total_ns;
  int aw_out, aw_waits;
  int stale;                    /* invariant 2, under mu */
  /* communicators the program tied to the session (rm_session_attach):
   * aborted with the session's own when it goes stale; under mu */
  rm_comm_t *attached[RM__ATTACH_MAX];
  int n_attached;
  int job_state;                /* last known JobState, under mu */
  char reason[512];             /* why it went stale, under mu */

  /* recovery timing: first sign of a failure, 0 = none pending */
  int64_t broke_wall_ms;
  uint64_t broke_gen;
  /* the re-formation under way (session.c RE-FORMATION TIMELINE): its
   * steps' ends, rm__now_ns; 0 outside rm_session_reform */
  int64_t rf_t0, rf_decided, rf_destroyed, rf_joined;

  /* the step being timed (session_step.c) */
  int in_step;
  int64_t step_t0_ns, comm_ns0;
  uint64_t bytes0;
  double step_wait_ms;

  /* undelivered step reports, oldest at rbuf_head, under rmu; delivered
   * by the reporter thread (session_step.c REPORTER) */
  rm__report_t rbuf[RM__REPORT_BUF_MAX];
  size_t rbuf_head, rbuf_n;
  uint64_t rbuf_overflow;       /* dropped because the buffer was full */
  uint64_t rbuf_stale;          /* dropped: of a generation the coordinator left */
  pthread_mutex_t rmu;
  pthread_cond_t rcv;
  pthread_t rthread;
  int r_on, r_stop, r_busy;     /* under rmu; r_on: the caller's */
  int r_away;                   /* under rmu: a report was not delivered in
                                 * time; steps do not wait for the queue */

  char last_error[640];         /* invariant 4 */

  /* secure aggregation (session_secure.c): this generation's keys, made on
   * the first secure call of a generation, dropped with its communicator */
  struct rm__secagg *secagg;
  uint64_t secagg_gen;

  /* SPEC USE (session_use.c; caller's thread only): secure sums and gated
   * step all-reduces so far, and every counter at the last step report
   * (the next report carries the differences) */
  uint64_t use_secure, use_gated;
  uint64_t use0_secure, use0_gated, use0_plain, use0_agg;
  uint64_t total_steps;         /* rm_session_set_total_steps; 0 unknown */
};

/* session_step.c REPORTER: wait up to ms for every queued step report to be
 * delivered (before Leave); stop the thread (close). */
void rm__session_reports_flush(rm_session_t *s, int ms);
void rm__session_reports_stop(rm_session_t *s);
/* session_live.c */
void rm__session_mark_stale(rm_session_t *s, int job_state, const char *why);
/* The same when the answer is about generation gen: ignored unless gen is
 * still the session's (threads racing a re-join). */
void rm__session_mark_stale_gen(rm_session_t *s, uint64_t gen, int job_state,
                                const char *why);
void rm__session_mark_stale_locked(rm_session_t *s, int job_state, const char *why);
/* The session went stale (mu held): abort its communicator and supersede
 * the attached ones (session.c, attached communicators) with
 * RM_ERR_JOB_ENDED or RM_ERR_RECONFIGURED and words saying why. */
void rm__session_abort_comms_locked(rm_session_t *s);
int rm__session_is_stale(rm_session_t *s);
int rm__session_heartbeat(rm_session_t *s);
void rm__session_hb_start(rm_session_t *s);
void rm__session_hb_stop(rm_session_t *s);
void rm__session_stream_start(rm_session_t *s);
void rm__session_stream_stop(rm_session_t *s);
/* COORDINATOR AWAY (session_live.c). A call that measures whether the
 * coordinator answers (unary heartbeats, step reports) is bracketed by
 * rm__away_begin and rm__away_end with its gRPC status. */
void rm__away_begin(rm_session_t *s);
void rm__away_end(rm_session_t *s, int rc);
/* A WAIT ON THE COORDINATOR (a barrier arrival, a ready step-gate call):
 * its own deadline d0 (monotonic ns), moved on by the time the coordinator
 * did not answer since the wait began (at most connect_timeout_ms in all);
 * `what` names it in the one line it logs when it waits on so ("barrier
 * 'x'"; NULL: not a wait on it, the deadline stays d0). Begin and end on
 * the caller's thread; deadline under mu (_locked) or not. */
typedef struct rm__cwait {
  char what[96];
  int64_t t0, d0, a0;
  int logged, fixed;
} rm__cwait_t;
void rm__cwait_begin(rm_session_t *s, rm__cwait_t *w, const char *what, int64_t d0);
int64_t rm__cwait_deadline(rm_session_t *s, rm__cwait_t *w);
int64_t rm__cwait_deadline_locked(rm_session_t *s, rm__cwait_t *w);
void rm__cwait_end(rm_session_t *s, rm__cwait_t *w);
/* A barrier arrival or gate call (m: a SessionRequest with `barrier` or
 * `gate` set and the ids) as a message on the open Session stream,
 * waiting for its answer until w's deadline (as it moves on): the unary call's
 * results (status, msg, *r on OK: the SessionResponse with the same field
 * set) when the stream gave them; -1 when it did not carry the request
 * (no Session open, one request already owed on it, or it ended without
 * the request's refusal): then the caller makes the unary call with the
 * time left. */
int rm__session_ask_on_stream(rm_session_t *s, Ringmaster__V1__SessionRequest *m,
                              rm__cwait_t *w, Ringmaster__V1__SessionResponse **r,
                              char *msg, size_t msglen);
/* A worker call's common fields. */
#define RM__SESSION_IDS(q, s)                                                 \
  do {                                                                        \
    (q).job_id = (s)->job_id;                                                 \
    (q).token = (s)->token;                                                   \
    (q).generation = (s)->generation;                                         \
    (q).worker_id = (s)->worker_id;                                           \
  } while (0)

/* session.c: the status a call returns once the coordinator moved on
 * (RM_ERR_JOB_ENDED or RM_ERR_RECONFIGURED), with last_error filled; RM_OK
 * when it has not. */
rm_status_t rm__session_moved_on(rm_session_t *s);

/* The per-step participant gate (StepGate rpc), for the built-in workloads
 * and rm_session_allreduce_step: 1 decided (members[0..world-1], *dropped),
 * 0 not yet, -1 the call failed (generation moved on). step is 0-based. */
int rm__session_gate(rm_session_t *s, uint64_t step, int ready, int wait_ms,
                     uint8_t *members, int *dropped);
/* Tell the coordinator which peer the data plane lost (ReportFailure). */
void rm__session_report_failure(rm_session_t *s, rm_status_t st);
/* JobState of the last answer (RINGMASTER__V1__JOB_STATE__*). */
int rm__session_job_state(rm_session_t *s);
/* session_step.c: a named barrier that relays one payload per member
 * (coordinator/core/barrier.c PAYLOADS). mine[len], 1 <= len <=
 * RM__SESSION_EXCHANGE_MAX, the same len on every member; released: all
 * gets world * len bytes, rank r's at r * len (RM_ERR_PROTOCOL when the
 * answer does not hold exactly world payloads of len bytes). Otherwise
 * rm_session_barrier's statuses (RM_ERR_TIMEOUT broken, the moved-on
 * status, RM_ERR_UNAVAILABLE), RM_ERR_INVALID_ARG for a payload the
 * coordinator refused (another length, a replay with other bytes); err
 * (may be NULL) and last_error get the words. all is written only on
 * RM_OK. deadline_ms 0 = the job's barrier timeout. */
#define RM__SESSION_EXCHANGE_MAX 1024
rm_status_t rm__session_exchange(rm_session_t *s, const char *name, const void *mine,
                                 size_t len, void *all, int deadline_ms, char *err,
                                 size_t errlen);
/* session_nccl.c: a job whose algorithm is nccl gets this generation's
 * NCCL unique id from rank 0 through the coordinator (never fatal). */
void rm__session_nccl_id(rm_session_t *s, rm_comm_t *comm);
/* session_secure.c: forget this generation's secure-aggregation keys
 * (wiped); called where the communicator is destroyed. */
void rm__session_secure_drop(rm_session_t *s);
/* session_use.c: arm this generation's communicator (form(), after
 * rm_comm_init): a command job whose spec asks for secure_aggregation or
 * a robust aggregation gets the plain-sum guard; the report counters
 * restart with the new communicator. */
void rm__session_use_arm(rm_session_t *s, rm_comm_t *comm);
/* What the program applied since the last report, into e. */
void rm__session_use_fill(rm_session_t *s, rm__report_t *e);
/* The agent prints its recovery line with its own name. */
void rm__session_set_log_prefix(rm_session_t *s, const char *prefix);

#endif
