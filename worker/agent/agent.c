/*
 * agent.c - ringmaster-worker's life: join, build the communicator, run the
 * workload, report, leave; re-join when the coordinator moves to a new
 * generation.
 *
 *   open data endpoint
 *   loop:
 *     JOIN (long-poll until the group forms; UNAVAILABLE -> retry with
 *           backoff until connect_timeout_ms, then exit 3 with the reason)
 *     job finished?             -> exit (0 succeeded, 1 otherwise)
 *     rm_comm_init(peers of this generation)
 *     heartbeat thread on; workload run(); heartbeat thread off
 *     finished all steps        -> LEAVE ok, exit 0
 *     coordinator said stale    -> destroy comm, loop (re-join)
 *     data-plane error          -> ReportFailure(failed peer, status, error)
 *                                  so the coordinator can declare the peer
 *                                  lost at once (recovery.c), then wait (2
 *                                  heartbeat timeouts) for its decision: job
 *                                  failed -> exit 1, new generation -> loop,
 *                                  else LEAVE failed (refused as stale: the
 *                                  job is re-forming -> loop; else exit 1)
 *
 * RECOVERY TIMING. The first moment this worker knows something broke (its
 * collective failed, or the coordinator moved on) is kept; when the first
 * step of a later generation completes, one line is logged:
 *   ringmaster-worker: recovered gen=G step=S detect_ms=T0 resume_ms=T1
 * (wall-clock ms), which tests and bench/recovery read.
 *
 * STRAGGLER POLICIES. Under backup/deadline/coded the workload asks the
 * coordinator for each step's participant set through env->gate (StepGate
 * rpc, below).
 *
 * SESSION STREAM. After its first Join answer the agent keeps a Watch call
 * open with its worker id (asking for no events), re-opened 500 ms after
 * it ends while the agent lives, cancelled only at exit (after Leave). If
 * this process dies its kernel closes the connection and the coordinator
 * sees that call cancelled by the transport: the worker is lost at once
 * (recovery.c detection source 2), without waiting for the heartbeat
 * timeout (RINGMASTER_SESSION_STREAM=0 turns it off, for measuring the
 * other sources). Devices come from rm__devices_probe (worker/transport/devices.h)
 * once at start, reported in every Join. The first stdout line is
 *   ringmaster-worker: pid P
 * so tests (and operators) reading a launcher's log know which process it is.
 *
 * "Stale" is learned from the heartbeat thread or a step report: the job's
 * generation moved on, the job ended, or the coordinator refused our
 * generation (FAILED_PRECONDITION, e.g. after it restarted). The heartbeat
 * thread then aborts the communicator (rm_comm_abort is thread-safe) so a
 * collective blocked on peers returns at once.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "control.h"
#include "transport/devices.h"
#include "ringmaster/ringmaster.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"
#include "workloads/workload.h"

enum { G_OK = 0, G_DEADLINE = 4, G_NOT_FOUND = 5, G_FAILED_PRECONDITION = 9,
       G_UNAVAILABLE = 14, G_UNAUTHENTICATED = 16 };

typedef struct agent {
  const rm_agent_opts_t *o;
  rm__ctl_t *ctl;
  rm_endpoint_t *ep;
  char host[128];
  uint64_t worker_id, generation, steps_done, max_steps;
  int rank, world, hb_interval_ms;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int hb_stop;
  int stale;        /* under mu */
  int job_state;    /* last known, under mu */
  char reason[256]; /* under mu */
  rm_comm_t *comm;  /* under mu, for abort */
  const rm_workload_ops_t *wl;
  void *wl_state;
  int64_t broke_wall_ms;   /* first sign of a failure, 0 = none pending */
  uint64_t broke_gen;
  char devices[256];       /* rm__devices_probe, reported in Join */
  pthread_t session;       /* the session stream's thread */
  int session_on, session_stop; /* under mu */
  rm__ctl_stream_t *stream;     /* under mu: the open session call */
} agent_t;



static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void mark_stale(agent_t *a, int job_state, const char *why)
{
  pthread_mutex_lock(&a->mu);
  if (!a->broke_wall_ms) {
    a->broke_wall_ms = rm__wall_ms();
    a->broke_gen = a->generation;
  }
  if (!a->stale) RM_INFO("coordinator moved on: %s", why);
  a->stale = 1;
  if (job_state >= 0) a->job_state = job_state;
  if (why && !a->reason[0]) snprintf(a->reason, sizeof a->reason, "%s", why);
  if (a->comm) rm_comm_abort(a->comm);
  pthread_mutex_unlock(&a->mu);
}

