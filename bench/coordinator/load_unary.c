/*
 * load_unary.c - the phases of a client process made of unary calls
 * (--session 0 and 2, and the heartbeats of --session 2): BARRIER k,
 * GATE s (with the GZIP check of its shared answers, load_join.c GZIP)
 * and HEARTBEAT; and the checks of a barrier's and a gate's answer that
 * the Session phases share (load_session.c).
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "load_client_int.h"
#include "ringmaster/v1/messages.pb-c.h"
#include "rm_clock.h"


/* ---- barriers and heartbeats ---- */

/* A barrier answer of round k for global worker g (unary or on its
 * Session, `how`): released with arrived == expected == N, else n_bad. */
void barrier_check(const client_t *c, const Ringmaster__V1__BarrierResponse *r, int g,
                          int k, const char *how, load_res_t *res)
{
  uint32_t n = (uint32_t)c->cfg->world;
  if (r && r->released && r->arrived == n && r->expected == n) {
    res->n_ok++;
    return;
  }
  res->n_bad++;
  note(res, "worker %d round %d%s: released %d arrived %u expected %u (%s)", g, k, how,
       r ? r->released : -1, r ? r->arrived : 0, r ? r->expected : 0,
       r && r->reason && r->reason[0] ? r->reason : "no answer");
}

void phase_barrier(client_t *c, int k, load_res_t *res)
{
  char name[32];
  snprintf(name, sizeof name, "round-%d", k);
  res->t_first = rm__now_ns();
  for (int i = 0; i < c->n; i++) {
    Ringmaster__V1__BarrierRequest q = RINGMASTER__V1__BARRIER_REQUEST__INIT;
    q.job_id = c->cfg->job_id;
    q.token = (char *)c->cfg->token;
    q.generation = c->gen;
    q.worker_id = c->wid[i];
    q.name = name;
    q.timeout_ms = (uint32_t)c->cfg->timeout_s * 1000u;
    call_start(c, i, i % c->cfg->channels, "/ringmaster.v1.Worker/Barrier", &q.base,
               c->cfg->timeout_s + 10, 0);
  }
  int64_t dl = rm__now_ns() + (int64_t)(c->cfg->timeout_s + 30) * 1000000000LL;
  for (int left = c->n; left > 0; left--) {
    int i = next_answer(c, dl, left, "Barrier", res);
    if (i < 0) break;
    op_t *o = &c->ops[i];
    if (o->st != GRPC_STATUS_OK) {
      rpc_error(res, o, "Barrier", c->cfg->lo + i);
    } else {
      Ringmaster__V1__BarrierResponse *r =
          (void *)unpack(o->recv, &ringmaster__v1__barrier_response__descriptor);
      barrier_check(c, r, c->cfg->lo + i, k, "", res);
      if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
      c->lat[res->n_lat++] = o->t1 - o->t0;
    }
    if (o->t1 > res->t_last) res->t_last = o->t1;
    call_finish(o);
  }
}

/* GZIP StepGate: forget the last step's kept answers. */
void gate_refs_clear(client_t *c)
{
  for (int k = 0; k < 2; k++) {
    if (c->gate[k].r) protobuf_c_message_free_unpacked(&c->gate[k].r->base, NULL);
    free(c->gate[k].z);
    memset(&c->gate[k], 0, sizeof c->gate[k]);
  }
}

/* The step-wide facts of a StepGate answer: decided, step s, a mask of n
 * bytes with n - 1 ones (the first n - 1 arrivals).  O(n). */
static int gate_step_ok(const Ringmaster__V1__StepGateResponse *r, uint64_t step, uint32_t n)
{
  if (!r || !r->decided || r->step != step || r->members.len != n) return 0;
  uint32_t ones = 0;
  for (size_t k = 0; k < n; k++) ones += r->members.data[k] != 0;
  return ones == n - 1;
}

/* A compressed StepGate answer (zb taken: kept or freed).  Returns the kept
 * entry it is byte-identical to, or the one it becomes (this step's first
 * decided answer of its kind, its step-wide facts checked once); *r is then
 * that entry's answer, not to be freed.  Else NULL, and *r is the answer
 * inflated and unpacked (NULL when that fails), the caller's to check in
 * full and free. */
