/*
 * workload.h - what ringmaster-worker runs once it has a communicator.
 *
 * A workload is a const ops table (STYLE.md 8). The agent creates its state
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
 * agent decides what next with the coordinator) or RM_OK when max_steps are
 * done. create() fills err with a message that names the bad option.
 */
#ifndef RM_AGENT_WORKLOAD_H
#define RM_AGENT_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"

typedef struct rm_step_report {
  uint64_t step;          /* 1-based step just finished */
  double compute_ms;      /* forward/backward or simulated compute */
  double comm_ms;         /* all-reduce time */
  double wait_ms;         /* waiting for peers (barriers, stragglers) */
  double loss;            /* NaN when not meaningful */
  double accuracy;        /* training-batch accuracy, NaN when not meaningful */
  uint64_t allreduce_bytes; /* payload bytes all-reduced this step */
  uint64_t param_checksum;  /* FNV-1a of the parameters after the step, 0 if none */
} rm_step_report_t;

typedef struct rm_workload_env {
  rm_comm_t *comm;        /* this generation's communicator, borrowed */
  int rank;
  int world;
  uint64_t start_step;    /* steps already completed by every member */
  uint64_t max_steps;
  /* After each step; return nonzero to stop run() with RM_OK. */
  int (*report)(void *ctx, const rm_step_report_t *r);
  void *report_ctx;
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
