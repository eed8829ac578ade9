/*
 * fuzz_rpc.c - libFuzzer target for the coordinator's gRPC request
 * handlers: each protobuf request through the real handler on an
 * in-memory coordinator.
 *
 * WHAT RUNS. Every coordinator source (coord.c, model.c, core/, store/,
 * rpc/rpc*.c, rpc/waiters.c, straggler/) and common/ is compiled in
 * unchanged, except rpc/server.c: fuzz_rpc_server.c takes its place (the
 * functions the handlers answer through: rm__reply, rm__reply_tail,
 * rm__stream_send, rm__call_park, rm__blob_*, rm__rpc_out_flush). One
 * coordinator per process, rm_coord_open on SQLite ":memory:" (migrations
 * and all), holds the FIXTURE, built through the same handlers:
 *   job 0  allreduce, world 3, straggler_policy backup (1 backup worker),
 *          three workers joined: RUNNING at generation 1 (StepGate,
 *          Barrier, ReportStep, ReportFailure, Leave reach the core);
 *          worker 0 is ready at gate step 0 (one more ready member decides
 *          it) and workers 0 and 1 wait, parked, in Barrier "fz-b"
 *          (timeout 1 day: worker 2's arrival releases it);
 *   job 1  workload command (/bin/true), world 2, one worker joined with
 *          launch index 0, so the job is FORMING (Attach, ReportExit);
 *   job 2  allreduce, world 2, no worker: PENDING (Join's first-worker and
 *          forming paths, Join parked while the group forms).
 * Launcher "none" (no launcher runs), heartbeat timeout 1 day (a tick never
 * loses a worker for being old). An input that changed the fixture (a new
 * event or job: c->last_seq or c->njobs moved) makes the harness close the
 * coordinator and build it again before the next input (as does an answer
 * to one of the fixture's parked Barrier calls: they are answered
 * UNAVAILABLE first, as server.c's stop does), so memory does not
 * grow and every input starts from the same state (within the step ring
 * and per-worker counters, which events do not cover).
 *
 * INPUT. Byte 0 selects: bits 0-3 the method, rm__methods[] index mod
 * RM__M_COUNT (Join, Heartbeat, Barrier, ReportStep, Watch, Leave,
 * SubmitJob, GetJob, ListJobs, CancelJob, ReportFailure, StepGate, Attach,
 * ReportExit, Session: every method server.c dispatches); bits 4-5 PATCH: 0 = the
 * request as sent, 1..3 = aim it at fixture job PATCH-1: job_id and token
 * are set to that job's, worker_id 0..7 becomes the id of the job's worker
 * (v mod its workers; 0 stays 0 for Join: a new worker), generation 0 the
 * job's current one (not for Join); bit 6 set: the call lacks the admin
 * token and the read token (SubmitJob/CancelJob, GetJob/ListJobs refused;
 * admin_ok of server.c); bit 7: how a
 * parked call is released (0: the client cancels it, as server.c's
 * on_close with cancelled; 1: the 100 ms tick runs 61 s later, past any
 * Join long poll, then a call still parked is cancelled). The rest of the
 * input is the request's protobuf encoding, unpacked with the method's real
 * descriptor exactly as server.c's on_recv does; NULL (malformed) is
 * answered INVALID_ARGUMENT through rm__reply, as there.
 *
 * A call goes through what server.c does with it: lock, dispatch (admin_ok),
 * commit (answers delivered after COMMIT); a Watch stream is driven like
 * on_send (next event after each delivered message, at most 32); a
 * Session that the request opened gets it again as its next message (the
 * heartbeat path of on_session, as server.c's on_session_msg); a call
 * still parked is released as above; then on_close (rm__park_drop).
 *
 * ORACLE (abort() when broken): every call ends with at most one final
 * status, exactly one unless its client cancelled it, and unlinked from its
 * job (freed memory must not stay parked); codes are the ones rpc_int.h
 * names; an OK answer carries a message that unpacks with the method's
 * response descriptor (Watch: OK with no message ends the stream, each
 * stream message unpacks as Event); a formed JoinResponse (head + shared
 * tail) lists `world` peers and a rank below world. Plus ASan/UBSan on
 * everything above. FUZZ_RPC_TRACE=1 prints each call's outcome (to check
 * that a seed reaches what it is meant to).
 *
 * NOT EXERCISED: gRPC itself (HTTP/2 framing, byte buffers, metadata
 * parsing, max_message_bytes, TLS, the admin token comparison in
 * server.c's admin_ok: bit 6 stands for its result), the completion-queue
 * thread and call reference counts, concurrency (one thread), sequences
 * of calls within an input (each input is one call; the only state it
 * meets is the fixture's: its Joins, its gate arrival and its two parked
 * Barrier calls), a restart
 * (rm__job_load_active on a populated database), launchers (none is
 * registered), and the REST API (api/, fuzzed by api/fuzz and
 * fuzz_target).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_rpc.h"
#include "rm_clock.h"
#include "rm_log.h"

#define NFIX 3
#define WATCH_ROUNDS 32

static rm_coord_t *g_c;
static struct {
  uint64_t id;
  char token[80];
} g_fx[NFIX];
static uint64_t g_seq;
static size_t g_njobs;
/* the fixture's calls that stay parked: Barrier "fz-b" of job 0's workers
 * 0 and 1 (one more arrival releases it) */