static gate_kept_t *gate_gz(client_t *c, uint8_t *zb, size_t zlen, uint64_t step, uint32_t n,
                            Ringmaster__V1__StepGateResponse **r)
{
  for (int k = 0; k < 2; k++)
    if (c->gate[k].r && c->gate[k].zlen == zlen && !memcmp(c->gate[k].z, zb, zlen)) {
      free(zb);
      *r = c->gate[k].r;
      return &c->gate[k];
    }
  uint8_t *full = NULL;
  size_t len;
  *r = NULL;
  if (!gz_inflate(zb, zlen, &full, &len))
    *r = (void *)protobuf_c_message_unpack(&ringmaster__v1__step_gate_response__descriptor, NULL,
                                           len, full);
  free(full);
  gate_kept_t *e = *r ? &c->gate[(*r)->dropped != 0] : NULL;
  if (e && (*r)->decided && (*r)->step == step && !e->r) { /* this step's first */
    e->r = *r;
    e->z = zb;
    e->zlen = zlen;
    e->ok = gate_step_ok(*r, step, n);
    return e;
  }
  free(zb);
  return NULL;
}

void phase_gate(client_t *c, int step, load_res_t *res)
{
  uint32_t n = (uint32_t)c->cfg->world;
  gate_refs_clear(c);
  res->t_first = rm__now_ns();
  for (int i = 0; i < c->n; i++) {
    Ringmaster__V1__StepGateRequest q = RINGMASTER__V1__STEP_GATE_REQUEST__INIT;
    q.job_id = c->cfg->job_id;
    q.token = (char *)c->cfg->token;
    q.generation = c->gen;
    q.worker_id = c->wid[i];
    q.step = (uint64_t)step;
    q.ready = 1;
    q.wait_ms = (uint32_t)c->cfg->timeout_s * 1000u;
    q.accept_gzip = c->cfg->gzip;
    call_start(c, i, i % c->cfg->channels, "/ringmaster.v1.Worker/StepGate", &q.base,
               c->cfg->timeout_s + 10, 0);
  }
  int64_t dl = rm__now_ns() + (int64_t)(c->cfg->timeout_s + 30) * 1000000000LL;
  for (int left = c->n; left > 0; left--) {
    int i = next_answer(c, dl, left, "StepGate", res);
    if (i < 0) break;
    op_t *o = &c->ops[i];
    if (o->st != GRPC_STATUS_OK) {
      rpc_error(res, o, "StepGate", c->cfg->lo + i);
    } else {
      Ringmaster__V1__StepGateResponse *r = NULL;
      gate_kept_t *kept = NULL;
      if (o->recv && o->recv->data.raw.compression == GRPC_COMPRESS_GZIP) { /* GZIP */
        size_t zlen;
        uint8_t *zb = raw_bytes(o->recv, &zlen);
        res->n_gzip++;
        kept = gate_gz(c, zb, zlen, (uint64_t)step, n, &r);
      } else {
        r = (void *)unpack(o->recv, &ringmaster__v1__step_gate_response__descriptor);
      }
      /* step-wide facts: the kept verdict, else in full; then its own byte */
      int step_ok = kept ? kept->ok : gate_step_ok(r, (uint64_t)step, n);
      uint32_t rank = c->rank_of[i];
      if (!step_ok || rank >= n || (r->dropped != 0) != (r->members.data[rank] == 0)) {
        uint32_t ones = 0; /* for the note only */
        for (size_t k = 0; r && k < r->members.len; k++) ones += r->members.data[k] != 0;
        res->n_bad++;
        note(res, "worker %d step %d: decided %d step %llu mask %zu bytes, %u ones, dropped %d",
             c->cfg->lo + i, step, r ? r->decided : -1, r ? (unsigned long long)r->step : 0ULL,
             r ? r->members.len : 0, ones, r ? r->dropped : -1);
      } else {
        res->n_ok++;
        res->n_dropped += r->dropped != 0;
      }
      if (r && !kept) protobuf_c_message_free_unpacked(&r->base, NULL);
      c->lat[res->n_lat++] = o->t1 - o->t0;
    }
    if (o->t1 > res->t_last) res->t_last = o->t1;
    call_finish(o);
  }
}

