/*
 * coord.h - the coordinator's C interface (module tier, conventions 2 in docs/architecture.md).
 *
 * The coordinator owns job and membership state: jobs and their state
 * machine, rendezvous (rank assignment + peer lists per generation),
 * heartbeat liveness, named barriers with deadlines, step reports, and the
 * event log. It persists all of it in one SQLite file and serves workers over
 * gRPC (proto/ringmaster/v1/). api/ (REST, metrics, SSE, CLI) and the `ringmaster`
 * binary call this header; nothing here knows about HTTP or JSON.
 *
 * Lifecycle:
 *
 *   rm_coord_options_init(&o);  o.db_path = ...; o.grpc_addr = ...;
 *   rm_coord_open(&o, &c, err, sizeof err);   opens/migrates the db, resumes
 *                                             jobs, starts the gRPC server
 *   ... rm_coord_submit / rm_coord_job_get / ... from any thread ...
 *   rm_coord_close(c);                        graceful gRPC shutdown, flush
 *
 * THREAD SAFETY. Every rm_coord_* function may be called from any thread at
 * any time between open and close (the REST server calls from its own
 * threads). Calls are serialised internally by one state mutex; none blocks
 * longer than one SQLite transaction, except rm_coord_event_wait, which blocks
 * up to its timeout WITHOUT holding the state mutex. rm_coord_close must not
 * race with other calls (stop the HTTP server first).
 *
 * DURABILITY. Every state change a caller or worker is told about is committed
 * to SQLite (WAL) before the answer is sent, so a coordinator killed with
 * SIGKILL and restarted on the same file still has every acknowledged job,
 * worker and event. Jobs that were forming or running resume at the next
 * generation as their workers reconnect.
 *
 * MEMORY. Functions that return arrays allocate them as ONE block (nested
 * pointers point inside that block) that the caller frees with
 * rm_coord_free(). Strings in structs are fixed-size, NUL-terminated arrays,
 * so every struct can be copied with '='.
 *
 * ERRORS. rm_status_t from ringmaster.h: RM_ERR_NOT_FOUND (unknown job),
 * RM_ERR_INVALID_ARG (bad spec or argument; rm_coord_error_t names the
 * field), RM_ERR_DENIED (operation not allowed in the job's state, e.g.
 * cancelling a finished job), RM_ERR_SYSTEM (SQLite or OS failure; message in
 * rm_coord_error_t when one is passed).
 */
#ifndef RM_COORDINATOR_COORD_H
#define RM_COORDINATOR_COORD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ringmaster/ringmaster.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rm_coord rm_coord_t;

/* ---- options ---- */
typedef struct rm_coord_options {
  const char *db_path;   /* SQLite file; default "./ringmaster.db" */
  const char *grpc_addr; /* "host:port" to listen on, port 0 = free port;
                            default "127.0.0.1:7070" */
  /* Defaults for jobs whose spec leaves them 0. */
  int heartbeat_timeout_ms;  /* default 10000 */
  int barrier_timeout_ms;    /* default 60000 */
  /* Largest gRPC message accepted, bytes; bigger ones get RESOURCE_EXHAUSTED.
   * Default 4 MiB. */
  int max_message_bytes;
  /* Recent step reports kept in memory per job (ring buffer). Default 4096. */
  int step_window;
  /* Mutual TLS for the gRPC port: all three set = TLS with client
   * certificates required and verified against tls_ca; all NULL = plaintext.
   * PEM file paths. */
  const char *tls_cert;
  const char *tls_key;
  const char *tls_ca;
  /* Bearer token required (metadata "authorization: Bearer T") on the job
   * service's mutations (SubmitJob, CancelJob); reads are open. NULL = no
   * check (embedders and in-process tests; `ringmaster serve` always sets
   * one, common/rm_token.h). Worker calls are always checked against the
   * job's own worker token. */
  const char *admin_token;
  /* Bearer token that may read jobs (GetJob, ListJobs) and nothing else;
   * NULL/"" = none. The reads need admin_token or this one, unless
   * public_reads is set (docs/security.md). */
  const char *read_token;
  int public_reads;
} rm_coord_options_t;

