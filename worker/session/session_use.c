/*
 * session_use.c - SPEC USE, the worker's half: whether a command job's
 * program applies what its spec asks (aggregation, secure_aggregation,
 * straggler_policy), told to the coordinator (coordinator/core/spec_use.c)
 * so that a spec the server accepted is never silently ignored.
 *
 * COUNTING. The library counts at its public entry points, on the
 * generation's communicator (comm/comm_int.h, use_*): the program's own
 * float SUM/AVG rm_allreduce calls (use_plain_bytes), rm_aggregate calls
 * and their method, and here on the session rm_session_secure_allreduce
 * and gated rm_session_allreduce_step calls. The library's collectives
 * raise use_internal around their own all-reduces, which are neither
 * counted nor guarded. Every step report carries the differences since
 * the previous report (use_known = 1): what that step applied.
 *
 * SUSPECTS. rm_aggregate also marks the ranks it excluded on the
 * communicator (use_excluded, OR over the step's calls); a report that
 * names none itself (rm_session_step_end, the DDP backend's steps) carries
 * them as excluded_ranks, the coordinator's byzantine_suspect evidence
 * (coordinator/core/suspect.c), and the marks are cleared.
 *
 * GUARD. In a command job whose spec has secure_aggregation, or a robust
 * aggregation (a method other than mean, or clip_norm > 0), a float
 * SUM/AVG all-reduce of the program's own on the session's communicator
 * is refused before anything is sent (api_allreduce.c rm__use_refuse,
 * RM_ERR_DENIED): a secure job must never let a plaintext gradient leave
 * a worker, and a robust job must not average gradients plainly while
 * the spec says otherwise. The refusal's words become the session's last
 * error and go at once to the coordinator as a ReportStep that is not a
 * step (use_refused); the coordinator fails the job with them. Integer
 * sums, MIN/MAX, broadcasts and gathers pass: they are not gradient sums.
 * Every rank of a job refuses alike (same spec, same program), so no rank
 * waits for a peer that refused. Built-in workloads are not guarded: they
 * apply the spec themselves.
 */
#include <stdio.h>
#include <string.h>

#include "comm/comm_int.h"
#include "rm_log.h"
#include "session/session_int.h"

static void refused(void *ctx, const char *words)
{
  rm_session_t *s = ctx;
  Ringmaster__V1__ReportStepRequest q = RINGMASTER__V1__REPORT_STEP_REQUEST__INIT;
  Ringmaster__V1__ReportStepResponse *r = NULL;
  char msg[256];

  snprintf(s->last_error, sizeof s->last_error, "RM_ERR_DENIED: %s", words);
  RM_ERROR("%s", words);
  RM__SESSION_IDS(q, s);
  q.step = s->steps_done;
  q.use_known = 1;
  q.use_refused = (char *)words;
  int rc = rm__ctl_call(s->ctl, "/ringmaster.v1.Worker/ReportStep", &q.base,
                        &ringmaster__v1__report_step_response__descriptor,
                        (ProtobufCMessage **)&r, 5000, msg, sizeof msg);
  if (rc == RM__G_OK) {
    if (r->job_state >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED)
      rm__session_mark_stale(s, r->job_state, words);
    protobuf_c_message_free_unpacked(&r->base, NULL);
  } else {
    RM_WARN("could not tell the coordinator of the refusal (status %d: %s)", rc, msg);
  }
}

void rm__session_use_arm(rm_session_t *s, rm_comm_t *comm)
{
  const Ringmaster__V1__JobSpec *sp = s->join ? s->join->spec : NULL;
  s->use0_secure = s->use_secure;
  s->use0_gated = s->use_gated;
  s->use0_plain = s->use0_agg = 0; /* a new communicator counts from 0 */
  if (!comm || !sp || strcmp(sp->workload, "command") != 0) return;
  int robust = (sp->aggregation[0] && strcmp(sp->aggregation, "mean") != 0) ||
               sp->clip_norm > 0;
  comm->use_guard = sp->secagg_bits ? RM__USE_GUARD_SECURE
                                    : robust ? RM__USE_GUARD_AGG : 0;
  comm->use_refused = refused;
  comm->use_ctx = s;
}

void rm_session_set_total_steps(rm_session_t *s, uint64_t total)
{
  if (s) s->total_steps = total;
}

void rm_session_set_step(rm_session_t *s, uint64_t done)
{
  if (s) s->steps_done = done;
}

void rm__session_use_fill(rm_session_t *s, rm__report_t *e)
{
  e->total_steps = s->total_steps;
  rm_comm_t *c = s->comm;
  uint64_t plain = c ? c->use_plain_bytes : s->use0_plain;
  uint64_t agg = c ? c->use_agg_calls : s->use0_agg;
  e->use_known = 1;
  e->use_secure = (uint32_t)(s->use_secure - s->use0_secure);
  e->use_gated = (uint32_t)(s->use_gated - s->use0_gated);
  e->use_plain = plain - s->use0_plain;
  e->use_agg[0] = 0;
  if (c && agg != s->use0_agg)
    snprintf(e->use_agg, sizeof e->use_agg, "%s",
             rm_agg_method_name((rm_agg_method_t)c->use_agg_method));
  s->use0_secure = s->use_secure;
  s->use0_gated = s->use_gated;
  s->use0_plain = plain;
  s->use0_agg = agg;
  /* SUSPECTS: a report that names no excluded ranks (rm_session_step_end,
   * or a program's own report) carries those its step's rm_aggregate calls
   * excluded, so byzantine_suspect events come for command jobs as for the
   * built-in workloads (which name them: their report wins) */
  if (c && c->use_excluded) {
    uint32_t k = 0;
    for (int r = 0; e->n_excluded == 0 && r < c->world && k < RM__REPORT_EXCLUDED_MAX; r++)
      if (c->use_excluded[r]) e->excluded[k++] = (uint32_t)r;
    if (e->n_excluded == 0) e->n_excluded = k;
    memset(c->use_excluded, 0, (size_t)c->world);
  }
}
