/*
 * server.c - the gRPC C-core server's lifecycle: K completion queues (SHARDS below),
 * each drained by its own polling thread that never blocks (it only takes
 * c->mu for short critical sections, one per GROUP of completions).
 *
 * The server is three files: this one owns the server, its queues and
 * threads, the requests kept posted and a call record's memory (created
 * by post_request, freed by the last rm__call_unref); server_group.c
 * handles a group of completions in one section (GROUP COMMIT, the
 * Session receive side, CLOSE WITH THE ANSWER); server_out.c owns the
 * outbox: every answer and stream message queued under the lock and
 * started after COMMIT (DURABILITY, GZIP ANSWERS). They share
 * server_int.h.
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
 * (CLOSE WITH THE ANSWER, server_group.c), the walk left is the join wave's (about
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
 * barrier waits for its answer, server_group.c), a client that dies closes its
 * connection (the same), and every call the coordinator parks has its own deadline in the
 * core (Join wait_ms, barrier and gate timeouts, heartbeat expiry), run by
 * the tick. A client whose deadline passed never reads a late answer.
 *
 * Shutdown (rm__server_stop): answer parked calls UNAVAILABLE,
 * grpc_server_shutdown_and_notify (on queue 0), wait a 1 s grace period,
 * then grpc_server_cancel_all_calls, wait for the notification, destroy the
 * server, then shut every queue down; each thread drains its queue until
 * GRPC_QUEUE_SHUTDOWN and is joined; then the queues are destroyed.
 */
#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "addr.h"
#include "rpc/rpc_int.h"
#include "rpc/server_int.h"
#include "rm_alloc.h"
#include "rm_channel.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"

#define TICK_NS (100LL * 1000000LL)
#define NCQ_MAX 64
#define GROUP_MAX 1024
#define NAP_BELOW 16 /* NAPS: only after a group smaller than this */
#define NAP_CALLS 4  /* NAPS: only when a nap gathers this many heartbeats */
#define NAP_WINDOW_NS (20 * 1000000LL) /* NAPS: the rate is measured over this */
#define DRAIN_SLEPT_NS (50 * 1000) /* GROUP COMMIT: a wait this short = busy */
#define REQUESTS_PER_METHOD 16

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

static int shutdown_tag;

/* A call's gRPC part (only for a call whose k->up is NULL: a lane has
 * none, RELAYS). */
#define G(k) rm__gcall(k)

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
  rm__server_t *s = c->rpc->srv;
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
                                             rm__tag(k, T_REQUEST));
  } else {
    rc = grpc_server_request_call(s->server, &g->call, &g->details, &g->md, q, q,
                                  rm__tag(k, T_REQUEST));
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
    for (int i = 0; c->rpc->srv->reg[m] && i < REQUESTS_PER_METHOD; i++) post_request(c, cq, m);
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
  rm__server_t *s = c->rpc->srv;
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
  rm__server_t *s = c->rpc->srv;
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
    /* GROUP COMMIT: gather more only when busy (server_group.c) */
    int more = n && slept < DRAIN_SLEPT_NS && ev[0].kind != T_SEND, emptied = 0;
    while (more && n < s->group_max) {
      e = grpc_completion_queue_next(sh->cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
      if (e.type == GRPC_QUEUE_SHUTDOWN) done = 1;
      if (e.type == GRPC_QUEUE_TIMEOUT) emptied = 1;
      if (e.type != GRPC_OP_COMPLETE) break;
      gather(c, &e, ev, &n);
    }
    int others = 0; /* new calls other than heartbeats */
    if (n) calls = rm__group_run(c, ev, n, &others);
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
  rm__out_init();
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
  c->rpc->srv = s;
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
  rm__server_t *s = c->rpc->srv;
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
  c->rpc->srv = NULL;
  grpc_shutdown();
}
