/*
 * load_relay.c - RELAYS (--relay K with --session 1): a client
 * process's workers talk to the coordinator as the lanes of relay streams
 * (service.proto Relay; coordinator/rpc/relay.c), K workers a relay, as a
 * relay process on each host would carry them (relay/relay.c): their Join
 * calls and their Sessions. Local worker w is on relay w / K; every Join
 * call and every Session is a lane of its own, numbered by the relay.
 *
 *   JOIN       each relay opens its stream and sends its workers' Join
 *              calls as lanes (RelayIn.join) in one RelayRequest; each
 *              answer is a RelayOut with `join` (+ the shared peer list,
 *              RelayResponse.shared, named by join_tail) and `end`. The
 *              first formed one is put together and verified in full (the
 *              reference, check_join); a later one's head is scanned and
 *              its shared tail compared with the reference's bytes once a
 *              RelayResponse (a memcmp), then check_join's O(1) checks.
 *              Not formed: joined again with its worker id on a new lane,
 *              with the relay's next message.
 *   OPEN       each relay sends one RelayRequest carrying its lanes'
 *              opening messages (job, token, generation, worker id, step
 *              0, gate_push), each on a new lane; a lane is open when that
 *              send completed (n_ok per lane, latency send start ->
 *              completion).
 *   BARRIER k  each relay sends one RelayRequest with its lanes' arrivals
 *              (after the send in flight, if any); each lane's answer is a
 *              RelayOut naming it, checked as a Session's (barrier_check,
 *              gate_sess_check), latency send start -> received.
 *   GATE s     the same with gate calls; pushed decisions are checked as
 *              on a Session and settle nothing.
 *   HEARTBEAT  worker g's beats fall due as in the other modes; a relay
 *              sends the beats due since its last send in one message
 *              once the oldest has waited BEAT_BATCH_MS (and no send is in
 *              flight), as a relay would batch them: latency = due ->
 *              send completed, so it includes that wait.
 *   CLOSE      each relay sends `end` for every lane with its half-close;
 *              every lane must get its end OK (n_ok, latency from the
 *              send), and the stream status OK.
 *
 * Anything else received, a lane ended before the close, or a stream that
 * ends before it, is a failure (sess_fail, as for Sessions). Tags are
 * SESS_TAG(relay, kind): this mode has no per-worker streams.
 */
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load_client_int.h"
#include "rm_clock.h"

#define BEAT_BATCH_MS 100 /* HEARTBEAT: a relay's beats wait at most this */

struct relay {
  grpc_call *call;
  grpc_byte_buffer *send, *recv;
  grpc_metadata_array md1, md2;
  grpc_status_code st;
  grpc_slice details;
  int lo, n;                 /* local workers [lo, lo + n): lanes 1..n */
  uint8_t sending, recving, ended, closed;
  int64_t t_send;
  int send_kind;             /* what the send in flight carries (SEND_*) */
  int owed_due;              /* BARRIER / GATE: its arrivals wait for the send */
  int *beat;                 /* HEARTBEAT: lanes (local index) whose beat is due */
  int nbeat;                 /* ... due, not sent */
  int nfly;                  /* ... in the send in flight: beat[0..nfly) */
  int64_t beat_t0;           /* when the oldest unsent beat fell due */
  uint32_t *step;            /* beats sent, per lane */
  int lanes_open;
  uint32_t next_lane;        /* lane numbers are never reused */
  int *lane_w;               /* by lane number: local worker, -1 none */
  uint8_t *lane_join;        /* by lane number: a Join lane */
  uint32_t cap_lw;
  int *rejoin;               /* JOIN: local workers to join again */
  int nrejoin;
  const uint8_t *tail_ok;    /* JOIN: the shared tail verified in this message */
  int md_sent;
};

/* JOIN: the reference answer's shared tail (one client per process) */
static uint8_t *ref_tail;
static size_t ref_tail_len;

enum { SEND_OPEN = 1, SEND_OWED, SEND_BEATS, SEND_CLOSE, SEND_JOIN };

