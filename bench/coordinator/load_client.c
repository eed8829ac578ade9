/*
 * load_client.c - one rm-coord-load client process: simulates the workers
 * [lo, hi) of one job with the gRPC C core async API (a few channels, each
 * its own TCP connection, one completion queue) and checks every answer.
 *
 * Phases (one per command from the parent, load_int.h):
 *   JOIN       every worker calls Join (long-poll, wait_ms <= 60 s; formed=
 *              false -> Join again with its worker id) until formed.
 *   BARRIER k  every worker calls Barrier("round-k") at once (--session 1:
 *              sends its arrival on its Session stream, SESSION BARRIERS).
 *   HEARTBEAT  worker g sends Heartbeat at t0 + g/N s + i s, i < S.
 *   GATE s     every worker calls StepGate(step s, ready, long poll) at
 *              once (a job with straggler_policy backup, one backup worker;
 *              --session 1: sends the call on its Session stream, SESSION
 *              BARRIERS AND GATES).
 *   OPEN       (--session 1) every worker opens its Session stream;
 *              (--session 2) its Watch call.
 *   CLOSE      (--session 1) every worker half-closes its Session stream;
 *              (--session 2) cancels its Watch call.
 *
 * Checks (a failing answer counts in n_bad, with the first reason in msg):
 *   Join:      formed; generation and world the same in every answer; the
 *              peer list has the whole world, each rank 0..N-1 exactly once,
 *              and the same entries in every answer; peers[rank].worker_id is
 *              the worker's own id.  Across clients the parent compares the
 *              generation and a digest of the peer list, and that the ranks
 *              of all N workers are a permutation of 0..N-1.
 *   Barrier:   released, arrived == expected == N (a unary answer or, with
 *              --session 1, the stream's SessionResponse.barrier).
 *   Heartbeat: status OK, generation unchanged.
 *   StepGate:  decided, step s, a mask of N bytes with N - 1 ones (the
 *              first N - 1 arrivals), dropped exactly when the worker's own
 *              rank is 0 in it; the parent checks one dropped worker a step.
 *              On a Session (SessionResponse.gate): decided, step s, world
 *              N and exactly one rank out, dropped exactly when it is the
 *              worker's own.
 *
 * Checking N answers of N peers each is O(N^2) bytes (65,536 workers: ~170
 * GB), so the first formed answer is unpacked and verified in full (the
 * reference), and every later one is scanned field by field at the top level
 * only: when its repeated-peers bytes are byte-identical to the reference's,
 * the peer list is the verified one (a memcmp).  An answer whose bytes differ
 * is unpacked and compared entry by entry (slow path; n_fast counts the fast
 * ones).  Each answer is freed as soon as it is checked.
 *
 * GZIP.  Unless --plain, every Join asks for a gzip answer
 * (JoinRequest.accept_gzip) and the channels leave messages compressed
 * (GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION 0: no O(N^2) inflating on
 * these 2 cores), so a formed answer arrives as the coordinator's gzip
 * member (coordinator/rpc/gz_answer.c): header, the head in a stored block,
 * the shared deflate stream of the peer list and spec, CRC-32 and ISIZE.
 * The first is inflated in full and verified as above (the reference; its
 * deflate stream and the CRC and length of what it inflates to are kept).
 * A later one passes the fast check when its deflate stream is
 * byte-identical to the reference's (so it inflates to the same verified
 * peers and spec), its CRC-32 equals crc32_combine(crc(its head), the
 * reference tail's CRC, its length) and ISIZE their lengths' sum (so the
 * member is valid for any gzip decoder), and its head scans as above; any
 * other compressed answer is inflated in full and checked as a plain one.
 * StepGate calls ask for gzip too (StepGateRequest.accept_gzip); a decided
 * answer is then a gzip member of the step's shared answer (its head is
 * empty, so every answer with the same `dropped` is the same member). The
 * first decided one of each kind in a step is inflated, its step-wide facts
 * (decided, step s, N mask bytes with N - 1 ones) are checked once, and it
 * is kept with that verdict; a later one byte-identical to a kept member is
 * that answer and has its verdict (a memcmp of ~100 bytes instead of
 * inflating and counting N); any other is inflated and checked in full, as
 * is every plain answer.  Every answer's own byte (dropped exactly when its
 * rank is 0 in the mask) is checked either way.  n_gzip counts the
 * compressed answers of both.
 *
 * SESSIONS (--session 1).  After the Join wave (OPEN) every worker
 * holds one Session stream (service.proto) on its channel, as the worker
 * library does for its whole life, through the barrier, gate and heartbeat
 * phases: created on the client's completion queue with no deadline, its
 * first message (job, token, generation, worker id, step 0) sent with the
 * initial metadata, a RECV_INITIAL_METADATA + RECV_MESSAGE batch and a
 * RECV_STATUS_ON_CLIENT batch posted for its whole life (sess_t).  The
 * coordinator sends nothing but barrier answers while all is well and the
 * job never ends during a run, so any other message received (and a
 * barrier answer outside a BARRIER phase or for no arrival waiting) and any
 * status before the CLOSE phase is a failure, counted (n_bad / n_err, first
 * reason noted) in the result of the phase during which it arrived
 * (sess_fold).  The stream's messages are SessionRequest / SessionResponse
 * (messages.proto: HeartbeatRequest / HeartbeatResponse plus a barrier
 * arrival and its answer).  In the HEARTBEAT
 * phase worker g's beats are messages on its stream at the same schedule as
 * the unary calls, one SEND_MESSAGE batch in flight per stream: a beat due
 * while the previous send is in flight is sent when it completes (n_late).
 * Its latency is send start -> send completion (nothing is answered), n_ok
 * counts the messages sent.  CLOSE half-closes every stream; each must end
 * with status OK (n_ok; else n_err) and no message received (else n_bad).  A
 * stream's call is unreffed once its status and every batch on it completed
 * (sess_release).  Tags: an op's is its index i >= 0, a stream's batch is
 * SESS_TAG(w, kind) < 0, so one queue serves both and next_done() handles
 * stream events arriving during the unary phases.  CLOSE first handles the
 * stream events already queued (a status that came before it is a failure).
 *
 * SESSION BARRIERS AND GATES (--session 1).  BARRIER k sends every worker's arrival as
 * a message on its stream, at once (phase_barrier_sess): a SessionRequest
 * with job, token, generation, worker id, its last step and barrier {name
 * "round-k", timeout_ms T * 1000}, in place of the unary Barrier call.  Its
 * answer is the SessionResponse with `barrier` set that the coordinator
 * sends on the stream at the release, checked as the unary answer; latency
 * = the arrival's send start -> the answer received.  One SEND_MESSAGE in
 * flight per stream still: an arrival due while a send is in flight (none
 * is: heartbeats do not run during the rounds) goes out when it completes
 * (sess_t.bar BS_DUE).  A worker's arrival is settled (s_done) once its
 * answer came (or the stream ended, or the send failed: a failure) and its
 * send completed; the phase waits for all, at most T + 10 s (the unary
 * call's deadline), and counts the rest as errors.  GATE s does the same
 * with a gate call (SessionRequest.gate {ready, wait_ms T * 1000}, step s)
 * in place of the arrival and the SessionResponse.gate its answer
 * (gate_sess_check); the same state (sess_t.bar) tracks it: one owed
 * request per stream, as the coordinator allows.  The opening message asks
 * for pushed decisions (gate_push), as the worker library does, so the
 * worker out of a step also gets the decision unasked, whenever it comes
 * (SessionResponse.gate_pushed): it must be decided, dropped, of this
 * generation, world N with the worker's own rank among those out (else a
 * failure); it settles nothing (every worker here asks, ready).  --session
 * 0 and 2 keep the unary calls.
 *
 * WATCHES (--session 2): the worker library before the Session RPC, for a
 * fair before/after.  OPEN: every worker opens a server-streaming Watch
 * (service.proto) on its channel, no deadline, its one request
 * (WatchRequest: job, token, its worker id, after_seq UINT64_MAX / 2, so no
 * event is ever due) sent with SEND_INITIAL_METADATA and
 * SEND_CLOSE_FROM_CLIENT in one batch (the SK_SEND of sess_t; its
 * completion is "opened"), RECV_INITIAL_METADATA + RECV_MESSAGE and
 * RECV_STATUS_ON_CLIENT posted as for a Session (RECV_INITIAL_METADATA is
 * not in the send batch: the coordinator sends no metadata before a message
 * or the status, so that batch would complete only at the end).  No sends
 * later: heartbeats are the unary calls of --session 0.  As for a Session,
 * any message and any status before CLOSE is a failure.  CLOSE cancels
 * every Watch (grpc_call_cancel: what the worker library did at its close);
 * each must end CANCELLED with no message received.  The coordinator
 * declares a worker whose Watch is cancelled lost and (the job's default
 * on_failure fail) fails the job at the first, and then ends every Watch
 * still open with status OK: one whose OK came before its own cancel took
 * effect ends OK, which after the close is no failure (n_ended counts
 * them).  Nothing the coordinator does after the close is checked.
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "load_client_int.h"
#include "ringmaster/v1/messages.pb-c.h"
#include "rm_clock.h"
#include "rm_le.h"
#include "rm_pbwire.h"

#define JOIN_WAIT_MS 60000 /* the coordinator's cap (JOIN_WAIT_MAX_MS) */
#define HEARTBEAT_DEADLINE_S 10

