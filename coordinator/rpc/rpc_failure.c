/*
 * rpc_failure.c - ReportFailure: a survivor names the peer its data plane
 * lost; the decision (declare it lost or not) is the core's
 * (core/recovery.c rm__recovery_failure_report, rules at the top there).
 */
#include <string.h>

#include "rpc/rpc_int.h"

void rm__rpc_report_failure(rm_coord_t *c, rm__call_t *call,
                            const Ringmaster__V1__ReportFailureRequest *q)
{
  rm__job_t *j = NULL; /* set by check_job when it returns 0 */
  rm__worker_t *w;
  Ringmaster__V1__ReportFailureResponse r =
      RINGMASTER__V1__REPORT_FAILURE_RESPONSE__INIT;
  if (rm__rpc_check_worker(c, call, q->job_id, q->token, q->generation,
                           q->worker_id, &j, &w))
    return;
  r.accepted = rm__recovery_failure_report(c, j, w, q->failed_rank, q->status,
                                           q->error, q->step);
  r.job_state = (Ringmaster__V1__JobState)j->info.state;
  r.generation = j->info.generation;
  rm__reply(c, call, RM__GRPC_OK, NULL, &r.base);
}
