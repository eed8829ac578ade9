/*
 * server.c - the gRPC C-core server: K completion queues (SHARDS below),
 * each drained by its own polling thread that never blocks (it only takes
 * c->mu for short critical sections, one per GROUP of completions).
 *
 * Call lifecycle (tags are call pointers with the op kind in the low 2 bits):
 *
 *   T_REQUEST  a request completed: post the next one of its kind on the
 *              same queue at once (gather). REGISTERED METHODS: a known
 *              method's call arrives with its request message read
 *              (payload), and is dispatched in this group; the generic
 *              request (always one per queue, so methods we do not know
 *              still reach us and get UNIMPLEMENTED) starts RECV_MESSAGE
 *              (T_RECV) for a known one instead (only with registration
 *              off, RINGMASTER_COORD_REGISTERED=0).
 *   T_RECV     (generic path) the message is read: dispatch as below.
 *   dispatch   parse with protobuf-c (INVALID_ARGUMENT when it fails), then
 *              rm__rpc_dispatch under the lock: it answers (rm__reply) or
 *              parks the call. Messages over max_message_bytes are refused by
 *              the core itself with RESOURCE_EXHAUSTED. A call still open
 *              after dispatch (parked, or a Watch stream) starts its
 *              RECV_CLOSE_ON_SERVER (T_CLOSE) now, under the same lock.
 *   T_SEND     a reply batch finished (for Watch streams: send the next
 *              event). Answers are queued by rm__reply and started by
 *              rm__rpc_out_flush after COMMIT, from whichever thread holds the
 *              lock: grpc_call_start_batch is thread-safe, and its completion
 *              lands on the call's queue, which is how other threads wake it.
 *   T_CLOSE    the call is over; cancelled = the client went away: unpark
 *              (a Join cancelled while forming frees its slot).
 *
 * REGISTERED METHODS. Every method of rm__methods is registered
 * with GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER (all take one request
 * message, Watch included), each with REQUESTS_PER_METHOD requests posted
 * per queue: a call costs one completion and one pass through our thread
 * fewer than the generic request + RECV_MESSAGE. Nothing else changes: the
 * same handlers, the same deadline-free calls (DEADLINES), and a message
 * over the limit still ends RESOURCE_EXHAUSTED (the core's message-size
 * filter fails the call; its payload reaches us as NULL, and our own
 * answer to it is never seen). A request is reposted as soon as its
 * completion is taken from the queue, before the group is handled, so a
 * burst of calls keeps completing while the group is gathered.
 *
 * GROUP COMMIT. A thread takes the completion it waited for and,
 * when it is busy, every completion already queued (zero deadline), up to
 * group_max (RINGMASTER_COORD_GROUP, default 128, read once), and handles
 * them as one section. Busy: the wait for the first one took under 50 us
 * (completions were queued or came at once) and it is not the end of one
 * of our own sends (those come right after every answer): a zero-deadline
 * poll that finds nothing costs an epoll_wait and gRPC's poll work, which
 * doubled the polls per heartbeat at 4,096 a second when every group
 * ended in one. The section: parse the payloads without the lock, then rm__lock (BEGIN;
 * rm__lock_ro when none of them writes a row: heartbeats, finished sends,
 * normal closes), every handler in queue order, rm__commit (COMMIT, then
 * every answer they queued, commit.c), then free requests and drop call
 * references. A join wave of N used to be N transactions (about 10 WAL
 * page writes each); a group of G arrivals is one. Why it stays correct
 * after a coordinator SIGKILL: an answer is still queued under the lock
 * and started only by rm__rpc_out_flush after the COMMIT that made every row
 * of its group durable, so nothing acknowledged is lost; a SIGKILL before
 * that COMMIT loses the group's rows and no client has been answered for
 * any of them (each retries, as after a SIGKILL before a single-call
 * COMMIT). Handlers see the same state they would one call at a time (the
 * lock is held across the group, so no other thread interleaves; within
 * the group they run in queue order). The cost: an answer of a group's
 * first call waits for the rest of the group (bounded by group_max
 * handlers, ~1 ms), and the lock is held that long (REST callers wait at
 * most as long).
 *
 * GZIP ANSWERS. A formed JoinResponse carries all N peers,
 * so a join wave sends O(N^2) bytes (16,384 workers: 9.4 GB, most of the
 * wave); a decided StepGateResponse carries N member bytes, so every step
 * of a gated job sends O(N^2) bytes too (16,384: 268 MB a step). A client
 * that says it decodes gzip (JoinRequest / StepGateRequest.accept_gzip:
 * the C-core server cannot read grpc-accept-encoding) gets such an answer
 * as one gzip member (rm__reply_tail_gz): the per-call head in a stored
 * block (a StepGate answer's head is empty), the shared part (the
 * generation's peer list and spec; the step's decided answer) deflated
 * ONCE (the blob's zslice,
 * made by the first such answer, shared by reference by every later one)
 * and an 8-byte trailer (format and proof of validity: gz_answer.c). It is
 * sent as a compressed byte buffer (grpc_raw_compressed_byte_buffer_create:
 * the core flags it compressed and does not compress it again) with
 * grpc-internal-encoding-request: gzip in the initial metadata (the
 * compression filter turns it into grpc-encoding: gzip). Every other
 * answer, and every answer to a client that did not ask, is exactly what
 * it was. Durability is unchanged: it is queued and sent like any answer.
 * zlib level 1 (GZ_LEVEL), deflated under the lock once per generation:
 * 16,384 peers of rm-coord-load (571 KB) give 109 KB in 3 ms (level 6: 95
 * KB in 22 ms); a table with random IPv4 addresses, ports and
 * shared-memory nonces (1.4 MB) gives 2.1x in 19 ms (level 6: 2.2x in 70
 * ms); 65,536 such peers: 83 ms. A StepGate answer of 16,384 members
 * (N - 1 ones) deflates to about 50 bytes.
 *
 * NAPS. When heartbeats arrive at a rate that brings NAP_CALLS
 * (4) or more per nap_us (8,000 a second at the default nap: the heartbeats
 * of the last NAP_WINDOW_NS, 20 ms, over its length; two that happen to
 * come close together do not count), after a group smaller than NAP_BELOW
 * with no other new call in it, and only when the thread gathered the queue
 * empty (GROUP COMMIT's busy case: a thread that was kept off the CPU
 * while it waited may have a backlog it has not seen; napping on it cut
 * 65,536 workers' heartbeats to a trickle), the thread sleeps nap_us
 * (RINGMASTER_COORD_NAP_US, default 500, 0 = off, at most 100,000) before
 * it polls again, so the heartbeats of that time are read and handled as one group: one wake-up
 * and one section for them all instead of one each (measured on a quiet
 * machine: 35 -> 24 us of coordinator CPU a heartbeat at 16,384 a second;
 * on a busy one the thread's wake-ups batch them by themselves and naps
 * change little). Slower heartbeats are never delayed (on a quiet machine
 * napping whenever two came close together cost 43 -> 62 us a heartbeat at
 * 4,096 a second and 74 -> 90 us at 1,024: a nap that gathers one or two
 * costs more than the wake-ups it saves), nor is a group with any other
 * call (Join, Barrier, StepGate:
 * waits that others wait on; napping between a barrier round's arrivals
 * added 8-14 ms to its p50 at 1,024 workers); a heartbeat waits at most
 * nap_us more, far inside any heartbeat deadline.
 *
 * CLOSE WITH THE ANSWER. A call answered before it was parked
 * (Heartbeat, ReportStep, every error, the last arrival of a barrier) has
 * nothing to unpark, so its RECV_CLOSE_ON_SERVER rides in its final batch
 * (rm__rpc_out_flush, close_started = 0): one batch and one completion fewer
 * per unary call, and no outstanding tag while it is handled. Its on_close
 * would have been a no-op: an answered call is unlinked (rm__reply), so
 * rm__park_drop returns at once, and answered is already 1. A call parked
 * or streaming has its T_CLOSE started before the lock is released, i.e.
 * before any other thread can answer it, so whoever answers it later sees
 * close_started = 1 and sends a batch without it, as before; a client that
 * went away before that still completes T_CLOSE (cancelled = 1) at once.
 *
 * A parked BARRIER call defers its close the same way (close_deferred):
 * its park holds one more reference instead of a T_CLOSE batch, and its
 * answer's batch carries the RECV_CLOSE. A barrier round then leaves no
 * outstanding tag per waiter (the debug tag walk of SHARDS was ~30% of a
 * round with one queue), whatever the number of queues. What a barrier
 * park's T_CLOSE did is only unlinking it (rm__park_drop: nothing else for
 * RM__PARK_BARRIER); a waiter whose client went away now stays linked
 * until its barrier closes, and its answer's batch fails at once. Every
 * BARRIER park is answered: RELEASED or BROKEN (its deadline, a member
 * lost, a new generation, the job ending, rm__server_stop), barrier.c,
 * and a park is unlinked only by its answer or its close (model.c), so the
 * extra reference always comes back (on_send). The cost: a cancelled
 * waiter's memory lives until its barrier's deadline at the latest, and
 * its wait counts in barrier_wait_seconds. Join, Watch and StepGate parks
 * keep their T_CLOSE: their cancellation frees a slot or declares a
 * worker lost (recovery.c detection source 2).
 *
 * SESSIONS. Session (service.proto) is the one bidirectional
 * stream: each agent keeps one open for its life in the job, and its
 * heartbeats are messages on it, not calls: no call set up, answered and
 * torn down per heartbeat (measured: a unary heartbeat ~19-23 us of
 * coordinator CPU at 16,384 a second, a stream message ~11 us with naps),
 * and one parked call per worker instead of a session Watch plus a
 * heartbeat call. Its first message arrives with the call (REGISTERED
 * METHODS; or by T_RECV on the generic path); each message is parsed in
 * step 1 (session_in: EV_SESSION, or EV_SESSION_END when the client
 * half-closed or the call broke) and handled under the lock
 * (on_session_msg -> rpc.c on_session), which starts the next
 * RECV_MESSAGE while the call is open. The pending RECV_MESSAGE is also
 * how its end is seen, so a session holds ONE outstanding tag (no T_CLOSE:
 * the debug tag walk of SHARDS is per outstanding tag). A message may
 * carry a barrier arrival: it waits in the call's second park (wpark,
 * linked only while the call is open, so a RECV or the dispatch holds the
 * call's memory; claim_answer and on_session_end unlink it) and is
 * answered by a message of the stream (rm__park_answer: the released
 * barrier's shared packed answer framed as SessionResponse.barrier, not
 * copied). A step-gate call waits the same way in the same park (one of
 * the two at a time, rpc.c on_session: then a RM__PARK_GATE in j->parked,
 * which the gate's walks answer like any parked StepGate), answered as
 * SessionResponse.gate: a decided step's answer is packed once per step
 * in the stream's form (the ranks out of the step, not a mask: no gzip on
 * a stream) and shared; where the unary
 * call would get FAILED_PRECONDITION (rm__rpc_answer_stale) the stream ends
 * with it. gRPC allows one message in flight per call, so a stream's
 * batches queue on the call (later[], in the order rm__rpc_out_flush saw them,
 * all after their COMMIT) and start one at a time (session_next: from
 * rm__rpc_out_flush, and from on_send when the one before completed); the
 * final one (rm__reply: a failed check, the job ended, shutdown) is last.
 * When the client ends it
 * (on_session_end), the final OK goes with RECV_CLOSE_ON_SERVER, and the
 * park stays linked until that batch completes: on_send then drops it with
 * the batch's `cancelled`, so a process that died (its transport cancelled
 * the call) declares its worker lost (rm__park_drop), one that
 * half-closed does not. That close and a barrier arrival (its barrier's
 * row when it closes it) are the session events that write rows
 * (ev_writes), and a gate call (it may write an event, as the unary
 * call may). Naps
 * count Session messages as heartbeats, but for barrier arrivals and gate
 * calls (a round's arrivals are never napped between). Each open session keeps one tag
 * outstanding on its queue, so every completion there walks them (SHARDS:
 * the debug cq_check_tag), as each session Watch's T_CLOSE did before
 * (rm-coord-load, 4,096 workers, unary barriers: barrier-phase CPU 0.69 s
 * without streams, 0.85 s with a session each; with the barriers on the
 * sessions 0.63 s: no parked call, fewer completions). Sessions on a queue and thread of
 * their own were measured and left out: 22.5 -> 35.2 us a heartbeat (a
 * futex wake-up per completion polled on the other thread), 26 -> 30 KB
 * of RSS per worker, and no shorter barrier rounds.
 *
 * RELAYS (relay.c, the design there). A Relay call is a stream
 * like a Session (streaming, the same RECV loop and end), but its
 * messages carry many lanes: each lane is an rm__call_t without a
 * grpc_call (`up` its relay), handled by the Session's or Join's own
 * handler. rm__rpc_out_flush hands a lane's answers and the relay's own end to
 * relay.c (rm__relay_out), which batches them into the relay's next
 * message after the flush (rm__relay_kick_all); on_send of a relay
 * continues its batches (rm__relay_on_send).
 *
 * A call's memory is reference counted: one reference per outstanding batch;
 * the last completion frees it. Queue 0's thread times out every 100 ms to
 * run the tick (heartbeat deadlines, barrier deadlines, long-poll ends), and
 * at the earliest step-gate deadline to run the gates' timers (TIMED
 * DEADLINES, core/step_gate.c); the
 * other threads only wait for events (with a 1 s deadline, re-armed).
 *
 * SHARDS. The distribution's libgrpc is built without NDEBUG:
 * every completion walks its queue's list of outstanding tags
 * (cq_check_tag), and each parked call kept one (its RECV_CLOSE), so with
 * one queue a barrier round of N calls cost O(N^2). K queues
 * (RINGMASTER_COORD_CQS, 1..64, read once; default 1) make each list about
 * N/K long. Which queue a call lives on: the one its request was posted on
 * (grpc_server_request_call with that queue as both the call's queue and
 * the notification queue; gRPC hands an incoming call to the queue of its
 * connection's pollset when that queue has a request waiting, else to the
 * next that has), and every later batch of the call (RECV, CLOSE, SEND)
 * completes there, so one thread sees all of a call's events in the order
 * gRPC delivers them, exactly as with one queue. Threads: one per queue;
 * queue 0's also runs the tick and receives the shutdown notification.
 * Locking is unchanged: every handler runs under c->mu (rm__lock /
 * rm__commit); the threads share nothing else but the atomic call
 * reference counts and s->stopping (written under c->mu before shutdown
 * starts, read without it: a stale read only posts one more request, which
 * shutdown fails with ok = 0).
 * Why the default is 1: once parked barrier calls hold no tag at all
 * (CLOSE WITH THE ANSWER above), the walk left is the join wave's (about
 * 6% of it; the rest is the kernel copying O(N^2) answer bytes), and on a
 * 2-core machine every extra thread costs a futex wake-up per completion
 * that lands on a queue other than the poller's: measured with
 * rm-coord-load (16,384 workers), K = 2..8 did not shorten barriers or
 * joins beyond the noise, doubled the coordinator's CPU per heartbeat and
 * added 4 to 10 KiB of RSS per worker (one malloc arena per thread).
 * Re-measured once every worker held a Session (each keeps one tag
 * outstanding, so the walk is back: N tags per completion), 16,384
 * workers, K = 1 -> 2, 2 runs each: barrier p99 477 / 426 -> 327 / 401
 * ms, StepGate p99 375 / 561 -> 326 / 309 ms, but a heartbeat 13.5 /
 * 13.1 -> 17.3 / 18.3 us (22% -> 29% of a core at 16,384 a second, past
 * the 25% aim) and +0.3 KiB per worker (4,096: +1.7 to +2.2 KiB); the
 * default stays 1. On a machine with more cores than the client load
 * needs, try K = 2..8.
 *
 * DEADLINES. The server's deadline filter is off (GRPC_ARG_ENABLE_DEADLINE_
 * CHECKS = 0, RINGMASTER_COORD_DEADLINE_FILTER=1 turns it back on): it arms
 * one gRPC timer per call, and the same debug build walks a 1009-bucket
 * hash of all timers on every add and cancel (O(N/1009) per call, ~10% of
 * the coordinator at 16,384 workers). Nothing depends on it: a client
 * cancels its own call at its deadline (RST_STREAM: T_CLOSE with
 * cancelled = 1 for a parked Join, Watch or StepGate, as before; a parked
 * barrier waits for its answer, above), a client that dies closes its
 * connection (the same), and every call the coordinator parks has its own deadline in the
 * core (Join wait_ms, barrier and gate timeouts, heartbeat expiry), run by
 * the tick. A client whose deadline passed never reads a late answer.
 *
 * DURABILITY. Nothing here changes what is durable or when an answer
 * leaves: every answer is still queued under c->mu and started by
 * rm__rpc_out_flush after COMMIT (core/commit.c), whatever queue or batch
 * carries it, so a coordinator SIGKILL loses no acknowledged event.
 *
 * Shutdown (rm__server_stop): answer parked calls UNAVAILABLE,
 * grpc_server_shutdown_and_notify (on queue 0), wait a 1 s grace period,
 * then grpc_server_cancel_all_calls, wait for the notification, destroy the
 * server, then shut every queue down; each thread drains its queue until
 * GRPC_QUEUE_SHUTDOWN and is joined; then the queues are destroyed.
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/compression.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "addr.h"
#include "rpc/gz_answer.h"
#include "rpc/rpc_int.h"
#include "rpc/server_int.h"
#include "rm_alloc.h"
#include "rm_channel.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_pbwire.h"
#include "rm_param.h"
#include "rm_token.h"

enum { T_REQUEST = 0, T_RECV = 1, T_CLOSE = 2, T_SEND = 3 };
#define TICK_NS (100LL * 1000000LL)
#define NCQ_MAX 64
#define GROUP_MAX 1024
#define NAP_BELOW 16 /* NAPS: only after a group smaller than this */
#define NAP_CALLS 4  /* NAPS: only when a nap gathers this many heartbeats */
#define NAP_WINDOW_NS (20 * 1000000LL) /* NAPS: the rate is measured over this */
#define DRAIN_SLEPT_NS (50 * 1000) /* GROUP COMMIT: a wait this short = busy */
#define REQUESTS_PER_METHOD 16
#define GZ_LEVEL 1 /* zlib level of the shared tail (GZIP ANSWERS) */
#define SESSION_PUSH_BELOW 4 /* SESSIONS: a push only when fewer are queued */