/* ---- heartbeats ---- */
static int heartbeat_once(agent_t *a)
{
  Ringmaster__V1__HeartbeatRequest q = RINGMASTER__V1__HEARTBEAT_REQUEST__INIT;
  Ringmaster__V1__HeartbeatResponse *r = NULL;
  char msg[256];
  q.job_id = a->o->job_id;
  q.token = (char *)a->o->token;
  q.generation = a->generation;
  q.worker_id = a->worker_id;
  q.step = a->steps_done;
  int rc = rm__ctl_call(a->ctl, "/ringmaster.v1.Worker/Heartbeat", &q.base,
                        &ringmaster__v1__heartbeat_response__descriptor,
                        (ProtobufCMessage **)&r, 5000, msg, sizeof msg);
  if (rc == G_OK) {
    if (r->job_state >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED)
      mark_stale(a, r->job_state, r->reason[0] ? r->reason : "job finished");
    else if (r->generation != a->generation)
      mark_stale(a, -1, "new generation");
    protobuf_c_message_free_unpacked(&r->base, NULL);
  } else if (rc == G_FAILED_PRECONDITION || rc == G_NOT_FOUND ||
             rc == G_UNAUTHENTICATED) {
    mark_stale(a, -1, msg);
  } else {
    RM_DEBUG("heartbeat: status %d: %s", rc, msg);
  }
  return rc;
}