/* Fill *o with the defaults above. */
void rm_coord_options_init(rm_coord_options_t *o);

/* Open the database (creating it and applying migrations), resume stored
 * jobs, start the gRPC server. OUT: *out only on success; on failure err
 * holds a sentence saying what failed (bad address, db locked, ...). */
rm_status_t rm_coord_open(const rm_coord_options_t *o, rm_coord_t **out,
                          char *err, size_t errlen);
/* "host:port" the gRPC server really bound (port resolved). Borrowed, valid
 * until close. */
const char *rm_coord_grpc_address(const rm_coord_t *c);
/* Graceful stop: refuse new calls, answer parked calls UNAVAILABLE, wait a
 * short grace period, cancel the rest, close the database. NULL is a no-op. */
void rm_coord_close(rm_coord_t *c);
/* Free any array returned by this interface. NULL is a no-op. */
void rm_coord_free(void *p);

#include "coord_types.h" /* the job, worker, barrier, step and event records */

/* Validate and store a new job. OUT: *out (with id and token) on success.
 * err may be NULL. */
rm_status_t rm_coord_submit(rm_coord_t *c, const rm_job_spec_t *spec,
                            rm_job_info_t *out, rm_coord_error_t *err);
rm_status_t rm_coord_job_get(rm_coord_t *c, uint64_t id, rm_job_info_t *out);

/* ---- job results ----
 * The summary JSON a worker's workload sends with its Leave call
 * ({"accuracy":0.9721,"test_loss":0.1076,...} for "train"). Each member's
 * is validated (one JSON object, at most RM_COORD_RESULT_MAX - 1 bytes)
 * and stored; when the job succeeds, the lowest rank's becomes the job's
 * result (coordinator/result.c: the other ranks are checked against it). */
#define RM_COORD_RESULT_MAX 4096

/* The job's result as JSON object text copied into buf (NUL-terminated), ""
 * while it has none (not succeeded, or no worker sent one); *rank (may be
 * NULL) = the rank it came from, -1 when none. RM_ERR_NOT_FOUND: unknown
 * job; RM_ERR_INVALID_ARG: len too small for the text (RM_COORD_RESULT_MAX
 * always suffices). */
rm_status_t rm_coord_job_result(rm_coord_t *c, uint64_t id, char *buf,
                                size_t len, int *rank);

/* Newest first. *out: array of *n jobs (free with rm_coord_free); *total:
 * how many match the filter ignoring offset/limit (may be NULL). A listed
 * job's token is "" unless the job is loaded (active or recently finished);
 * rm_coord_job_get always fills it. */
rm_status_t rm_coord_job_list(rm_coord_t *c, const rm_job_filter_t *f,
                              rm_job_info_t **out, size_t *n, size_t *total);
/* Cancel: parked worker calls are answered, workers are told at their next
 * call. RM_ERR_DENIED if the job is already terminal. reason may be NULL. */
rm_status_t rm_coord_job_cancel(rm_coord_t *c, uint64_t id,
                                const char *reason);
/* Mark a job failed from outside (a launcher could not start its workers).
 * RM_ERR_DENIED if already terminal. */
rm_status_t rm_coord_job_fail(rm_coord_t *c, uint64_t id, const char *reason);
/* Record an event of `kind` with `message` on a job that is not finished
 * (a launcher's word on something around the job: its workers' log folder
 * full or read-only, then writable again). RM_ERR_NOT_FOUND: not a loaded
 * job; RM_ERR_DENIED: the job is finished; RM_ERR_UNAVAILABLE: the store
 * refused the write. Any thread. */
rm_status_t rm_coord_job_note(rm_coord_t *c, uint64_t id, const char *kind,
                              const char *message);

/* Workers of a job (current and past generations), by rank then id. */
rm_status_t rm_coord_job_workers(rm_coord_t *c, uint64_t job_id,
                                 rm_worker_info_t **out, size_t *n);

/* Events with seq > after_seq, oldest first, of one job (job_id != 0) or all
 * (job_id == 0), at most limit (0 = 1000). From SQLite: complete history. */
