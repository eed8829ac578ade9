/* rpc_int.h - helpers shared by the rpc_*.c files (module-private). */
#ifndef RM_COORDINATOR_RPC_INT_H
#define RM_COORDINATOR_RPC_INT_H

#include "coord_int.h"

/* o's strings point into s; its command/env tables are heap: call
 * rm__pb_spec_free(o) once packed (rm__pb_job_from: on its spec). */
void rm__pb_spec_from(Ringmaster__V1__JobSpec *o, rm_job_spec_t *s);
void rm__pb_spec_free(Ringmaster__V1__JobSpec *o);
void rm__pb_job_from(Ringmaster__V1__Job *o, Ringmaster__V1__JobSpec *spec,
                     rm_job_info_t *in, int with_token);
int rm__pb_str(char *dst, size_t len, const char *src);
const char *rm__pb_spec_to(rm_job_spec_t *s, const Ringmaster__V1__JobSpec *in);
/* rpc.c's checks of a worker call (job, token, worker, generation); 0 ok,
 * else the call is answered. For recovery.c and gate_rpc.c. */
int rm__rpc_check_worker(rm_coord_t *c, rm__call_t *call, uint64_t job_id,
                         const char *token, uint64_t gen, uint64_t worker_id,
                         rm__job_t **jp, rm__worker_t **wp);
/* rpc.c's job and token check alone; 0 ok, else the call is answered. */
int rm__rpc_check_job(rm_coord_t *c, rm__call_t *call, uint64_t job_id,
                      const char *token, rm__job_t **jp);
/* The job service handlers (rpc_jobs.c). */
void rm__rpc_jobs(rm_coord_t *c, rm__call_t *call, int method,
                  const ProtobufCMessage *req, int admin_ok);

/* gRPC status codes we use (values from grpc/status.h, kept here so the
 * handlers do not depend on gRPC headers). */
enum {
  RM__GRPC_OK = 0, RM__GRPC_INVALID_ARGUMENT = 3, RM__GRPC_NOT_FOUND = 5,
  RM__GRPC_RESOURCE_EXHAUSTED = 8, RM__GRPC_FAILED_PRECONDITION = 9,
  RM__GRPC_UNAUTHENTICATED = 16, RM__GRPC_UNAVAILABLE = 14
};

#endif