RM_PARAM(server_cqs, "RINGMASTER_COORD_CQS", 1)
RM_PARAM(deadline_filter, "RINGMASTER_COORD_DEADLINE_FILTER", 0)
RM_PARAM(server_registered, "RINGMASTER_COORD_REGISTERED", 1)
RM_PARAM(server_group, "RINGMASTER_COORD_GROUP", 128)
RM_PARAM(server_nap_us, "RINGMASTER_COORD_NAP_US", 500)


/* One shard: a queue and the thread that drains it. */
typedef struct rm__shard {
  rm_coord_t *c;
  grpc_completion_queue *cq;
  pthread_t thread;
  int index;
  int started;
} rm__shard_t;

struct rm__server {
  grpc_server *server;
  rm__shard_t sh[NCQ_MAX];
  int ncq;
  void *reg[RM__M_COUNT]; /* REGISTERED METHODS; NULL: the generic path */
  int group_max;          /* GROUP COMMIT: completions per section */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int shutdown_done;
  int stopping;
};

/* Outbox entries whose room outlives the flush that emptied it; a group
 * that answered more (a released barrier of thousands) frees its room. */
#define OUTBOX_KEEP 256

static int shutdown_tag;
/* GZIP ANSWERS: the call's encoding, asked of gRPC's compression
 * filter in the initial metadata (it sets grpc-encoding and leaves a
 * message sent as a compressed byte buffer as it is). */