/* A new lane of relay r for local worker w. */
static uint32_t lane_new(struct relay *r, int w, int join)
{
  uint32_t n = r->next_lane++;
  if (n >= r->cap_lw) {
    uint32_t cap = r->cap_lw ? 2 * r->cap_lw : 64;
    while (cap <= n) cap *= 2;
    r->lane_w = realloc(r->lane_w, cap * sizeof *r->lane_w);
    r->lane_join = realloc(r->lane_join, cap);
    if (!r->lane_w || !r->lane_join) abort();
    for (uint32_t k = r->cap_lw; k < cap; k++) r->lane_w[k] = -1;
    memset(r->lane_join + r->cap_lw, 0, cap - r->cap_lw);
    r->cap_lw = cap;
  }
  r->lane_w[n] = w;
  r->lane_join[n] = (uint8_t)join;
  return n;
}

static void rl_batch(struct relay *r, int i, const grpc_op *ops, size_t n, int kind)
{
  if (grpc_call_start_batch(r->call, ops, n, SESS_TAG(i, kind), NULL) != GRPC_CALL_OK) abort();
}

static void rl_recv(struct relay *r, int i, int first)
{
  r->recving = 1;
  recv_start(r->call, first, &r->md1, &r->recv, SESS_TAG(i, SK_RECV));
}

/* One RelayRequest of the lanes in `lanes` (local indices; NULL: all),
 * each with its Session message of this `kind`, sent now (none in flight). */
