/*
 * rpc_gate.c - the StepGate call (straggler policies): checks the worker,
 * then the core's gate decides (core/step_gate.c, design at its top) and
 * answers through rpc/waiters.c, at once or when the step is decided.
 */
#include "rpc/rpc_int.h"

void rm__rpc_step_gate(rm_coord_t *c, rm__call_t *call,
                       const Ringmaster__V1__StepGateRequest *q)
{
  rm__job_t *j = NULL; /* set by check_job when it returns 0 */
  rm__worker_t *w;
  if (rm__rpc_check_worker(c, call, q->job_id, q->token, q->generation,
                           q->worker_id, &j, &w))
    return;
  c->ctr.step_gate_calls_unary++;
  rm__call_accept_gzip(call, q->accept_gzip);
  rm__park_t *p = rm__call_park(call);
  p->call = call;
  rm__gate_request(c, j, w, q->step, q->ready, q->wait_ms, p);
}