static grpc_metadata gzip_md;

/* A call's gRPC part (only for a call whose k->up is NULL: a lane has
 * none, RELAYS). */
#define G(k) rm__gcall(k)

static void *tag_of(rm__call_t *k, int kind) { return (char *)k + kind; }

rm__park_t *rm__call_park(rm__call_t *call) { return &call->park; }

void rm__call_unref(rm__call_t *k)
{
  if (__atomic_sub_fetch(&k->refs, 1, __ATOMIC_ACQ_REL)) return;
  rm__call_t *up = k->up; /* RELAYS: a lane holds a reference of its relay */
  if (!up) { /* a gRPC call's state; a lane has none */
    rm__gcall_t *g = G(k);
    if (g->call) grpc_call_unref(g->call);
    grpc_call_details_destroy(&g->details);
    grpc_metadata_array_destroy(&g->md);
    if (g->recv) grpc_byte_buffer_destroy(g->recv);
    if (g->send_bb) grpc_byte_buffer_destroy(g->send_bb);
    if (g->has_status_slice) grpc_slice_unref(g->status_slice);
    free(g->later);
  }
  if (k->mux) rm__relay_free(k);
  free(k->wpark);
  free(k); /* the gcall itself when it is one: k is its first member */
  if (up) rm__call_unref(up);
}

/* The next request of queue `cq` for `method` (REGISTERED METHODS), or
 * the generic one (method < 0: a method we do not know, or every method
 * when registration is off): the call it brings lives on that queue. */
static void post_request(rm_coord_t *c, int cq, int method)
{
  rm__gcall_t *g = rm__xcalloc(1, sizeof *g);
  rm__call_t *k = &g->k;
  rm__server_t *s = c->srv;
  grpc_completion_queue *q = s->sh[cq].cq;
  grpc_call_error rc;
  k->c = c;
  k->refs = 1;
  k->method = method;
  k->cq = cq;
  grpc_call_details_init(&g->details);
  grpc_metadata_array_init(&g->md);
  if (method >= 0) {
    g->registered = 1;
    rc = grpc_server_request_registered_call(s->server, s->reg[method], &g->call,
                                             &g->deadline, &g->md, &g->recv, q, q,
                                             tag_of(k, T_REQUEST));
  } else {
    rc = grpc_server_request_call(s->server, &g->call, &g->details, &g->md, q, q,
                                  tag_of(k, T_REQUEST));
  }
  if (rc != GRPC_CALL_OK) {
    RM_ERROR("grpc_server_request_call failed (%d)", (int)rc);
    rm__call_unref(k);
  }
}

/* Every request a queue keeps posted: the generic one and, with
 * REGISTERED METHODS, REQUESTS_PER_METHOD per method. */
static void post_requests(rm_coord_t *c, int cq)
{
  post_request(c, cq, -1);
  for (int m = 0; m < RM__M_COUNT; m++)
    for (int i = 0; c->srv->reg[m] && i < REQUESTS_PER_METHOD; i++) post_request(c, cq, m);
}

static grpc_slice packed(const ProtobufCMessage *m)
{
  size_t len = protobuf_c_message_get_packed_size(m);
  if (!len) return grpc_empty_slice();
  uint8_t *buf = rm__xmalloc(len);
  protobuf_c_message_pack(m, buf);
  return grpc_slice_new(buf, len, free);
}