static void rl_send(client_t *c, int i, int kind, const int *lanes, int nl)
{
  struct relay *r = &c->rl[i];
  int n = lanes ? nl : r->n;
  Ringmaster__V1__RelayIn *in = calloc((size_t)n, sizeof *in);
  Ringmaster__V1__RelayIn **inp = calloc((size_t)n, sizeof *inp);
  Ringmaster__V1__SessionRequest *q = calloc((size_t)n, sizeof *q);
  Ringmaster__V1__JoinRequest *jq = kind == SEND_JOIN ? calloc((size_t)n, sizeof *jq) : NULL;
  char (*jh)[32] = kind == SEND_JOIN ? calloc((size_t)n, 32) : NULL;
  char (*jd)[32] = kind == SEND_JOIN ? calloc((size_t)n, 32) : NULL;
  Ringmaster__V1__SessionBarrier b = RINGMASTER__V1__SESSION_BARRIER__INIT;
  Ringmaster__V1__SessionGate g = RINGMASTER__V1__SESSION_GATE__INIT;
  char name[32];
  if (!in || !inp || !q || (kind == SEND_JOIN && (!jq || !jh || !jd))) abort();
  snprintf(name, sizeof name, "round-%d", c->s_round);
  b.name = name;
  b.timeout_ms = (uint32_t)c->cfg->timeout_s * 1000u;
  g.ready = 1;
  g.wait_ms = (uint32_t)c->cfg->timeout_s * 1000u;
  int64_t now = rm__now_ns();
  for (int k = 0; k < n; k++) {
    int l = lanes ? lanes[k] : k, w = r->lo + l;
    ringmaster__v1__relay_in__init(&in[k]);
    inp[k] = &in[k];
    if (kind == SEND_JOIN) { /* a lane of its own; worker id: a re-join's */
      in[k].lane = lane_new(r, w, 1);
      ringmaster__v1__join_request__init(&jq[k]);
      join_req(c, w, c->wid[w], c->join_dl, &jq[k], jh[k], jd[k]);
      in[k].join = &jq[k];
      continue;
    }
    if (kind == SEND_OPEN) c->lane_of[w] = lane_new(r, w, 0);
    in[k].lane = c->lane_of[w];
    if (kind == SEND_CLOSE) {
      in[k].end = 1;
      c->lane_t[w] = now;
      continue;
    }
    ringmaster__v1__session_request__init(&q[k]);
    in[k].message = &q[k];
    q[k].job_id = c->cfg->job_id;
    q[k].token = (char *)c->cfg->token;
    q[k].generation = c->gen;
    q[k].worker_id = c->wid[w];
    q[k].step = r->step[l];
    if (kind == SEND_OPEN) {
      q[k].gate_push = 1; /* as the worker library asks */
    } else if (kind == SEND_OWED) {
      c->lane_st[w] = BS_SENT;
      c->lane_t[w] = now;
      if (c->s_phase == LOAD_CMD_GATE) {
        q[k].gate = &g;
        q[k].step = (uint64_t)c->s_round;
      } else {
        q[k].barrier = &b;
      }
    } else { /* SEND_BEATS */
      q[k].step = ++r->step[l];
    }
  }
  Ringmaster__V1__RelayRequest m = RINGMASTER__V1__RELAY_REQUEST__INIT;
  m.n_in = (size_t)n;
  m.in = inp;
  r->send = pack(&m.base);
  free(jq);
  free(jh);
  free(jd);
  free(q);
  free(inp);
  free(in);
  grpc_op ops[3];
  size_t k = 0;
  memset(ops, 0, sizeof ops);
  if (!r->md_sent) { /* the stream's first message */
    r->md_sent = 1;
    ops[k++].op = GRPC_OP_SEND_INITIAL_METADATA;
  }
  ops[k].op = GRPC_OP_SEND_MESSAGE;
  ops[k++].data.send_message.send_message = r->send;
  if (kind == SEND_CLOSE) {
    ops[k++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    r->closed = 1;
  }
  r->sending = 1;
  r->send_kind = kind;
  r->t_send = now;
  rl_batch(r, i, ops, k, SK_SEND);
}

/* HEARTBEAT: send the beats due, if the oldest waited long enough. */
static void rl_beats(client_t *c, int i, int64_t now)
{
  struct relay *r = &c->rl[i];
  if (r->sending || !r->nbeat || r->ended || now - r->beat_t0 < BEAT_BATCH_MS * 1000000LL)
    return;
  r->nfly = r->nbeat;
  rl_send(c, i, SEND_BEATS, r->beat, r->nbeat);
}

static void rl_owed_send(client_t *c, int i)
{
  struct relay *r = &c->rl[i];
  r->owed_due = 0;
  rl_send(c, i, SEND_OWED, NULL, 0);
}

/* Lane l's owed request is answered or failed: settled. */
static void lane_settle(client_t *c, int w)
{
  if (c->lane_st[w] == BS_NONE) return;
  c->lane_st[w] = BS_NONE;
  c->s_done++;
}

/* What one RelayOut says to the lane of local worker w. */
static void lane_out(client_t *c, struct relay *r, int w, const Ringmaster__V1__RelayOut *o,
                     int64_t now)
{
  load_res_t *res = c->s_res;
  int g = c->cfg->lo + w;
  const Ringmaster__V1__SessionResponse *m = o->message;
  const Ringmaster__V1__BarrierResponse *b = m ? m->barrier : NULL;
  const Ringmaster__V1__StepGateResponse *gt = m ? m->gate : NULL;
  if (gt && m->gate_pushed) { /* checked as on a Session; settles nothing */
    int mine = 0;
    for (size_t k = 0; k < gt->n_out; k++) mine |= gt->out[k] == c->rank_of[w];
    if (!gt->decided || !gt->dropped || m->generation != c->gen ||
        gt->world != (uint32_t)c->cfg->world || !mine)
      sess_fail(c, 1, "lane of worker %d: a pushed gate decision not about it", g);
  } else if ((b && c->lane_st[w] == BS_SENT && c->s_phase == LOAD_CMD_BARRIER) ||
             (gt && c->lane_st[w] == BS_SENT && c->s_phase == LOAD_CMD_GATE)) {
    if (b) barrier_check(c, b, g, c->s_round, " (Relay)", res);
    else gate_sess_check(c, gt, w, res);
    c->lat[res->n_lat++] = now - c->lane_t[w];
    if (now > res->t_last) res->t_last = now;
    lane_settle(c, w);
  } else if (m) {
    sess_fail(c, 1, "lane of worker %d: a message came (job_state %d, barrier %d, gate %d)", g,
              (int)m->job_state, b != NULL, gt != NULL);
  }
  if (!o->end) return;
  r->lanes_open--;
  if (r->closed && c->s_phase == LOAD_CMD_CLOSE && o->code == 0) {
    res->n_ok++;
    c->lat[res->n_lat++] = now - c->lane_t[w];
    if (now > res->t_last) res->t_last = now;
    c->s_done++;
  } else {
    sess_fail(c, 0, "lane of worker %d ended: status %d %s", g, o->code,
              o->details ? o->details : "");
    if (c->s_phase == LOAD_CMD_CLOSE) c->s_done++;
    lane_settle(c, w);
  }
}

static void rejoin_flush(client_t *c, int i)
{
  struct relay *r = &c->rl[i];
  if (r->sending || !r->nrejoin || r->ended) return;
  r->nfly = r->nrejoin;
  rl_send(c, i, SEND_JOIN, r->rejoin, r->nrejoin);
  r->nrejoin = 0;
}

/* JOIN: the answer to the Join lane of local worker w (see the top). */
static void join_out(client_t *c, int i, int w, const Ringmaster__V1__RelayOut *o,
                     const Ringmaster__V1__RelayResponse *m, int64_t now)
{
  struct relay *r = &c->rl[i];
  load_res_t *res = c->s_res;
  int g = c->cfg->lo + w;
  if (c->s_phase != LOAD_CMD_JOIN || !o->end) {
    sess_fail(c, 1, "Join lane of worker %d: an answer %s", g,
              o->end ? "outside the Join wave" : "without its end");
    return;
  }
  if (o->code) {
    res->n_err++;
    note(res, "Join of worker %d: status %d %s", g, o->code, o->details ? o->details : "");
    c->s_done++;
    return;
  }
  const ProtobufCBinaryData *t = NULL;
  if (o->join_tail) {
    if (o->join_tail > m->n_shared) {
      res->n_bad++;
      note(res, "Join of worker %d: shared tail %u of %zu", g, o->join_tail, m->n_shared);
      c->s_done++;
      return;
    }
    t = &m->shared[o->join_tail - 1];
  }
  join_scan_t sc;
  uint8_t *full = NULL;
  const uint8_t *b = o->join.data;
  size_t len = o->join.len;
  int bad;
  if (t && c->ref && ref_tail) { /* the fast case: the reference's tail */
    if (t->data != r->tail_ok &&
        (t->len != ref_tail_len || memcmp(t->data, ref_tail, t->len))) {
      bad = 1;
    } else {
      r->tail_ok = t->data; /* once a message */
      bad = scan_join(b, len, NULL, 0, &sc) || sc.seen_peer ? 1 : 0;
      sc.span_match = 1; /* the peers are the reference's, byte for byte */
      sc.n_peer_fields = 0;
    }
  } else {
    bad = 1;
  }
  if (bad) { /* put it together and check it in full */
    len = o->join.len + (t ? t->len : 0);
    full = malloc(len ? len : 1);
    if (!full) abort();
    memcpy(full, o->join.data, o->join.len);
    if (t) memcpy(full + o->join.len, t->data, t->len);
    b = full;
    bad = scan_join(b, len, c->ref_peers, c->ref_peers_len, &sc) < 0;
  }
  if (bad) {
    res->n_bad++;
    note(res, "worker %d: malformed Join answer (Relay)", g);
    c->s_done++;
  } else if (!sc.formed && now < c->join_dl) {
    res->n_rejoin++;
    c->wid[w] = sc.worker_id;
    r->rejoin[r->nrejoin++] = w - r->lo;
    rejoin_flush(c, i);
  } else if (!sc.formed) {
    res->n_bad++;
    note(res, "worker %d: not formed by the deadline", g);
    c->s_done++;
  } else {
    int first = !c->ref;
    if (check_join(c, w, b, len, &sc, res)) {
      res->n_bad++;
    } else {
      if (first && t) { /* the reference's tail, for the fast case */
        ref_tail = malloc(t->len ? t->len : 1);
        if (!ref_tail) abort();
        memcpy(ref_tail, t->data, t->len);
        ref_tail_len = t->len;
        r->tail_ok = t->data;
      }
      res->n_ok++;
      c->wid[w] = sc.worker_id;
      c->rank_of[w] = sc.rank;
    }
    c->lat[res->n_lat++] = now - c->lane_t[w];
    if (now > res->t_last) res->t_last = now;
    c->s_done++;
  }
  free(full);
}

void relay_event(client_t *c, intptr_t tag, int success)
{
  intptr_t v = -1 - tag;
  int i = (int)(v >> 2), kind = (int)(v & 3);
  if (!c->rl || i < 0 || i >= c->n_rl) abort();
  struct relay *r = &c->rl[i];
  load_res_t *res = c->s_res;
  int64_t now = rm__now_ns();
  if (kind == SK_SEND) {
    int sk = r->send_kind;
    r->sending = 0;
    grpc_byte_buffer_destroy(r->send);
    r->send = NULL;
    if (sk == SEND_JOIN && !success) {
      res->n_err += r->nfly;
      c->s_done += r->nfly;
      note(res, "relay of workers %d..: Join calls not sent", c->cfg->lo + r->lo);
    } else if (sk == SEND_OPEN) {
      for (int l = 0; l < r->n; l++) {
        c->s_done++;
        if (success) {
          res->n_ok++;
          c->lat[res->n_lat++] = now - r->t_send;
        } else {
          res->n_err++;
          note(res, "relay of workers %d..: its opening message was not sent",
               c->cfg->lo + r->lo);
        }
      }
      if (now > res->t_last) res->t_last = now;
    } else if (sk == SEND_BEATS) {
      for (int k = 0; k < r->nfly; k++) {
        int w = r->lo + r->beat[k];
        c->s_done++;
        if (success) {
          res->n_ok++;
          c->lat[res->n_lat++] = now - c->lane_t[w];
        } else {
          res->n_err++;
          note(res, "relay of workers %d..: a heartbeat message was not sent",
               c->cfg->lo + r->lo);
        }
      }
      memmove(r->beat, r->beat + r->nfly, (size_t)(r->nbeat - r->nfly) * sizeof *r->beat);
      r->nbeat -= r->nfly;
      r->nfly = 0;
      if (r->nbeat) r->beat_t0 = c->lane_t[r->lo + r->beat[0]];
      if (now > res->t_last) res->t_last = now;
    } else if (sk == SEND_OWED && !success) {
      for (int l = 0; l < r->n; l++)
        if (c->lane_st[r->lo + l] == BS_SENT) {
          sess_fail(c, 0, "lane of worker %d: its request was not sent", c->cfg->lo + r->lo + l);
          lane_settle(c, r->lo + l);
        }
    }
    if (r->owed_due && !r->ended) rl_owed_send(c, i);
    else if (c->s_phase == LOAD_CMD_HEARTBEAT) rl_beats(c, i, now);
    else if (c->s_phase == LOAD_CMD_JOIN) rejoin_flush(c, i);
  } else if (kind == SK_RECV) {
    r->recving = 0;
    if (r->recv) {
      Ringmaster__V1__RelayResponse *m =
          (void *)unpack(r->recv, &ringmaster__v1__relay_response__descriptor);
      if (!m) sess_fail(c, 1, "relay of workers %d..: a malformed RelayResponse",
                        c->cfg->lo + r->lo);
      r->tail_ok = NULL;
      for (size_t k = 0; m && k < m->n_out; k++) {
        const Ringmaster__V1__RelayOut *o = m->out[k];
        for (size_t j = 0; j < o->n_lanes; j++) {
          uint32_t ln = o->lanes[j];
          int w = ln < r->next_lane && ln < r->cap_lw ? r->lane_w[ln] : -1;
          if (w < 0) {
            sess_fail(c, 1, "relay of workers %d..: an answer for lane %u", c->cfg->lo + r->lo,
                      ln);
            continue;
          }
          if (r->lane_join[ln]) {
            r->lane_w[ln] = -1; /* answered once */
            join_out(c, i, w, o, m, now);
          } else {
            lane_out(c, r, w, o, now);
          }
        }
      }
      if (m) protobuf_c_message_free_unpacked(&m->base, NULL);
      grpc_byte_buffer_destroy(r->recv);
      r->recv = NULL;
      if (!r->ended) rl_recv(r, i, 0);
    }
  } else if (kind == SK_STATUS) {
    r->ended = 1;
    if (!success && r->st == GRPC_STATUS_OK) r->st = GRPC_STATUS_UNKNOWN;
    if (c->s_phase == LOAD_CMD_CLOSE && r->closed) {
      c->s_done++;
      if (r->st != GRPC_STATUS_OK) {
        res->n_err++;
        note(res, "relay of workers %d..: status %d after the close", c->cfg->lo + r->lo,
             (int)r->st);
      }
      if (r->lanes_open > 0) { /* lanes that never got their end */
        res->n_err += r->lanes_open;
        c->s_done += r->lanes_open;
        note(res, "relay of workers %d..: %d lanes not ended before its status",
             c->cfg->lo + r->lo, r->lanes_open);
        r->lanes_open = 0;
      }
    } else if (c->s_phase != -1) {
      sess_fail(c, 0, "relay of workers %d.. ended before the close: status %d",
                c->cfg->lo + r->lo, (int)r->st);
      for (int l = 0; l < r->n; l++) lane_settle(c, r->lo + l);
    }
  }
}

/* Wait (bounded) until no relay has a send in flight. */
static void rl_quiesce(client_t *c)
{
  int64_t dl = rm__now_ns() + 10 * 1000000000LL;
  for (;;) {
    int busy = 0;
    for (int i = 0; i < c->n_rl; i++) busy |= c->rl[i].sending;
    if (!busy) return;
    grpc_event ev = cq_wait(c, dl);
    if (ev.type != GRPC_OP_COMPLETE) return;
    if ((intptr_t)ev.tag < 0) relay_event(c, (intptr_t)ev.tag, ev.success);
  }
}

static void phase_start(client_t *c, int kind, load_res_t *res)
{
  c->s_phase = kind;
  c->s_res = res;
  c->s_done = 0;
  res->t_first = rm__now_ns();
}

static void phase_end(client_t *c)
{
  c->s_phase = 0;
  c->s_res = NULL;
}

/* Open every relay stream (no message yet). */
static void rl_streams_open(client_t *c)
{
  int k = c->cfg->relay;
  c->n_rl = (c->n + k - 1) / k;
  c->rl = calloc((size_t)c->n_rl, sizeof *c->rl);
  c->lane_st = calloc((size_t)c->n, sizeof *c->lane_st);
  c->lane_t = calloc((size_t)c->n, sizeof *c->lane_t);
  c->lane_of = calloc((size_t)c->n, sizeof *c->lane_of);
  if (!c->rl || !c->lane_st || !c->lane_t || !c->lane_of) abort();
  for (int i = 0; i < c->n_rl; i++) {
    struct relay *r = &c->rl[i];
    grpc_op op;
    r->lo = i * k;
    r->n = c->n - r->lo < k ? c->n - r->lo : k;
    r->next_lane = 1;
    r->beat = calloc(2 * (size_t)r->n, sizeof *r->beat); /* a lane in flight and due again */
    r->step = calloc((size_t)r->n, sizeof *r->step);
    r->rejoin = calloc((size_t)r->n, sizeof *r->rejoin);
    if (!r->beat || !r->step || !r->rejoin) abort();
    r->call = grpc_channel_create_call(c->ch[i % c->cfg->channels], NULL,
                                       GRPC_PROPAGATE_DEFAULTS, c->cq,
                                       grpc_slice_from_static_string("/ringmaster.v1.Worker/Relay"),
                                       NULL, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    grpc_metadata_array_init(&r->md1);
    grpc_metadata_array_init(&r->md2);
    r->details = grpc_empty_slice();
    rl_recv(r, i, 1);
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &r->md2;
    op.data.recv_status_on_client.status = &r->st;
    op.data.recv_status_on_client.status_details = &r->details;
    rl_batch(r, i, &op, 1, SK_STATUS);
  }
}

void relay_phase_join(client_t *c, load_res_t *res)
{
  if (!c->rl) rl_streams_open(c);
  c->join_dl = rm__now_ns() + (int64_t)c->cfg->timeout_s * 1000000000LL;
  phase_start(c, LOAD_CMD_JOIN, res);
  for (int w = 0; w < c->n; w++) c->lane_t[w] = res->t_first;
  for (int i = 0; i < c->n_rl; i++) {
    c->rl[i].nfly = c->rl[i].n;
    rl_send(c, i, SEND_JOIN, NULL, 0);
  }
  if (stream_wait(c, c->n, c->join_dl + 60 * 1000000000LL)) {
    note(res, "%d Join answers not received on the relays past the deadline", c->n - c->s_done);
    res->n_err += c->n - c->s_done;
  }
  rl_quiesce(c);
  phase_end(c);
  res->n_ranks = c->n; /* rank_of: the parent checks all N are a permutation */
}

void relay_phase_open(client_t *c, load_res_t *res)
{
  if (!c->rl) rl_streams_open(c);
  phase_start(c, LOAD_CMD_OPEN, res);
  for (int i = 0; i < c->n_rl; i++) {
    struct relay *r = &c->rl[i];
    r->lanes_open = r->n;
    if (r->ended) {
      res->n_err += r->n;
      c->s_done += r->n;
      note(res, "relay of workers %d.. ended before the open", c->cfg->lo + r->lo);
      continue;
    }
    rl_send(c, i, SEND_OPEN, NULL, 0);
  }
  if (stream_wait(c, c->n, rm__now_ns() + (int64_t)(c->cfg->timeout_s + 30) * 1000000000LL)) {
    note(res, "%d lanes' opening not sent past the deadline", c->n - c->s_done);
    res->n_err += c->n - c->s_done;
  }
  phase_end(c);
}

void relay_phase_owed(client_t *c, int kind, int k, load_res_t *res)
{
  c->s_round = k;
  phase_start(c, kind, res);
  for (int i = 0; i < c->n_rl; i++) {
    struct relay *r = &c->rl[i];
    if (r->ended) {
      res->n_err += r->n;
      c->s_done += r->n;
      note(res, "relay of workers %d.. ended: round %d not sent", c->cfg->lo + r->lo, k);
    } else if (r->sending) {
      r->owed_due = 1;
    } else {
      rl_owed_send(c, i);
    }
  }
  if (stream_wait(c, c->n, res->t_first + (int64_t)(c->cfg->timeout_s + 10) * 1000000000LL)) {
    note(res, "%d answers not received on the relays past the deadline", c->n - c->s_done);
    res->n_err += c->n - c->s_done;
    memset(c->lane_st, BS_NONE, (size_t)c->n);
  }
  rl_quiesce(c);
  phase_end(c);
}

void relay_phase_heartbeat(client_t *c, int secs, load_res_t *res)
{
  int total = secs * c->n, sched = 0;
  int64_t t0 = rm__now_ns();
  int64_t end = t0 + (int64_t)(secs + 10 + 5) * 1000000000LL;
  /* nfly also counted the Join wave's lanes: none of these is in flight */
  for (int i = 0; i < c->n_rl; i++) c->rl[i].nbeat = c->rl[i].nfly = 0;
  phase_start(c, LOAD_CMD_HEARTBEAT, res);
  while (c->s_done < total) {
    int64_t now = rm__now_ns(), due = 0;
    while (sched < total) {
      int w = sched % c->n;
      due = beat_due(c, t0, sched);
      if (due > now) break;
      struct relay *r = &c->rl[w / c->cfg->relay];
      if (r->ended) {
        res->n_err++;
        c->s_done++;
        note(res, "worker %d: heartbeat not sent: its relay ended", c->cfg->lo + w);
      } else if (r->nbeat == 2 * r->n) { /* never: beats wait BEAT_BATCH_MS, not 1 s */
        res->n_late++;
        res->n_err++;
        c->s_done++;
      } else {
        if (!r->nbeat || r->nbeat == r->nfly) r->beat_t0 = due;
        r->beat[r->nbeat++] = w - r->lo;
        c->lane_t[w] = due;
      }
      sched++;
    }
    /* the next wake: a beat due, or a relay's batch ripe */
    int64_t wake = sched < total ? due : end;
    for (int i = 0; i < c->n_rl; i++) {
      struct relay *r = &c->rl[i];
      if (r->nbeat > r->nfly && !r->sending) {
        int64_t ripe = r->beat_t0 + BEAT_BATCH_MS * 1000000LL;
        if (ripe <= now) rl_beats(c, i, now);
        else if (ripe < wake) wake = ripe;
      }
    }
    if (c->s_done >= total) break;
    grpc_event ev = cq_wait(c, wake);
    if (ev.type == GRPC_OP_COMPLETE) {
      if ((intptr_t)ev.tag < 0) relay_event(c, (intptr_t)ev.tag, ev.success);
    } else if (rm__now_ns() >= end) {
      note(res, "%d heartbeat messages not sent past the deadline", total - c->s_done);
      res->n_err += total - c->s_done;
      break;
    }
  }
  rl_quiesce(c);
  for (int i = 0; i < c->n_rl; i++) c->rl[i].nbeat = c->rl[i].nfly = 0;
  phase_end(c);
}

void relay_phase_close(client_t *c, load_res_t *res)
{
  int want = 0;
  c->s_res = res; /* what came before the close counts as before it */
  for (;;) {
    grpc_event ev = cq_wait(c, 0);
    if (ev.type != GRPC_OP_COMPLETE) break;
    if ((intptr_t)ev.tag < 0) relay_event(c, (intptr_t)ev.tag, ev.success);
  }
  phase_start(c, LOAD_CMD_CLOSE, res);
  for (int i = 0; c->rl && i < c->n_rl; i++) {
    struct relay *r = &c->rl[i];
    if (r->ended || r->sending) continue; /* counted where it ended; cannot be */
    rl_send(c, i, SEND_CLOSE, NULL, 0);
    want += r->lanes_open + 1; /* each lane's end, then the stream's status */
  }
  if (stream_wait(c, want, rm__now_ns() + 30 * 1000000000LL)) {
    note(res, "%d lane ends or relay statuses missing 30 s after the close", want - c->s_done);
    res->n_err += want - c->s_done;
  }
  relay_teardown(c);
  phase_end(c);
}

void relay_teardown(client_t *c)
{
  if (!c->rl) return;
  c->s_phase = -1;
  c->s_res = NULL;
  for (int i = 0; i < c->n_rl; i++)
    if (c->rl[i].call && !c->rl[i].ended) grpc_call_cancel(c->rl[i].call, NULL);
  int64_t dl = rm__now_ns() + 10 * 1000000000LL;
  for (;;) {
    int live = 0;
    for (int i = 0; i < c->n_rl; i++)
      live |= c->rl[i].call && (!c->rl[i].ended || c->rl[i].sending || c->rl[i].recving);
    if (!live) break;
    grpc_event ev = cq_wait(c, dl);
    if (ev.type != GRPC_OP_COMPLETE) {
      fprintf(stderr, "rm-coord-load: client: relay streams not released\n");
      return; /* batches still write into them: keep them (the process ends) */
    }
    if ((intptr_t)ev.tag < 0) relay_event(c, (intptr_t)ev.tag, ev.success);
  }
  for (int i = 0; i < c->n_rl; i++) {
    struct relay *r = &c->rl[i];
    grpc_call_unref(r->call);
    grpc_metadata_array_destroy(&r->md1);
    grpc_metadata_array_destroy(&r->md2);
    grpc_slice_unref(r->details);
    free(r->beat);
    free(r->step);
    free(r->rejoin);
    free(r->lane_w);
    free(r->lane_join);
  }
  free(c->rl);
  free(c->lane_st);
  free(c->lane_t);
  free(c->lane_of);
  free(ref_tail);
  ref_tail = NULL;
  c->rl = NULL;
  c->lane_st = NULL;
  c->lane_t = NULL;
  c->lane_of = NULL;
  c->n_rl = 0;
  c->s_phase = 0;
}