static void *hb_thread(void *arg)
{
  agent_t *a = arg;
  pthread_mutex_lock(&a->mu);
  while (!a->hb_stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + (int64_t)a->hb_interval_ms * 1000000;
    ts.tv_sec += ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    if (a->hb_stop) break;
    pthread_mutex_unlock(&a->mu);
    heartbeat_once(a);
    pthread_mutex_lock(&a->mu);
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

/* ---- session stream ---- */
static void *session_thread(void *arg)
{
  agent_t *a = arg;
  char msg[256];
  pthread_mutex_lock(&a->mu);
  while (!a->session_stop) {
    Ringmaster__V1__WatchRequest q = RINGMASTER__V1__WATCH_REQUEST__INIT;
    q.job_id = a->o->job_id;
    q.token = (char *)a->o->token;
    q.generation = a->generation;
    q.worker_id = a->worker_id;
    q.after_seq = UINT64_MAX / 2; /* a session: no events wanted */
    pthread_mutex_unlock(&a->mu);
    rm__ctl_stream_t *s = rm__ctl_stream_open(a->ctl, "/ringmaster.v1.Worker/Watch",
                                              &q.base);
    pthread_mutex_lock(&a->mu);
    a->stream = s;
    if (s && a->session_stop) rm__ctl_stream_cancel(s);
    pthread_mutex_unlock(&a->mu);
    if (s) {
      int rc = rm__ctl_stream_wait(s, msg, sizeof msg);
      RM_DEBUG("session stream ended: status %d: %s", rc, msg);
    }
    pthread_mutex_lock(&a->mu);
    a->stream = NULL;
    rm__ctl_stream_free(s);
    if (a->session_stop) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 500000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&a->cv, &a->mu, &ts);
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

static void session_start(agent_t *a)
{
  if (a->session_on || !a->worker_id) return;
  if (!rm__env_int("RINGMASTER_SESSION_STREAM", 1)) return; /* bench knob */
  a->session_stop = 0;
  a->session_on = pthread_create(&a->session, NULL, session_thread, a) == 0;
}

static void session_stop(agent_t *a)
{
  if (!a->session_on) return;
  pthread_mutex_lock(&a->mu);
  a->session_stop = 1;
  if (a->stream) rm__ctl_stream_cancel(a->stream);
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  pthread_join(a->session, NULL);
  a->session_on = 0;
}

/* ---- join ---- */
static int join(agent_t *a, Ringmaster__V1__JoinResponse **out)
{
  int backoff = 100;
  int64_t give_up = rm__now_ns() + (int64_t)a->o->connect_timeout_ms * 1000000;
  char msg[256];
  for (;;) {
    Ringmaster__V1__JoinRequest q = RINGMASTER__V1__JOIN_REQUEST__INIT;
    Ringmaster__V1__JoinResponse *r = NULL;
    q.job_id = a->o->job_id;
    q.token = (char *)a->o->token;
    q.generation = a->generation;
    q.worker_id = a->worker_id;
    q.host = a->host;
    q.data_addr = (char *)rm_endpoint_address(a->ep);
    q.devices = a->devices;
    q.rank_hint = a->o->rank_hint;
    q.world_hint = a->o->world_hint;
    q.wait_ms = 5000;
    q.steps_done = a->steps_done;
    int rc = rm__ctl_call(a->ctl, "/ringmaster.v1.Worker/Join", &q.base,
                          &ringmaster__v1__join_response__descriptor,
                          (ProtobufCMessage **)&r, 10000, msg, sizeof msg);
    if (rc == G_OK) {
      a->worker_id = r->worker_id;
      if (r->formed || r->job_state >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED) {
        *out = r;
        return 0;
      }
      protobuf_c_message_free_unpacked(&r->base, NULL);
      give_up = rm__now_ns() + (int64_t)a->o->connect_timeout_ms * 1000000;
      backoff = 100;
      continue;
    }
    if (rc != G_UNAVAILABLE && rc != G_DEADLINE) {
      fprintf(stderr, "ringmaster-worker: the coordinator refused to let us "
              "join job %llu: %s (status %d)\n",
              (unsigned long long)a->o->job_id, msg, rc);
      return -1;
    }
    if (rm__now_ns() > give_up) {
      fprintf(stderr, "ringmaster-worker: coordinator %s unreachable for %d ms, "
              "giving up: %s\n", a->o->coordinator, a->o->connect_timeout_ms, msg);
      return -1;
    }
    RM_INFO("coordinator %s unavailable (%s); retrying in %d ms",
            a->o->coordinator, msg, backoff);
    sleep_ms(backoff);
    backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
  }
}

/* ---- steps ---- */
/* 0 left, 1 refused for a stale generation (re-join and leave again), -1. */
static int report(void *ctx, const rm_step_report_t *s)
{
  agent_t *a = ctx;
  Ringmaster__V1__ReportStepRequest q = RINGMASTER__V1__REPORT_STEP_REQUEST__INIT;
  Ringmaster__V1__ReportStepResponse *r = NULL;
  char msg[256];
  a->steps_done = s->step;
  q.job_id = a->o->job_id;
  q.token = (char *)a->o->token;
  q.generation = a->generation;
  q.worker_id = a->worker_id;
  q.step = s->step;
  q.compute_ms = s->compute_ms;
  q.comm_ms = s->comm_ms;
  q.wait_ms = s->wait_ms;
  q.loss = s->loss;
  q.accuracy = s->accuracy;
  q.allreduce_bytes = s->allreduce_bytes;
  q.param_checksum = s->param_checksum;
  q.checkpoint_step = s->checkpoint_step;
  if (a->broke_wall_ms && a->generation > a->broke_gen) {
    printf("ringmaster-worker: recovered gen=%llu step=%llu detect_ms=%lld "
           "resume_ms=%lld\n", (unsigned long long)a->generation,
           (unsigned long long)s->step, (long long)a->broke_wall_ms,
           (long long)rm__wall_ms());
    fflush(stdout);
    pthread_mutex_lock(&a->mu);
    a->broke_wall_ms = 0;
    pthread_mutex_unlock(&a->mu);
  }
  int rc = rm__ctl_call(a->ctl, "/ringmaster.v1.Worker/ReportStep", &q.base,
                        &ringmaster__v1__report_step_response__descriptor,
                        (ProtobufCMessage **)&r, 5000, msg, sizeof msg);
  if (rc == G_OK) {
    if (r->job_state >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED)
      mark_stale(a, r->job_state, "job finished");
    else if (r->generation != a->generation)
      mark_stale(a, -1, "new generation");
    protobuf_c_message_free_unpacked(&r->base, NULL);
  } else if (rc == G_FAILED_PRECONDITION || rc == G_NOT_FOUND) {
    mark_stale(a, -1, msg);
  }
  pthread_mutex_lock(&a->mu);
  int stop = a->stale;
  pthread_mutex_unlock(&a->mu);
  return stop;
}

static int leave(agent_t *a, int ok, const char *error)
{
  Ringmaster__V1__LeaveRequest q = RINGMASTER__V1__LEAVE_REQUEST__INIT;
  Ringmaster__V1__LeaveResponse *r = NULL;
  char msg[256], summary[512] = "";
  if (a->wl && a->wl->summary && a->wl_state) a->wl->summary(a->wl_state, summary, sizeof summary);
  q.job_id = a->o->job_id;
  q.token = (char *)a->o->token;
  q.generation = a->generation;
  q.worker_id = a->worker_id;
  q.ok = ok;
  q.error = (char *)(error ? error : "");
  q.step = a->steps_done;
  q.summary = summary;
  for (int i = 0; i < 5; i++) {
    int rc = rm__ctl_call(a->ctl, "/ringmaster.v1.Worker/Leave", &q.base,
                          &ringmaster__v1__leave_response__descriptor,
                          (ProtobufCMessage **)&r, 5000, msg, sizeof msg);
    if (rc == G_OK) {
      protobuf_c_message_free_unpacked(&r->base, NULL);
      return 0;
    }
    if (rc == G_FAILED_PRECONDITION) { /* new generation: re-join first */
      RM_INFO("leave refused (%s): re-joining", msg);
      return 1;
    }
    if (rc != G_UNAVAILABLE) break;
    sleep_ms(500 << i);
  }
  RM_WARN("leave: %s", msg);
  return -1;
}

/* The per-step participant gate (workload.h rm_step_gate_fn). */
static int step_gate(void *ctx, uint64_t step, int ready, int wait_ms,
                     uint8_t *members, int *dropped)
{
  agent_t *a = ctx;
  Ringmaster__V1__StepGateRequest q = RINGMASTER__V1__STEP_GATE_REQUEST__INIT;
  Ringmaster__V1__StepGateResponse *r = NULL;
  char msg[256];
  int ret = -1;
  q.job_id = a->o->job_id;
  q.token = (char *)a->o->token;
  q.generation = a->generation;
  q.worker_id = a->worker_id;
  q.step = step;
  q.ready = ready != 0;
  q.wait_ms = (uint32_t)(wait_ms > 0 ? wait_ms : 0);
  int rc = rm__ctl_call(a->ctl, "/ringmaster.v1.Worker/StepGate", &q.base,
                        &ringmaster__v1__step_gate_response__descriptor,
                        (ProtobufCMessage **)&r, wait_ms + 5000, msg, sizeof msg);
  if (rc == G_OK) {
    ret = 0;
    if (r->decided && r->members.len == (size_t)a->world) {
      memcpy(members, r->members.data, r->members.len);
      *dropped = r->dropped;
      ret = 1;
    } else if (r->dropped) {
      ret = -1; /* a step behind the group: cannot happen when in sync */
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
  } else if (rc == G_FAILED_PRECONDITION || rc == G_NOT_FOUND) {
    mark_stale(a, -1, msg);
  } else {
    RM_WARN("StepGate: status %d: %s", rc, msg);
  }
  return ret;
}

/* A survivor names the peer its data plane lost (recovery.c). */
static void report_failure(agent_t *a, rm_comm_t *comm, rm_status_t st)
{
  Ringmaster__V1__ReportFailureRequest q =
      RINGMASTER__V1__REPORT_FAILURE_REQUEST__INIT;
  Ringmaster__V1__ReportFailureResponse *r = NULL;
  char msg[256];
  q.job_id = a->o->job_id;
  q.token = (char *)a->o->token;
  q.generation = a->generation;
  q.worker_id = a->worker_id;
  q.failed_rank = comm ? rm_comm_failed_peer(comm) : -1;
  q.status = (char *)rm_status_name(st);
  q.error = (char *)(comm ? rm_comm_last_error(comm) : "");
  q.step = a->steps_done;
  int rc = rm__ctl_call(a->ctl, "/ringmaster.v1.Worker/ReportFailure", &q.base,
                        &ringmaster__v1__report_failure_response__descriptor,
                        (ProtobufCMessage **)&r, 5000, msg, sizeof msg);
  if (rc == G_OK) {
    RM_INFO("reported %s naming rank %d: %s", q.status, q.failed_rank,
            r->accepted ? "declared lost" : "not declared lost");
    protobuf_c_message_free_unpacked(&r->base, NULL);
  } else {
    RM_INFO("ReportFailure: status %d: %s", rc, msg);
  }
}

/* After a data-plane failure: give the coordinator two heartbeat timeouts to
 * decide (job failed, or a new generation). 1 = re-join, 0 = give up. */
static int await_decision(agent_t *a)
{
  int64_t until = rm__now_ns() + (int64_t)a->hb_interval_ms * 8 * 1000000;
  while (rm__now_ns() < until) {
    heartbeat_once(a);
    pthread_mutex_lock(&a->mu);
    int stale = a->stale;
    pthread_mutex_unlock(&a->mu);
    if (stale) return 1;
    sleep_ms(200);
  }
  return 0;
}

static int make_workload(agent_t *a, const Ringmaster__V1__JobSpec *spec)
{
  const char *name = a->o->workload ? a->o->workload : spec->workload;
  const char *opts = a->o->workload_options ? a->o->workload_options
                                            : spec->workload_options;
  char err[256] = "";
  if (a->wl) return 0;
  a->max_steps = a->o->steps ? a->o->steps : spec->steps;
  a->wl = rm__workload_find(name);
  if (!a->wl) snprintf(err, sizeof err, "unknown workload '%s'", name);
  else if (a->wl->create(opts, &a->wl_state, err, sizeof err) != RM_OK)
    a->wl_state = NULL;
  if (a->wl_state) return 0;
  fprintf(stderr, "ringmaster-worker: %s\n", err);
  leave(a, 0, err);
  return -1;
}

/* One generation. Returns 0 done, 1 re-join, -1 failed. */
static int run_generation(agent_t *a, const Ringmaster__V1__JoinResponse *r)
{
  rm_comm_config_t cfg;
  rm_comm_t *comm = NULL;
  const char **peers = calloc(r->n_peers ? r->n_peers : 1, sizeof *peers);
  pthread_t hb;
  int ret = -1;
  char err[300];
  for (size_t i = 0; i < r->n_peers; i++) peers[i] = r->peers[i]->data_addr;
  rm_comm_config_init(&cfg);
  cfg.job_id = a->o->job_id;
  cfg.generation = r->generation;
  cfg.rank = (int)r->rank;
  cfg.world = (int)r->world;
  cfg.peers = peers;
  cfg.endpoint = a->ep;
  if (a->o->data_timeout_ms > 0) cfg.timeout_ms = a->o->data_timeout_ms;
  if (r->spec && r->spec->algorithm[0]) rm_algo_parse(r->spec->algorithm, &cfg.algorithm);
  a->generation = r->generation;
  a->rank = (int)r->rank;
  a->world = (int)r->world;
  a->hb_interval_ms = r->heartbeat_interval_ms ? (int)r->heartbeat_interval_ms : 1000;
  a->hb_stop = 0;
  pthread_create(&hb, NULL, hb_thread, a);
  RM_INFO("generation %llu: rank %d of %d", (unsigned long long)a->generation,
          a->rank, a->world);
  rm_status_t st = rm_comm_init(&cfg, &comm);
  if (st == RM_OK) {
    rm_workload_env_t env = {.comm = comm, .rank = a->rank, .world = a->world,
                             .start_step = r->start_step,
                             .max_steps = a->max_steps, .report = report,
                             .report_ctx = a};
    const char *pol = r->spec && r->spec->straggler_policy ? r->spec->straggler_policy : "none";
    env.job_id = a->o->job_id;
    env.generation = r->generation;
    env.checkpoint_every = r->spec ? r->spec->checkpoint_every : 0;
    env.checkpoint_step = r->checkpoint_step;
    env.straggler_policy = pol;
    env.step_quorum = (int)r->step_quorum;
    env.coded_s = (int)r->coded_s;
    env.gate = strcmp(pol, "none") && pol[0] ? step_gate : NULL;
    pthread_mutex_lock(&a->mu);
    a->comm = comm;
    if (a->stale) rm_comm_abort(comm);
    pthread_mutex_unlock(&a->mu);
    if (a->steps_done < r->start_step) a->steps_done = r->start_step;
    st = a->wl->run(a->wl_state, &env);
    if (st == RM_OK)
      snprintf(err, sizeof err, "workload %s stopped after step %llu of the "
               "job's %llu", a->wl->name, (unsigned long long)a->steps_done,
               (unsigned long long)a->max_steps);
    else
      snprintf(err, sizeof err, "%s", rm_comm_last_error(comm)[0] /* "RM_ERR_X: why" */
               ? rm_comm_last_error(comm) : rm_status_name(st));
    pthread_mutex_lock(&a->mu);
    int was_stale = a->stale;
    pthread_mutex_unlock(&a->mu);
    if (st != RM_OK && st != RM_ERR_INTERNAL && !was_stale)
      report_failure(a, comm, st);
  } else {
    snprintf(err, sizeof err, "communicator setup failed: %s", rm_status_name(st));
  }
  pthread_mutex_lock(&a->mu);
  a->hb_stop = 1;
  a->comm = NULL;
  pthread_cond_broadcast(&a->cv);
  int stale = a->stale;
  pthread_mutex_unlock(&a->mu);
  pthread_join(hb, NULL);
  if (comm) rm_comm_destroy(comm);
  free(peers);
  if (st != RM_OK && st != RM_ERR_INTERNAL && !stale) {
    pthread_mutex_lock(&a->mu);
    if (!a->broke_wall_ms) {
      a->broke_wall_ms = rm__wall_ms();
      a->broke_gen = a->generation;
    }
    pthread_mutex_unlock(&a->mu);
  }
  if (st == RM_OK && a->steps_done >= a->max_steps) {
    ret = leave(a, 1, NULL); /* 0 done, 1 re-join, -1 failed */
  } else if (stale || (st != RM_ERR_INTERNAL && await_decision(a))) {
    ret = 1;
  } else {
    /* no decision seen (e.g. our heartbeats could not reach a coordinator
     * that restarted meanwhile): Leave reporting the failure; a coordinator
     * that refuses it for a stale generation is re-forming the job and
     * wants us back, so re-join instead of exiting */
    fprintf(stderr, "ringmaster-worker: rank %d failed: %s\n", a->rank, err);
    if (leave(a, 0, err) == 1) ret = 1;
  }
  return ret;
}

int rm__agent_run(const rm_agent_opts_t *o)
{
  agent_t a;
  char err[256];
  int rc = 3;
  memset(&a, 0, sizeof a);
  a.o = o;
  pthread_mutex_init(&a.mu, NULL);
  pthread_cond_init(&a.cv, NULL);
  printf("ringmaster-worker: pid %d\n", (int)getpid());
  fflush(stdout);
  rm__devices_probe(a.devices, sizeof a.devices);
  if (o->host) snprintf(a.host, sizeof a.host, "%s", o->host);
  else if (gethostname(a.host, sizeof a.host)) snprintf(a.host, sizeof a.host, "unknown");
  a.host[sizeof a.host - 1] = 0;
  if (rm_endpoint_open(o->data_addr ? o->data_addr : "127.0.0.1:0", &a.ep) != RM_OK) {
    fprintf(stderr, "ringmaster-worker: cannot listen on data address %s\n",
            o->data_addr ? o->data_addr : "127.0.0.1:0");
    return 3;
  }
  a.ctl = rm__ctl_open(o->coordinator, o->tls_ca, o->tls_cert, o->tls_key, err, sizeof err);
  if (!a.ctl) {
    fprintf(stderr, "ringmaster-worker: %s\n", err);
    goto out;
  }
  for (;;) {
    Ringmaster__V1__JoinResponse *r = NULL;
    if (join(&a, &r)) {
      rc = 3;
      break;
    }
    session_start(&a);
    if (!r->formed) { /* the job is over */
      rc = r->job_state == RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED ? 0 : 1;
      fprintf(stderr, "ringmaster-worker: job %llu is %s\n", (unsigned long long)o->job_id,
              r->job_state == RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED ? "succeeded"
              : r->job_state == RINGMASTER__V1__JOB_STATE__JOB_STATE_CANCELLED ? "cancelled" : "failed");
      protobuf_c_message_free_unpacked(&r->base, NULL);
      break;
    }
    pthread_mutex_lock(&a.mu);
    a.stale = 0;
    a.reason[0] = 0;
    pthread_mutex_unlock(&a.mu);
    a.generation = r->generation; /* a refused workload Leaves at this one */
    if (make_workload(&a, r->spec)) {
      protobuf_c_message_free_unpacked(&r->base, NULL);
      rc = 1;
      break;
    }
    int g = run_generation(&a, r);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    if (g == 1) continue;
    rc = g == 0 ? 0 : 1;
    break;
  }
out:
  session_stop(&a);
  if (a.wl && a.wl_state) a.wl->destroy(a.wl_state);
  rm__ctl_close(a.ctl);
  rm_endpoint_close(a.ep);
  pthread_cond_destroy(&a.cv);
  pthread_mutex_destroy(&a.mu);
  return rc;
}