static grpc_byte_buffer *pack(const ProtobufCMessage *m)
{
  grpc_slice s = packed(m);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

void rm__out_push(rm_coord_t *c, rm__call_t *k, int code,
                     const char *details, grpc_byte_buffer *bb)
{
  if (k->up) { /* RELAYS: into its relay's pending entries (relay.c PENDING) */
    rm__relay_push(c, k, code, details, bb);
    if (code < 0) return;
    details = NULL, bb = NULL; /* an end: its entry here retires the lane at the flush */
  }
  if (c->nout == c->capout) {
    c->capout = c->capout ? 2 * c->capout : 16;
    c->out = rm__xrealloc(c->out, c->capout * sizeof *c->out);
  }
  rm__out_t *o = &c->out[c->nout++];
  o->call = k;
  o->code = code;
  o->details = details ? rm__xstrdup(details) : NULL;
  o->bb = bb;
  __atomic_add_fetch(&k->refs, 1, __ATOMIC_ACQ_REL); /* held by the outbox */
}

/* The call's one final answer starts here: 0 if it already has one. */
static int claim_answer(rm__call_t *k)
{
  if (k->answered) return 0;
  k->answered = 1;
  rm__park_unlink(&k->park);
  if (k->wpark) rm__park_unlink(k->wpark); /* SESSIONS: a barrier or step gate it waited on */
  return 1;
}

int rm__call_claim(rm__call_t *k) { return claim_answer(k); }

void rm__reply(rm_coord_t *c, rm__call_t *k, int code, const char *details,
               const ProtobufCMessage *resp)
{
  if (!claim_answer(k)) return;
  if (code != GRPC_STATUS_OK) c->ctr.grpc_errors_total++;
  rm__out_push(c, k, code, details ? details : "",
           code == GRPC_STATUS_OK && resp ? pack(resp) : NULL);
}

struct rm__blob {
  rm__blob_release_fn release; /* first: rm__blob_release (model.h) */
  grpc_slice slice;
  /* GZIP ANSWERS: slice deflated, made by the first gzip answer */
  int gz_state;       /* 0 not yet, 1 made, -1 failed (answers go plain) */
  grpc_slice zslice;  /* the raw deflate stream, shared */
  rm__gz_tail_t gz;   /* its length and CRC (gz.z is owned by zslice) */
};

rm__blob_t *rm__blob_pack(const ProtobufCMessage *m)
{
  rm__blob_t *b = rm__xcalloc(1, sizeof *b);
  b->release = rm__blob_unref;
  b->slice = packed(m);
  return b;
}

void rm__blob_unref(rm__blob_t *b)
{
  if (!b) return;
  grpc_slice_unref(b->slice);
  if (b->gz_state == 1) grpc_slice_unref(b->zslice);
  free(b);
}

/* The blob's deflate stream, made once (under c->mu, like every use of a
 * blob); 0 when it cannot be had. */
static int blob_gz(rm__blob_t *b)
{
  if (!b->gz_state) {
    int64_t t0 = rm__now_ns();
    b->gz_state = rm__gz_tail_make(GRPC_SLICE_START_PTR(b->slice),
                                   GRPC_SLICE_LENGTH(b->slice), GZ_LEVEL, &b->gz)
                      ? -1 : 1;
    if (b->gz_state == 1) {
      b->zslice = grpc_slice_new(b->gz.z, b->gz.zlen, free);
      b->gz.z = NULL;
      RM_DEBUG("shared answer tail: %zu bytes deflated to %zu in %.1f ms",
               b->gz.len, b->gz.zlen, (double)(rm__now_ns() - t0) / 1e6);
    } else {
      RM_WARN("deflating a shared answer tail failed: its answers go uncompressed");
    }
  }
  return b->gz_state == 1;
}

/* A relay lane's answer is never gzip: it travels inside a RelayResponse
 * (relay.c), whose Join answers share their tail by reference instead. */
void rm__call_accept_gzip(rm__call_t *k, int yes)
{
  if (!k->up) G(k)->gzip_ok = yes;
}

/* One message: head's bytes (taken; an empty slice: none) then body's
 * (referenced, not copied: a shared answer). */
static grpc_byte_buffer *head_then(grpc_slice head, grpc_slice body)
{
  grpc_slice parts[2] = {head, grpc_slice_ref(body)};
  int skip = GRPC_SLICE_LENGTH(head) == 0;
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(parts + skip, 2 - (size_t)skip);
  grpc_slice_unref(parts[0]);
  grpc_slice_unref(parts[1]);
  return bb;
}

void rm__reply_tail(rm_coord_t *c, rm__call_t *k, const ProtobufCMessage *head,
                    rm__blob_t *tail)
{
  if (!claim_answer(k)) return;
  rm__out_push(c, k, GRPC_STATUS_OK, "", head_then(packed(head), tail->slice));
}

/* GZIP ANSWERS: the answer as one gzip member (gz_answer.c): the
 * head in a stored block, the shared deflated tail, an 8-byte trailer, sent
 * with grpc-encoding gzip (gzip, rm__rpc_out_flush). Plain rm__reply_tail
 * for a relay lane, when the client did not ask, when its initial
 * metadata is already out (the encoding rides in it), or when the tail
 * cannot be deflated. */
void rm__reply_tail_gz(rm_coord_t *c, rm__call_t *k, const ProtobufCMessage *head,
                       rm__blob_t *tail)
{
  size_t hlen = protobuf_c_message_get_packed_size(head);
  if (k->up || !G(k)->gzip_ok || G(k)->md_sent || hlen > RM__GZ_HEAD_MAX || !blob_gz(tail)) {
    rm__reply_tail(c, k, head, tail);
    return;
  }
  if (!claim_answer(k)) return;
  uint8_t *buf = rm__xmalloc(RM__GZ_HEAD_OVERHEAD + hlen), trailer[RM__GZ_TRAILER];
  protobuf_c_message_pack(head, buf + RM__GZ_HEAD_OVERHEAD);
  rm__gz_head(buf, hlen);
  rm__gz_trailer(trailer, buf + RM__GZ_HEAD_OVERHEAD, hlen, &tail->gz);
  grpc_slice parts[3] = {grpc_slice_new(buf, RM__GZ_HEAD_OVERHEAD + hlen, free),
                         grpc_slice_ref(tail->zslice),
                         grpc_slice_from_copied_buffer((const char *)trailer, sizeof trailer)};
  grpc_byte_buffer *bb = grpc_raw_compressed_byte_buffer_create(parts, 3, GRPC_COMPRESS_GZIP);
  for (int i = 0; i < 3; i++) grpc_slice_unref(parts[i]);
  G(k)->gzip = 1;
  rm__out_push(c, k, GRPC_STATUS_OK, "", bb);
}

/* SESSIONS: SessionResponse.barrier's, .gate's, .gate_pushed's and
 * .generation's field numbers (rm__server_start). */
static int session_barrier_field, session_gate_field, session_pushed_field,
    session_generation_field;

static int session_field(const char *name)
{
  return (int)protobuf_c_message_descriptor_get_field_by_name(
             &ringmaster__v1__session_response__descriptor, name)->id;
}

rm__park_t *rm__call_wpark(rm__call_t *k) { return k->wpark; }
rm__park_t *rm__call_wpark_make(rm__call_t *k)
{
  if (!k->wpark) k->wpark = rm__xcalloc(1, sizeof *k->wpark);
  return k->wpark;
}
int rm__park_on_stream(const rm__park_t *p)
{
  return p == p->call->wpark;
}

/* A SessionResponse: (pushed_gen > 0: generation = pushed_gen and
 * gate_pushed = true, then) body's bytes as field `field`, framed by its
 * key and length (body referenced, not copied). */
static grpc_byte_buffer *framed(uint64_t pushed_gen, int field, grpc_slice body)
{
  uint8_t head[40];
  size_t n = 0;
  if (pushed_gen) {
    n = rm__pb_varint(head, n, (uint64_t)session_generation_field << 3); /* wire type varint */
    n = rm__pb_varint(head, n, pushed_gen);
    n = rm__pb_varint(head, n, (uint64_t)session_pushed_field << 3);
    n = rm__pb_varint(head, n, 1);
  }
  n = rm__pb_varint(head, n, (uint64_t)field << 3 | 2); /* length-delimited */
  n = rm__pb_varint(head, n, GRPC_SLICE_LENGTH(body));
  return head_then(grpc_slice_from_copied_buffer((const char *)head, n), body);
}

/* The call's own park ends the call with the answer; a Session's barrier
 * or gate park (SESSIONS) gets it as a message of the stream: a
 * SessionResponse whose `barrier` or `gate` is the answer's bytes, framed
 * by its key and length, so a shared answer is not copied. */
void rm__park_answer(rm_coord_t *c, rm__park_t *p, const ProtobufCMessage *resp,
                     rm__blob_t *shared)
{
  rm__call_t *k = p->call;
  if (!rm__park_on_stream(p)) {
    if (!claim_answer(k)) return;
    rm__out_push(c, k, GRPC_STATUS_OK, "",
             shared ? head_then(grpc_empty_slice(), shared->slice) : pack(resp));
    return;
  }
  rm__park_unlink(p);
  if (k->answered) return; /* the stream is over */
  grpc_slice body = shared ? grpc_slice_ref(shared->slice) : packed(resp);
  rm__out_push(c, k, -1, NULL,
           framed(0, p->kind == RM__PARK_BARRIER ? session_barrier_field : session_gate_field,
                  body));
  grpc_slice_unref(body);
}

void rm__session_push(rm_coord_t *c, rm__call_t *k, uint64_t gen, rm__blob_t *shared)
{
  if (k->answered || (k->up ? !rm__relay_room(k) : G(k)->nlater >= SESSION_PUSH_BELOW))
    return;
  rm__out_push(c, k, -1, NULL, framed(gen, session_gate_field, shared->slice));
}

void rm__session_push_msg(rm_coord_t *c, rm__call_t *k, const ProtobufCMessage *m)
{
  if (k->answered || (k->up ? !rm__relay_room(k) : G(k)->nlater >= SESSION_PUSH_BELOW))
    return;
  rm__out_push(c, k, -1, NULL, pack(m));
}

void rm__stream_send(rm_coord_t *c, rm__call_t *k, const ProtobufCMessage *msg)
{
  if (k->answered) return;
  k->park.watch_sending = 1;
  rm__out_push(c, k, -1, NULL, pack(msg));
}

/* Start one queued answer's batch (the outbox reference becomes the
 * batch's); frees its details. */
void rm__start_out(rm__call_t *k, rm__out_t *o)
{
  rm__gcall_t *g = G(k);
  grpc_op ops[4];
  size_t n = 0;
  memset(ops, 0, sizeof ops);
  if (!g->md_sent) {
    if (g->gzip) { /* GZIP ANSWERS: grpc-encoding gzip */
      ops[n].data.send_initial_metadata.count = 1;
      ops[n].data.send_initial_metadata.metadata = &gzip_md;
    }
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    g->md_sent = 1;
  }
  if (o->bb) {
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = o->bb;
    g->send_bb = o->bb;
  }
  if (o->code >= 0) {
    g->status_slice = grpc_slice_from_copied_string(o->details);
    g->has_status_slice = 1;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)o->code;
    ops[n++].data.send_status_from_server.status_details = &g->status_slice;
    if (!g->close_started) { /* CLOSE WITH THE ANSWER */
      g->close_started = 1;
      ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
      ops[n++].data.recv_close_on_server.cancelled = &k->cancelled;
    }
  }
  if (grpc_call_start_batch(g->call, ops, n, tag_of(k, T_SEND), NULL) != GRPC_CALL_OK) {
    RM_WARN("grpc_call_start_batch (reply) failed");
    g->sending = 0;
    if (g->close_deferred) { /* no batch will give the park's back */
      g->close_deferred = 0;
      rm__call_unref(k);
    }
    rm__call_unref(k);
  }
  free(o->details);
}