static rm__call_t *g_parked[2];

/* responses by method (rm__methods[] order); Watch: its stream message */
static const ProtobufCMessageDescriptor *const k_resp[RM__M_COUNT] = {
    [RM__M_JOIN] = &ringmaster__v1__join_response__descriptor,
    [RM__M_HEARTBEAT] = &ringmaster__v1__heartbeat_response__descriptor,
    [RM__M_BARRIER] = &ringmaster__v1__barrier_response__descriptor,
    [RM__M_REPORT_STEP] = &ringmaster__v1__report_step_response__descriptor,
    [RM__M_WATCH] = &ringmaster__v1__event__descriptor,
    [RM__M_LEAVE] = &ringmaster__v1__leave_response__descriptor,
    [RM__M_SUBMIT] = &ringmaster__v1__submit_job_response__descriptor,
    [RM__M_GET] = &ringmaster__v1__get_job_response__descriptor,
    [RM__M_LIST] = &ringmaster__v1__list_jobs_response__descriptor,
    [RM__M_CANCEL] = &ringmaster__v1__cancel_job_response__descriptor,
    [RM__M_REPORT_FAILURE] = &ringmaster__v1__report_failure_response__descriptor,
    [RM__M_STEP_GATE] = &ringmaster__v1__step_gate_response__descriptor,
    [RM__M_ATTACH] = &ringmaster__v1__attach_response__descriptor,
    [RM__M_REPORT_EXIT] = &ringmaster__v1__report_exit_response__descriptor,
    [RM__M_SESSION] = &ringmaster__v1__session_response__descriptor,
};

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "fuzz_rpc: %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
      fprintf(stderr, __VA_ARGS__);                                           \
      fputc('\n', stderr);                                                    \
      abort();                                                                \
    }                                                                         \
  } while (0)

/* ---- answers (called by fuzz_rpc_server.c's rm__rpc_out_flush) ---- */
static int known_code(int code)
{
  return code == RM__GRPC_OK || code == RM__GRPC_INVALID_ARGUMENT ||
         code == RM__GRPC_NOT_FOUND || code == RM__GRPC_RESOURCE_EXHAUSTED ||
         code == RM__GRPC_FAILED_PRECONDITION || code == RM__GRPC_UNAUTHENTICATED ||
         code == RM__GRPC_UNAVAILABLE;
}

