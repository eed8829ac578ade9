/*
 * session_secure.c - secure aggregation on a session (ringmaster/secure.h):
 * the job spec's parameters, the coordinator as the protocol's relay, and
 * one protocol state per generation. The protocol is worker/secagg/.
 *
 * RELAY. The protocol's two relayed rounds (KEYS once per generation, OPEN
 * once per call) are barriers with payloads through the coordinator
 * (rm__session_exchange, coordinator/core/barrier.c): the coordinator
 * answers only when every member of the generation arrived, hands every
 * member all payloads in rank order, keeps them in memory only and refuses
 * an arrival of another generation or a replay with different bytes. What
 * it relays is public keys and self-mask seeds; it never sees the data
 * plane, so it holds nothing from which a gradient follows.
 *
 * COMPLETION. A call that returns RM_OK is final: OPEN released, so every
 * member holds the sum; even when the job re-forms right after, the step is
 * not redone (the report of it carries steps_done past it, and a new
 * generation starts after the step every member completed). Redoing it
 * over the survivors would hand a survivor the sum with and without the
 * lost member.
 *
 * LIFETIME. The state (keys, pairwise seeds) is made by the first secure
 * call of a generation and wiped when its communicator goes (reform, close:
 * rm__session_secure_drop). A failed call leaves the state as it is: the
 * caller re-forms (new generation, new keys) before it calls again, and a
 * call again in the same generation uses the next seq, so no mask repeats.
 *
 * TIME. Relay waits count as the step's wait (step timing, session_step.c),
 * the integer all-reduce as its comm (the communicator counts it).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_int.h"
#include "device/gpu.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "secagg/secagg.h"
#include "session/session_int.h"
#include "session/session_secure.h"

int rm_session_secure(const rm_session_t *s)
{
  return s && rm_session_spec_uint(s, "secagg_bits") != 0;
}

void rm__session_secure_drop(rm_session_t *s)
{
  rm__secagg_close(s->secagg);
  s->secagg = NULL;
  s->secagg_gen = 0;
}

static rm_status_t relay_exchange(void *ctx, const char *name, const void *mine,
                                  size_t len, void *all, char *err, size_t errlen)
{
  rm_session_t *s = ctx;
  int64_t t0 = rm__now_ns();
  rm_status_t st = rm__session_exchange(s, name, mine, len, all, 0, err, errlen);
  s->step_wait_ms += (double)(rm__now_ns() - t0) / 1e6;
  return st;
}

/* The job's parameters for this generation. */
static void params_of(const rm_session_t *s, rm__secagg_params_t *p)
{
  memset(p, 0, sizeof *p);
  p->bits = (int)rm_session_spec_uint(s, "secagg_bits");
  p->clip = rm_session_spec_double(s, "secagg_clip");
  p->scale = rm_session_spec_double(s, "secagg_scale");
  p->threshold = (int)rm_session_spec_uint(s, "secagg_threshold");
  const char *nb = rm_session_spec_string(s, "secagg_neighbours");
  p->neighbours_log = nb && !strcmp(nb, "log");
  p->job_id = s->job_id;
  p->generation = s->generation;
}

static rm_status_t failed(rm_session_t *s, rm_status_t st, const char *err)
{
  /* the coordinator moving on explains a relay or data-plane failure
   * better than the failure itself */
  rm_status_t moved = rm__session_moved_on(s);
  if (moved != RM_OK) return moved;
  snprintf(s->last_error, sizeof s->last_error, "%s: %s%s", rm_status_name(st),
           strncmp(err, "secure aggregation", 18) ? "secure aggregation: " : "", err);
  return st;
}

rm_status_t rm__session_secure_sum(rm_session_t *s, const float *send, float *recv,
                                   size_t count, int mean, void *my_q, void *sum_q,
                                   rm_secure_info_t *info)
{
  char err[512] = "";
  if (!s || (!send && count) || (!recv && count)) return RM_ERR_INVALID_ARG;
  if (s->ended) return RM_ERR_JOB_ENDED;
  rm_status_t st = rm__session_moved_on(s);
  if (st != RM_OK) return st;
  if (!rm_session_secure(s)) {
    snprintf(s->last_error, sizeof s->last_error, "RM_ERR_INVALID_ARG: the "
             "job's spec has no secure_aggregation");
    return RM_ERR_INVALID_ARG;
  }
  double ms_keys = 0;
  if (!s->secagg || s->secagg_gen != s->generation) {
    rm__session_secure_drop(s);
    rm__secagg_params_t p;
    params_of(s, &p);
    rm__secagg_relay_t relay = {s, relay_exchange};
    int64_t t0 = rm__now_ns();
    st = rm__secagg_open(s->comm, &p, &relay, &s->secagg, err, sizeof err);
    if (st != RM_OK) return failed(s, st, err);
    s->secagg_gen = s->generation;
    ms_keys = (double)(rm__now_ns() - t0) / 1e6;
  }
  rm__secagg_stats_t sst;
  memset(&sst, 0, sizeof sst);
  st = rm__secagg_sum_f32(s->secagg, send, recv, count, mean, my_q, sum_q, &sst, err,
                          sizeof err);
  if (st != RM_OK) return failed(s, st, err);
  if (info && info->struct_size >= sizeof *info) {
    info->members = sst.members;
    info->norm = sst.norm;
    info->clipped = sst.clipped;
    info->neighbours = sst.neighbours;
    info->guard = sst.guard;
    info->scale = rm__secagg_scale(s->secagg);
    info->bytes_sent = sst.bytes_sent;
    info->ms_keys = ms_keys;
    info->ms_mask = sst.ms_mask;
    info->ms_reduce = sst.ms_reduce;
    info->ms_open = sst.ms_open;
    info->ms_unmask = sst.ms_unmask;
  }
  /* Complete: every member holds this sum (OPEN released). Not the
   * coordinator's news of a loss since then: a caller told "reconfigured"
   * would redo the call over the survivors, and a curious survivor would
   * hold the sum with and without the lost member - its input. The next
   * call sees the re-formation. */
  return RM_OK;
}

rm_status_t rm_session_secure_allreduce(rm_session_t *s, const float *send,
                                        float *recv, size_t count, rm_op_t op,
                                        rm_secure_info_t *info)
{
  int dev = 0;
  if (op != RM_SUM && op != RM_AVG) return RM_ERR_INVALID_ARG;
  /* masking and quantizing run on the CPU: device memory is refused */
  if (count > 0 && (rm__gpu_ptr_is_device(send, &dev) || rm__gpu_ptr_is_device(recv, &dev))) {
    RM_ERROR("rm_session_secure_allreduce: device (GPU) memory is not supported: secure "
             "aggregation masks on the CPU; copy the gradient to host memory");
    return RM_ERR_UNSUPPORTED;
  }
  rm_secure_info_t local = {.struct_size = sizeof local};
  rm_comm_t *c = s ? s->comm : NULL;
  if (c) c->use_internal++; /* SPEC USE: the library's own sums */
  rm_status_t st = rm__session_secure_sum(s, send, recv, count, op == RM_AVG, NULL, NULL,
                                          info ? info : &local);
  if (c) c->use_internal--;
  if (st == RM_OK) s->use_secure++;
  return st;
}