/* SESSIONS: a stream carries one batch at a time (gRPC allows one message
 * in flight), in the order they were queued: the next one starts when
 * none is in flight (after COMMIT: every queued one came through
 * rm__rpc_out_flush; or from on_send, after the one before it). */
static void session_next(rm__call_t *k)
{
  rm__gcall_t *g = G(k);
  if (g->sending || !g->nlater) return;
  rm__out_t o = g->later[0];
  memmove(&g->later[0], &g->later[1], (size_t)--g->nlater * sizeof o);
  g->sending = 1;
  if (o.code >= 0) g->final_started = 1;
  rm__start_out(k, &o);
}

/* The section was rolled back (core/commit.c): nothing it queued may go
 * out as it is. A final answer becomes the storage failure; a stream's
 * message (a Watch event, a Session push) ends the stream with it instead,
 * once (a stream that already has its final queued just loses the
 * message), so the client reconnects as after a coordinator restart and
 * reads only what is stored. Relay lanes' entries went to their relay's
 * pending entries when queued: rm__relay_fail ends each lane they name
 * with the same failure (relay.c ROLLED BACK); a lane's entry here (its
 * end's retirement) and a relay's own end stay as they are. */
void rm__rpc_out_fail(rm_coord_t *c, int full, const char *why)
{
  size_t k = 0;
  int code = full ? RM__GRPC_RESOURCE_EXHAUSTED : RM__GRPC_UNAVAILABLE;
  char msg[256];
  snprintf(msg, sizeof msg, "storage: %s (%s); nothing of this call was stored, retry later",
           full ? "the coordinator's disk is full" : "the coordinator cannot write its database",
           why && *why ? why : "write failed");
  for (size_t i = 0; i < c->nout; i++) {
    rm__out_t o = c->out[i];
    rm__call_t *call = o.call;
    if (call->up || call->method == RM__M_RELAY) {
      c->out[k++] = o;
      continue;
    }
    if (o.code < 0 && !claim_answer(call)) { /* its final is queued: drop the message */
      if (o.bb) grpc_byte_buffer_destroy(o.bb);
      free(o.details);
      rm__call_unref(call);
      continue;
    }
    if (o.bb) grpc_byte_buffer_destroy(o.bb);
    free(o.details);
    o.bb = NULL;
    o.code = code;
    o.details = rm__xstrdup(msg);
    c->ctr.grpc_errors_total++;
    c->out[k++] = o;
  }
  c->nout = k;
  rm__relay_fail(c, code, msg);
}

void rm__rpc_out_flush(rm_coord_t *c)
{
  for (size_t i = 0; i < c->nout; i++) {
    rm__out_t *o = &c->out[i];
    rm__call_t *k = o->call;
    if (k->up || k->method == RM__M_RELAY) { /* RELAYS: a lane's, a relay's own */
      rm__relay_out(c, o);
      continue;
    }
    if (!k->streaming) {
      rm__start_out(k, o);
      continue;
    }
    if (G(k)->nlater == SESSION_QUEUE) { /* never: pushes stop at SESSION_PUSH_BELOW,
                                        * then a barrier, a gate, the end */
      RM_ERROR("session: %d answers queued behind one in flight; one dropped",
               SESSION_QUEUE);
      if (o->bb) grpc_byte_buffer_destroy(o->bb);
      free(o->details);
      rm__call_unref(k);
      continue;
    }
    if (!G(k)->later) G(k)->later = rm__xmalloc(SESSION_QUEUE * sizeof *G(k)->later);
    G(k)->later[G(k)->nlater++] = *o; /* with the outbox's reference */
    session_next(k);
  }
  c->nout = 0;
  if (c->capout > OUTBOX_KEEP) { /* a fan-out's room goes with it (RSS) */
    free(c->out);
    c->out = NULL;
    c->capout = 0;
  }
  rm__relay_kick_all(c);
}

/* ---- events on the queue ---- */
static int find_method(const grpc_slice *m)
{
  for (int i = 0; i < RM__M_COUNT; i++) {
    size_t len = strlen(rm__methods[i].path);
    if (GRPC_SLICE_LENGTH(*m) == len &&
        !memcmp(GRPC_SLICE_START_PTR(*m), rm__methods[i].path, len))
      return i;
  }
  return -1;
}

static void start_ops(rm__call_t *k, grpc_op *ops, size_t n, int kind)
{
  __atomic_add_fetch(&k->refs, 1, __ATOMIC_ACQ_REL);
  if (grpc_call_start_batch(G(k)->call, ops, n, tag_of(k, kind), NULL) !=
      GRPC_CALL_OK) {
    RM_WARN("grpc_call_start_batch failed");
    rm__call_unref(k);
  }
}

/* A call left open by its dispatch (parked, streaming) starts T_CLOSE
 * (CLOSE WITH THE ANSWER). Under c->mu. */
