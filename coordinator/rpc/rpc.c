/*
 * rpc.c - the Worker service handlers (proto/ringmaster/v1/service.proto).
 * Called by server.c under the coordinator lock with a parsed request; each
 * answers with rm__reply() or parks the call (Join, Barrier, Watch).
 *
 * Checks, in this order, on every worker call (check_worker):
 *   job known?            no  -> NOT_FOUND
 *   token matches?        no  -> UNAUTHENTICATED
 *   worker known?         no  -> NOT_FOUND
 *   job finished?         yes -> the handler answers with the job state
 *   member of the job's current generation, same generation number?
 *                         no  -> FAILED_PRECONDITION "stale generation ..."
 * Join skips the last check: it is how a worker reaches a new generation.
 *
 * TOKENS. A job's token is checked by its verifier (store/store_key.c):
 * SHA-256 of the presented token against the job's token_verifier, compared
 * in constant time; the coordinator never compares plaintext and the
 * database holds no token. One SHA-256 per call (0.4 to 1 us for a
 * 48-byte token), under the lock.
 *
 * LATE STEP REPORTS (ReportStep only; late_report). A report whose
 * generation is over - older than the job's, or the job's while the job is
 * not RUNNING (re-forming: after a coordinator restart, the job stays at
 * generation G, FORMING, until G+1 forms) - is a report the agent buffered
 * while the coordinator was away (worker/session/session_step.c, REPORT
 * BUFFER) or one that arrives after a re-formation. It is ACCEPTED into the
 * step history when the worker is known, the token is the job's, the job is
 * not finished, and the generations table lists that worker id as a member
 * of that generation (which also gives the rank it had then): the sample
 * goes into the job's window (rm__job_step_late) and into step_summaries as
 * a one-step row, with that generation and rank. It touches nothing of the
 * current generation: not the worker's step or steps_done (progress never
 * moves back; a new generation's start step comes from Join's steps_done,
 * recovery.c R1), not the accumulators of the current summaries, not the
 * step gate, straggler detector, suspect tracker or checkpoint record, not
 * membership or job state. The answer is OK with the job's state and
 * generation, so the agent learns where the job is. Anything else of an
 * ended generation (not a member then, unknown generation) is refused as
 * stale, as before.
 *
 * Why this is safe: the sample is a measurement of a step that worker did
 * compute in a generation it belonged to (the same token guards it as any
 * current report); history is append-only and labelled with its
 * generation, so readers (GET .../steps, the dashboard) see it where it
 * belongs; and every decision the coordinator takes (forming, gating,
 * straggler and failure handling, progress) reads only current-generation
 * state, which a late report never writes. The cost is one SELECT of the
 * generations row per late report (the backlog after an outage only).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec_use.h"
#include "rpc/rpc_int.h"
#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_metrics.h"
#include "rm_token.h"
#include "rm_transports.h"

#define JOIN_WAIT_MAX_MS 60000

const rm__method_t rm__methods[RM__M_COUNT] = {
    [RM__M_JOIN] = {"/ringmaster.v1.Worker/Join", &ringmaster__v1__join_request__descriptor, 0},
    [RM__M_HEARTBEAT] = {"/ringmaster.v1.Worker/Heartbeat", &ringmaster__v1__heartbeat_request__descriptor, 0},
    [RM__M_BARRIER] = {"/ringmaster.v1.Worker/Barrier", &ringmaster__v1__barrier_request__descriptor, 0},
    [RM__M_REPORT_STEP] = {"/ringmaster.v1.Worker/ReportStep", &ringmaster__v1__report_step_request__descriptor, 0},
    [RM__M_WATCH] = {"/ringmaster.v1.Worker/Watch", &ringmaster__v1__watch_request__descriptor, 0},
    [RM__M_LEAVE] = {"/ringmaster.v1.Worker/Leave", &ringmaster__v1__leave_request__descriptor, 0},
    [RM__M_SUBMIT] = {"/ringmaster.v1.Jobs/SubmitJob", &ringmaster__v1__submit_job_request__descriptor, 1},
    [RM__M_GET] = {"/ringmaster.v1.Jobs/GetJob", &ringmaster__v1__get_job_request__descriptor, 2},
    [RM__M_LIST] = {"/ringmaster.v1.Jobs/ListJobs", &ringmaster__v1__list_jobs_request__descriptor, 2},
    [RM__M_CANCEL] = {"/ringmaster.v1.Jobs/CancelJob", &ringmaster__v1__cancel_job_request__descriptor, 1},
    [RM__M_REPORT_FAILURE] = {"/ringmaster.v1.Worker/ReportFailure", &ringmaster__v1__report_failure_request__descriptor, 0},
    [RM__M_STEP_GATE] = {"/ringmaster.v1.Worker/StepGate", &ringmaster__v1__step_gate_request__descriptor, 0},
    [RM__M_ATTACH] = {"/ringmaster.v1.Worker/Attach", &ringmaster__v1__attach_request__descriptor, 0},
    [RM__M_REPORT_EXIT] = {"/ringmaster.v1.Worker/ReportExit", &ringmaster__v1__report_exit_request__descriptor, 0},
    /* a stream of them (service.proto; server_group.c SESSIONS) */
    [RM__M_SESSION] = {"/ringmaster.v1.Worker/Session", &ringmaster__v1__session_request__descriptor, 0},
    /* a stream of lanes, each a Session (server_int.h, relay.c RELAYS) */
    [RM__M_RELAY] = {"/ringmaster.v1.Worker/Relay", &ringmaster__v1__relay_request__descriptor, 0},
};