/* SESSION BARRIERS AND GATES: a gate answer on local worker w's Session
 * at step s_round: decided, step s, world N with exactly one rank out (the
 * first N - 1 arrivals), dropped exactly when that rank is its own.  O(1). */
void gate_sess_check(client_t *c, const Ringmaster__V1__StepGateResponse *r, int w,
                            load_res_t *res)
{
  uint32_t n = (uint32_t)c->cfg->world, rank = c->rank_of[w];
  int step = c->s_round;
  if (r->decided && r->step == (uint64_t)step && r->world == n && !r->members.len &&
      r->n_out == 1 && r->out[0] < n && rank < n && (r->dropped != 0) == (r->out[0] == rank)) {
    res->n_ok++;
    res->n_dropped += r->dropped != 0;
    return;
  }
  res->n_bad++;
  note(res, "worker %d step %d (Session): decided %d step %llu world %u, %zu out (first %d), "
       "%zu mask bytes, dropped %d", c->cfg->lo + w, step, r->decided,
       (unsigned long long)r->step, r->world, r->n_out, r->n_out ? (int)r->out[0] : -1,
       r->members.len, r->dropped);
}

static int heartbeat_done(client_t *c, int i, load_res_t *res)
{
  op_t *o = &c->ops[i];
  int w = i % c->n;
  if (o->st != GRPC_STATUS_OK) {
    rpc_error(res, o, "Heartbeat", c->cfg->lo + w);
  } else {
    Ringmaster__V1__HeartbeatResponse *r =
        (void *)unpack(o->recv, &ringmaster__v1__heartbeat_response__descriptor);
    if (!r || r->generation != c->gen) {
      res->n_bad++;
      note(res, "worker %d: Heartbeat answer generation %llu, want %llu", c->cfg->lo + w,
           r ? (unsigned long long)r->generation : 0ULL, (unsigned long long)c->gen);
    } else {
      res->n_ok++;
    }
    if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
    c->lat[res->n_lat++] = o->t1 - o->t0;
  }
  if (o->t1 > res->t_last) res->t_last = o->t1;
  call_finish(o);
  return 0;
}

/* When beat s (0 <= s < S * n: local worker s % n's (s / n)-th) is due:
 * worker g at t0 + g/N s + i s, spread evenly over each second. */
int64_t beat_due(const client_t *c, int64_t t0, int s)
{
  int g = c->cfg->lo + s % c->n;
  return t0 + (int64_t)(s / c->n) * 1000000000LL + (int64_t)g * 1000000000LL / c->cfg->world;
}

/* Call s (0 <= s < S * n) is worker s % n's (s / n)-th beat. */
void phase_heartbeat(client_t *c, int secs, load_res_t *res)
{
  int total = secs * c->n, sent = 0, done = 0;
  int64_t t0 = rm__now_ns();
  res->t_first = t0;
  while (done < total) {
    int64_t now = rm__now_ns(), due = 0;
    while (sent < total) {
      int w = sent % c->n;
      due = beat_due(c, t0, sent);
      if (due > now) break;
      Ringmaster__V1__HeartbeatRequest q = RINGMASTER__V1__HEARTBEAT_REQUEST__INIT;
      q.job_id = c->cfg->job_id;
      q.token = (char *)c->cfg->token;
      q.generation = c->gen;
      q.worker_id = c->wid[w];
      q.step = (uint64_t)(sent / c->n);
      call_start(c, sent, w % c->cfg->channels, "/ringmaster.v1.Worker/Heartbeat", &q.base,
                 HEARTBEAT_DEADLINE_S, 0);
      sent++;
    }
    int64_t wait = sent < total ? due : now + (int64_t)(HEARTBEAT_DEADLINE_S + 5) * 1000000000LL;
    int i = next_done(c, wait);
    if (i >= 0) {
      heartbeat_done(c, i, res);
      done++;
    } else if (sent == total) {
      note(res, "%d Heartbeat calls unanswered past the deadline", total - done);
      res->n_err += total - done;
      cancel_all(c, total);
      break;
    }
  }
}

