/*
 * rpc_command.c - Attach and ReportExit, the calls of a command job's agent
 * (what they do to the job: core/command.c, rules at its top).
 */
#include <stdio.h>
#include <string.h>

#include "rpc/rpc_int.h"

static int not_command(rm_coord_t *c, rm__call_t *call, const rm__job_t *j)
{
  char msg[160];
  if (!strcmp(j->info.spec.workload, "command")) return 0;
  snprintf(msg, sizeof msg, "job %llu is not a command job (workload %s)",
           (unsigned long long)j->info.id, j->info.spec.workload);
  rm__reply(c, call, RM__GRPC_FAILED_PRECONDITION, msg, NULL);
  return 1;
}

void rm__rpc_attach(rm_coord_t *c, rm__call_t *call,
                    const Ringmaster__V1__AttachRequest *q)
{
  rm__job_t *j = NULL; /* set by check_job when it returns 0 */
  Ringmaster__V1__AttachResponse r = RINGMASTER__V1__ATTACH_RESPONSE__INIT;
  Ringmaster__V1__JobSpec spec;
  size_t hl = q->host ? strlen(q->host) : 0;
  if (rm__rpc_check_job(c, call, q->job_id, q->token, &j)) return;
  if (q->launch_index < -1 || hl >= sizeof j->master_addr ||
      q->master_port > 65535) {
    rm__reply(c, call, RM__GRPC_INVALID_ARGUMENT, "launch_index (>= -1), "
              "host (< 128 bytes) or master_port (<= 65535) out of range",
              NULL);
    return;
  }
  r.joined = rm__command_attach(j, q->launch_index, q->host, q->master_port);
  rm__pb_spec_from_secret(&spec, &j->info.spec);
  r.spec = &spec;
  r.job_state = (Ringmaster__V1__JobState)j->info.state;
  r.reason = j->info.reason;
  r.master_addr = j->master_addr;
  r.master_port = j->master_port;
  r.world_size = (uint32_t)(j->info.spec.world_size ? j->info.spec.world_size
                                                    : j->info.spec.max_workers);
  rm__reply(c, call, RM__GRPC_OK, NULL, &r.base);
  rm__pb_spec_free(&spec);
}

void rm__rpc_report_exit(rm_coord_t *c, rm__call_t *call,
                         const Ringmaster__V1__ReportExitRequest *q)
{
  rm__job_t *j = NULL; /* set by check_job when it returns 0 */
  Ringmaster__V1__ReportExitResponse r = RINGMASTER__V1__REPORT_EXIT_RESPONSE__INIT;
  if (rm__rpc_check_job(c, call, q->job_id, q->token, &j)) return;
  if (q->launch_index < 0 || q->signal < 0 || q->signal > 128) {
    rm__reply(c, call, RM__GRPC_INVALID_ARGUMENT, "launch_index must be >= 0 "
              "and signal 0..128", NULL);
    return;
  }
  if (not_command(c, call, j)) return;
  rm__command_exited(c, j, q->launch_index, q->exit_code, q->signal, q->stderr_tail,
                q->reason);
  r.job_state = (Ringmaster__V1__JobState)j->info.state;
  rm__reply(c, call, RM__GRPC_OK, NULL, &r.base);
}