static int fail(rm_coord_t *c, rm__call_t *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(rm_coord_t *c, rm__call_t *call, int code, const char *fmt, ...)
{
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  rm__reply(c, call, code, msg, NULL);
  return -1;
}

/* The presented token against the job's verifier (TOKENS above). */
static int token_ok(const rm_job_info_t *info, const char *token)
{
  return rm__job_token_ok(info, token);
}

/* Finds job and token; 0 ok. */
static int check_job(rm_coord_t *c, rm__call_t *call, uint64_t job_id,
                     const char *token, rm__job_t **jp)
{
  rm__job_t *j = rm__job_find(c, job_id);
  rm_job_info_t info;
  if (!j) {
    if (rm__job_info_stored(c, job_id, &info) != RM_OK)
      return fail(c, call, RM__GRPC_NOT_FOUND, "job %llu not found",
                  (unsigned long long)job_id);
    if (!token_ok(&info, token))
      return fail(c, call, RM__GRPC_UNAUTHENTICATED, "wrong token for job %llu",
                  (unsigned long long)job_id);
    return fail(c, call, RM__GRPC_FAILED_PRECONDITION, "job %llu is %s",
                (unsigned long long)job_id, rm_job_state_name(info.state));
  }
  if (!token_ok(&j->info, token))
    return fail(c, call, RM__GRPC_UNAUTHENTICATED, "wrong token for job %llu",
                (unsigned long long)job_id);
  *jp = j;
  return 0;
}

/* The worker of an authenticated job; its liveness is refreshed. */
static rm__worker_t *find_worker(rm_coord_t *c, rm__call_t *call, rm__job_t *j,
                                 uint64_t worker_id)
{
  rm__worker_t *w = rm__job_worker(j, worker_id);
  if (!w) {
    fail(c, call, RM__GRPC_NOT_FOUND, "worker %llu not in job %llu",
         (unsigned long long)worker_id, (unsigned long long)j->info.id);
    return NULL;
  }
  w->last_ns = rm__now_ns();
  w->last_wall_ms = rm__wall_ms();
  return w;
}

/* The last check of the header: a member of the running generation gen. */
static int check_member(rm_coord_t *c, rm__call_t *call, rm__job_t *j,
                        rm__worker_t *w, uint64_t gen)
{
  uint64_t job_id = j->info.id, worker_id = w->id;
  if (rm_job_state_terminal(j->info.state)) return 0;
  if (j->info.state != RM_JOB_RUNNING || gen != j->info.generation ||
      w->generation != gen || w->state != RM_WORKER_RUNNING)
    return fail(c, call, RM__GRPC_FAILED_PRECONDITION,
                "stale generation %llu: job %llu is %s at generation %llu, "
                "worker %llu is %s; join again",
                (unsigned long long)gen, (unsigned long long)job_id,
                rm_job_state_name(j->info.state),
                (unsigned long long)j->info.generation,
                (unsigned long long)worker_id, rm_worker_state_name(w->state));
  return 0;
}

static int check_worker(rm_coord_t *c, rm__call_t *call, uint64_t job_id,
                        const char *token, uint64_t gen, uint64_t worker_id,
                        rm__job_t **jp, rm__worker_t **wp)
{
  rm__job_t *j = NULL; /* set by check_job when it returns 0 */
  rm__worker_t *w;
  if (check_job(c, call, job_id, token, &j)) return -1;
  if (!(w = find_worker(c, call, j, worker_id))) return -1;
  *jp = j;
  *wp = w;
  return check_member(c, call, j, w, gen);
}

/* For command.c: job and token only (no worker). */
int rm__rpc_check_job(rm_coord_t *c, rm__call_t *call, uint64_t job_id,
                      const char *token, rm__job_t **jp)
{
  return check_job(c, call, job_id, token, jp);
}

/* For the handlers in rpc_failure.c, rpc_gate.c and rpc_command.c. */
int rm__rpc_check_worker(rm_coord_t *c, rm__call_t *call, uint64_t job_id,
                         const char *token, uint64_t gen, uint64_t worker_id,
                         rm__job_t **jp, rm__worker_t **wp)
{
  return check_worker(c, call, job_id, token, gen, worker_id, jp, wp);
}

/* ---- Join ----
 * A formed answer is a small per-worker head (worker id, rank, generation,
 * ...) followed by the generation's peer list and spec, packed once per
 * generation and shared: N answers cost O(N) memory, not O(N^2). A client
 * that set accept_gzip gets the same bytes as one gzip member whose
 * peer-list part is deflated once per generation (server_out.c GZIP
 * ANSWERS): O(N^2) bytes on the wire, but 2 to 6 times fewer. */
static rm__blob_t *join_tail(rm__job_t *j)
{
  if (j->join_tail && j->join_tail_gen == j->info.generation) return j->join_tail;
  Ringmaster__V1__JoinResponse t = RINGMASTER__V1__JOIN_RESPONSE__INIT;
  Ringmaster__V1__JobSpec spec;
  int n = j->nmembers;
  Ringmaster__V1__Peer *peers = rm__xcalloc((size_t)n + 1, sizeof *peers);
  Ringmaster__V1__Peer **pp = rm__xcalloc((size_t)n + 1, sizeof *pp);
  for (int i = 0; i < n; i++) {
    rm__worker_t *m = &j->w[j->members[i]];
    ringmaster__v1__peer__init(&peers[i]);
    peers[i].rank = (uint32_t)i;
    peers[i].host = m->host;
    peers[i].data_addr = (char *)rm__worker_data_addr(m);
    peers[i].transports = (char *)rm__worker_transports(m);
    peers[i].worker_id = m->id;
    pp[i] = &peers[i];
  }
  rm__pb_spec_from(&spec, &j->info.spec);
  t.spec = &spec;
  t.n_peers = (size_t)n;
  t.peers = pp;
  rm__blob_unref(j->join_tail);
  j->join_tail = rm__blob_pack(&t.base);
  j->join_tail_gen = j->info.generation;
  rm__pb_spec_free(&spec);
  free(peers);
  free(pp);
  return j->join_tail;
}

void rm__rpc_answer_join(rm_coord_t *c, rm__job_t *j, rm__park_t *p)
{
  Ringmaster__V1__JoinResponse r = RINGMASTER__V1__JOIN_RESPONSE__INIT;
  Ringmaster__V1__JobSpec spec;
  rm__worker_t *w = rm__job_worker(j, p->worker_id);
  r.worker_id = p->worker_id;
  r.job_state = (Ringmaster__V1__JobState)j->info.state;
  if (j->info.state == RM_JOB_RUNNING && w && w->state == RM_WORKER_RUNNING &&
      w->generation == j->info.generation) {
    r.formed = 1;
    r.generation = j->info.generation;
    r.rank = (uint32_t)w->rank;
    r.world = (uint32_t)j->nmembers;
    r.start_step = j->start_step;
    r.checkpoint_step = j->ckpt_step;
    rm__gate_join_fields(j, &r.step_quorum, &r.coded_s);
    int hb = rm__job_heartbeat_ms(c, j) / 4;
    r.heartbeat_interval_ms = (uint32_t)(hb < 50 ? 50 : hb);
    r.session_gate = 1;
    unsigned char key[RM__DATA_KEY_BYTES];
    rm__job_data_key(c, j, key);
    r.data_key.data = key;
    r.data_key.len = sizeof key;
    rm__reply_tail_gz(c, p->call, &r.base, join_tail(j));
    explicit_bzero(key, sizeof key); /* the answer holds its own copy */
    return;
  }
  rm__pb_spec_from(&spec, &j->info.spec);
  r.spec = &spec;
  rm__reply(c, p->call, RM__GRPC_OK, NULL, &r.base);
  rm__pb_spec_free(&spec);
}

static rm__worker_t *join_new(rm_coord_t *c, rm__call_t *call, rm__job_t *j)
{
  const rm_job_spec_t *s = &j->info.spec;
  int target = s->world_size ? s->world_size : s->max_workers;
  int standby = rm__recovery_standby_cap(j); /* replace: standbys wait */
  if (j->info.state == RM_JOB_RUNNING && !standby) {
    fail(c, call, RM__GRPC_FAILED_PRECONDITION, "job %llu is running with "
         "its full group (generation %llu)", (unsigned long long)j->info.id,
         (unsigned long long)j->info.generation);
    return NULL;
  }
  int n = j->n_joining; /* JOINING COUNT (model.h), not a scan */
  if (j->info.state == RM_JOB_RUNNING) n += target; /* members */
  if (n >= target + standby) {
    fail(c, call, RM__GRPC_FAILED_PRECONDITION, "job %llu already has its %d "
         "workers", (unsigned long long)j->info.id, target);
    return NULL;
  }
  return rm__job_worker_add(j);
}

static void on_join(rm_coord_t *c, rm__call_t *call,
                    const Ringmaster__V1__JoinRequest *q)
{
  rm__job_t *j = NULL; /* set by check_job when it returns 0 */
  rm__worker_t *w = NULL;
  struct { char host[128], data_addr[160], transports[256], devices[256]; } tmp;
  if (check_job(c, call, q->job_id, q->token, &j)) return;
  memset(&tmp, 0, sizeof tmp);
  if (rm__pb_str(tmp.host, sizeof tmp.host, q->host) ||
      rm__pb_str(tmp.data_addr, sizeof tmp.data_addr, q->data_addr) ||
      rm__pb_str(tmp.devices, sizeof tmp.devices, q->devices) ||
      !tmp.data_addr[0] || !strchr(tmp.data_addr, ':')) {
    RM_WARN("job %llu: Join of worker %llu refused: host, data_addr or devices missing or "
            "too long", (unsigned long long)q->job_id, (unsigned long long)q->worker_id);
    fail(c, call, RM__GRPC_INVALID_ARGUMENT, "host, data_addr (host:port) or "
         "devices missing or too long");
    return;
  }
  {
    char why[200];
    if (rm__pb_str(tmp.transports, sizeof tmp.transports, q->transports))
      snprintf(why, sizeof why, "too long (at most 255 bytes)");
    else if (rm_tp_offer_valid(tmp.transports, why, sizeof why))
      why[0] = '\0';
    if (why[0]) {
      RM_WARN("job %llu: Join of worker %llu refused: transports: %s",
              (unsigned long long)q->job_id, (unsigned long long)q->worker_id, why);
      fail(c, call, RM__GRPC_INVALID_ARGUMENT, "transports: %s", why);
      return;
    }
  }
  rm__park_t *p = rm__call_park(call);
  p->call = call;
  rm__call_accept_gzip(call, q->accept_gzip);
  if (rm_job_state_terminal(j->info.state)) {
    p->worker_id = q->worker_id;
    rm__rpc_answer_join(c, j, p);
    return;
  }
  if (q->worker_id) w = rm__job_worker(j, q->worker_id);
  if (w && w->state >= RM_WORKER_LOST) w = NULL;
  if (w && w->state == RM_WORKER_RUNNING && w->generation == j->info.generation &&
      j->info.state == RM_JOB_RUNNING && q->generation < j->info.generation) {
    p->worker_id = w->id; /* repeated join: answer the current group */
    rm__rpc_answer_join(c, j, p);
    return;
  }
  if (w && w->state == RM_WORKER_RUNNING) w = NULL; /* member of an old group */
  int fresh = !w;
  if (fresh && !(w = join_new(c, call, j))) return;
  rm__worker_strs(w, tmp.host, tmp.data_addr, tmp.transports, tmp.devices);
  w->rank_hint = q->world_hint > 0 ? q->rank_hint : -1;
  w->world_hint = q->world_hint;
  /* The agent's launch index travels as its rank hint (with a world hint);
   * unlike the hint, it is kept when the worker becomes a rank elsewhere. */
  w->launch_index = q->world_hint > 0 && q->rank_hint >= 0 ? q->rank_hint : -1;
  if (q->steps_done > w->steps_done) w->steps_done = q->steps_done;
  int was_joining = rm__worker_joining(w); /* JOINING COUNT (model.h) */
  w->state = RM_WORKER_JOINING;
  w->last_ns = rm__now_ns();
  w->last_wall_ms = rm__wall_ms();
  if (fresh) w->joined_ms = w->last_wall_ms;
  rm__worker_record(c, j, w, fresh);
  if (!w->in_group)
    rm__event(c, j, "worker_joined", -1, "worker %llu joined from %s (data %s%s)",
              (unsigned long long)w->id, w->host, rm__worker_data_addr(w),
              fresh ? "" : ", re-joining");
  w->in_group = 1;
  j->n_joining += 1 - was_joining;
  j->last_join_ns = w->last_ns;
  if (j->info.state == RM_JOB_PENDING)
    rm__job_set_state(c, j, RM_JOB_FORMING, "first worker joined");
  p->kind = RM__PARK_JOIN;
  p->call = call;
  p->job_id = j->info.id;
  p->worker_id = w->id;
  uint32_t wait = q->wait_ms > JOIN_WAIT_MAX_MS ? JOIN_WAIT_MAX_MS : q->wait_ms;
  p->deadline_ns = w->last_ns + (int64_t)wait * 1000000;
  rm__park_link(j, p);
  rm__job_try_form(c, j);
  if (p->next && !wait) rm__rpc_answer_join(c, j, p);
}

/* ---- the others ---- */
static void on_heartbeat(rm_coord_t *c, rm__call_t *call,
                         const Ringmaster__V1__HeartbeatRequest *q)
{
  rm__job_t *j = NULL; /* set by check_job when it returns 0 */
  rm__worker_t *w;
  Ringmaster__V1__HeartbeatResponse r = RINGMASTER__V1__HEARTBEAT_RESPONSE__INIT;
  if (check_worker(c, call, q->job_id, q->token, q->generation, q->worker_id, &j, &w))
    return;
  if (q->step > w->step) w->step = q->step;
  r.job_state = (Ringmaster__V1__JobState)j->info.state;
  r.generation = j->info.generation;
  r.reason = j->info.reason;
  rm__reply(c, call, RM__GRPC_OK, NULL, &r.base);
}

/* A checked member's barrier arrival, waiting in p: the call's park (a
 * Barrier call) or its barrier park (a Session's message). */
static void barrier_arrive(rm_coord_t *c, rm__call_t *call, rm__job_t *j, rm__worker_t *w,
                           const char *name, uint32_t timeout_ms, uint64_t step,
                           ProtobufCBinaryData payload, rm__park_t *p)
{
  if (!name || !name[0] || strlen(name) >= RM_COORD_NAME_MAX) {
    fail(c, call, RM__GRPC_INVALID_ARGUMENT, "barrier name: 1 to 63 bytes");
    return;
  }
  if (rm_job_state_terminal(j->info.state)) {
    fail(c, call, RM__GRPC_FAILED_PRECONDITION, "job %llu is %s: %s",
         (unsigned long long)j->info.id, rm_job_state_name(j->info.state),
         j->info.reason);
    return;
  }
  if (step > w->step) w->step = step;
  p->call = call;
  p->job_id = j->info.id;
  p->worker_id = w->id;
  int timeout = timeout_ms > 86400000u ? 86400000 : (int)timeout_ms;
  char why[200];
  if (rm__barrier_arrive(c, j, w, name, timeout, payload.data, payload.len, p, why,
                         sizeof why) != RM_OK)
    fail(c, call, RM__GRPC_INVALID_ARGUMENT, "%s", why); /* never the payload bytes */
}

static void on_barrier(rm_coord_t *c, rm__call_t *call,
                       const Ringmaster__V1__BarrierRequest *q)
{
  rm__job_t *j = NULL; /* set by check_job when it returns 0 */
  rm__worker_t *w;
  if (check_worker(c, call, q->job_id, q->token, q->generation, q->worker_id, &j, &w))
    return;
  barrier_arrive(c, call, j, w, q->name, q->timeout_ms, q->step, q->payload,
                 rm__call_park(call));
}

static void sample_of(rm_step_sample_t *s, const Ringmaster__V1__ReportStepRequest *q,
                      int rank, int64_t time_ms)
{
  memset(s, 0, sizeof *s);
  s->rank = rank;
  s->step = q->step;
  s->generation = q->generation;
  s->time_ms = time_ms;
  s->compute_ms = isfinite(q->compute_ms) && q->compute_ms >= 0 ? q->compute_ms : 0;
  s->comm_ms = isfinite(q->comm_ms) && q->comm_ms >= 0 ? q->comm_ms : 0;
  s->wait_ms = isfinite(q->wait_ms) && q->wait_ms >= 0 ? q->wait_ms : 0;
  s->loss = q->loss;
  s->accuracy = q->accuracy;
  s->allreduce_bytes = q->allreduce_bytes;
  for (size_t i = 0; i < q->n_metrics && i < RM_METRICS_MAX; i++) { /* checked: bad_metrics */
    snprintf(s->metrics[i].name, sizeof s->metrics[i].name, "%s", q->metrics[i]->name);
    s->metrics[i].value = q->metrics[i]->value;
    s->n_metrics++;
  }
}

/* A report whose named metrics break rm_metrics.h's rules is refused
 * whole (INVALID_ARGUMENT with the rule's words), never stored without
 * them: 1 if so, and answered. */
static int bad_metrics(rm_coord_t *c, rm__call_t *call,
                       const Ringmaster__V1__ReportStepRequest *q)
{
  const char *names[RM_METRICS_MAX];
  double values[RM_METRICS_MAX];
  char why[160];
  size_t n = q->n_metrics < RM_METRICS_MAX ? q->n_metrics : RM_METRICS_MAX;
  for (size_t i = 0; i < n; i++) {
    names[i] = q->metrics[i]->name;
    values[i] = q->metrics[i]->value;
  }
  if (!rm__metrics_check(names, values, q->n_metrics, why, sizeof why)) return 0;
  fail(c, call, RM__GRPC_INVALID_ARGUMENT, "step %llu: %s", (unsigned long long)q->step, why);
  return 1;
}

/* LATE STEP REPORTS of the header: 1 if q was one and is answered. */
static int late_report(rm_coord_t *c, rm__call_t *call, rm__job_t *j, rm__worker_t *w,
                       const Ringmaster__V1__ReportStepRequest *q)
{
  Ringmaster__V1__ReportStepResponse r = RINGMASTER__V1__REPORT_STEP_RESPONSE__INIT;
  rm_step_sample_t s;
  int over = q->generation < j->info.generation ||
             (q->generation == j->info.generation && j->info.state != RM_JOB_RUNNING);
  if (rm_job_state_terminal(j->info.state) || !over || q->generation == 0) return 0;
  int rank = rm__job_generation_rank(c, j, q->generation, w->id);
  if (rank < 0) return 0; /* not a member then: stale, as before */
  sample_of(&s, q, rank, w->last_wall_ms);
  rm__job_step_late(c, j, &s);
  r.job_state = (Ringmaster__V1__JobState)j->info.state;
  r.generation = j->info.generation;
  rm__reply(c, call, RM__GRPC_OK, NULL, &r.base);
  return 1;
}

static void on_report_step(rm_coord_t *c, rm__call_t *call,
                           const Ringmaster__V1__ReportStepRequest *q)
{
  rm__job_t *j = NULL; /* set by check_job when it returns 0 */
  rm__worker_t *w;
  Ringmaster__V1__ReportStepResponse r = RINGMASTER__V1__REPORT_STEP_RESPONSE__INIT;
  if (check_job(c, call, q->job_id, q->token, &j)) return;
  if (!(w = find_worker(c, call, j, q->worker_id))) return;
  if (bad_metrics(c, call, q)) return;
  if (late_report(c, call, j, w, q)) return;
  if (check_member(c, call, j, w, q->generation)) return;
  rm__spec_use_t u = {q->use_known, q->step, q->use_aggregation, q->use_secure_sums,
                      q->use_gated, q->use_plain_bytes, q->use_refused};
  if (q->total_steps) j->info.steps_program = q->total_steps;
  if (!rm_job_state_terminal(j->info.state) && !rm__spec_use_step(c, j, w, &u)) {
    rm_step_sample_t s;
    sample_of(&s, q, w->rank, w->last_wall_ms);
    rm__job_step(c, j, w, &s);
    rm__recovery_step(c, j, w, &s, q->checkpoint_step);
    rm__suspect_step(c, j, q->step, q->excluded_ranks, q->n_excluded_ranks);
  }
  r.job_state = (Ringmaster__V1__JobState)j->info.state;
  r.generation = j->info.generation;
  rm__reply(c, call, RM__GRPC_OK, NULL, &r.base);
}

static void on_leave(rm_coord_t *c, rm__call_t *call,
                     const Ringmaster__V1__LeaveRequest *q)
{
  rm__job_t *j = NULL; /* set by check_job when it returns 0 */
  rm__worker_t *w;
  Ringmaster__V1__LeaveResponse r = RINGMASTER__V1__LEAVE_RESPONSE__INIT;
  if (check_worker(c, call, q->job_id, q->token, q->generation, q->worker_id, &j, &w))
    return;
  if (q->step > w->step) w->step = q->step;
  if (!rm_job_state_terminal(j->info.state) && q->ok && w->state < RM_WORKER_LOST)
    rm__result_offer(c, j, w, q->summary);
  if (!rm_job_state_terminal(j->info.state))
    rm__job_worker_left(c, j, w, q->ok, q->error && q->error[0] ? q->error : "unknown error");
  r.job_state = (Ringmaster__V1__JobState)j->info.state;
  rm__reply(c, call, RM__GRPC_OK, NULL, &r.base);
}

/* ---- Session: the agent's stream of heartbeats (service.proto) ----
 * One message of it (server_group.c SESSIONS delivers them in order). The first
 * opens it: the job, its token and the worker are checked (not the
 * generation: the agent opens it at its first Join answer), and the call
 * is linked as the worker's SESSION park, so its cancellation by the
 * transport declares the worker lost (rm__park_drop). Every later one is
 * a heartbeat with on_heartbeat's checks; a failing check answers the call
 * (ends the stream) with on_heartbeat's status and text. A job that ended
 * is told in the final message, then status OK. A heartbeat may carry a
 * barrier arrival: on_barrier's after the heartbeat's checks, waiting in
 * the call's barrier park instead of a parked call, and answered by a
 * message of the stream (waiters.c, server_group.c SESSIONS); or a step-gate
 * call, the same way in its gate park (rpc_gate.c's after its checks).
 * One of the two at a time: a gate's stale answer ends the stream
 * (rm__reply unlinks all three parks) from inside the gate's walk of
 * j->parked, which must not lose its next park: the session's own park
 * was linked before the gate park, and no barrier park is linked. */
static void on_session(rm_coord_t *c, rm__call_t *call,
                       const Ringmaster__V1__SessionRequest *q)
{
  rm__park_t *p = rm__call_park(call);
  rm__job_t *j = NULL; /* set by check_job when it returns 0 */
  rm__worker_t *w;
  if (p->kind != RM__PARK_SESSION) {
    if (q->barrier || q->gate) {
      fail(c, call, RM__GRPC_INVALID_ARGUMENT, "a %s on a Session's opening message",
           q->barrier ? "barrier arrival" : "step-gate call");
      return;
    }
    if (check_job(c, call, q->job_id, q->token, &j)) return;
    if (!(w = find_worker(c, call, j, q->worker_id))) return;
    p->kind = RM__PARK_SESSION;
    p->call = call;
    p->job_id = j->info.id;
    p->worker_id = w->id;
    p->gate_push = q->gate_push;
    p->moved_on_push = q->moved_on_push;
    rm__park_link(j, p);
  } else {
    if (q->job_id != p->job_id || q->worker_id != p->worker_id) {
      fail(c, call, RM__GRPC_INVALID_ARGUMENT, "a session carries the heartbeats of the "
           "worker that opened it (job %llu, worker %llu)", (unsigned long long)p->job_id,
           (unsigned long long)p->worker_id);
      return;
    }
    if (check_worker(c, call, q->job_id, q->token, q->generation, q->worker_id, &j, &w))
      return;
  }
  if (q->step > w->step) w->step = q->step;
  if (rm_job_state_terminal(j->info.state)) {
    Ringmaster__V1__SessionResponse r = RINGMASTER__V1__SESSION_RESPONSE__INIT;
    r.job_state = (Ringmaster__V1__JobState)j->info.state;
    r.generation = j->info.generation;
    r.reason = j->info.reason;
    rm__reply(c, call, RM__GRPC_OK, NULL, &r.base);
    return;
  }
  if (!q->barrier && !q->gate) return; /* a heartbeat alone */
  rm__park_t *wp = rm__call_wpark(call);
  int waiting = wp && wp->next;
  if (waiting || (q->barrier && q->gate)) {
    fail(c, call, RM__GRPC_INVALID_ARGUMENT, "a Session carries one barrier arrival or "
         "step-gate call at a time (it waits in %s)",
         !waiting ? "neither: this message has both"
         : wp->kind == RM__PARK_BARRIER ? "a barrier" : "a step gate");
    return;
  }
  wp = rm__call_wpark_make(call);
  /* the kind first: an answer at once is framed by it (rm__park_answer) */
  if (q->barrier) {
    wp->kind = RM__PARK_BARRIER;
    barrier_arrive(c, call, j, w, q->barrier->name, q->barrier->timeout_ms, q->step,
                   q->barrier->payload, wp);
  }
  if (q->gate) {
    c->ctr.step_gate_calls_session++;
    wp->kind = RM__PARK_GATE;
    wp->call = call;
    rm__gate_request(c, j, w, q->step, q->gate->ready, q->gate->wait_ms, wp);
  }
}

/* ---- Watch: a server stream of the job's events ---- */
static void on_watch(rm_coord_t *c, rm__call_t *call,
                     const Ringmaster__V1__WatchRequest *q)
{
  rm__job_t *j = NULL; /* set by check_job when it returns 0 */
  if (check_job(c, call, q->job_id, q->token, &j)) return;
  rm__park_t *p = rm__call_park(call);
  p->kind = RM__PARK_WATCH;
  p->call = call;
  p->job_id = j->info.id;
  p->worker_id = q->worker_id;
  p->watch_seq = q->after_seq;
  rm__park_link(j, p);
  rm__watch_next(c, p);
}

void rm__watch_next(rm_coord_t *c, rm__park_t *p)
{
  rm_event_t *ev = NULL;
  size_t n = 0;
  rm__job_t *j = rm__job_find(c, p->job_id);
  if (!p->next || p->watch_sending || !j) return;
  rm__job_events_after(c, p->job_id, p->watch_seq, 1, &ev, &n);
  if (n) {
    Ringmaster__V1__Event e = RINGMASTER__V1__EVENT__INIT;
    e.seq = ev->seq;
    e.job_id = ev->job_id;
    e.time_ms = ev->time_ms;
    e.kind = ev->kind;
    e.rank = ev->rank;
    e.generation = ev->generation;
    e.message = ev->message;
    p->watch_seq = ev->seq;
    rm__stream_send(c, p->call, &e.base);
  } else if (rm_job_state_terminal(j->info.state)) {
    rm__reply(c, p->call, RM__GRPC_OK, NULL, NULL); /* end of stream */
  }
  free(ev);
}

/* Walks j->watchers only (model.h): an event of a join wave no longer
 * visits the N parked Joins. */
void rm__rpc_watch_kick(rm_coord_t *c, rm__job_t *j)
{
  for (rm__park_t *p = j->watchers.wnext, *n; p != &j->watchers; p = n) {
    n = p->wnext;
    rm__watch_next(c, p);
  }
}

void rm__rpc_dispatch(rm_coord_t *c, rm__call_t *call, int method,
                      const ProtobufCMessage *req, int admin_ok)
{
  switch (method) {
  case RM__M_JOIN: on_join(c, call, (const void *)req); break;
  case RM__M_HEARTBEAT: on_heartbeat(c, call, (const void *)req); break;
  case RM__M_BARRIER: on_barrier(c, call, (const void *)req); break;
  case RM__M_REPORT_STEP: on_report_step(c, call, (const void *)req); break;
  case RM__M_WATCH: on_watch(c, call, (const void *)req); break;
  case RM__M_LEAVE: on_leave(c, call, (const void *)req); break;
  case RM__M_REPORT_FAILURE: rm__rpc_report_failure(c, call, (const void *)req); break;
  case RM__M_STEP_GATE: rm__rpc_step_gate(c, call, (const void *)req); break;
  case RM__M_ATTACH: rm__rpc_attach(c, call, (const void *)req); break;
  case RM__M_REPORT_EXIT: rm__rpc_report_exit(c, call, (const void *)req); break;
  case RM__M_SESSION: on_session(c, call, (const void *)req); break;
  default: rm__rpc_jobs(c, call, method, req, admin_ok); break;
  }
}
