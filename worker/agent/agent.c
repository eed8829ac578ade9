/*
 * agent.c - ringmaster-worker's life for a built-in workload: a session of
 * libringmaster (worker/session/) runs the control plane; this file runs the
 * workload on it generation after generation.
 *
 *   Attach (supervise.c) -> the job's workload; "command" -> supervise.c
 *   rm_session_join              (job already over -> exit 0/1)
 *   workload create(options)     (bad options -> Leave failed, exit 1)
 *   loop:
 *     workload run(comm of this generation)
 *     all steps done            -> Leave ok (refused as re-forming ->
 *                                  reform, run again), exit 0
 *     the workload's own error  -> Leave failed, exit 1
 *     data-plane error or the coordinator moved on
 *                               -> rm_session_reform (reports the lost
 *                                  peer, waits for the decision, joins the
 *                                  next generation); job ended -> exit 0 if
 *                                  it succeeded, 1 otherwise
 *
 * The first stdout line is "ringmaster-worker: pid P" so tests (and
 * operators) reading a launcher's log know which process it is.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "rm_log.h"
#include "session/session_int.h"
#include "workload.h"

void rm__agent_session_config(const rm_agent_opts_t *o, rm_session_config_t *cfg)
{
  rm_session_config_init(cfg);
  cfg->coordinator = o->coordinator;
  cfg->job_id = o->job_id;
  cfg->token = o->token;
  cfg->host = o->host;
  cfg->data_addr = o->data_addr;
  cfg->rank_hint = o->rank_hint;
  cfg->world_hint = o->world_hint;
  cfg->connect_timeout_ms = o->connect_timeout_ms;
  cfg->data_timeout_ms = o->data_timeout_ms;
  cfg->tls_ca = o->tls_ca;
  cfg->tls_cert = o->tls_cert;
  cfg->tls_key = o->tls_key;
}

static int report(void *ctx, const rm_step_report_t *r)
{
  rm_step_report_t rep = *r;
  rep.struct_size = sizeof rep;
  return rm_session_step_report(ctx, &rep) != RM_OK;
}

static int gate(void *ctx, uint64_t step, int ready, int wait_ms,
                uint8_t *members, int *dropped)
{
  return rm__session_gate(ctx, step, ready, wait_ms, members, dropped);
}

static const char *ended_word(rm_session_t *s)
{
  int js = rm__session_job_state(s);
  return js == RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED   ? "succeeded"
         : js == RINGMASTER__V1__JOB_STATE__JOB_STATE_CANCELLED ? "cancelled"
                                                                : "failed";
}

static int ended_rc(rm_session_t *s)
{
  fprintf(stderr, "ringmaster-worker: job %llu is %s\n",
          (unsigned long long)rm_session_job_id(s), ended_word(s));
  return rm__session_job_state(s) == RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED ? 0 : 1;
}

typedef struct {
  const rm_workload_ops_t *wl;
  void *state;
  uint64_t max_steps;
} workload_t;

static int make_workload(const rm_agent_opts_t *o, rm_session_t *s, workload_t *w)
{
  const char *name = o->workload ? o->workload : rm_session_spec_string(s, "workload");
  const char *opts = o->workload_options ? o->workload_options
                                         : rm_session_spec_string(s, "workload_options");
  char err[256] = "";
  w->max_steps = o->steps ? o->steps : rm_session_spec_uint(s, "steps");
  w->wl = rm__workload_find(name);
  if (!w->wl) snprintf(err, sizeof err, "unknown workload '%s'", name ? name : "");
  else if (w->wl->create(opts ? opts : "", &w->state, err, sizeof err) != RM_OK)
    w->state = NULL;
  if (w->state) return 0;
  fprintf(stderr, "ringmaster-worker: %s\n", err);
  rm_session_leave(s, 0, err, NULL);
  return -1;
}

static rm_status_t run_once(rm_session_t *s, workload_t *w, char *why,
                            size_t whylen)
{
  const char *pol = rm_session_spec_string(s, "straggler_policy");
  rm_workload_env_t env = {.comm = rm_session_comm(s),
                           .rank = rm_session_rank(s),
                           .world = rm_session_world(s),
                           .start_step = rm_session_start_step(s),
                           .max_steps = w->max_steps,
                           .report = report,
                           .report_ctx = s};
  pol = pol && pol[0] ? pol : "none";
  env.job_id = rm_session_job_id(s);
  env.generation = rm_session_generation(s);
  env.checkpoint_every = rm_session_spec_uint(s, "checkpoint_every");
  env.checkpoint_step = rm_session_spec_uint(s, "checkpoint_step");
  env.straggler_policy = pol;
  env.step_quorum = (int)rm_session_spec_uint(s, "step_quorum");
  env.coded_s = (int)rm_session_spec_uint(s, "coded_s");
  env.max_staleness = (int)rm_session_spec_uint(s, "max_staleness");
  env.gate = strcmp(pol, "none") ? gate : NULL;
  env.aggregation = rm_session_spec_string(s, "aggregation");
  env.agg_f = (int)rm_session_spec_uint(s, "aggregation_f");
  env.agg_m = (int)rm_session_spec_uint(s, "aggregation_m");
  env.agg_iterations = (int)rm_session_spec_uint(s, "aggregation_iterations");
  env.clip_norm = rm_session_spec_double(s, "clip_norm");
  env.agg_tau = rm_session_spec_double(s, "aggregation_tau");
  env.session = s;
  env.secure = rm_session_secure(s);
  rm_status_t st = w->wl->run(w->state, &env);
  snprintf(why, whylen, "%s", env.error);
  return st;
}

/* A data-plane status a new attempt may clear (a peer died while we
 * connected to the next generation). */
