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
 * Checking every Join answer in full would cost O(N^2) bytes: how the
 * checks avoid that is in load_join.c.
 *
 * The client is four files sharing load_client_int.h: this one (the
 * calls, the process and its command loop, the pipes), load_join.c (the
 * Join wave and its checks, GZIP), load_unary.c (the unary barrier, gate
 * and heartbeat phases) and load_session.c (SESSIONS, SESSION BARRIERS
 * AND GATES, WATCHES); load_relay.c adds --relay K.
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


#include "load_client_int.h"
#include "ringmaster/v1/messages.pb-c.h"
#include "rm_clock.h"


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
grpc_slice answer_bytes(grpc_byte_buffer *bb)
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

void call_start(client_t *c, int i, int ch, const char *method,
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

void call_finish(op_t *o)
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

void recv_start(grpc_call *call, int first, grpc_metadata_array *md1, grpc_byte_buffer **recv,
                void *tag)
{
  grpc_op ops[2];
  size_t k = 0;
  memset(ops, 0, sizeof ops);
  if (first) {
    ops[k].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[k++].data.recv_initial_metadata.recv_initial_metadata = md1;
  }
  ops[k].op = GRPC_OP_RECV_MESSAGE;
  ops[k++].data.recv_message.recv_message = recv;
  if (grpc_call_start_batch(call, ops, k, tag, NULL) != GRPC_CALL_OK) abort();
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

/* A stream's batch completed (tag < 0): a relay stream's (RELAYS) or a
 * worker's own Session or Watch (SESSIONS). */
static void stream_event(client_t *c, intptr_t tag, int success)
{
  if (c->rl) relay_event(c, tag, success);
  else sess_event(c, tag, success);
}

int stream_wait(client_t *c, int want, int64_t deadline_ns)
{
  while (c->s_done < want) {
    grpc_event ev = cq_wait(c, deadline_ns);
    if (ev.type != GRPC_OP_COMPLETE) return -1;
    if ((intptr_t)ev.tag < 0) stream_event(c, (intptr_t)ev.tag, ev.success);
    /* else an op left by an earlier phase's bounded cancel_all: ignored */
  }
  return 0;
}

/* Next completion of an op, or -1 when none came by deadline_ns.  SESSIONS:
 * stream events that come meanwhile are handled (stream_event). */
int next_done(client_t *c, int64_t deadline_ns)
{
  for (;;) {
    grpc_event ev = cq_wait(c, deadline_ns);
    if (ev.type != GRPC_OP_COMPLETE) return -1;
    if ((intptr_t)ev.tag < 0) {
      stream_event(c, (intptr_t)ev.tag, ev.success);
      continue;
    }
    int i = (int)(intptr_t)ev.tag;
    c->ops[i].t1 = rm__now_ns();
    if (!ev.success && c->ops[i].st == GRPC_STATUS_OK) c->ops[i].st = GRPC_STATUS_UNKNOWN;
    return i;
  }
}

/* Cancel every busy call and wait for their completions (bounded). */
void cancel_all(client_t *c, int nops)
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

int next_answer(client_t *c, int64_t deadline_ns, int left, const char *what, load_res_t *res)
{
  int i = next_done(c, deadline_ns);
  if (i >= 0) return i;
  note(res, "%d %s calls unanswered past the deadline", left, what);
  res->n_err += left;
  cancel_all(c, c->n);
  return -1;
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
void rpc_error(load_res_t *r, const op_t *o, const char *what, int g)
{
  r->n_err++;
  note(r, "%s of worker %d: status %d %.*s", what, g, (int)o->st,
       (int)GRPC_SLICE_LENGTH(o->details), (const char *)GRPC_SLICE_START_PTR(o->details));
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
