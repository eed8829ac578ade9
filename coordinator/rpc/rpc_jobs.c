/*
 * rpc_jobs.c - the Jobs service handlers (SubmitJob, GetJob, ListJobs,
 * CancelJob), mirrors of coord.h's job functions. When the coordinator has an
 * admin token (`ringmaster serve` always has one: common/rm_token.h), the
 * mutations SubmitJob and CancelJob need metadata "authorization: Bearer
 * <token>" (admin_ok in server_group.c, constant time); the reads GetJob and
 * ListJobs need that token or the read token (--read-token), as the REST
 * API's GETs do, unless --public-reads opened them (docs/security.md).
 * Worker.Watch is a worker call: its job's worker token guards it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/rpc_int.h"
#include "rm_alloc.h"

static void reply_job(rm_coord_t *c, rm__call_t *call, rm_job_info_t *info,
                      int with_token, int which)
{
  Ringmaster__V1__Job job;
  Ringmaster__V1__JobSpec spec;
  rm__pb_job_from(&job, &spec, info, with_token);
  if (which == RM__M_SUBMIT) {
    Ringmaster__V1__SubmitJobResponse r = RINGMASTER__V1__SUBMIT_JOB_RESPONSE__INIT;
    r.job = &job;
    rm__reply(c, call, RM__GRPC_OK, NULL, &r.base);
  } else if (which == RM__M_GET) {
    Ringmaster__V1__GetJobResponse r = RINGMASTER__V1__GET_JOB_RESPONSE__INIT;
    r.job = &job;
    rm__reply(c, call, RM__GRPC_OK, NULL, &r.base);
  } else {
    Ringmaster__V1__CancelJobResponse r = RINGMASTER__V1__CANCEL_JOB_RESPONSE__INIT;
    r.job = &job;
    rm__reply(c, call, RM__GRPC_OK, NULL, &r.base);
  }
  rm__pb_spec_free(&spec);
}

static void on_submit(rm_coord_t *c, rm__call_t *call,
                      const Ringmaster__V1__SubmitJobRequest *q)
{
  rm_job_spec_t spec;
  rm_job_info_t info;
  rm_coord_error_t err;
  char msg[300];
  const char *bad = q->spec ? rm__pb_spec_to(&spec, q->spec) : "spec";
  if (bad) {
    snprintf(msg, sizeof msg, "%s: missing or too long", bad);
    rm__reply(c, call, RM__GRPC_INVALID_ARGUMENT, msg, NULL);
    return;
  }
  if (rm__submit_locked(c, &spec, &info, &err) != RM_OK) {
    rm__reply(c, call, RM__GRPC_INVALID_ARGUMENT, err.message, NULL);
    return;
  }
  reply_job(c, call, &info, 1, RM__M_SUBMIT);
}

static void on_list(rm_coord_t *c, rm__call_t *call,
                    const Ringmaster__V1__ListJobsRequest *q)
{
  rm_job_filter_t f = {q->any_state ? -1 : (int)q->state, q->offset, q->limit};
  rm_job_info_t *arr = NULL;
  size_t n = 0, total = 0;
  if ((unsigned)q->state >= RM_JOB_STATE_COUNT && !q->any_state) {
    rm__reply(c, call, RM__GRPC_INVALID_ARGUMENT, "state: unknown", NULL);
    return;
  }
  rm__job_list_locked(c, &f, &arr, &n, &total);
  Ringmaster__V1__Job *jobs = rm__xcalloc(n + 1, sizeof *jobs);
  Ringmaster__V1__JobSpec *specs = rm__xcalloc(n + 1, sizeof *specs);
  Ringmaster__V1__Job **pj = rm__xcalloc(n + 1, sizeof *pj);
  for (size_t i = 0; i < n; i++) {
    rm__pb_job_from(&jobs[i], &specs[i], &arr[i], 0);
    pj[i] = &jobs[i];
  }
  Ringmaster__V1__ListJobsResponse r = RINGMASTER__V1__LIST_JOBS_RESPONSE__INIT;
  r.n_jobs = n;
  r.jobs = pj;
  r.total = total;
  rm__reply(c, call, RM__GRPC_OK, NULL, &r.base);
  for (size_t i = 0; i < n; i++) rm__pb_spec_free(&specs[i]);
  free(pj);
  free(specs);
  free(jobs);
  free(arr);
}

void rm__rpc_jobs(rm_coord_t *c, rm__call_t *call, int method,
                  const ProtobufCMessage *req, int admin_ok)
{
  rm_job_info_t info;
  int read = method == RM__M_GET || method == RM__M_LIST;
  if (read && admin_ok < RM__AUTH_READ && !c->opt.public_reads) {
    rm__reply(c, call, RM__GRPC_UNAUTHENTICATED, "reading jobs needs metadata "
              "'authorization: Bearer <token>' with the coordinator's API token or "
              "read token (--read-token)", NULL);
    return;
  }
  if (!read && admin_ok != RM__AUTH_ADMIN) {
    rm__reply(c, call, RM__GRPC_UNAUTHENTICATED, "this call changes jobs: it "
              "needs metadata 'authorization: Bearer <token>' with the "
              "coordinator's API token (--api-token)", NULL);
    return;
  }
  if (method == RM__M_SUBMIT) {
    on_submit(c, call, (const void *)req);
  } else if (method == RM__M_LIST) {
    on_list(c, call, (const void *)req);
  } else if (method == RM__M_GET) {
    const Ringmaster__V1__GetJobRequest *q = (const void *)req;
    if (rm__job_get_locked(c, q->job_id, &info) != RM_OK)
      rm__reply(c, call, RM__GRPC_NOT_FOUND, "job not found", NULL);
    else
      reply_job(c, call, &info, 0, RM__M_GET);
  } else {
    const Ringmaster__V1__CancelJobRequest *q = (const void *)req;
    rm_status_t st = rm__job_stop_locked(c, q->job_id, RM_JOB_CANCELLED,
                                         q->reason && *q->reason ? q->reason
                                                                 : "cancelled by user");
    if (st == RM_ERR_NOT_FOUND)
      rm__reply(c, call, RM__GRPC_NOT_FOUND, "job not found", NULL);
    else if (st != RM_OK)
      rm__reply(c, call, RM__GRPC_FAILED_PRECONDITION, "job already finished", NULL);
    else if (rm__job_get_locked(c, q->job_id, &info) == RM_OK)
      reply_job(c, call, &info, 0, RM__M_CANCEL);
  }
}
