/*
 * spec_use.c - SPEC USE: a command job's spec is applied, or the job says
 * so. The server accepts "aggregation", "secure_aggregation" and
 * "straggler_policy" for a command job, but only the user's program can
 * apply them (through rm_aggregate, rm_session_secure_allreduce,
 * rm_session_allreduce_step, or the Python layers on them). The worker
 * library counts what each step applied and every ReportStep carries it
 * (worker/session/session_use.c; messages.proto ReportStepRequest use_*).
 * Here, for command jobs and reports whose use_known is set:
 *
 *   use_refused != ""          the library refused a plain gradient sum
 *                              before it left the worker: the job FAILS
 *                              with those words (not a step)
 *   secure_aggregation, and    the step's gradients did not go through
 *   no secure sum              a secure sum: the job FAILS
 *   robust aggregation, and    the step combined no gradient with the
 *   another method or none     spec's method: the job FAILS
 *   straggler_policy, and no   the policy does not act: event
 *   gated all-reduce           "straggler_policy_unused" once a job, the
 *                              job goes on (it is still correct, only
 *                              without the mitigation)
 *
 * Each message says what was asked, what happened and how to use it.
 * Built-in workloads apply the spec themselves and are not judged; reports
 * from a library that does not fill the fields (use_known false) are not
 * judged either.
 */
#include <stdio.h>
#include <string.h>

#include "core/spec_use.h"

static const char HOW[] =
    "in Python use ringmaster.torch.DistributedOptimizer (or ringmaster.aggregate / "
    "ringmaster.secure_allreduce / ringmaster.allreduce_gradients); from C "
    "rm_aggregate, rm_session_secure_allreduce or rm_session_allreduce_step on the "
    "session (docs/pytorch.md)";

static int fail(rm_coord_t *c, rm__job_t *j, const char *why)
{
  rm__job_set_state(c, j, RM_JOB_FAILED, why);
  return 1;
}

int rm__spec_use_step(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                      const rm__spec_use_t *u)
{
  const rm_job_spec_t *sp = &j->info.spec;
  char why[RM_COORD_TEXT_MAX];
  if (!u->known || strcmp(sp->workload, "command") != 0) return 0;
  if (u->refused && u->refused[0]) {
    snprintf(why, sizeof why, "spec not applied: %s", u->refused);
    return fail(c, j, why);
  }
  if (sp->secagg_bits && u->secure_sums == 0) {
    snprintf(why, sizeof why,
             "spec not applied: the job's spec asks for secure_aggregation, and step %llu "
             "of rank %d summed no gradient securely (%llu bytes in the program's own plain "
             "all-reduces; anything else was combined outside ringmaster); %s",
             (unsigned long long)u->step, w->rank, (unsigned long long)u->plain_bytes, HOW);
    return fail(c, j, why);
  }
  const char *want = sp->aggregation[0] ? sp->aggregation : "mean";
  int robust = strcmp(want, "mean") != 0 || sp->clip_norm > 0;
  const char *got = u->aggregation ? u->aggregation : "";
  if (robust && strcmp(got, want) != 0) {
    snprintf(why, sizeof why,
             "spec not applied: the job's spec asks for aggregation %s%s, and step %llu of "
             "rank %d combined its gradients %s%s (%llu bytes in the program's own plain "
             "all-reduces); %s",
             want, sp->clip_norm > 0 ? " with clip_norm" : "", (unsigned long long)u->step,
             w->rank, got[0] ? "with " : "without rm_aggregate", got,
             (unsigned long long)u->plain_bytes, HOW);
    return fail(c, j, why);
  }
  if (sp->straggler_policy[0] && strcmp(sp->straggler_policy, "none") != 0 &&
      u->gated == 0 && !j->spec_use_warned) {
    j->spec_use_warned = 1;
    rm__event(c, j, "straggler_policy_unused", w->rank,
              "the job's spec asks for straggler_policy %s, and step %llu of rank %d made "
              "no gated all-reduce, so every step waits for the slowest rank; all-reduce "
              "the gradients with rm_session_allreduce_step (Python: "
              "ringmaster.allreduce_gradients, or ringmaster.torch.DistributedOptimizer)",
              sp->straggler_policy, (unsigned long long)u->step, w->rank);
  }
  return 0;
}