static void start_close(rm__call_t *k)
{
  grpc_op op;
  if (k->answered || G(k)->close_started || G(k)->close_deferred) return;
  if (k->park.next && k->park.kind == RM__PARK_BARRIER) {
    G(k)->close_deferred = 1; /* the park's reference, back in on_send */
    __atomic_add_fetch(&k->refs, 1, __ATOMIC_ACQ_REL);
    return;
  }
  G(k)->close_started = 1;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &k->cancelled;
  start_ops(k, &op, 1, T_CLOSE);
}

/* Which token the call carried: RM__AUTH_ADMIN (the API token, or none is
 * configured, or a worker method, which checks its job's token itself),
 * RM__AUTH_READ (the read token), 0. */
static int admin_ok(rm_coord_t *c, rm__call_t *k)
{
  const char *tok = c->opt.admin_token, *rd = c->opt.read_token;
  if (!tok || !rm__methods[k->method].admin) return RM__AUTH_ADMIN;
  for (size_t i = 0; i < G(k)->md.count; i++) {
    const grpc_metadata *m = &G(k)->md.metadata[i];
    const char *v = (const char *)GRPC_SLICE_START_PTR(m->value);
    size_t vl = GRPC_SLICE_LENGTH(m->value);
    if (grpc_slice_str_cmp(m->key, "authorization") != 0 || vl <= 7 ||
        strncasecmp(v, "Bearer ", 7))
      continue;
    if (rm__ct_memeq(tok, v + 7, vl - 7)) return RM__AUTH_ADMIN;
    if (rd && *rd && rm__ct_memeq(rd, v + 7, vl - 7)) return RM__AUTH_READ;
  }
  return 0;
}

/* ---- GROUP COMMIT: a section per group of completions ----
 * Each completion is handled in three steps: before the lock (repost a
 * request, parse a payload), under the group's one rm__lock ... rm__commit
 * (the handler), and after COMMIT (free the request, drop references: a
 * call's memory outlives every completion of the group that names it). */
typedef struct {
  rm__call_t *k;
  int kind;                 /* T_*, or EV_* below */
  int ok;
  ProtobufCMessage *msg;    /* EV_DISPATCH: the parsed request, or NULL */
  int unrefs;               /* references to drop after COMMIT */
} ev_t;

enum { EV_SKIP = 8, EV_DISPATCH, EV_UNKNOWN, EV_SESSION, EV_SESSION_END };