static int retryable(rm_status_t st)
{
  return st == RM_ERR_PEER_LOST || st == RM_ERR_TIMEOUT || st == RM_ERR_PROTOCOL ||
         st == RM_ERR_RECONFIGURED || st == RM_ERR_STALE_GENERATION;
}

static int run_builtin(const rm_agent_opts_t *o)
{
  rm_session_config_t cfg;
  rm_session_t *s = NULL;
  workload_t w = {0};
  char err[700], summary[1024], why[256];
  int rc = 1;
  rm__agent_session_config(o, &cfg);
  rm_status_t st = rm_session_join(&cfg, &s, err, sizeof err);
  if (st == RM_ERR_JOB_ENDED) {
    fprintf(stderr, "ringmaster-worker: %s\n", err);
    return strstr(err, " is succeeded") ? 0 : 1;
  }
  if (st != RM_OK) {
    fprintf(stderr, "ringmaster-worker: %s\n", err);
    return 3;
  }
  rm__session_set_log_prefix(s, "ringmaster-worker");
  if (make_workload(o, s, &w)) goto out;
  for (;;) {
    why[0] = 0;
    st = run_once(s, &w, why, sizeof why);
    if (st == RM_OK && rm_session_step(s) >= w.max_steps) {
      summary[0] = 0;
      if (w.wl->summary) w.wl->summary(w.state, summary, sizeof summary);
      if (summary[0]) printf("ringmaster-worker: result %s\n", summary);
      fflush(stdout);
      st = rm_session_leave(s, 1, NULL, summary[0] ? summary : NULL);
      if (st == RM_OK) { rc = 0; break; }
      if (st != RM_ERR_RECONFIGURED) { rc = 1; break; }
    } else if (st == RM_ERR_INTERNAL || st == RM_ERR_INVALID_ARG ||
               (st == RM_ERR_SYSTEM && why[0])) {
      /* the workload's own failure (a bad aggregation for this membership,
       * parameters that differ across ranks, a checkpoint it cannot write):
       * no re-forming clears it (workload.h) */
      snprintf(err, sizeof err, "workload %s failed at step %llu%s%s",
               w.wl->name, (unsigned long long)rm_session_step(s),
               why[0] ? ": " : "", why);
      fprintf(stderr, "ringmaster-worker: rank %d failed: %s\n", rm_session_rank(s), err);
      rm_session_leave(s, 0, err, NULL);
      break;
    }
    int tries = 0;
    do st = rm_session_reform(s);
    while (st != RM_OK && retryable(st) && ++tries < 10);
    if (st == RM_ERR_JOB_ENDED) { rc = ended_rc(s); break; }
    if (st != RM_OK) {
      fprintf(stderr, "ringmaster-worker: %s\n", rm_session_last_error(s));
      break;
    }
  }
out:
  if (w.wl && w.state) w.wl->destroy(w.state);
  rm_session_close(s);
  return rc;
}

int rm__agent_run(const rm_agent_opts_t *o)
{
  char workload[64];
  printf("ringmaster-worker: pid %d\n", (int)getpid());
  fflush(stdout);
  if (o->workload && strcmp(o->workload, "command")) return run_builtin(o);
  int rc = rm__agent_attach_workload(o, workload, sizeof workload);
  if (rc) return rc;
  if (!strcmp(workload, "command")) return rm__agent_supervise(o);
  return run_builtin(o);
}