rm_status_t rm_coord_events(rm_coord_t *c, uint64_t job_id, uint64_t after_seq,
                            uint32_t limit, rm_event_t **out, size_t *n);
/* Seq of the newest event (0 if none). */
uint64_t rm_coord_event_seq(rm_coord_t *c);
/* Block until an event newer than after_seq exists or timeout_ms passes (or
 * close). Returns the newest seq. For SSE: loop { wait; rm_coord_events }. */
uint64_t rm_coord_event_wait(rm_coord_t *c, uint64_t after_seq, int timeout_ms);

/* Callback flavour: cb runs on a coordinator thread right after each event
 * is committed, with no coordinator lock held. It must not block; it may
 * call rm_coord_event_seq/rm_coord_events but not (un)subscribe. Returns a
 * subscription id > 0, or 0 when the table (64 entries) is full. */
typedef void (*rm_coord_event_cb)(void *ctx, const rm_event_t *ev);
int rm_coord_subscribe(rm_coord_t *c, rm_coord_event_cb cb, void *ctx);
void rm_coord_unsubscribe(rm_coord_t *c, int id);

/* Open barriers first, then recently closed ones (at most 64). */
rm_status_t rm_coord_job_barriers(rm_coord_t *c, uint64_t job_id,
                                  rm_barrier_info_t **out, size_t *n);

/* Most recent samples from the in-memory window, oldest first; rank -1 = all
 * ranks; limit 0 = the whole window. */
rm_status_t rm_coord_job_steps(rm_coord_t *c, uint64_t job_id, int rank,
                               uint32_t limit, rm_step_sample_t **out,
                               size_t *n);

/* ---- counters (for /metrics) ---- */
#define RM_COORD_STEP_BUCKETS 12
/* Upper bounds (seconds) of the step-time histogram buckets; +Inf implied. */
extern const double rm_coord_step_bucket_le[RM_COORD_STEP_BUCKETS];

typedef struct rm_coord_counters {
  uint64_t jobs_by_state[RM_JOB_STATE_COUNT];       /* gauge, all stored jobs */
  uint64_t workers_by_state[RM_WORKER_STATE_COUNT]; /* gauge, jobs not terminal */
  uint64_t grpc_calls_total;
  uint64_t grpc_errors_total;     /* calls answered with a non-OK status */
  uint64_t session_messages_total; /* heartbeats received on Session streams */
  uint64_t relay_messages_total; /* messages received on Relay streams */
  uint64_t relay_lanes_total; /* lanes (Sessions) opened on Relay streams */
  uint64_t step_gate_calls_unary;   /* StepGate calls */
  uint64_t step_gate_calls_session; /* gate calls carried by Session messages */
  uint64_t barriers_released_total;
  uint64_t barriers_broken_total;
  uint64_t barrier_waits_open;    /* gauge: workers parked in a barrier */
  double barrier_wait_seconds_sum; /* over released/broken waits */
  uint64_t barrier_wait_count;
  uint64_t steps_reported_total;
  double step_seconds_sum;
  uint64_t step_seconds_bucket[RM_COORD_STEP_BUCKETS + 1]; /* not cumulative;
                                                   last = +Inf overflow */
  uint64_t allreduce_bytes_total;
  double allreduce_seconds_total;
  uint64_t workers_lost_total;
  uint64_t stragglers_flagged;    /* gauge */
  uint64_t byzantine_suspects;    /* gauge: live workers of active jobs
                                     flagged suspect */
  uint64_t events_total;
  uint64_t generations_total;
  uint64_t store_commits_failed;  /* sections rolled back by a failed write */
  int store_state;                /* gauge: RM_COORD_STORE_* below */
} rm_coord_counters_t;

void rm_coord_counters(rm_coord_t *c, rm_coord_counters_t *out);