static ProtobufCMessage *parse(rm__call_t *k)
{
  ProtobufCMessage *msg = NULL;
  grpc_byte_buffer_reader rd;
  if (G(k)->recv && grpc_byte_buffer_reader_init(&rd, G(k)->recv)) {
    grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
    msg = protobuf_c_message_unpack(rm__methods[k->method].req, NULL, GRPC_SLICE_LENGTH(s),
                                    GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    grpc_byte_buffer_reader_destroy(&rd);
  }
  return msg;
}

/* SESSIONS: a message of the stream (parsed; its buffer freed, so the
 * next RECV_MESSAGE can take its place), or its end (the client
 * half-closed, or the call broke). */
static void session_in(rm__call_t *k, ev_t *e, int ok)
{
  if (ok && G(k)->recv) {
    e->kind = EV_SESSION;
    e->msg = parse(k);
  } else {
    e->kind = EV_SESSION_END;
  }
  if (G(k)->recv) grpc_byte_buffer_destroy(G(k)->recv);
  G(k)->recv = NULL;
}

/* Step 1, no lock (the request was reposted by gather). */
static void ev_prepare(rm_coord_t *c, ev_t *e)
{
  rm__call_t *k = e->k;
  rm__gcall_t *g = G(k); /* an event: a gRPC call */
  e->unrefs = 1; /* the completed batch's (or request's) reference */
  if (e->kind == T_REQUEST) {
    if (!e->ok) { /* server shutting down */
      e->kind = EV_SKIP;
      return;
    }
    if (!g->registered) k->method = find_method(&g->details.method);
    k->streaming = k->method == RM__M_SESSION || k->method == RM__M_RELAY;
    if (k->method < 0) {
      e->kind = EV_UNKNOWN;
    } else if (g->registered && k->streaming) { /* its first message came with it */
      session_in(k, e, 1);
    } else if (g->registered) { /* the payload came with the call */
      e->kind = EV_DISPATCH;
      e->msg = parse(k);
    } else { /* generic: read the message first (T_RECV) */
      grpc_op op;
      memset(&op, 0, sizeof op);
      op.op = GRPC_OP_RECV_MESSAGE;
      op.data.recv_message.recv_message = &g->recv;
      start_ops(k, &op, 1, T_RECV);
      e->kind = EV_SKIP;
    }
  } else if (e->kind == T_RECV && k->streaming) {
    session_in(k, e, e->ok);
  } else if (e->kind == T_RECV) {
    e->kind = EV_DISPATCH;
    if (e->ok) e->msg = parse(k);
    else if (g->recv) { /* no message after all */
      grpc_byte_buffer_destroy(g->recv);
      g->recv = NULL;
    }
  }
}

/* Does the group write rows? (A Heartbeat, a Session heartbeat, a
 * finished send and a normal close write none: the mutex without BEGIN,
 * commit.c.) */
/* A parsed Session message that asks for an answer (a barrier arrival or
 * a gate call), not a heartbeat alone; a Relay message that may write rows
 * (rm__relay_writes). */
static int stream_asks(const ev_t *e)
{
  const Ringmaster__V1__SessionRequest *q = (const void *)e->msg;
  if (e->kind == EV_SESSION && e->k->method == RM__M_RELAY) /* RELAYS */
    return rm__relay_writes((const void *)e->msg);
  return e->kind == EV_SESSION && q && (q->barrier || q->gate);
}

static int ev_writes(const ev_t *e)
{
  /* a Session message with a barrier arrival may close the barrier (its
   * row); one with a gate call may write an event (straggler_auto), as the
   * unary StepGate may */
  if (e->kind == EV_SESSION) return stream_asks(e);
  return (e->kind == EV_DISPATCH && e->k->method != RM__M_HEARTBEAT) ||
         ((e->kind == T_CLOSE || (e->kind == T_SEND && e->k->streaming)) &&
          e->k->cancelled);
}

static void on_dispatch(rm_coord_t *c, ev_t *e)
{
  rm__call_t *k = e->k;
  const rm__method_t *m = &rm__methods[k->method];
  c->ctr.grpc_calls_total++;
  if (!G(k)->recv) {
    rm__reply(c, k, GRPC_STATUS_INVALID_ARGUMENT, "no request message", NULL);
  } else if (!e->msg) {
    char why[160];
    snprintf(why, sizeof why, "malformed %s message", m->req->name);
    rm__reply(c, k, GRPC_STATUS_INVALID_ARGUMENT, why, NULL);
  } else if (c->closing) {
    rm__reply(c, k, GRPC_STATUS_UNAVAILABLE, "coordinator shutting down", NULL);
  } else {
    rm__rpc_dispatch(c, k, k->method, e->msg, admin_ok(c, k));
  }
  start_close(k); /* only when still open */
}

/* SESSIONS: one message, under the lock. Writes no row (a heartbeat's
 * checks, or linking the park). The next RECV_MESSAGE starts here, while
 * the call is open. */
static void on_session_msg(rm_coord_t *c, ev_t *e)
{
  rm__call_t *k = e->k;
  grpc_op op;
  if (k->answered) return; /* ended by an answer already */
  if (k->method == RM__M_RELAY) { /* RELAYS: its lanes' messages */
    rm__relay_msg(c, k, (const void *)e->msg);
  } else {
    if (k->park.kind == RM__PARK_SESSION) c->ctr.session_messages_total++;
    else c->ctr.grpc_calls_total++; /* its opening message */
    if (!e->msg) {
      rm__reply(c, k, GRPC_STATUS_INVALID_ARGUMENT, "malformed ringmaster.v1.SessionRequest "
                "message on a Session", NULL);
    } else if (c->closing) {
      rm__reply(c, k, GRPC_STATUS_UNAVAILABLE, "coordinator shutting down", NULL);
    } else {
      rm__rpc_dispatch(c, k, k->method, e->msg, admin_ok(c, k));
    }
  }
  if (k->answered) return;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &G(k)->recv;
  start_ops(k, &op, 1, T_RECV);
}

/* SESSIONS: the stream ended from the client's side (half-close: it
 * leaves; or the call broke). Its final status OK goes with its
 * RECV_CLOSE_ON_SERVER; the park stays linked until that batch says
 * whether the client went away (on_send), so a broken session still
 * declares its worker lost. */
static void on_session_end(rm_coord_t *c, ev_t *e)
{
  rm__call_t *k = e->k;
  if (k->method == RM__M_RELAY) {
    rm__relay_end(c, k);
    return;
  }
  if (k->answered) return;
  k->answered = 1;
  if (k->wpark) rm__park_unlink(k->wpark); /* a barrier or step gate it waited on: nobody to tell */
  rm__out_push(c, k, GRPC_STATUS_OK, "", NULL);
}

/* Writes no row (a Watch reads the next event), but for a broken
 * Session's close (SESSIONS). */
static void on_send(rm_coord_t *c, ev_t *e)
{
  rm__call_t *k = e->k;
  rm__gcall_t *g = G(k); /* an event: a gRPC call */
  if (g->send_bb) grpc_byte_buffer_destroy(g->send_bb);
  g->send_bb = NULL;
  if (g->has_status_slice) grpc_slice_unref(g->status_slice);
  g->has_status_slice = 0;
  if (k->park.kind == RM__PARK_WATCH && !k->answered) {
    k->park.watch_sending = 0;
    rm__watch_next(c, &k->park);
  }
  if (g->close_deferred && k->answered) { /* the park's reference */
    g->close_deferred = 0;
    e->unrefs++;
  }
  /* SESSIONS: the next queued batch; after the final one (its park is
   * still linked when the client ended it, on_session_end), the close */
  if (k->method == RM__M_RELAY) {
    rm__relay_on_send(c, k);
  } else if (k->streaming) {
    g->sending = 0;
    if (g->final_started) rm__park_drop(c, &k->park, k->cancelled);
    else session_next(k);
  }
}

/* A normal close only unparks; a cancelled call may declare its worker
 * lost (rows). */
static void on_close(rm_coord_t *c, ev_t *e)
{
  rm__call_t *k = e->k;
  rm__park_drop(c, &k->park, k->cancelled);
  if (k->cancelled) k->answered = 1;
}

/* Step 2, under the group's lock. */
static void ev_locked(rm_coord_t *c, ev_t *e)
{
  switch (e->kind) {
  case EV_DISPATCH: on_dispatch(c, e); break;
  case EV_UNKNOWN:
    c->ctr.grpc_calls_total++;
    rm__reply(c, e->k, GRPC_STATUS_UNIMPLEMENTED, "unknown method", NULL);
    break;
  case T_SEND: on_send(c, e); break;
  case T_CLOSE: on_close(c, e); break;
  case EV_SESSION: on_session_msg(c, e); break;
  case EV_SESSION_END: on_session_end(c, e); break;
  default: break;
  }
}

/* One group: its completions in the order the queue gave them, every
 * handler inside one section, so their rows share one COMMIT and their
 * answers leave after it (DURABILITY). */
/* NAPS: is a prepared completion a heartbeat (a Heartbeat call, a
 * Session message without a barrier arrival or gate call), another new
 * call or message (1 in *other), or neither? */
static int ev_heartbeat(const ev_t *e, int *other)
{
  int hb = (e->kind == EV_DISPATCH && e->k->method == RM__M_HEARTBEAT) ||
           (e->kind == EV_SESSION && e->msg && !stream_asks(e));
  *other |= !hb && (e->kind == EV_DISPATCH || e->kind == EV_SESSION || e->kind == EV_UNKNOWN);
  return hb;
}

/* Returns the group's heartbeats; *others: it had other new calls. */
static int run_group(rm_coord_t *c, ev_t *ev, int n, int *others)
{
  int writes = 0, locked = 0, calls = 0;
  for (int i = 0; i < n; i++) {
    ev_prepare(c, &ev[i]);
    writes |= ev_writes(&ev[i]);
    locked |= ev[i].kind != EV_SKIP;
    calls += ev_heartbeat(&ev[i], others);
  }
  if (locked) {
    if (writes) rm__lock(c);
    else rm__lock_ro(c);
    for (int i = 0; i < n; i++) ev_locked(c, &ev[i]);
    rm__commit(c);
  }
  for (int i = 0; i < n; i++) {
    if (ev[i].msg) protobuf_c_message_free_unpacked(ev[i].msg, NULL);
    while (ev[i].unrefs-- > 0) rm__call_unref(ev[i].k);
  }
  return calls;
}

static void tick(rm_coord_t *c)
{
  rm__lock(c);
  int64_t now = rm__now_ns(); /* after the lock: a stall holding it is a gap */
  rm__liveness_check(c, now);
  for (size_t i = 0; i < c->njobs; i++) rm__job_tick(c, c->jobs[i], now);
  rm__job_evict(c, rm__wall_ms());
  rm__commit(c);
}

/* TIMED DEADLINES (core/step_gate.c): the gates whose deadline came. */
static void gate_timers(rm_coord_t *c)
{
  rm__lock(c);
  rm__gate_timers(c, rm__now_ns());
  rm__commit(c);
}

static void on_shutdown_tag(rm__server_t *s)
{
  pthread_mutex_lock(&s->mu);
  s->shutdown_done = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Appends a completion to the group; 1 if it was the shutdown tag. A
 * request is reposted at once, so the next call waiting for one completes
 * while this group is still being gathered. */
static int gather(rm_coord_t *c, const grpc_event *e, ev_t *ev, int *n)
{
  rm__server_t *s = c->srv;
  if (e->tag == &shutdown_tag) {
    on_shutdown_tag(s);
    return 1;
  }
  rm__call_t *k = (rm__call_t *)((uintptr_t)e->tag & ~(uintptr_t)3);
  if (((uintptr_t)e->tag & 3) == T_REQUEST && e->success &&
      !__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE))
    post_request(c, k->cq, G(k)->registered ? k->method : -1);
  ev[*n].k = k;
  ev[*n].kind = (int)((uintptr_t)e->tag & 3);
  ev[*n].ok = e->success;
  ev[*n].msg = NULL;
  (*n)++;
  return 0;
}

/* One shard's thread; shard 0 also runs the tick (SHARDS). GROUP COMMIT:
 * after the completion it waited for, it takes those already queued
 * (zero deadline) up to group_max, and handles them as one group. */
static void *cq_thread(void *arg)
{
  rm__shard_t *sh = arg;
  rm_coord_t *c = sh->c;
  rm__server_t *s = c->srv;
  int ticks = sh->index == 0, done = 0;
  int64_t next_tick = rm__now_ns() + (ticks ? TICK_NS : 10 * TICK_NS);
  ev_t *ev = rm__xcalloc((size_t)s->group_max, sizeof *ev);
  rm__log_set_tag("coord");
  int64_t nap_us = rm__param_server_nap_us();
  int64_t nap_ns = (nap_us < 0 ? 0 : nap_us > 100000 ? 100000 : nap_us) * 1000;
  int64_t win_ns = 0;         /* NAPS: start of the window of heartbeats */
  int win_calls = 0, win_rate = 0; /* heartbeats in it; the last one's verdict */
  while (!done) {
    int n = 0, calls = 0;
    /* queue 0 also wakes for the earliest gate deadline (TIMED DEADLINES) */
    int64_t gate_wake = ticks ? __atomic_load_n(&c->gate_wake_ns, __ATOMIC_ACQUIRE) : 0;
    int64_t wake = gate_wake && gate_wake < next_tick ? gate_wake : next_tick;
    int64_t left = wake - rm__now_ns();
    gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                   gpr_time_from_nanos(left > 0 ? left : 0, GPR_TIMESPAN));
    int64_t t0 = rm__now_ns();
    grpc_event e = grpc_completion_queue_next(sh->cq, dl, NULL);
    int64_t slept = rm__now_ns() - t0;
    t0 += slept;
    if (e.type == GRPC_QUEUE_SHUTDOWN) break;
    if (e.type == GRPC_OP_COMPLETE) gather(c, &e, ev, &n);
    /* GROUP COMMIT: gather more only when busy (see the header) */
    int more = n && slept < DRAIN_SLEPT_NS && ev[0].kind != T_SEND, emptied = 0;
    while (more && n < s->group_max) {
      e = grpc_completion_queue_next(sh->cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
      if (e.type == GRPC_QUEUE_SHUTDOWN) done = 1;
      if (e.type == GRPC_QUEUE_TIMEOUT) emptied = 1;
      if (e.type != GRPC_OP_COMPLETE) break;
      gather(c, &e, ev, &n);
    }
    int others = 0; /* new calls other than heartbeats */
    if (n) calls = run_group(c, ev, n, &others);
    if (calls && !others) { /* NAPS: heartbeats that bring NAP_CALLS a nap */
      if (t0 - win_ns >= NAP_WINDOW_NS) { /* the last window's rate decides */
        win_rate = (int64_t)win_calls * nap_ns >= NAP_CALLS * (t0 - win_ns);
        win_ns = t0;
        win_calls = 0;
      }
      win_calls += calls;
      /* only after a drain that found the queue empty: a thread that was
       * kept off the CPU while it waited has a backlog it has not seen */
      int nap = emptied && nap_ns && n < NAP_BELOW && win_rate &&
                nap_ns < wake - rm__now_ns();
      if (nap) {
        struct timespec ts = {0, (long)nap_ns};
        nanosleep(&ts, NULL);
      }
    }
    if (rm__now_ns() >= next_tick) {
      if (ticks && !__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE)) tick(c);
      next_tick = rm__now_ns() + (ticks ? TICK_NS : 10 * TICK_NS);
    } else if (ticks) {
      gate_wake = __atomic_load_n(&c->gate_wake_ns, __ATOMIC_ACQUIRE);
      if (gate_wake && rm__now_ns() >= gate_wake &&
          !__atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE))
        gate_timers(c);
    }
  }
  free(ev);
  return NULL;
}

