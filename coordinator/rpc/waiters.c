/*
 * waiters.c - how the RPC adapter answers the calls the core keeps parked
 * (core/waiters.h): the core decides WHEN (a barrier closed, a step's
 * participants are known, the generation moved on) and with what state;
 * this file turns that state into the protobuf answer and queues it with
 * rm__reply, sent after COMMIT by the post-commit queue.
 */
#include <stdio.h>
#include <stdlib.h>

#include "rm_alloc.h"
#include "rpc/rpc_int.h"

/* A RELEASED answer is the same for every waiter of the round (no missing
 * ranks, same counts, reason and payloads): packed by the first one answered into
 * b->answer and shared by the other N-1 (rm__park_answer). b is const in the
 * port (the core's state is not the adapter's to change); the packed bytes
 * are a cache of it, not state, hence the cast. */
void rm__rpc_answer_barrier(rm_coord_t *c, const rm__job_t *j, const rm__barrier_t *b,
                        rm__park_t *p)
{
  Ringmaster__V1__BarrierResponse r = RINGMASTER__V1__BARRIER_RESPONSE__INIT;
  if (b->state == RM_BARRIER_RELEASED && !b->n_missing) {
    rm__barrier_t *cache = (rm__barrier_t *)b;
    if (!cache->answer) {
      ProtobufCBinaryData *pl = NULL;
      r.released = 1;
      r.reason = (char *)b->reason;
      r.arrived = (uint32_t)b->arrived;
      r.expected = (uint32_t)b->expected;
      if (b->payloads) { /* barrier.c P2: every member's, rank order */
        pl = rm__xcalloc((size_t)b->expected, sizeof *pl);
        for (int k = 0; k < b->expected; k++) {
          pl[k].len = (size_t)b->payload_len;
          pl[k].data = b->payloads + (size_t)k * (size_t)b->payload_len;
        }
        r.n_payloads = (size_t)b->expected;
        r.payloads = pl;
      }
      cache->answer = rm__blob_pack(&r.base);
      free(pl);
    }
    rm__park_answer(c, p, NULL, cache->answer);
    return;
  }
  Ringmaster__V1__MissingRank *m = NULL, **mp = NULL;
  r.released = b->state == RM_BARRIER_RELEASED;
  r.reason = (char *)b->reason;
  r.arrived = (uint32_t)b->arrived;
  r.expected = (uint32_t)b->expected;
  if (b->n_missing) {
    m = rm__xcalloc((size_t)b->n_missing, sizeof *m);
    mp = rm__xcalloc((size_t)b->n_missing, sizeof *mp);
    for (int i = 0; i < b->n_missing; i++) {
      ringmaster__v1__missing_rank__init(&m[i]);
      m[i].rank = (uint32_t)b->missing[i].rank;
      m[i].step = b->missing[i].step;
      m[i].state = (Ringmaster__V1__WorkerState)b->missing[i].state;
      m[i].ms_since_heartbeat = b->missing[i].ms_since_heartbeat;
      int idx = b->missing[i].rank < j->nmembers ? j->members[b->missing[i].rank] : -1;
      m[i].host = idx >= 0 ? (char *)j->w[idx].host : (char *)"";
      mp[i] = &m[i];
    }
    r.n_missing = (size_t)b->n_missing;
    r.missing = mp;
  }
  rm__park_answer(c, p, &r.base, NULL);
  free(m);
  free(mp);
}

/* A decided answer in wire form `form` (0: a StepGate call's, the
 * world-byte mask; 1: a Session message's, world and the ranks out), packed. */
static rm__blob_t *decided_blob(uint64_t step, const uint8_t *members, int world, int dropped,
                                int form)
{
  Ringmaster__V1__StepGateResponse r = RINGMASTER__V1__STEP_GATE_RESPONSE__INIT;
  uint32_t *out = NULL;
  r.step = step;
  r.dropped = dropped != 0;
  r.decided = 1;
  if (form) {
    size_t n = 0;
    for (int i = 0; i < world; i++) n += !members[i];
    out = rm__xcalloc(n ? n : 1, sizeof *out);
    for (int i = 0, k = 0; i < world; i++)
      if (!members[i]) out[k++] = (uint32_t)i;
    r.world = (uint32_t)world;
    r.n_out = n;
    r.out = out;
  } else {
    r.members.data = (uint8_t *)members;
    r.members.len = (size_t)world;
  }
  rm__blob_t *b = rm__blob_pack(&r.base);
  free(out);
  return b;
}