/* ---- storage failures (docs/storage.md) ----
 * A section whose write or COMMIT fails is rolled back and acknowledged to
 * nobody: the public functions that write return RM_ERR_UNAVAILABLE, gRPC
 * calls answered in it get RESOURCE_EXHAUSTED (disk full) or UNAVAILABLE,
 * and a job it inserted is dropped from memory. rm_coord_store_state says
 * whether writes fail now: RM_COORD_STORE_OK, _FULL (SQLITE_FULL) or _ERROR
 * (an I/O or other failure), with the words in why (may be NULL). While
 * failing it tries one write of its own first (after a full disk, only
 * once 256 KiB are free again), so the answer turns OK as soon as space
 * returns (no restart). */
enum { RM_COORD_STORE_OK = 0, RM_COORD_STORE_FULL = 1, RM_COORD_STORE_ERROR = 2 };
int rm_coord_store_state(rm_coord_t *c, char *why, size_t len);
/* The same without the write: the state the last failed or successful
 * write left (what a refused request is answered with). */
int rm_coord_store_state_last(rm_coord_t *c, char *why, size_t len);

/* ---- launcher hook (coordinator/launch/) ----
 * A launcher starts the workers of a submitted job. start() runs with no
 * coordinator lock held, right after the job is stored, and must not block
 * for long (spawn and return); a failure message makes the job failed.
 * stop() is called when the job becomes terminal. Jobs with launcher "none"
 * never call these; jobs naming a launcher nobody registered stay pending
 * with an event saying so (start workers by hand). */
typedef struct rm_coord_launcher {
  const char *name; /* "local", "slurm", "k8s" */
  rm_status_t (*start)(void *ctx, const rm_job_info_t *job,
                       const char *coord_addr, char *err, size_t errlen);
  void (*stop)(void *ctx, const rm_job_info_t *job);
  void *ctx;
  /* Optional (NULL = this launcher cannot): start ONE more worker for a
   * running job, same command line, the next launch index (on_failure
   * replace when no standby is waiting; recovery.c). No coordinator lock
   * held; must not block for long. A failure message becomes a
   * "relaunch_failed" event (the re-formation deadline then decides). */
  rm_status_t (*relaunch)(void *ctx, const rm_job_info_t *job,
                          const char *coord_addr, char *err, size_t errlen);
} rm_coord_launcher_t;

/* Register before or after open; at most 8. The struct is copied. */
rm_status_t rm_coord_register_launcher(rm_coord_t *c,
                                       const rm_coord_launcher_t *l);

/* A launcher saw the process it started with launch index `index` exit
 * abnormally (`what`: "killed by signal 9 (Killed); log ..."). The worker
 * that joined with that index as its rank hint (RINGMASTER_LAUNCH_INDEX,
 * world hint RINGMASTER_LAUNCH_WORLD), if still a member or joining, is
 * lost at once (detection source 4 in recovery.c) and the job's on_failure
 * policy decides. RM_ERR_NOT_FOUND: unknown job, or no live worker with
 * that index (it already left or was declared lost). Any thread. */
rm_status_t rm_coord_worker_exited(rm_coord_t *c, uint64_t id, int index,
                                   const char *what);

/* ---- command jobs (coordinator/command.c) ----
 * What the agent of launch index `index` tells the coordinator when its
 * program ended (the ReportExit RPC calls this). exit_code: its status
 * (-1 when killed), sig: the signal (0 when it exited), stderr_tail: its
 * last stderr lines (may be NULL), reason: the agent's own sentence ("did
 * not join within 30000 ms"; may be NULL). Records "program_exited", then
 * by the worker with that launch index: a live member or joining worker
 * that failed -> lost (on_failure decides); a member that exited 0 without
 * leaving -> lost; never joined (or the agent's reason) -> the job fails;
 * already gone -> the event only. OUT *state (may be NULL): the job's
 * state afterwards. RM_ERR_NOT_FOUND: unknown job. */
rm_status_t rm_coord_program_exited(rm_coord_t *c, uint64_t id, int index,
                                    int exit_code, int sig,
                                    const char *stderr_tail,
                                    const char *reason, rm_job_state_t *state);

#ifdef __cplusplus
}
#endif
#endif /* RM_COORDINATOR_COORD_H */