/* ---- start / stop ---- */
static grpc_server_credentials *make_creds(rm_coord_t *c, char *err, size_t errlen)
{
  const rm_coord_options_t *o = &c->opt;
  return rm__server_creds_open(o->tls_ca, o->tls_cert, o->tls_key, err, errlen);
}

rm_status_t rm__server_start(rm_coord_t *c, char *err, size_t errlen)
{
  char host[128];
  int port;
  if (rm__addr_split(c->opt.grpc_addr, host, sizeof host, &port)) {
    snprintf(err, errlen, "bad gRPC address '%s' (want host:port)", c->opt.grpc_addr);
    return RM_ERR_INVALID_ARG;
  }
  grpc_init();
  gzip_md.key = grpc_slice_from_static_string(GRPC_COMPRESSION_REQUEST_ALGORITHM_MD_KEY);
  gzip_md.value = grpc_slice_from_static_string("gzip");
  session_barrier_field = session_field("barrier");
  session_gate_field = session_field("gate");
  session_pushed_field = session_field("gate_pushed");
  session_generation_field = session_field("generation");
  rm__server_t *s = rm__xcalloc(1, sizeof *s);
  grpc_arg args[3];
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = c->opt.max_message_bytes;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = GRPC_ARG_ALLOW_REUSEPORT;
  args[1].value.integer = 0;
  args[2].type = GRPC_ARG_INTEGER; /* DEADLINES of the header */
  args[2].key = GRPC_ARG_ENABLE_DEADLINE_CHECKS;
  args[2].value.integer = rm__param_deadline_filter() != 0;
  grpc_channel_args ca = {3, args};
  grpc_server_credentials *creds = make_creds(c, err, errlen);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  int64_t ncq = rm__param_server_cqs();
  s->ncq = ncq < 1 ? 1 : ncq > NCQ_MAX ? NCQ_MAX : (int)ncq;
  s->server = grpc_server_create(&ca, NULL);
  if (rm__param_server_registered()) /* REGISTERED METHODS */
    for (int m = 0; m < RM__M_COUNT; m++)
      s->reg[m] = grpc_server_register_method(s->server, rm__methods[m].path, NULL,
                                              GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
  int64_t group = rm__param_server_group();
  s->group_max = group < 1 ? 1 : group > GROUP_MAX ? GROUP_MAX : (int)group;
  for (int i = 0; i < s->ncq; i++) {
    s->sh[i].c = c;
    s->sh[i].index = i;
    s->sh[i].cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->sh[i].cq, NULL);
  }
  c->srv = s;
  int bound = creds ? grpc_server_add_http2_port(s->server, c->opt.grpc_addr, creds) : 0;
  if (creds) grpc_server_credentials_release(creds);
  if (bound <= 0) {
    if (creds) snprintf(err, errlen, "cannot listen on %s (address in use or "
                        "not local?)", c->opt.grpc_addr);
    grpc_server_destroy(s->server);
    s->server = NULL;
    rm__server_stop(c);
    return RM_ERR_SYSTEM;
  }
  snprintf(c->grpc_addr, sizeof c->grpc_addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d",
           host, bound);
  grpc_server_start(s->server);
  for (int i = 0; i < s->ncq; i++) post_requests(c, i);
  for (int i = 0; i < s->ncq; i++)
    s->sh[i].started = !pthread_create(&s->sh[i].thread, NULL, cq_thread, &s->sh[i]);
  RM_INFO("gRPC server on %s%s (%d completion queues)", c->grpc_addr,
          c->opt.tls_ca ? " (mutual TLS)" : "", s->ncq);
  return RM_OK;
}

static int wait_shutdown(rm__server_t *s, int ms)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&s->mu);
  while (!s->shutdown_done)
    if (pthread_cond_timedwait(&s->cv, &s->mu, &ts)) break;
  int done = s->shutdown_done;
  pthread_mutex_unlock(&s->mu);
  return done;
}

/* Shut every queue down; its thread (or, when none runs, this one)
 * drains it to GRPC_QUEUE_SHUTDOWN; then destroy it. */
static void shards_stop(rm__server_t *s)
{
  for (int i = 0; i < s->ncq; i++) grpc_completion_queue_shutdown(s->sh[i].cq);
  for (int i = 0; i < s->ncq; i++) {
    if (s->sh[i].started) {
      pthread_join(s->sh[i].thread, NULL);
    } else {
      while (grpc_completion_queue_next(s->sh[i].cq,
                                        gpr_inf_future(GPR_CLOCK_REALTIME),
                                        NULL).type != GRPC_QUEUE_SHUTDOWN) {
      }
    }
    grpc_completion_queue_destroy(s->sh[i].cq);
  }
}

void rm__server_stop(rm_coord_t *c)
{
  rm__server_t *s = c->srv;
  if (!s) return;
  if (s->server) {
    rm__lock(c);
    __atomic_store_n(&s->stopping, 1, __ATOMIC_RELEASE);
    for (size_t i = 0; i < c->njobs; i++) {
      rm__job_t *j = c->jobs[i];
      while (j->parked.next != &j->parked)
        rm__reply(c, j->parked.next->call, GRPC_STATUS_UNAVAILABLE,
                  "coordinator shutting down", NULL);
    }
    rm__relay_stop_all(c); /* RELAYS: their lanes were parked above */
    rm__commit(c);
    grpc_server_shutdown_and_notify(s->server, s->sh[0].cq, &shutdown_tag);
    if (!wait_shutdown(s, 1000)) {
      grpc_server_cancel_all_calls(s->server);
      while (!wait_shutdown(s, 1000)) RM_WARN("waiting for gRPC shutdown");
    }
    grpc_server_destroy(s->server);
  }
  shards_stop(s);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);
  c->srv = NULL;
  grpc_shutdown();
}