/* ---- calls ---- */

grpc_byte_buffer *pack(const ProtobufCMessage *m)
{
  size_t len = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) abort();
  protobuf_c_message_pack(m, buf);
  grpc_slice s = grpc_slice_new(buf, len, free);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

/* The answer's bytes in one slice (new reference; empty if none). */
static grpc_slice answer_bytes(grpc_byte_buffer *bb)
{
  grpc_byte_buffer_reader rd;
  if (!bb || !grpc_byte_buffer_reader_init(&rd, bb)) return grpc_empty_slice();
  grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
  grpc_byte_buffer_reader_destroy(&rd);
  return s;
}

ProtobufCMessage *unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d)
{
  grpc_slice s = answer_bytes(bb);
  ProtobufCMessage *m = bb ? protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(s),
                                                       GRPC_SLICE_START_PTR(s))
                           : NULL;
  grpc_slice_unref(s);
  return m;
}

static void call_start(client_t *c, int i, int ch, const char *method,
                       const ProtobufCMessage *req, int deadline_s, int auth)
{
  op_t *o = &c->ops[i];
  grpc_op ops[6];
  static grpc_metadata md;
  memset(ops, 0, sizeof ops);
  memset(o, 0, sizeof *o);
  o->call = grpc_channel_create_call(c->ch[ch], NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
                                     grpc_slice_from_static_string(method), NULL,
                                     gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                  gpr_time_from_seconds(deadline_s,
                                                                        GPR_TIMESPAN)),
                                     NULL);
  o->send = pack(req);
  grpc_metadata_array_init(&o->md1);
  grpc_metadata_array_init(&o->md2);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (auth) { /* a mutation: the API token */
    md.key = grpc_slice_from_static_string("authorization");
    md.value = grpc_slice_from_static_string("Bearer " LOAD_API_TOKEN);
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &md;
  }
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = o->send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &o->md1;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &o->recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &o->md2;
  ops[5].data.recv_status_on_client.status = &o->st;
  ops[5].data.recv_status_on_client.status_details = &o->details;
  o->busy = 1;
  o->t0 = rm__now_ns();
  if (grpc_call_start_batch(o->call, ops, 6, (void *)(intptr_t)i, NULL) != GRPC_CALL_OK)
    abort();
}

static void call_finish(op_t *o)
{
  grpc_call_unref(o->call);
  grpc_byte_buffer_destroy(o->send);
  if (o->recv) grpc_byte_buffer_destroy(o->recv);
  grpc_metadata_array_destroy(&o->md1);
  grpc_metadata_array_destroy(&o->md2);
  grpc_slice_unref(o->details);
  o->busy = 0;
  o->recv = NULL;
}

/* Next event of the queue, or type GRPC_QUEUE_TIMEOUT at deadline_ns. */
grpc_event cq_wait(client_t *c, int64_t deadline_ns)
{
  int64_t left = deadline_ns - rm__now_ns();
  if (left < 0) left = 0;
  gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_nanos(left, GPR_TIMESPAN));
  return grpc_completion_queue_next(c->cq, dl, NULL);
}

static void sess_event(client_t *c, intptr_t tag, int success);

/* Next completion of an op, or -1 when none came by deadline_ns.  SESSIONS:
 * stream events that come meanwhile are handled (sess_event). */
static int next_done(client_t *c, int64_t deadline_ns)
{
  for (;;) {
    grpc_event ev = cq_wait(c, deadline_ns);
    if (ev.type != GRPC_OP_COMPLETE) return -1;
    if ((intptr_t)ev.tag < 0) {
      if (c->rl) relay_event(c, (intptr_t)ev.tag, ev.success); /* RELAYS */
      else sess_event(c, (intptr_t)ev.tag, ev.success);
      continue;
    }
    int i = (int)(intptr_t)ev.tag;
    c->ops[i].t1 = rm__now_ns();
    if (!ev.success && c->ops[i].st == GRPC_STATUS_OK) c->ops[i].st = GRPC_STATUS_UNKNOWN;
    return i;
  }
}

/* Cancel every busy call and wait for their completions (bounded). */
static void cancel_all(client_t *c, int nops)
{
  int busy = 0;
  for (int i = 0; i < nops; i++)
    if (c->ops[i].busy) {
      grpc_call_cancel(c->ops[i].call, NULL);
      busy++;
    }
  int64_t dl = rm__now_ns() + 10 * 1000000000LL;
  while (busy > 0) {
    int i = next_done(c, dl);
    if (i < 0) break;
    call_finish(&c->ops[i]);
    busy--;
  }
}