/* The decided answer in form `form` from cache[form], packed there by
 * the first answer that needs it. */
static rm__blob_t *decided_cached(rm__blob_t **cache, int form, uint64_t step,
                                  const uint8_t *members, int world, int dropped)
{
  if (!cache[form]) cache[form] = decided_blob(step, members, world, dropped, form);
  return cache[form];
}

/* A decided answer (members != NULL, with cache) is packed once into
 * cache[form] and shared by every waiter with the same (step, dropped)
 * and form: O(world) bytes packed once per step, not per waiter. Form 0, a
 * StepGate call: the world-byte mask, deflated once per step too for a
 * client that accepts gzip (GZIP ANSWERS, server_out.c). Form 1, a Session's
 * gate park (server_group.c SESSIONS): world and the ranks out of the step
 * (StepGateResponse.out), since a stream message is not compressed. */
void rm__rpc_answer_gate(rm_coord_t *c, rm__park_t *p, uint64_t step,
                     const uint8_t *members, int world, int dropped,
                     int arrivals_decide, rm__blob_t **cache)
{
  int form = rm__park_on_stream(p);
  if (members) {
    rm__blob_t *b = decided_cached(cache, form, step, members, world, dropped);
    if (form) {
      rm__park_answer(c, p, NULL, b);
    } else {
      Ringmaster__V1__StepGateResponse none = RINGMASTER__V1__STEP_GATE_RESPONSE__INIT;
      rm__reply_tail_gz(c, p->call, &none.base, b);
    }
    return;
  }
  Ringmaster__V1__StepGateResponse r = RINGMASTER__V1__STEP_GATE_RESPONSE__INIT;
  r.step = step;
  r.dropped = dropped != 0;
  r.arrivals_decide = arrivals_decide != 0;
  rm__park_answer(c, p, &r.base, NULL);
}

void rm__rpc_push_gate(rm_coord_t *c, rm__park_t *p, uint64_t gen, uint64_t step,
                   const uint8_t *members, int world, rm__blob_t **cache)
{
  rm__session_push(c, p->call, gen, decided_cached(cache, 1, step, members, world, 1));
}

void rm__rpc_push_moved_on(rm_coord_t *c, rm__park_t *p, uint64_t gen, rm_job_state_t st,
                           const char *why)
{
  Ringmaster__V1__SessionResponse r = RINGMASTER__V1__SESSION_RESPONSE__INIT;
  r.moved_on = 1;
  r.generation = gen;
  r.job_state = (Ringmaster__V1__JobState)st;
  r.reason = (char *)(why ? why : "");
  rm__session_push_msg(c, p->call, &r.base);
}

void rm__rpc_answer_stale(rm_coord_t *c, rm__park_t *p, const char *why)
{
  rm__reply(c, p->call, RM__GRPC_FAILED_PRECONDITION, why, NULL);
}

void rm__rpc_answer_storage(rm_coord_t *c, rm__park_t *p, int full, const char *why)
{
  char msg[256];
  snprintf(msg, sizeof msg, "storage: %s (%s); retry later",
           full ? "the coordinator's disk is full" : "the coordinator cannot write its database",
           why && *why ? why : "write failed");
  rm__reply(c, p->call, full ? RM__GRPC_RESOURCE_EXHAUSTED : RM__GRPC_UNAVAILABLE, msg, NULL);
}

rm__rpc_t *rm__rpc_open(void) { return rm__xcalloc(1, sizeof(rm__rpc_t)); }

void rm__rpc_close(rm__rpc_t *r)
{
  if (!r) return;
  free(r->out);
  free(r->relay_kick);
  free(r);
}

const rm__answer_ops_t rm__rpc_answer_ops = {
    .join = rm__rpc_answer_join,
    .barrier = rm__rpc_answer_barrier,
    .gate = rm__rpc_answer_gate,
    .push_gate = rm__rpc_push_gate,
    .push_moved_on = rm__rpc_push_moved_on,
    .stale = rm__rpc_answer_stale,
    .storage = rm__rpc_answer_storage,
    .watch_kick = rm__rpc_watch_kick,
    .out_fail = rm__rpc_out_fail,
    .out_flush = rm__rpc_out_flush,
};
