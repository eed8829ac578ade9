/*
 * workload.h - what ringmaster-worker runs once it has a communicator.
 *
 * A workload is a const ops table (conventions 8 in docs/architecture.md). The agent creates its state
 * once per process, then calls run() once per generation with that
 * generation's communicator: run() executes steps until max_steps, an error,
 * or report() asking it to stop (job cancelled, membership changed). State
 * (parameters, step counter) survives across generations so a job resumes
 * where every member left off.
 *
 *   create(options)   parse "key=value,key=value" options; allocate state
 *   run(state, env)   steps; env->report() after each one
 *   destroy(state)
 *
 * Errors: run() returns the data-plane status of a failed collective (the
 * agent decides what next with the coordinator), RM_OK when max_steps are
 * done, or its own failure: RM_ERR_INTERNAL / RM_ERR_INVALID_ARG with words
 * in env->error (the agent fails the job with them; no re-forming). create() fills err with a message that names the bad option.
 */
#ifndef RM_AGENT_WORKLOAD_H
#define RM_AGENT_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"

/* A finished step: rm_step_report_t of ringmaster.h (the session reports
 * it; the agent sets struct_size). */

/* Straggler policies: the per-step participant gate. The agent
 * asks the coordinator (StepGate) whether the member set of global step
 * `step` (0-based) is decided. ready: my gradient is ready (an arrival);
 * wait_ms: how long the coordinator may hold the answer. Returns 1 decided
 * (members[0..world-1] filled, *dropped = I am not a member), 0 not yet,
 * 2 not yet and only an arrival can decide it (no deadline runs: a long
 * poll is answered in time), < 0 the call failed (the generation moved on:
 * stop stepping). */
typedef int (*rm_step_gate_fn)(void *ctx, uint64_t step, int ready,
                               int wait_ms, uint8_t *members, int *dropped);

typedef struct rm_workload_env {
  rm_comm_t *comm;        /* this generation's communicator, borrowed */
  int rank;
  int world;
  uint64_t start_step;    /* steps already completed by every member */
  uint64_t max_steps;
  /* After each step; return nonzero to stop run() with RM_OK. */
  int (*report)(void *ctx, const rm_step_report_t *r);
  void *report_ctx;
  /* Recovery and stragglers; zero when not used. */
  uint64_t job_id, generation;
  uint64_t checkpoint_every;   /* write a checkpoint every K steps; 0 never */
  uint64_t checkpoint_step;    /* last checkpoint every member completed */
  const char *straggler_policy; /* "none" (or NULL), "backup", "deadline",
                                   "coded", "stale", "auto" (the
                                   workload runs it through the session's
                                   step engine, session/step_engine.h) */
  int max_staleness;           /* stale: k */
  int step_quorum;             /* backup: gradients a step needs */
  int coded_s;                 /* coded: tolerated stragglers */
  rm_step_gate_fn gate;        /* with report_ctx; NULL under "none" */
  /* Aggregation of the step's gradient (the job spec's
   * "aggregation"): method name as rm_agg_method_parse takes it ("mean",
   * "median", "krum", ...; NULL or "" = "mean") and its parameters (0 =
   * the method's default, see rm_agg_config_t). Mean with clip_norm 0 is
   * the plain all-reduce every job had before. */
  const char *aggregation;
  int agg_f, agg_m, agg_iterations;
  double clip_norm, agg_tau;
  /* The worker's session (borrowed): secure aggregation needs
   * it, for the coordinator's relay rounds; secure = the job's spec has
   * secure_aggregation (rm_session_secure). */
  rm_session_t *session;
  int secure;
  /* Filled by run() when it fails on its own account, which no re-forming
   * clears: RM_ERR_INTERNAL or RM_ERR_INVALID_ARG (a bad combination, a rule
   * the membership cannot hold), or RM_ERR_SYSTEM with error[] set (an I/O
   * failure of the workload's own, e.g. a checkpoint that cannot be
   * written): words for the job's failure message; "" otherwise. */
  char error[256];
} rm_workload_env_t;

typedef struct rm_workload_ops {
  const char *name;
  rm_status_t (*create)(const char *options, void **state, char *err,
                        size_t errlen);
  rm_status_t (*run)(void *state, rm_workload_env_t *env);
  /* Optional: final metrics as a JSON object text ("{\"accuracy\":0.97}"). */
  void (*summary)(void *state, char *buf, size_t len);
  void (*destroy)(void *state);
} rm_workload_ops_t;

/* By name ("allreduce", "train", "synthetic"); NULL when unknown. */
const rm_workload_ops_t *rm__workload_find(const char *name);

#endif