void note(load_res_t *r, const char *fmt, ...)
{
  if (r->msg[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->msg, sizeof r->msg, fmt, ap);
  va_end(ap);
}

/* A call ended with a non-OK status: count it, note the first. */
static void rpc_error(load_res_t *r, const op_t *o, const char *what, int g)
{
  r->n_err++;
  note(r, "%s of worker %d: status %d %.*s", what, g, (int)o->st,
       (int)GRPC_SLICE_LENGTH(o->details), (const char *)GRPC_SLICE_START_PTR(o->details));
}

/* ---- Join answers ---- */


/* Top-level walk of a packed JoinResponse (see the file comment). */
int scan_join(const uint8_t *b, size_t len, const uint8_t *ref, size_t ref_len,
                     join_scan_t *o)
{
  const uint8_t *p = b, *end = b + len;
  memset(o, 0, sizeof *o);
  o->contig = 1;
  while (p < end) {
    const uint8_t *tag = p;
    uint64_t key, v;
    if (rm__pb_read_varint(&p, end, &key)) return -1;
    uint32_t f = (uint32_t)(key >> 3), wt = (uint32_t)(key & 7);
    if (wt == 0) {
      if (rm__pb_read_varint(&p, end, &v)) return -1;
      if (f == 1) o->formed = v != 0;
      else if (f == 2) o->worker_id = v;
      else if (f == 3) o->generation = v;
      else if (f == 4) o->rank = (uint32_t)v;
      else if (f == 5) o->world = (uint32_t)v;
    } else if (wt == 2) {
      if (rm__pb_read_varint(&p, end, &v) || v > (uint64_t)(end - p)) return -1;
      if (f == 6) {
        if (!o->seen_peer) {
          o->seen_peer = 1;
          o->first_peer = (size_t)(tag - b);
          if (ref && (size_t)(end - tag) >= ref_len && !memcmp(tag, ref, ref_len)) {
            o->span_match = 1;
            p = tag + ref_len;
            o->peers_end = (size_t)(p - b);
            continue;
          }
        } else if ((size_t)(tag - b) != o->peers_end) {
          o->contig = 0;
        }
        o->n_peer_fields++;
        o->peers_end = (size_t)(p - b) + (size_t)v;
      }
      p += v;
    } else if (wt == 1 || wt == 5) {
      size_t w = wt == 1 ? 8 : 4;
      if ((size_t)(end - p) < w) return -1;
      p += w;
    } else {
      return -1;
    }
  }
  return 0;
}

/* The same walk over the answer's slices in place (no copy of the answer:
 * at 65,536 workers the copy and its fresh pages cost a third of a client's
 * CPU).  Fast path only, with a reference span: 0 = scanned, 1 = the peers
 * differ from the reference (use scan_join on a copy), -1 = malformed. */
typedef struct {
  grpc_byte_buffer_reader rd;
  const uint8_t *p, *end;
  size_t off;
} cursor_t;

static int cur_fill(cursor_t *k)
{
  grpc_slice *sl;
  while (k->p == k->end) {
    if (!grpc_byte_buffer_reader_peek(&k->rd, &sl)) return -1;
    k->p = GRPC_SLICE_START_PTR(*sl);
    k->end = k->p + GRPC_SLICE_LENGTH(*sl);
  }
  return 0;
}

static int cur_varint(cursor_t *k, uint64_t *v)
{
  uint64_t x = 0;
  for (int sh = 0; sh < 64; sh += 7) {
    if (cur_fill(k)) return -1;
    uint8_t b = *k->p++;
    k->off++;
    x |= (uint64_t)(b & 0x7f) << sh;
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return -1;
}

/* Skip n bytes, or compare them with ref (ref != NULL): 0 = skipped/equal. */
static int cur_advance(cursor_t *k, size_t n, const uint8_t *ref)
{
  while (n > 0) {
    if (cur_fill(k)) return -1;
    size_t m = (size_t)(k->end - k->p) < n ? (size_t)(k->end - k->p) : n;
    if (ref && memcmp(k->p, ref, m)) return 1;
    if (ref) ref += m;
    k->p += m;
    k->off += m;
    n -= m;
  }
  return 0;
}

static int scan_join_bb(grpc_byte_buffer *bb, const uint8_t *ref, size_t ref_len,
                        join_scan_t *o)
{
  cursor_t k = {.p = NULL, .end = NULL, .off = 0};
  int rc = -1;
  memset(o, 0, sizeof *o);
  o->contig = 1;
  if (!bb || !grpc_byte_buffer_reader_init(&k.rd, bb)) return -1;
  for (;;) {
    uint64_t key, v;
    if (cur_fill(&k)) {
      rc = 0; /* end of the answer */
      break;
    }
    if (cur_varint(&k, &key)) break;
    uint32_t f = (uint32_t)(key >> 3), wt = (uint32_t)(key & 7);
    if (wt == 0) {
      if (cur_varint(&k, &v)) break;
      if (f == 1) o->formed = v != 0;
      else if (f == 2) o->worker_id = v;
      else if (f == 3) o->generation = v;
      else if (f == 4) o->rank = (uint32_t)v;
      else if (f == 5) o->world = (uint32_t)v;
    } else if (wt == 2 && f == 6 && !o->seen_peer) {
      /* The span starts with this tag (consumed): re-encode it, compare
       * it, then the span's remaining bytes in place. */
      uint8_t tb[10];
      size_t tl = 0;
      for (uint64_t x = key; tl < sizeof tb; x >>= 7) {
        tb[tl++] = (uint8_t)((x & 0x7f) | (x > 0x7f ? 0x80 : 0));
        if (x <= 0x7f) break;
      }
      o->seen_peer = 1;
      if (tl > ref_len || memcmp(tb, ref, tl) || cur_advance(&k, ref_len - tl, ref + tl)) {
        rc = 1; /* differs: the caller takes the slow path */
        break;
      }
      o->span_match = 1;
    } else if (wt == 2) {
      if (cur_varint(&k, &v)) break;
      if (f == 6) o->n_peer_fields++;
      if (cur_advance(&k, (size_t)v, NULL)) break;
    } else if (wt == 1 || wt == 5) {
      if (cur_advance(&k, wt == 1 ? 8 : 4, NULL)) break;
    } else {
      break;
    }
  }
  grpc_byte_buffer_reader_destroy(&k.rd);
  return rc;
}

static uint64_t fnv(uint64_t h, const void *d, size_t n)
{
  const uint8_t *p = d;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

/* Full check of an unpacked answer's peer list: the whole world, each rank
 * once; with a reference, the same entries.  Fills by_rank (N entries). */
static int check_peers(const client_t *c, const Ringmaster__V1__JoinResponse *r,
                       uint64_t *by_rank, char *why, size_t whylen)
{
  int n = c->cfg->world;
  if ((int)r->n_peers != n || (int)r->world != n) {
    snprintf(why, whylen, "%zu peers, world %u, want %d", r->n_peers, r->world, n);
    return -1;
  }
  memset(by_rank, 0, (size_t)n * sizeof *by_rank);
  for (int i = 0; i < n; i++) {
    const Ringmaster__V1__Peer *q = r->peers[i];
    if (q->rank >= (uint32_t)n || by_rank[q->rank] || !q->worker_id) {
      snprintf(why, whylen, "peer %d: rank %u bad, repeated or no worker id", i, q->rank);
      return -1;
    }
    by_rank[q->rank] = q->worker_id;
    if (c->ref) {
      const Ringmaster__V1__Peer *e = NULL;
      for (size_t k = 0; k < c->ref->n_peers && !e; k++) /* "by rank": usually k == i */
        if (c->ref->peers[(i + (int)k) % n]->rank == q->rank) e = c->ref->peers[(i + (int)k) % n];
      if (!e || e->worker_id != q->worker_id || strcmp(e->host, q->host) ||
          strcmp(e->data_addr, q->data_addr)) {
        snprintf(why, whylen, "peer of rank %u differs from the first answer", q->rank);
        return -1;
      }
    }
  }
  return 0;
}

/* The first formed answer: verify in full, keep as the reference. */
static int take_reference(client_t *c, const uint8_t *b, size_t len, const join_scan_t *s,
                          load_res_t *res)
{
  char why[160];
  Ringmaster__V1__JoinResponse *r = (void *)protobuf_c_message_unpack(
      &ringmaster__v1__join_response__descriptor, NULL, len, b);
  int n = c->cfg->world;
  if (!r) {
    note(res, "Join answer does not unpack");
    return -1;
  }
  c->ref_wid = calloc((size_t)n, sizeof *c->ref_wid);
  if (!c->ref_wid) abort();
  if (check_peers(c, r, c->ref_wid, why, sizeof why) || !r->generation) {
    note(res, "first Join answer: %s", r->generation ? why : "generation 0");
    protobuf_c_message_free_unpacked(&r->base, NULL);
    free(c->ref_wid);
    c->ref_wid = NULL;
    return -1;
  }
  c->ref = r;
  c->gen = r->generation;
  uint64_t h = 1469598103934665603ULL;
  for (int k = 0; k < n; k++) { /* digest in rank order, independent of encoding */
    const Ringmaster__V1__Peer *q = NULL;
    for (size_t i = 0; i < r->n_peers && !q; i++)
      if (r->peers[((size_t)k + i) % r->n_peers]->rank == (uint32_t)k)
        q = r->peers[((size_t)k + i) % r->n_peers];
    h = fnv(h, &q->worker_id, sizeof q->worker_id);
    h = fnv(h, q->host, strlen(q->host) + 1);
    h = fnv(h, q->data_addr, strlen(q->data_addr) + 1);
  }
  res->peers_digest = h;
  res->generation = r->generation;
  if (s->contig && s->n_peer_fields == (size_t)n) {
    c->ref_peers_len = s->peers_end - s->first_peer;
    c->ref_peers = malloc(c->ref_peers_len);
    if (!c->ref_peers) abort();
    memcpy(c->ref_peers, b + s->first_peer, c->ref_peers_len);
  }
  return 0;
}

/* Check one formed answer of local worker i; 0 = good. */
int check_join(client_t *c, int i, const uint8_t *b, size_t len, const join_scan_t *s,
                      load_res_t *res)
{
  int g = c->cfg->lo + i, n = c->cfg->world;
  if (!c->ref && take_reference(c, b, len, s, res)) return -1;
  if (s->generation != c->gen || s->world != (uint32_t)n || s->rank >= (uint32_t)n ||
      !s->worker_id) {
    note(res, "worker %d: generation %llu world %u rank %u (want generation %llu world %d)",
         g, (unsigned long long)s->generation, s->world, s->rank,
         (unsigned long long)c->gen, n);
    return -1;
  }
  if (s->span_match && !s->n_peer_fields) {
    res->n_fast++;
  } else { /* slow path: unpack and compare entry by entry */
    char why[160];
    uint64_t *tmp = malloc((size_t)n * sizeof *tmp);
    Ringmaster__V1__JoinResponse *r = (void *)protobuf_c_message_unpack(
        &ringmaster__v1__join_response__descriptor, NULL, len, b);
    int bad = !r || !tmp || check_peers(c, r, tmp, why, sizeof why);
    if (bad) note(res, "worker %d: %s", g, r ? why : "answer does not unpack");
    if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
    free(tmp);
    if (bad) return -1;
  }
  if (c->ref_wid[s->rank] != s->worker_id) {
    note(res, "worker %d: rank %u but peers[%u] is worker %llu, not %llu", g, s->rank,
         s->rank, (unsigned long long)c->ref_wid[s->rank],
         (unsigned long long)s->worker_id);
    return -1;
  }
  return 0;
}

/* ---- GZIP answers (see the file comment) ---- */

/* A compressed answer's bytes as received (reading it through a
 * grpc_byte_buffer_reader would inflate it). malloc'd, never NULL. */
static uint8_t *raw_bytes(const grpc_byte_buffer *bb, size_t *len)
{
  const grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
  uint8_t *b = malloc(sb->length ? sb->length : 1), *p = b;
  if (!b) abort();
  for (size_t i = 0; i < sb->count; i++) {
    memcpy(p, GRPC_SLICE_START_PTR(sb->slices[i]), GRPC_SLICE_LENGTH(sb->slices[i]));
    p += GRPC_SLICE_LENGTH(sb->slices[i]);
  }
  *len = sb->length;
  return b;
}

/* Inflate a gzip member in full; 0 and a malloc'd *out, or -1. */
static int gz_inflate(const uint8_t *z, size_t zlen, uint8_t **out, size_t *outlen)
{
  z_stream st;
  size_t cap = zlen * 8 + 64;
  uint8_t *b = malloc(cap);
  int rc = Z_OK;
  memset(&st, 0, sizeof st);
  if (!b || inflateInit2(&st, 15 + 16) != Z_OK) abort();
  st.next_in = (Bytef *)z;
  st.avail_in = (uInt)zlen;
  while (rc == Z_OK) {
    if (st.total_out == cap) {
      cap *= 2;
      if (!(b = realloc(b, cap))) abort();
    }
    st.next_out = b + st.total_out;
    st.avail_out = (uInt)(cap - st.total_out);
    rc = inflate(&st, Z_NO_FLUSH);
  }
  *outlen = st.total_out;
  inflateEnd(&st);
  if (rc != Z_STREAM_END || st.avail_in) {
    free(b);
    return -1;
  }
  *out = b;
  return 0;
}

/* The parts of the coordinator's layout of a member; -1 if it is not it. */
typedef struct {
  const uint8_t *head, *defl;
  size_t hlen, dlen;
  uint32_t crc, isize;
} gz_parts_t;

static int gz_split(const uint8_t *b, size_t len, gz_parts_t *g)
{
  if (len < 15 + 8 || b[0] != 0x1f || b[1] != 0x8b || b[2] != 8 || b[3] != 0 || b[10] != 0)
    return -1;
  g->hlen = (size_t)b[11] | (size_t)b[12] << 8;
  if (((b[13] | b[14] << 8) ^ 0xffff) != (int)g->hlen || 15 + g->hlen + 8 > len) return -1;
  g->head = b + 15;
  g->defl = g->head + g->hlen;
  g->dlen = len - 15 - g->hlen - 8;
  g->crc = rm__get_le32(b + len - 8);
  g->isize = rm__get_le32(b + len - 4);
  return 0;
}

/* The reference's deflate stream and tail, from a member whose inflated
 * bytes (full, len) were just verified. */
static void gz_keep_reference(client_t *c, const uint8_t *z, size_t zlen, const uint8_t *full,
                              size_t len)
{
  gz_parts_t g;
  if (c->ref_z || gz_split(z, zlen, &g) || g.hlen > len || memcmp(full, g.head, g.hlen)) return;
  c->ref_z = malloc(g.dlen ? g.dlen : 1);
  if (!c->ref_z) abort();
  memcpy(c->ref_z, g.defl, g.dlen);
  c->ref_zlen = g.dlen;
  c->ref_tail_len = len - g.hlen;
  c->ref_tail_crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), full + g.hlen, (uInt)c->ref_tail_len);
}

/* The fast check: 0 = the member is head + the reference's tail (its head
 * scanned into s, span_match set), -1 = not (inflate it). */
static int gz_fast(const client_t *c, const uint8_t *z, size_t zlen, join_scan_t *s)
{
  gz_parts_t g;
  if (!c->ref_z || gz_split(z, zlen, &g) || g.dlen != c->ref_zlen ||
      memcmp(g.defl, c->ref_z, g.dlen) ||
      g.isize != (uint32_t)(g.hlen + c->ref_tail_len))
    return -1;
  uLong ch = crc32(crc32(0L, Z_NULL, 0), g.head, (uInt)g.hlen);
  if ((uint32_t)crc32_combine(ch, c->ref_tail_crc, (z_off_t)c->ref_tail_len) != g.crc) return -1;
  if (scan_join(g.head, g.hlen, NULL, 0, s) || s->seen_peer) return -1;
  s->span_match = 1; /* the peers are the reference's, byte for byte */
  return 0;
}

void join_req(client_t *c, int i, uint64_t worker_id, int64_t deadline_ns,
              Ringmaster__V1__JoinRequest *q, char *host, char *data)
{
  int g = c->cfg->lo + i;
  snprintf(host, 32, "node%d", g / 8);
  snprintf(data, 32, "10.%d.%d.%d:5000", g / 65536, (g / 256) % 256, g % 256);
  q->job_id = c->cfg->job_id;
  q->token = (char *)c->cfg->token;
  q->worker_id = worker_id;
  q->host = host;
  q->data_addr = data;
  q->devices = "cpu";
  q->rank_hint = -1;
  q->accept_gzip = c->cfg->gzip;
  int left_ms = rm__ms_left(deadline_ns);
  q->wait_ms = (uint32_t)(left_ms < JOIN_WAIT_MS ? left_ms : JOIN_WAIT_MS);
}

static void join_send(client_t *c, int i, uint64_t worker_id, int64_t deadline_ns)
{
  char host[32], data[32];
  Ringmaster__V1__JoinRequest q = RINGMASTER__V1__JOIN_REQUEST__INIT;
  join_req(c, i, worker_id, deadline_ns, &q, host, data);
  int left_ms = rm__ms_left(deadline_ns);
  /* The call's deadline is the wave's, not wait_ms: the group may form at
   * once and still take minutes to deliver N answers of N peers. */
  call_start(c, i, i % c->cfg->channels, "/ringmaster.v1.Worker/Join", &q.base,
             left_ms / 1000 + 30, 0);
}

static void phase_join(client_t *c, load_res_t *res)
{
  int64_t dl = rm__now_ns() + (int64_t)c->cfg->timeout_s * 1000000000LL;
  int64_t *first = calloc((size_t)c->n, sizeof *first);
  if (!first) abort();
  res->t_first = rm__now_ns();
  for (int i = 0; i < c->n; i++) {
    join_send(c, i, 0, dl);
    first[i] = c->ops[i].t0;
  }
  int left = c->n;
  while (left > 0) {
    int i = next_done(c, dl + 60 * 1000000000LL);
    if (i < 0) {
      note(res, "%d Join calls unanswered past the deadline", left);
      res->n_err += left;
      cancel_all(c, c->n);
      break;
    }
    op_t *o = &c->ops[i];
    if (o->st != GRPC_STATUS_OK) {
      rpc_error(res, o, "Join", c->cfg->lo + i);
      call_finish(o);
      left--;
      continue;
    }
    join_scan_t s;
    grpc_slice sl = grpc_empty_slice();
    const uint8_t *b = NULL;
    uint8_t *zb = NULL, *full = NULL;
    size_t len = 0, zlen = 0;
    int bad;
    if (o->recv && o->recv->data.raw.compression == GRPC_COMPRESS_GZIP) { /* GZIP */
      res->n_gzip++;
      zb = raw_bytes(o->recv, &zlen);
      bad = gz_fast(c, zb, zlen, &s) ? 1 : 0;
      if (bad == 1) { /* no reference yet, or another tail: inflate it */
        bad = gz_inflate(zb, zlen, &full, &len) ? -1 : 0;
        b = full;
        if (!bad) bad = scan_join(b, len, c->ref_peers, c->ref_peers_len, &s);
      }
    } else {
      bad = c->ref_peers ? scan_join_bb(o->recv, c->ref_peers, c->ref_peers_len, &s) : 1;
      if (bad == 0 && s.formed && (!s.span_match || s.n_peer_fields)) bad = 1;
      if (bad == 1) { /* no reference yet, or not the fast case: a copy */
        sl = answer_bytes(o->recv);
        b = GRPC_SLICE_START_PTR(sl);
        len = GRPC_SLICE_LENGTH(sl);
        bad = scan_join(b, len, c->ref_peers, c->ref_peers_len, &s);
      }
    }
    int64_t t1 = o->t1;
    call_finish(o);
    if (bad) {
      note(res, "worker %d: malformed Join answer", c->cfg->lo + i);
      res->n_bad++;
      left--;
    } else if (!s.formed && rm__now_ns() < dl) {
      res->n_rejoin++;
      join_send(c, i, s.worker_id, dl);
    } else if (!s.formed) {
      note(res, "worker %d: not formed by the deadline", c->cfg->lo + i);
      res->n_bad++;
      left--;
    } else {
      if (check_join(c, i, b, len, &s, res)) {
        res->n_bad++;
      } else {
        if (full) gz_keep_reference(c, zb, zlen, full, len);
        res->n_ok++;
        c->wid[i] = s.worker_id;
        c->rank_of[i] = s.rank;
      }
      c->lat[res->n_lat++] = t1 - first[i];
      if (t1 > res->t_last) res->t_last = t1;
      left--;
    }
    grpc_slice_unref(sl);
    free(zb);
    free(full);
  }
  free(first);
  res->n_ranks = c->n; /* rank_of: the parent checks all N are a permutation */
}

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

static void phase_barrier(client_t *c, int k, load_res_t *res)
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
    int i = next_done(c, dl);
    if (i < 0) {
      note(res, "%d Barrier calls unanswered past the deadline", left);
      res->n_err += left;
      cancel_all(c, c->n);
      break;
    }
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
static void gate_refs_clear(client_t *c)
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

static void phase_gate(client_t *c, int step, load_res_t *res)
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
    int i = next_done(c, dl);
    if (i < 0) {
      note(res, "%d StepGate calls unanswered past the deadline", left);
      res->n_err += left;
      cancel_all(c, c->n);
      break;
    }
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
static void phase_heartbeat(client_t *c, int secs, load_res_t *res)
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

/* ---- SESSIONS (see the file comment) ---- */

#define SESS_TEARDOWN (-1) /* s_phase: cancelling; nothing counts */
#define WATCH(c) ((c)->cfg->session == 2) /* sess_t is a Watch call (WATCHES) */
#define SESS_WHAT(c) (WATCH(c) ? "Watch" : "Session")
#define SESS_WHATS(c) (WATCH(c) ? "Watches" : "Sessions")

/* A stream failure (a message, or a status before the close): counted in
 * the session phase under way, else reported with the next result
 * (sess_fold), whatever phase that is. */
void sess_fail(client_t *c, int bad, const char *fmt, ...)
{
  int *n_err = c->s_res ? &c->s_res->n_err : &c->p_err;
  int *n_bad = c->s_res ? &c->s_res->n_bad : &c->p_bad;
  char *msg = c->s_res ? c->s_res->msg : c->p_msg;
  size_t len = c->s_res ? sizeof c->s_res->msg : sizeof c->p_msg;
  if (bad) (*n_bad)++;
  else (*n_err)++;
  if (msg[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, len, fmt, ap);
  va_end(ap);
}

static void sess_fold(client_t *c, load_res_t *res)
{
  res->n_err += c->p_err;
  res->n_bad += c->p_bad;
  if (c->p_msg[0]) note(res, "%s", c->p_msg);
  c->p_err = c->p_bad = 0;
  c->p_msg[0] = 0;
}

/* Unref the call once its status and every batch on it completed. */
static void sess_release(client_t *c, sess_t *s)
{
  if (!s->call || !s->ended || s->sending || s->recving || s->closing) return;
  grpc_call_unref(s->call);
  s->call = NULL;
  if (s->recv) grpc_byte_buffer_destroy(s->recv);
  s->recv = NULL;
  grpc_metadata_array_destroy(&s->md1);
  grpc_metadata_array_destroy(&s->md2);
  grpc_slice_unref(s->details);
  s->details = grpc_empty_slice();
  c->n_live--;
}

static void sess_batch(sess_t *s, const grpc_op *ops, size_t n, int w, int kind)
{
  if (grpc_call_start_batch(s->call, ops, n, SESS_TAG(w, kind), NULL) != GRPC_CALL_OK) abort();
}

/* RECV_MESSAGE (with RECV_INITIAL_METADATA the first time). */
static void sess_recv(sess_t *s, int w, int first)
{
  grpc_op ops[2];
  size_t k = 0;
  memset(ops, 0, sizeof ops);
  if (first) {
    ops[k].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[k++].data.recv_initial_metadata.recv_initial_metadata = &s->md1;
  }
  ops[k].op = GRPC_OP_RECV_MESSAGE;
  ops[k++].data.recv_message.recv_message = &s->recv;
  s->recving = 1;
  sess_batch(s, ops, k, w, SK_RECV);
}

/* One message of local worker w (first: with the initial metadata; bar:
 * a barrier arrival, with step the last beat's; gate: a gate call, with
 * step the gate's; else a beat of step). */
static void sess_send_msg(client_t *c, int w, int first, uint32_t step,
                          Ringmaster__V1__SessionBarrier *bar, Ringmaster__V1__SessionGate *gate)
{
  sess_t *s = &c->sess[w];
  Ringmaster__V1__SessionRequest q = RINGMASTER__V1__SESSION_REQUEST__INIT;
  grpc_op ops[2];
  size_t k = 0;
  q.job_id = c->cfg->job_id;
  q.token = (char *)c->cfg->token;
  q.generation = c->gen;
  q.worker_id = c->wid[w];
  q.step = step;
  q.barrier = bar;
  q.gate = gate;
  q.gate_push = first; /* as the worker library asks (SESSION BARRIERS AND GATES) */
  s->send = pack(&q.base);
  if (!gate) s->step = step; /* beats sent */
  s->send_bar = bar || gate;
  memset(ops, 0, sizeof ops);
  if (first) ops[k++].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[k].op = GRPC_OP_SEND_MESSAGE;
  ops[k++].data.send_message.send_message = s->send;
  s->sending = 1;
  s->t_send = rm__now_ns();
  sess_batch(s, ops, k, w, SK_SEND);
}

static void sess_send(client_t *c, int w, int first, uint32_t step)
{
  sess_send_msg(c, w, first, step, NULL, NULL);
}

#define OWED(c) ((c)->s_phase == LOAD_CMD_GATE ? "gate call" : "barrier arrival")

/* SESSION BARRIERS AND GATES: local worker w's arrival at this round's
 * barrier (GATE: its gate call at step s_round, ready, long poll), as a
 * message on its stream (no send in flight); latency from here. */
static void sess_bar_send(client_t *c, int w)
{
  sess_t *s = &c->sess[w];
  Ringmaster__V1__SessionBarrier b = RINGMASTER__V1__SESSION_BARRIER__INIT;
  Ringmaster__V1__SessionGate g = RINGMASTER__V1__SESSION_GATE__INIT;
  int gate = c->s_phase == LOAD_CMD_GATE;
  b.name = (char *)c->s_bar_name;
  b.timeout_ms = (uint32_t)c->cfg->timeout_s * 1000u;
  g.ready = 1;
  g.wait_ms = (uint32_t)c->cfg->timeout_s * 1000u;
  s->bar = BS_SENT;
  s->t_bar = rm__now_ns();
  sess_send_msg(c, w, 0, gate ? (uint32_t)c->s_round : s->step, gate ? NULL : &b,
                gate ? &g : NULL);
}

/* SESSION BARRIERS: worker w's arrival is answered or failed (counted);
 * it is settled once its send completed too. */
static void sess_bar_settle(client_t *c, sess_t *s)
{
  if (s->sending && s->send_bar) {
    s->bar = BS_SETTLING;
    return;
  }
  s->bar = BS_NONE;
  c->s_done++;
}

/* WATCHES: local worker w's one request, with the initial metadata and the
 * half-close (no event is ever due after after_seq). */
static void watch_send(client_t *c, int w)
{
  sess_t *s = &c->sess[w];
  Ringmaster__V1__WatchRequest q = RINGMASTER__V1__WATCH_REQUEST__INIT;
  grpc_op ops[3];
  q.job_id = c->cfg->job_id;
  q.token = (char *)c->cfg->token;
  q.worker_id = c->wid[w];
  q.after_seq = UINT64_MAX / 2;
  s->send = pack(&q.base);
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = s->send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  s->sending = 1;
  s->t_send = rm__now_ns();
  sess_batch(s, ops, 3, w, SK_SEND);
}

/* Open local worker w's stream (WATCHES: its Watch call): no deadline; the
 * first message (the request), then the receive and status batches it
 * keeps posted. */
static void sess_open(client_t *c, int w)
{
  sess_t *s = &c->sess[w];
  grpc_op op;
  memset(s, 0, sizeof *s);
  s->call = grpc_channel_create_call(c->ch[w % c->cfg->channels], NULL, GRPC_PROPAGATE_DEFAULTS,
                                     c->cq,
                                     grpc_slice_from_static_string(
                                         WATCH(c) ? "/ringmaster.v1.Worker/Watch"
                                                  : "/ringmaster.v1.Worker/Session"),
                                     NULL, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
  grpc_metadata_array_init(&s->md1);
  grpc_metadata_array_init(&s->md2);
  s->details = grpc_empty_slice();
  c->n_live++;
  if (WATCH(c)) watch_send(c, w);
  else sess_send(c, w, 1, 0);
  sess_recv(s, w, 1);
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  op.data.recv_status_on_client.trailing_metadata = &s->md2;
  op.data.recv_status_on_client.status = &s->st;
  op.data.recv_status_on_client.status_details = &s->details;
  sess_batch(s, &op, 1, w, SK_STATUS);
}

/* A stream's batch completed (tag < 0). */
static void sess_event(client_t *c, intptr_t tag, int success)
{
  intptr_t v = -1 - tag;
  int w = (int)(v >> 2), kind = (int)(v & 3);
  if (!c->sess || w < 0 || w >= c->n) abort();
  sess_t *s = &c->sess[w];
  load_res_t *r = c->s_res;
  int g = c->cfg->lo + w;
  int64_t now = rm__now_ns();
  if (kind == SK_SEND) {
    int was_bar = s->send_bar;
    s->sending = 0;
    s->send_bar = 0;
    grpc_byte_buffer_destroy(s->send);
    s->send = NULL;
    if (was_bar) { /* SESSION BARRIERS: counted by its answer */
      if (s->bar == BS_SETTLING) { /* answered (or failed) already */
        s->bar = BS_NONE;
        c->s_done++;
      } else if (!success) { /* BS_SENT: no answer will come; or left past a deadline */
        sess_fail(c, 0, "Session of worker %d round %d: the %s was not sent", g, c->s_round,
                  OWED(c));
        if (s->bar == BS_SENT) sess_bar_settle(c, s);
      }
    } else if (c->s_phase == LOAD_CMD_OPEN || c->s_phase == LOAD_CMD_HEARTBEAT) {
      c->s_done++;
      if (success) {
        r->n_ok++;
        c->lat[r->n_lat++] = now - s->t_send;
      } else {
        r->n_err++;
        note(r, "%s of worker %d: the %s was not sent", SESS_WHAT(c), g,
             WATCH(c) ? "request" : c->s_phase == LOAD_CMD_OPEN ? "first message"
                                                               : "heartbeat message");
      }
      if (now > r->t_last) r->t_last = now;
      if (c->s_phase == LOAD_CMD_HEARTBEAT && s->backlog > 0) {
        if (success && !s->ended) { /* the late beat, now */
          s->backlog--;
          sess_send(c, w, 0, s->step + 1);
        } else {
          r->n_err += s->backlog;
          c->s_done += s->backlog;
          note(r, "Session of worker %d: %d heartbeats not sent (stream broken)", g, s->backlog);
          s->backlog = 0;
        }
      }
    }
    if (s->bar == BS_DUE) { /* SESSION BARRIERS: the arrival waited for this send */
      if (success && !s->ended) {
        sess_bar_send(c, w);
      } else {
        sess_fail(c, 0, "Session of worker %d round %d: %s not sent (stream broken)", g,
                  c->s_round, OWED(c));
        s->bar = BS_NONE;
        c->s_done++;
      }
    }
  } else if (kind == SK_RECV) {
    s->recving = 0;
    if (s->recv && WATCH(c)) { /* no event is due after after_seq */
      Ringmaster__V1__Event *m = (void *)unpack(s->recv, &ringmaster__v1__event__descriptor);
      s->got_msg++;
      if (!s->closed) /* after the close, the call's verdict counts it */
        sess_fail(c, 1, "Watch of worker %d: an event came (seq %llu, kind %s)", g,
                  m ? (unsigned long long)m->seq : 0ULL, m && m->kind ? m->kind : "?");
      if (m) protobuf_c_message_free_unpacked(&m->base, NULL);
    } else if (s->recv) { /* nothing but barrier and gate answers while all is well */
      Ringmaster__V1__SessionResponse *m =
          (void *)unpack(s->recv, &ringmaster__v1__session_response__descriptor);
      const Ringmaster__V1__BarrierResponse *b = m ? m->barrier : NULL;
      const Ringmaster__V1__StepGateResponse *gt = m ? m->gate : NULL;
      if (gt && m->gate_pushed) { /* a pushed decision: checked, nothing to settle */
        int mine = 0;
        for (size_t k = 0; k < gt->n_out; k++) mine |= gt->out[k] == c->rank_of[w];
        if (!gt->decided || !gt->dropped || m->generation != c->gen ||
            gt->world != (uint32_t)c->cfg->world || !mine)
          sess_fail(c, 1, "Session of worker %d: a pushed gate decision not about it (step "
                    "%llu, decided %d, dropped %d, generation %llu, world %u, %zu out)", g,
                    (unsigned long long)gt->step, gt->decided, gt->dropped,
                    (unsigned long long)m->generation, gt->world, gt->n_out);
      } else if ((b && s->bar == BS_SENT && c->s_phase == LOAD_CMD_BARRIER) ||
          (gt && s->bar == BS_SENT && c->s_phase == LOAD_CMD_GATE)) { /* its answer */
        if (b) barrier_check(c, b, g, c->s_round, " (Session)", r);
        else gate_sess_check(c, gt, w, r);
        c->lat[r->n_lat++] = now - s->t_bar;
        if (now > r->t_last) r->t_last = now;
        sess_bar_settle(c, s);
      } else {
        s->got_msg++;
        if (s->closed) {
          /* after the close, the stream's verdict counts it */
        } else if (b) {
          sess_fail(c, 1, "Session of worker %d: a barrier answer with no arrival waiting "
                    "(released %d, arrived %u, reason %s)", g, b->released, b->arrived,
                    b->reason && b->reason[0] ? b->reason : "none");
        } else if (gt) {
          sess_fail(c, 1, "Session of worker %d: a gate answer with no call waiting "
                    "(step %llu, decided %d)", g, (unsigned long long)gt->step, gt->decided);
        } else {
          sess_fail(c, 1, "Session of worker %d: a message came (job_state %d, generation "
                    "%llu, reason %s)", g, m ? (int)m->job_state : -1,
                    m ? (unsigned long long)m->generation : 0ULL,
                    m && m->reason ? m->reason : "none");
        }
      }
      if (m) protobuf_c_message_free_unpacked(&m->base, NULL);
    }
    if (s->recv) {
      grpc_byte_buffer_destroy(s->recv);
      s->recv = NULL;
      if (!s->ended) sess_recv(s, w, 0);
    }
  } else if (kind == SK_STATUS) {
    s->ended = 1;
    if (!success && s->st == GRPC_STATUS_OK) s->st = GRPC_STATUS_UNKNOWN;
    const char *d = (const char *)GRPC_SLICE_START_PTR(s->details);
    int dl = (int)GRPC_SLICE_LENGTH(s->details);
    if (s->closed && c->s_phase == LOAD_CMD_CLOSE) { /* the verdict */
      /* WATCHES: CANCELLED, or OK when the coordinator ended it first */
      grpc_status_code want = WATCH(c) ? GRPC_STATUS_CANCELLED : GRPC_STATUS_OK;
      c->s_done++;
      if (s->st != want && !(WATCH(c) && s->st == GRPC_STATUS_OK)) {
        r->n_err++;
        note(r, "%s of worker %d: status %d %.*s after the close", SESS_WHAT(c), g, (int)s->st,
             dl, d);
      } else if (s->got_msg) {
        r->n_bad++;
        note(r, "%s of worker %d: %d messages received", SESS_WHAT(c), g, s->got_msg);
      } else {
        r->n_ok++;
        if (s->st != want) r->n_ended++;
      }
      c->lat[r->n_lat++] = now - s->t_close;
      if (now > r->t_last) r->t_last = now;
    } else if (c->s_phase != SESS_TEARDOWN) {
      sess_fail(c, 0, "%s of worker %d ended before the close: status %d %.*s", SESS_WHAT(c),
                g, (int)s->st, dl, d);
    }
    /* SESSION BARRIERS AND GATES: no answer will come (the failure is counted above) */
    if (s->bar == BS_DUE) {
      s->bar = BS_NONE;
      c->s_done++;
    } else if (s->bar == BS_SENT) {
      sess_bar_settle(c, s);
    }
  } else { /* SK_CLOSE */
    s->closing = 0;
  }
  sess_release(c, s);
}

/* Handle events until s_done reaches want; -1 at the deadline. */
static int sess_wait(client_t *c, int want, int64_t deadline_ns)
{
  while (c->s_done < want) {
    grpc_event ev = cq_wait(c, deadline_ns);
    if (ev.type != GRPC_OP_COMPLETE) return -1;
    if ((intptr_t)ev.tag < 0) sess_event(c, (intptr_t)ev.tag, ev.success);
    /* else an op left by an earlier phase's bounded cancel_all: ignored */
  }
  return 0;
}

/* Cancel every open stream and wait (bounded) until each is released. */
static void sess_teardown(client_t *c)
{
  if (!c->sess) return;
  c->s_phase = SESS_TEARDOWN;
  c->s_res = NULL;
  for (int w = 0; w < c->n; w++)
    if (c->sess[w].call && !c->sess[w].ended) grpc_call_cancel(c->sess[w].call, NULL);
  int64_t dl = rm__now_ns() + 10 * 1000000000LL;
  while (c->n_live > 0) {
    grpc_event ev = cq_wait(c, dl);
    if (ev.type != GRPC_OP_COMPLETE) break;
    if ((intptr_t)ev.tag < 0) sess_event(c, (intptr_t)ev.tag, ev.success);
  }
  c->s_phase = 0;
  if (c->n_live > 0) { /* batches still write into it: keep it (the process ends) */
    fprintf(stderr, "rm-coord-load: client: %d %s not released\n", c->n_live, SESS_WHATS(c));
    return;
  }
  free(c->sess);
  c->sess = NULL;
}

static void phase_open(client_t *c, load_res_t *res)
{
  if (c->sess) { /* opened already: the parent opens once */
    res->n_err++;
    note(res, "%s opened twice", SESS_WHATS(c));
    return;
  }
  c->sess = calloc((size_t)c->n, sizeof *c->sess);
  if (!c->sess) abort();
  c->s_phase = LOAD_CMD_OPEN;
  c->s_res = res;
  c->s_done = 0;
  res->t_first = rm__now_ns();
  for (int w = 0; w < c->n; w++) sess_open(c, w);
  if (sess_wait(c, c->n, rm__now_ns() + (int64_t)(c->cfg->timeout_s + 30) * 1000000000LL)) {
    note(res, "%d %s opens not sent past the deadline", c->n - c->s_done, SESS_WHAT(c));
    res->n_err += c->n - c->s_done;
  }
  c->s_phase = 0;
  c->s_res = NULL;
}

/* SESSION BARRIERS AND GATES: every worker's arrival at "round-k" (kind
 * LOAD_CMD_BARRIER; LOAD_CMD_GATE: its gate call at step k) as a message on
 * its stream at once (after the send in flight, if any), its answer a
 * message on the stream; the checks of phase_barrier (phase_gate), latency
 * send start -> answer, each answer due T + 10 s after the phase starts (a
 * unary call's deadline). */
static void phase_owed_sess(client_t *c, int kind, int k, load_res_t *res)
{
  char name[32];
  snprintf(name, sizeof name, "round-%d", k);
  c->s_bar_name = name;
  c->s_round = k;
  c->s_phase = kind;
  c->s_res = res;
  c->s_done = 0;
  res->t_first = rm__now_ns();
  for (int w = 0; w < c->n; w++) {
    sess_t *s = &c->sess[w];
    if (!s->call || s->ended) {
      res->n_err++;
      c->s_done++;
      note(res, "worker %d round %d: %s not sent: its Session ended", c->cfg->lo + w, k,
           OWED(c));
    } else if (s->bar != BS_NONE) { /* cannot be: every round settles or resets */
      res->n_err++;
      c->s_done++;
      note(res, "worker %d round %d: a %s still outstanding", c->cfg->lo + w, k, OWED(c));
    } else if (s->sending) { /* one send in flight per stream: after it */
      s->bar = BS_DUE;
    } else {
      sess_bar_send(c, w);
    }
  }
  if (sess_wait(c, c->n, res->t_first + (int64_t)(c->cfg->timeout_s + 10) * 1000000000LL)) {
    int left = c->n - c->s_done;
    note(res, "%d %s answers not received on the Sessions past the deadline", left,
         c->s_phase == LOAD_CMD_GATE ? "gate" : "barrier");
    res->n_err += left;
    for (int w = 0; w < c->n; w++) /* a late answer is then a failure (sess_fail) */
      c->sess[w].bar = BS_NONE;
  }
  c->s_phase = 0;
  c->s_res = NULL;
  c->s_bar_name = NULL;
}

/* Beat s (0 <= s < S * n) is worker s % n's (s / n)-th, as in
 * phase_heartbeat, as a message on its stream. */
static void phase_heartbeat_sess(client_t *c, int secs, load_res_t *res)
{
  int total = secs * c->n, sched = 0;
  int64_t t0 = rm__now_ns();
  int64_t end = t0 + (int64_t)(secs + HEARTBEAT_DEADLINE_S + 5) * 1000000000LL;
  res->t_first = t0;
  c->s_phase = LOAD_CMD_HEARTBEAT;
  c->s_res = res;
  c->s_done = 0;
  while (c->s_done < total) {
    int64_t now = rm__now_ns(), due = 0;
    while (sched < total) {
      int w = sched % c->n, g = c->cfg->lo + w;
      due = beat_due(c, t0, sched);
      if (due > now) break;
      sess_t *s = &c->sess[w];
      if (!s->call || s->ended) {
        res->n_err++;
        c->s_done++;
        note(res, "worker %d: heartbeat not sent: its Session ended", g);
      } else if (s->sending) { /* one send in flight per stream: after it */
        s->backlog++;
        res->n_late++;
      } else {
        sess_send(c, w, 0, (uint32_t)(sched / c->n));
      }
      sched++;
    }
    grpc_event ev = cq_wait(c, sched < total ? due : end);
    if (ev.type == GRPC_OP_COMPLETE) {
      if ((intptr_t)ev.tag < 0) sess_event(c, (intptr_t)ev.tag, ev.success);
    } else if (sched == total) {
      note(res, "%d heartbeat messages not sent past the deadline", total - c->s_done);
      res->n_err += total - c->s_done;
      for (int w = 0; w < c->n; w++) {
        c->sess[w].backlog = 0;
        if (c->sess[w].sending) grpc_call_cancel(c->sess[w].call, NULL);
      }
      break;
    }
  }
  c->s_phase = 0;
  c->s_res = NULL;
}

/* Half-close every open stream (WATCHES: cancel every Watch); each must
 * end OK (WATCHES: CANCELLED) with no message. */
static void phase_close(client_t *c, load_res_t *res)
{
  int want = 0;
  /* what came before the close counts as before it (sess_fail) */
  c->s_res = res;
  for (;;) {
    grpc_event ev = cq_wait(c, 0);
    if (ev.type != GRPC_OP_COMPLETE) break;
    if ((intptr_t)ev.tag < 0) sess_event(c, (intptr_t)ev.tag, ev.success);
  }
  c->s_phase = LOAD_CMD_CLOSE;
  c->s_done = 0;
  res->t_first = rm__now_ns();
  for (int w = 0; c->sess && w < c->n; w++) {
    sess_t *s = &c->sess[w];
    if (!s->call || s->ended) continue; /* counted where it ended */
    if (s->sending) {                   /* cannot be: every send completed */
      res->n_err++;
      note(res, "%s of worker %d: a send in flight at the close", SESS_WHAT(c), c->cfg->lo + w);
      grpc_call_cancel(s->call, NULL);
      continue;
    }
    if (WATCH(c)) { /* the worker library's close: its transport cancels it */
      s->closed = 1;
      s->t_close = rm__now_ns();
      grpc_call_cancel(s->call, NULL);
      want++;
      continue;
    }
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    s->closed = 1;
    s->closing = 1;
    s->t_close = rm__now_ns();
    sess_batch(s, &op, 1, w, SK_CLOSE);
    want++;
  }
  if (sess_wait(c, want, rm__now_ns() + (int64_t)(HEARTBEAT_DEADLINE_S + 20) * 1000000000LL)) {
    note(res, "%d %s without a status %d s after the close", want - c->s_done, SESS_WHATS(c),
         HEARTBEAT_DEADLINE_S + 20);
    res->n_err += want - c->s_done;
  }
  sess_teardown(c); /* waits for the last receive batches; frees the streams */
  c->s_res = NULL;
}

/* ---- the process ---- */

static int client_open(client_t *c, const load_client_cfg_t *cfg)
{
  memset(c, 0, sizeof *c);
  c->cfg = cfg;
  c->n = cfg->hi - cfg->lo;
  c->cq = grpc_completion_queue_create_for_next(NULL);
  c->ch = calloc((size_t)cfg->channels, sizeof *c->ch);
  /* Each channel its own subchannel pool: its own TCP connection. */
  grpc_arg args[3] = {
      {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = -1}},
      {GRPC_ARG_INTEGER, GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, {.integer = 1}},
      /* GZIP: compressed answers reach us as sent */
      {GRPC_ARG_INTEGER, GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION, {.integer = 0}},
  };
  grpc_channel_args ca = {3, args};
  grpc_channel_credentials *cr = grpc_insecure_credentials_create();
  for (int i = 0; i < cfg->channels; i++) c->ch[i] = grpc_channel_create(cfg->addr, cr, &ca);
  grpc_channel_credentials_release(cr);
  c->wid = calloc((size_t)c->n, sizeof *c->wid);
  c->rank_of = malloc((size_t)c->n * sizeof *c->rank_of);
  for (int i = 0; c->rank_of && i < c->n; i++) c->rank_of[i] = UINT32_MAX; /* none yet */
  return c->ch && c->wid && c->rank_of ? 0 : -1;
}

/* Room for the largest phase: n ops / latencies, or S * n for heartbeats. */
static int client_size(client_t *c, int calls)
{
  free(c->ops);
  free(c->lat);
  c->ops = calloc((size_t)calls, sizeof *c->ops);
  c->lat = calloc((size_t)calls, sizeof *c->lat);
  return c->ops && c->lat ? 0 : -1;
}

static void client_close(client_t *c)
{
  sess_teardown(c);
  relay_teardown(c);
  for (int i = 0; i < c->cfg->channels; i++) grpc_channel_destroy(c->ch[i]);
  grpc_completion_queue_shutdown(c->cq);
  while (grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(c->cq);
  if (c->ref) protobuf_c_message_free_unpacked(&c->ref->base, NULL);
  free(c->ref_wid);
  free(c->ref_peers);
  free(c->ref_z);
  gate_refs_clear(c);
  free(c->ch);
  free(c->ops);
  free(c->lat);
  free(c->wid);
  free(c->rank_of);
}

static int64_t self_hwm_kb(void)
{
  char buf[256];
  int64_t kb = 0;
  FILE *f = fopen("/proc/self/status", "r");
  while (f && fgets(buf, sizeof buf, f))
    if (!strncmp(buf, "VmHWM:", 6)) kb = atoll(buf + 6);
  if (f) fclose(f);
  return kb;
}

static int send_result(client_t *c, load_res_t *res)
{
  sess_fold(c, res);
  res->hwm_kb = self_hwm_kb();
  int fd = c->cfg->res_fd;
  if (load_write_full(fd, res, sizeof *res) ||
      load_write_full(fd, c->lat, (size_t)res->n_lat * sizeof *c->lat) ||
      load_write_full(fd, c->rank_of, (size_t)res->n_ranks * sizeof *c->rank_of))
    return -1;
  return 0;
}

int load_client_main(const load_client_cfg_t *cfg)
{
  client_t c;
  load_cmd_t cmd;
  int rc = 1;
  grpc_init();
  if (client_open(&c, cfg) || client_size(&c, c.n)) goto out;
  while (!load_read_full(cfg->cmd_fd, &cmd, sizeof cmd, 0)) {
    load_res_t res;
    memset(&res, 0, sizeof res);
    res.kind = cmd.kind;
    if (cmd.kind == LOAD_CMD_QUIT) {
      rc = 0;
      break;
    } else if (cmd.kind == LOAD_CMD_JOIN) {
      if (cfg->relay) relay_phase_join(&c, &res); /* RELAYS */
      else phase_join(&c, &res);
    } else if (c.rl && (cmd.kind == LOAD_CMD_BARRIER || cmd.kind == LOAD_CMD_GATE)) {
      relay_phase_owed(&c, cmd.kind, cmd.arg, &res); /* RELAYS */
    } else if (c.rl && cmd.kind == LOAD_CMD_HEARTBEAT) {
      if (client_size(&c, cmd.arg * c.n)) goto out;
      relay_phase_heartbeat(&c, cmd.arg, &res);
    } else if (cfg->relay && cmd.kind == LOAD_CMD_OPEN) {
      relay_phase_open(&c, &res);
    } else if (c.rl && cmd.kind == LOAD_CMD_CLOSE) {
      relay_phase_close(&c, &res);
    } else if (cmd.kind == LOAD_CMD_BARRIER) {
      if (c.sess && !WATCH(&c)) phase_owed_sess(&c, LOAD_CMD_BARRIER, cmd.arg, &res);
      else phase_barrier(&c, cmd.arg, &res);
    } else if (cmd.kind == LOAD_CMD_GATE) {
      if (c.sess && !WATCH(&c)) phase_owed_sess(&c, LOAD_CMD_GATE, cmd.arg, &res);
      else phase_gate(&c, cmd.arg, &res);
    } else if (cmd.kind == LOAD_CMD_HEARTBEAT) {
      if (client_size(&c, cmd.arg * c.n)) goto out;
      if (c.sess && !WATCH(&c)) phase_heartbeat_sess(&c, cmd.arg, &res);
      else phase_heartbeat(&c, cmd.arg, &res);
    } else if (cmd.kind == LOAD_CMD_OPEN) {
      phase_open(&c, &res);
    } else if (cmd.kind == LOAD_CMD_CLOSE) {
      phase_close(&c, &res);
    }
    if (send_result(&c, &res)) break;
    if (cmd.kind == LOAD_CMD_HEARTBEAT && client_size(&c, c.n)) goto out;
  }
out:
  client_close(&c);
  grpc_shutdown();
  return rc;
}

int load_submit_main(const char *addr, int n, int timeout_s, int gate, int fd)
{
  load_client_cfg_t cfg = {.addr = addr, .world = n, .lo = 0, .hi = 1, .channels = 1,
                           .timeout_s = timeout_s, .cmd_fd = -1, .res_fd = -1};
  client_t c;
  int rc = 1;
  grpc_init();
  if (client_open(&c, &cfg) || client_size(&c, 1)) goto out;
  Ringmaster__V1__JobSpec spec = RINGMASTER__V1__JOB_SPEC__INIT;
  Ringmaster__V1__SubmitJobRequest q = RINGMASTER__V1__SUBMIT_JOB_REQUEST__INIT;
  spec.name = "load";
  spec.world_size = (uint32_t)n;
  spec.launcher = "none";
  spec.heartbeat_timeout_ms = 3600000;
  spec.barrier_timeout_ms = (uint32_t)timeout_s * 1000u;
  if (gate) { /* StepGate steps: the first N - 1 arrivals make a step */
    spec.straggler_policy = "backup";
    spec.backup_workers = 1;
  }
  q.spec = &spec;
  call_start(&c, 0, 0, "/ringmaster.v1.Jobs/SubmitJob", &q.base, timeout_s, 1);
  if (next_done(&c, rm__now_ns() + (int64_t)(timeout_s + 5) * 1000000000LL) != 0) goto out;
  if (c.ops[0].st != GRPC_STATUS_OK) {
    fprintf(stderr, "rm-coord-load: SubmitJob: status %d %.*s\n", (int)c.ops[0].st,
            (int)GRPC_SLICE_LENGTH(c.ops[0].details),
            (const char *)GRPC_SLICE_START_PTR(c.ops[0].details));
    call_finish(&c.ops[0]);
    goto out;
  }
  Ringmaster__V1__SubmitJobResponse *r =
      (void *)unpack(c.ops[0].recv, &ringmaster__v1__submit_job_response__descriptor);
  call_finish(&c.ops[0]);
  if (r && r->job) {
    char line[160];
    int len = snprintf(line, sizeof line, "%llu %s\n", (unsigned long long)r->job->id,
                       r->job->token);
    rc = len > 0 && len < (int)sizeof line && !load_write_full(fd, line, (size_t)len) ? 0 : 1;
  }
  if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
out:
  client_close(&c);
  grpc_shutdown();
  return rc;
}

/* ---- pipes ---- */

int load_read_full(int fd, void *buf, size_t len, int64_t deadline_ns)
{
  uint8_t *p = buf;
  while (len > 0) {
    if (deadline_ns) {
      struct pollfd pf = {.fd = fd, .events = POLLIN};
      int ms = rm__ms_left(deadline_ns);
      int k = poll(&pf, 1, ms);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) return -1;
      if (k == 0) {
        errno = ETIMEDOUT;
        return -1;
      }
    }
    ssize_t r = read(fd, p, len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) {
      errno = EPIPE;
      return -1;
    }
    p += r;
    len -= (size_t)r;
  }
  return 0;
}

int load_write_full(int fd, const void *buf, size_t len)
{
  const uint8_t *p = buf;
  while (len > 0) {
    ssize_t r = write(fd, p, len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    p += r;
    len -= (size_t)r;
  }
  return 0;
}