void fz_deliver(rm__call_t *k, int code, const char *details,
                const uint8_t *buf, size_t len)
{
  if (code < 0) { /* a Watch message, or a Session's barrier or gate answer */
    CHECK((k->method == RM__M_WATCH || k->method == RM__M_SESSION) && buf,
          "stream message on method %d", k->method);
    ProtobufCMessage *m = protobuf_c_message_unpack(k_resp[k->method], NULL, len, buf);
    CHECK(m, "%s sent a message that does not unpack (%zu bytes)",
          k->method == RM__M_WATCH ? "Watch" : "Session", len);
    if (k->method == RM__M_SESSION) {
      const Ringmaster__V1__SessionResponse *r = (const void *)m;
      CHECK(!r->barrier != !r->gate, "a Session message that is not one barrier or gate "
            "answer");
      CHECK(!r->gate || !r->gate->members.len, "a Session gate answer with a mask");
      CHECK(!r->gate_pushed || (r->gate && r->gate->decided && r->gate->dropped),
            "a pushed Session message that is not a decided, dropped gate answer");
      for (size_t i = 0; r->gate && i < r->gate->n_out; i++)
        CHECK(r->gate->out[i] < r->gate->world && (!i || r->gate->out[i - 1] < r->gate->out[i]),
              "a Session gate answer's out[%zu] = %u (world %u)", i, r->gate->out[i],
              r->gate->world);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    k->streamed++;
    return;
  }
  k->finals++;
  CHECK(k->finals == 1, "method %d answered %d times", k->method, k->finals);
  CHECK(known_code(code), "method %d answered code %d", k->method, code);
  k->code = code;
  snprintf(k->details, sizeof k->details, "%s", details ? details : "");
  if (buf) {
    k->msg = malloc(len ? len : 1);
    memcpy(k->msg, buf, len);
    k->len = len;
  }
}

/* The oracle on a finished call (see the top of the file). */
static void check_call(const rm__call_t *k, int cancelled)
{
  CHECK(!k->park.next && !k->park.prev, "method %d: call still parked", k->method);
  CHECK(!k->wpark.next && !k->wpark.prev, "method %d: barrier or gate wait still linked",
        k->method);
  CHECK(!k->queued, "method %d: answer queued after the last commit", k->method);
  CHECK(k->finals == 1 || (cancelled && !k->finals), "method %d: %d answers%s",
        k->method, k->finals, cancelled ? " (cancelled)" : "");
  if (!k->finals || k->code != RM__GRPC_OK) return;
  if (k->method == RM__M_WATCH) {
    CHECK(!k->msg, "Watch's end of stream carries a message");
    return;
  }
  CHECK(k->msg, "method %d: OK without a message", k->method);
  ProtobufCMessage *m = protobuf_c_message_unpack(k_resp[k->method], NULL, k->len, k->msg);
  CHECK(m, "method %d: answer does not unpack as %s", k->method, k_resp[k->method]->name);
  if (k->method == RM__M_JOIN) {
    const Ringmaster__V1__JoinResponse *r = (const void *)m;
    if (r->formed) {
      CHECK(r->n_peers == r->world && r->world > 0 && r->rank < r->world,
            "formed Join: %zu peers, world %u, rank %u", r->n_peers, r->world, r->rank);
    } else {
      CHECK(r->n_peers == 0 && !k->tail_used, "unformed Join with %zu peers", r->n_peers);
    }
  }
  protobuf_c_message_free_unpacked(m, NULL);
}

static void call_free(rm__call_t *k)
{
  free(k->msg);
  free(k);
}

/* ---- one call, as server.c runs it ---- */
static void tick_all(rm_coord_t *c, int64_t now)
{
  rm__lock(c);
  for (size_t i = 0; i < c->njobs; i++) rm__job_tick(c, c->jobs[i], now);
  rm__job_evict(c, rm__wall_ms());
  rm__commit(c);
}

/* Dispatch req (NULL: malformed) and see the call to its end; returns it
 * (caller frees) after the oracle. */
static rm__call_t *run_call(rm_coord_t *c, int method, const ProtobufCMessage *req,
                            int admin, int release_tick)
{
  rm__call_t *k = calloc(1, sizeof *k);
  int cancelled = 0;
  k->method = method;
  rm__lock(c);
  c->ctr.grpc_calls_total++;
  if (!req) {
    rm__reply(c, k, RM__GRPC_INVALID_ARGUMENT, "malformed message", NULL);
  } else if (method == RM__M_SESSION) { /* its opening message: the ids */
    Ringmaster__V1__SessionRequest open = *(const Ringmaster__V1__SessionRequest *)req;
    open.barrier = NULL;
    open.gate = NULL;
    rm__rpc_dispatch(c, k, method, &open.base, admin);
  } else {
    rm__rpc_dispatch(c, k, method, req, admin);
  }
  rm__commit(c);
  /* on_send: a Watch message went out, send the next */
  for (int r = 0, seen = -1; r < WATCH_ROUNDS && k->park.kind == RM__PARK_WATCH &&
                             !k->answered && k->streamed != seen; r++) {
    seen = k->streamed;
    rm__lock(c);
    k->park.watch_sending = 0;
    rm__watch_next(c, &k->park);
    rm__commit(c);
  }
  /* on_session_msg: the request itself as the stream's next message (a
   * heartbeat, with its barrier arrival or gate call if it has one) */
  if (k->park.kind == RM__PARK_SESSION && !k->answered && req) {
    rm__lock(c);
    rm__rpc_dispatch(c, k, method, req, admin);
    rm__commit(c);
  }
  if (!k->answered && release_tick) tick_all(c, rm__now_ns() + 61LL * 1000000000LL);
  cancelled = !k->answered;
  /* on_close */
  rm__lock(c);
  rm__park_drop(c, &k->park, cancelled);
  rm__park_unlink(&k->wpark); /* server.c on_session_end */
  if (cancelled) k->answered = 1;
  rm__commit(c);
  check_call(k, cancelled);
  return k;
}

/* ---- the fixture ---- */
static ProtobufCMessage *decode(int method, const uint8_t *d, size_t n)
{
  return protobuf_c_message_unpack(rm__methods[method].req, NULL, n, d);
}

static uint64_t fx_submit(rm_coord_t *c, int slot, Ringmaster__V1__JobSpec *spec)
{
  Ringmaster__V1__SubmitJobRequest q = RINGMASTER__V1__SUBMIT_JOB_REQUEST__INIT;
  q.spec = spec;
  rm__call_t *k = run_call(c, RM__M_SUBMIT, &q.base, RM__AUTH_ADMIN, 0);
  CHECK(k->code == RM__GRPC_OK, "fixture submit %d: %s", slot, k->details);
  Ringmaster__V1__SubmitJobResponse *r = (void *)protobuf_c_message_unpack(
      &ringmaster__v1__submit_job_response__descriptor, NULL, k->len, k->msg);
  g_fx[slot].id = r->job->id;
  snprintf(g_fx[slot].token, sizeof g_fx[slot].token, "%s", r->job->token);
  protobuf_c_message_free_unpacked(&r->base, NULL);
  call_free(k);
  return g_fx[slot].id;
}

static void fx_join(rm_coord_t *c, int slot, int i, int rank_hint, int world_hint)
{
  Ringmaster__V1__JoinRequest q = RINGMASTER__V1__JOIN_REQUEST__INIT;
  char addr[32];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", 7100 + i);
  q.job_id = g_fx[slot].id;
  q.token = g_fx[slot].token;
  q.host = "fz-host";
  q.data_addr = addr;
  q.devices = "cpu";
  q.rank_hint = rank_hint;
  q.world_hint = world_hint;
  rm__call_t *k = run_call(c, RM__M_JOIN, &q.base, RM__AUTH_ADMIN, 0);
  CHECK(k->code == RM__GRPC_OK, "fixture join %d/%d: %s", slot, i, k->details);
  call_free(k);
}

static void fx_barrier(rm_coord_t *c, int i)
{
  Ringmaster__V1__BarrierRequest q = RINGMASTER__V1__BARRIER_REQUEST__INIT;
  rm__job_t *j = rm__job_find(c, g_fx[0].id);
  rm__call_t *k = calloc(1, sizeof *k);
  q.job_id = g_fx[0].id;
  q.token = g_fx[0].token;
  q.generation = j->info.generation;
  q.worker_id = j->w[i].id;
  q.name = "fz-b";
  q.timeout_ms = 86400000;
  k->method = RM__M_BARRIER;
  rm__lock(c);
  rm__rpc_dispatch(c, k, RM__M_BARRIER, &q.base, 1);
  rm__commit(c);
  CHECK(!k->answered && k->park.next, "fixture barrier %d answered: %s", i, k->details);
  g_parked[i] = k;
}

/* job 0's worker 0 arrives at step 0 of the gate (answered at once,
 * wait_ms 0): one more ready member decides the step (quorum 2) */
static void fx_gate(rm_coord_t *c)
{
  Ringmaster__V1__StepGateRequest q = RINGMASTER__V1__STEP_GATE_REQUEST__INIT;
  rm__job_t *j = rm__job_find(c, g_fx[0].id);
  q.job_id = g_fx[0].id;
  q.token = g_fx[0].token;
  q.generation = j->info.generation;
  q.worker_id = j->w[0].id;
  q.ready = 1;
  call_free(run_call(c, RM__M_STEP_GATE, &q.base, RM__AUTH_ADMIN, 0));
}

static void fx_build(void)
{
  rm_coord_options_t o;
  char err[256] = "";
  char *cmd[] = {"/bin/true"};
  rm_coord_options_init(&o);
  o.db_path = ":memory:";
  o.grpc_addr = "127.0.0.1:0";
  o.heartbeat_timeout_ms = 86400000;
  CHECK(rm_coord_open(&o, &g_c, err, sizeof err) == RM_OK, "open: %s", err);

  Ringmaster__V1__JobSpec s = RINGMASTER__V1__JOB_SPEC__INIT;
  s.name = "fz-train";
  s.world_size = 3;
  s.workload = "allreduce";
  s.launcher = "none";
  s.steps = 100;
  s.straggler_policy = "backup";
  s.backup_workers = 1;
  fx_submit(g_c, 0, &s);
  for (int i = 0; i < 3; i++) fx_join(g_c, 0, i, -1, 0);

  Ringmaster__V1__JobSpec s1 = RINGMASTER__V1__JOB_SPEC__INIT;
  s1.name = "fz-command";
  s1.world_size = 2;
  s1.workload = "command";
  s1.launcher = "none";
  s1.n_command = 1;
  s1.command = cmd;
  fx_submit(g_c, 1, &s1);
  fx_join(g_c, 1, 10, 0, 2);

  Ringmaster__V1__JobSpec s2 = RINGMASTER__V1__JOB_SPEC__INIT;
  s2.name = "fz-pending";
  s2.world_size = 2;
  s2.workload = "allreduce";
  s2.launcher = "none";
  fx_submit(g_c, 2, &s2);

  fx_gate(g_c);
  fx_barrier(g_c, 0);
  fx_barrier(g_c, 1);
  static const rm_job_state_t want[NFIX] = {RM_JOB_RUNNING, RM_JOB_FORMING, RM_JOB_PENDING};
  for (int i = 0; i < NFIX; i++) {
    rm__job_t *j = rm__job_find(g_c, g_fx[i].id);
    CHECK(j && j->info.state == want[i], "fixture job %d is %s, not %s", i,
          j ? rm_job_state_name(j->info.state) : "missing", rm_job_state_name(want[i]));
  }
  g_seq = g_c->last_seq;
  g_njobs = g_c->njobs;
}

static void fx_reset_if_changed(void)
{
  if (g_c->last_seq == g_seq && g_c->njobs == g_njobs && !g_parked[0]->answered &&
      !g_parked[1]->answered)
    return;
  /* server.c's stop: parked calls are answered UNAVAILABLE, then closed */
  rm__lock(g_c);
  for (int i = 0; i < 2; i++)
    rm__reply(g_c, g_parked[i], RM__GRPC_UNAVAILABLE, "fixture reset", NULL);
  rm__commit(g_c);
  for (int i = 0; i < 2; i++) {
    check_call(g_parked[i], 0);
    call_free(g_parked[i]);
    g_parked[i] = NULL;
  }
  rm_coord_close(g_c);
  g_c = NULL;
  fx_build();
}

/* ---- aiming a request at a fixture job ---- */
typedef struct {
  char **token, *token_was; /* restored before the message is freed */
} patch_t;

static void *field(ProtobufCMessage *m, const char *name, ProtobufCType type)
{
  const ProtobufCFieldDescriptor *f =
      protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
  if (!f || f->type != type || f->label == PROTOBUF_C_LABEL_REPEATED) return NULL;
  return (char *)m + f->offset;
}

static void patch(ProtobufCMessage *m, int method, int slot, patch_t *pt)
{
  rm__job_t *j = rm__job_find(g_c, g_fx[slot].id);
  uint64_t *job = field(m, "job_id", PROTOBUF_C_TYPE_UINT64);
  uint64_t *wid = field(m, "worker_id", PROTOBUF_C_TYPE_UINT64);
  uint64_t *gen = field(m, "generation", PROTOBUF_C_TYPE_UINT64);
  char **tok = field(m, "token", PROTOBUF_C_TYPE_STRING);
  if (job) *job = g_fx[slot].id;
  if (tok) {
    pt->token = tok;
    pt->token_was = *tok;
    *tok = g_fx[slot].token;
  }
  if (!j) return;
  if (wid && *wid < 8 && j->nw && (*wid || method != RM__M_JOIN))
    *wid = j->w[*wid % j->nw].id;
  if (gen && !*gen && method != RM__M_JOIN) *gen = j->info.generation;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  patch_t pt = {NULL, NULL};
  if (!g_c) {
    if (!getenv("RINGMASTER_LOG_LEVEL")) rm__log_set_level(RM_LOG_ERROR);
    fx_build();
  }
  if (size < 1) return 0;
  /* every handler rm__rpc_dispatch has; a Relay is server.c and relay.c's
   * (RELAYS: its lanes are Sessions), which this harness leaves out */
  int method = (data[0] & 0x0f) % RM__M_RELAY;
  int slot = (data[0] >> 4) & 3;
  int admin = (data[0] & 0x40) ? 0 : RM__AUTH_ADMIN;
  int release_tick = data[0] >> 7;
  ProtobufCMessage *req = decode(method, data + 1, size - 1);
  if (req && slot) patch(req, method, slot - 1, &pt);
  rm__call_t *k = run_call(g_c, method, req, admin, release_tick);
  if (!req) CHECK(k->code == RM__GRPC_INVALID_ARGUMENT, "malformed: code %d", k->code);
  if (getenv("FUZZ_RPC_TRACE")) /* what the call got, to check the seeds */
    fprintf(stderr, "fuzz_rpc: %s -> %s (%zu bytes, %d streamed) %s\n",
            rm__methods[method].path, !k->finals ? "cancelled" : k->code ? "error" : "OK",
            k->len, k->streamed, k->details);
  call_free(k);
  if (pt.token) *pt.token = pt.token_was;
  if (req) protobuf_c_message_free_unpacked(req, NULL);
  fx_reset_if_changed();
  return 0;
}
