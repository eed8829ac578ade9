/*
 * session.c - a worker's membership of a coordinator job: configuration,
 * join, re-form, leave, close, getters (design and states in ringmaster.h,
 * invariants in session_int.h).
 *
 *   rm_session_join:  endpoint + control channel, then form()
 *   form():           JOIN (long-poll until the group forms; UNAVAILABLE ->
 *                     retry with backoff until connect_timeout_ms) ->
 *                     job over?  -> RM_ERR_JOB_ENDED
 *                     heartbeats + session stream on, rm_comm_init(peers)
 *   rm_session_reform (after a failed collective or RM_ERR_RECONFIGURED;
 *                     its steps and their costs: RE-FORMATION TIMELINE):
 *                     data-plane failure, coordinator not yet moved on ->
 *                       ReportFailure(failed peer) so it can declare the
 *                       peer lost at once, then wait (8 heartbeat
 *                       intervals) for its decision;
 *                       no decision -> LEAVE(failed): refused as stale ->
 *                       the job is re-forming, join it; else give up
 *                     destroy the communicator, form() the next generation
 *
 * The Join long-poll answers at most every 5 s; a coordinator that answers
 * but never forms the group keeps us waiting (the job's own deadlines
 * decide), one that does not answer for connect_timeout_ms is given up.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_int.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"
#include "session/session_int.h"
#include "transport/probe.h"

static void copy(char *dst, size_t n, const char *src)
{
  snprintf(dst, n, "%s", src ? src : "");
}

static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- configuration ---- */
void rm_session_config_init(rm_session_config_t *cfg)
{
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->version = RM_SESSION_CONFIG_VERSION;
  cfg->rank_hint = -1;
}

size_t rm_session_config_size(void) { return sizeof(rm_session_config_t); }

static const char *env(const char *name)
{
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

/* The hint is also the worker's LAUNCH INDEX (the coordinator's log link and
 * how it tells which member a dead process was). RINGMASTER_LAUNCH_INDEX
 * wins: our launchers set it for exactly this process, while SLURM_PROCID
 * or JOB_COMPLETION_INDEX may be inherited from a coordinator that itself
 * runs inside a Slurm step or an Indexed Job pod. */
static void hints(rm_session_config_t *cfg)
{
  const char *procid = env("SLURM_PROCID"), *ntasks = env("SLURM_NTASKS");
  const char *index = env("JOB_COMPLETION_INDEX");
  const char *lindex = env("RINGMASTER_LAUNCH_INDEX");
  cfg->rank_hint = -1;
  if (lindex) {
    cfg->rank_hint = atoi(lindex);
    cfg->world_hint = (int)rm__env_int("RINGMASTER_LAUNCH_WORLD", 0);
  } else if (procid && ntasks) {
    cfg->rank_hint = atoi(procid);
    cfg->world_hint = atoi(ntasks);
  } else if (index) {
    cfg->rank_hint = atoi(index);
    cfg->world_hint = (int)rm__env_int("RINGMASTER_WORLD", 0);
  }
}

rm_status_t rm_session_config_from_env(rm_session_config_t *cfg)
{
  const char *job;
  if (!cfg) return RM_ERR_INVALID_ARG;
  cfg->coordinator = env("RINGMASTER_COORDINATOR");
  cfg->token = env("RINGMASTER_TOKEN");
  job = env("RINGMASTER_JOB");
  cfg->job_id = job ? strtoull(job, NULL, 10) : 0;
  if (env("RINGMASTER_HOST")) cfg->host = env("RINGMASTER_HOST");
  if (env("RINGMASTER_DATA_ADDR")) cfg->data_addr = env("RINGMASTER_DATA_ADDR");
  hints(cfg);
  cfg->connect_timeout_ms = (int)rm__env_int("RINGMASTER_COORDINATOR_TIMEOUT_MS",
                                             cfg->connect_timeout_ms);
  cfg->data_timeout_ms = (int)rm__env_int("RINGMASTER_DATA_TIMEOUT_MS",
                                          cfg->data_timeout_ms);
  if (env("RINGMASTER_TLS_CA")) cfg->tls_ca = env("RINGMASTER_TLS_CA");
  if (env("RINGMASTER_TLS_CERT")) cfg->tls_cert = env("RINGMASTER_TLS_CERT");
  if (env("RINGMASTER_TLS_KEY")) cfg->tls_key = env("RINGMASTER_TLS_KEY");
  if (!cfg->coordinator || !cfg->token || !cfg->job_id) return RM_ERR_INVALID_ARG;
  return RM_OK;
}

/* ---- errors ---- */
static rm_status_t fail(rm_session_t *s, rm_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static rm_status_t fail(rm_session_t *s, rm_status_t st, const char *fmt, ...)
{
  va_list ap;
  int n = snprintf(s->last_error, sizeof s->last_error, "%s: ", rm_status_name(st));
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof s->last_error)
    vsnprintf(s->last_error + n, sizeof s->last_error - (size_t)n, fmt, ap);
  va_end(ap);
  return st;
}

rm_status_t rm__session_moved_on(rm_session_t *s)
{
  pthread_mutex_lock(&s->mu);
  int stale = s->stale, js = s->job_state;
  char why[sizeof s->reason];
  copy(why, sizeof why, s->reason);
  pthread_mutex_unlock(&s->mu);
  if (!stale) return RM_OK;
  if (js >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED)
    return fail(s, RM_ERR_JOB_ENDED, "job %llu ended: %s",
                (unsigned long long)s->job_id, why);
  return fail(s, RM_ERR_RECONFIGURED, "generation %llu is over: %s; "
              "call rm_session_reform", (unsigned long long)s->generation, why);
}

/* gRPC status of a refused Join -> our status. */
static rm_status_t join_refused(int rc)
{
  if (rc == RM__G_UNAUTHENTICATED) return RM_ERR_DENIED;
  if (rc == RM__G_NOT_FOUND) return RM_ERR_NOT_FOUND;
  if (rc == RM__G_FAILED_PRECONDITION) return RM_ERR_JOB_ENDED;
  return RM_ERR_UNAVAILABLE;
}

/* ---- join ---- */
static rm_status_t join(rm_session_t *s, Ringmaster__V1__JoinResponse **out)
{
  int backoff = 100;
  int64_t give_up = rm__now_ns() + (int64_t)s->connect_timeout_ms * 1000000;
  char msg[256];
  for (;;) {
    Ringmaster__V1__JoinRequest q = RINGMASTER__V1__JOIN_REQUEST__INIT;
    Ringmaster__V1__JoinResponse *r = NULL;
    RM__SESSION_IDS(q, s);
    q.host = s->host;
    q.data_addr = (char *)rm_endpoint_address(s->ep);
    q.transports = (char *)rm_endpoint_transports(s->ep);
    q.devices = s->devices;
    q.rank_hint = s->rank_hint;
    q.world_hint = s->world_hint;
    q.wait_ms = 5000;
    q.steps_done = s->steps_done;
    q.accept_gzip = 1; /* control.c's gRPC stack decodes gzip (messages.proto) */
    /* RELAY (session_live.c): through the host's relay, but for the
     * attempt right after one that found it UNAVAILABLE */
    int via = s->relay_ctl && !s->join_skip;
    int rc = rm__ctl_call(via ? s->relay_ctl : s->ctl, "/ringmaster.v1.Worker/Join", &q.base,
                          &ringmaster__v1__join_response__descriptor,
                          (ProtobufCMessage **)&r, 10000, msg, sizeof msg);
    s->join_skip = via && rc == RM__G_UNAVAILABLE;
    if (s->join_skip) {
      RM_INFO("relay %s unavailable for Join (%s): asking the coordinator", s->relay, msg);
      continue;
    }
    if (rc == RM__G_OK) {
      s->worker_id = r->worker_id;
      if (r->formed || r->job_state >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED) {
        *out = r;
        return RM_OK;
      }
      protobuf_c_message_free_unpacked(&r->base, NULL);
      give_up = rm__now_ns() + (int64_t)s->connect_timeout_ms * 1000000;
      backoff = 100;
      continue;
    }
    if (rc != RM__G_UNAVAILABLE && rc != RM__G_DEADLINE)
      return fail(s, join_refused(rc), "the coordinator refused to let us "
                  "join job %llu: %s (gRPC status %d)",
                  (unsigned long long)s->job_id, msg, rc);
    if (rm__now_ns() > give_up)
      return fail(s, RM_ERR_UNAVAILABLE, "coordinator %s unreachable for %d "
                  "ms, giving up: %s", s->coordinator, s->connect_timeout_ms, msg);
    RM_INFO("coordinator %s unavailable (%s); retrying in %d ms",
            s->coordinator, msg, backoff);
    sleep_ms(backoff);
    backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
  }
}

static const char *job_state_word(int js)
{
  switch (js) {
  case RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED: return "succeeded";
  case RINGMASTER__V1__JOB_STATE__JOB_STATE_CANCELLED: return "cancelled";
  default: return "failed";
  }
}

/* Join the next generation and build its communicator (invariant 1). */
static rm_status_t form(rm_session_t *s)
{
  Ringmaster__V1__JoinResponse *r = NULL;
  rm_status_t st = join(s, &r);
  if (st != RM_OK) return st;
  if (s->rf_t0) s->rf_joined = rm__now_ns();
  rm__session_stream_start(s);
  if (!r->formed) {
    s->ended = 1;
    pthread_mutex_lock(&s->mu);
    s->job_state = r->job_state;
    pthread_mutex_unlock(&s->mu);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return fail(s, RM_ERR_JOB_ENDED, "job %llu is %s",
                (unsigned long long)s->job_id, job_state_word(s->job_state));
  }
  const char **peers = calloc(r->n_peers ? 2 * r->n_peers : 1, sizeof *peers);
  const char **offers = peers + r->n_peers;
  rm_comm_config_t cfg;
  rm_comm_t *comm = NULL;
  if (!peers) {
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return fail(s, RM_ERR_NOMEM, "out of memory for %zu peers", r->n_peers);
  }
  for (size_t i = 0; i < r->n_peers; i++) {
    peers[i] = r->peers[i]->data_addr;
    offers[i] = r->peers[i]->transports; /* "" from an older coordinator: tcp */
  }
  if (s->join) protobuf_c_message_free_unpacked(&s->join->base, NULL);
  s->join = r;
  pthread_mutex_lock(&s->mu);
  s->generation = r->generation;
  s->rank = (int)r->rank;
  s->world = (int)r->world;
  s->hb_interval_ms = r->heartbeat_interval_ms ? (int)r->heartbeat_interval_ms : 1000;
  s->stale = 0;
  s->reason[0] = 0;
  s->job_state = r->job_state;
  pthread_mutex_unlock(&s->mu);
  /* a new generation resumes after the last step EVERY member completed: a
   * member that got one step further re-runs it with the others (the Join
   * request above told the coordinator how far we got) */
  s->steps_done = r->start_step;
  rm__session_hb_start(s);
  RM_INFO("generation %llu: rank %d of %d", (unsigned long long)s->generation,
          s->rank, s->world);
  rm_comm_config_init(&cfg);
  cfg.job_id = s->job_id;
  cfg.generation = r->generation;
  cfg.rank = s->rank;
  cfg.world = s->world;
  cfg.peers = peers;
  cfg.transports = offers;
  cfg.endpoint = s->ep;
  if (s->data_timeout_ms > 0) cfg.timeout_ms = s->data_timeout_ms;
  /* the generation's data-plane key: only members can then take a rank's
   * place on a link (transport/hello_auth.c); an older coordinator sends
   * none and rm_comm_init warns */
  if (r->data_key.len == RM_DATA_KEY_BYTES) cfg.data_key = r->data_key.data;
  else if (r->data_key.len != 0)
    RM_WARN("generation %llu: the coordinator's data-plane key has %zu bytes, "
            "not %d; connecting without one", (unsigned long long)r->generation,
            r->data_key.len, RM_DATA_KEY_BYTES);
  if (r->spec && r->spec->algorithm[0]) rm_algo_parse(r->spec->algorithm, &cfg.algorithm);
  st = rm_comm_init(&cfg, &comm);
  free(peers);
  if (comm && r->spec && r->spec->deterministic) {
    comm->cost.fixed = 1; /* select.c: auto from the fixed model, never timing */
    RM_INFO("generation %llu: deterministic job: all-reduce algorithm %s, auto "
            "by the fixed cost model (a function of size and world only)",
            (unsigned long long)s->generation, rm_algo_name(cfg.algorithm));
  }
  pthread_mutex_lock(&s->mu);
  s->comm = comm;
  int stale = s->stale;
  if (comm && stale) rm__comm_abort_with(comm, RM_ERR_RECONFIGURED, s->reason);
  pthread_mutex_unlock(&s->mu);
  if (st != RM_OK)
    return fail(s, st, "generation %llu: communicator setup failed: %s",
                (unsigned long long)s->generation, rm_status_string(st));
  s->last_error[0] = 0;
  if (s->rf_t0) {
    int64_t now = rm__now_ns();
    RM_INFO("generation %llu re-formed in %.1f ms: decision %.1f, old communicator "
            "closed %.1f, Join %.1f, communicator %.1f", (unsigned long long)s->generation,
            (double)(now - s->rf_t0) / 1e6, (double)(s->rf_decided - s->rf_t0) / 1e6,
            (double)(s->rf_destroyed - s->rf_decided) / 1e6,
            (double)(s->rf_joined - s->rf_destroyed) / 1e6, (double)(now - s->rf_joined) / 1e6);
  }
  rm__session_use_arm(s, comm);
  /* algorithm nccl: the unique id through the coordinator (session_nccl.c) */
  if (cfg.algorithm == RM_ALGO_NCCL && !stale) rm__session_nccl_id(s, comm);
  return RM_OK;
}

rm_status_t rm_session_join(const rm_session_config_t *cfg, rm_session_t **out,
                            char *err, size_t errlen)
{
  rm_session_t *s;
  char why[256] = "";
  rm_status_t st;
  if (err && errlen) err[0] = 0;
  if (!cfg || !out || cfg->struct_size < sizeof *cfg ||
      cfg->version != RM_SESSION_CONFIG_VERSION || !cfg->coordinator ||
      !cfg->token || !cfg->job_id) {
    if (err) snprintf(err, errlen, "rm_session_join: a config from "
                      "rm_session_config_init with coordinator, job and token");
    return RM_ERR_INVALID_ARG;
  }
  s = calloc(1, sizeof *s);
  if (!s) return RM_ERR_NOMEM;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  pthread_mutex_init(&s->rmu, NULL);
  pthread_cond_init(&s->rcv, NULL);
  copy(s->coordinator, sizeof s->coordinator, cfg->coordinator);
  copy(s->token, sizeof s->token, cfg->token);
  copy(s->data_addr, sizeof s->data_addr, cfg->data_addr ? cfg->data_addr : "127.0.0.1:0");
  copy(s->tls_ca, sizeof s->tls_ca, cfg->tls_ca);
  copy(s->tls_cert, sizeof s->tls_cert, cfg->tls_cert);
  copy(s->tls_key, sizeof s->tls_key, cfg->tls_key);
  copy(s->log_prefix, sizeof s->log_prefix, "ringmaster");
  s->job_id = cfg->job_id;
  s->rank_hint = cfg->rank_hint;
  s->world_hint = cfg->world_hint;
  s->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 30000;
  s->data_timeout_ms = cfg->data_timeout_ms;
  s->rank = -1;
  if (cfg->devices) copy(s->devices, sizeof s->devices, cfg->devices);
  else rm__devices_probe(s->devices, sizeof s->devices);
  if (cfg->host) copy(s->host, sizeof s->host, cfg->host);
  else if (gethostname(s->host, sizeof s->host)) copy(s->host, sizeof s->host, "unknown");
  s->host[sizeof s->host - 1] = 0;
  st = rm_endpoint_open(s->data_addr, &s->ep);
  if (st != RM_OK) {
    fail(s, st, "cannot listen on data address %s", s->data_addr);
    goto out;
  }
  s->ctl = rm__ctl_open(s->coordinator, s->tls_ca[0] ? s->tls_ca : NULL,
                        s->tls_cert[0] ? s->tls_cert : NULL,
                        s->tls_key[0] ? s->tls_key : NULL, why, sizeof why);
  if (!s->ctl) {
    st = fail(s, RM_ERR_INVALID_ARG, "%s", why);
    goto out;
  }
  const char *relay = getenv("RINGMASTER_RELAY"); /* session_live.c RELAY */
  if (relay && relay[0] && rm__env_int("RINGMASTER_SESSION_STREAM", 1)) {
    snprintf(s->relay, sizeof s->relay, "%s", relay);
    /* a HOST:PORT relay with the worker's TLS files, a unix: one in
     * plaintext (relay/relay.c LISTEN SIDE) */
    int tls = strncmp(s->relay, "unix:", 5) && (s->tls_ca[0] || s->tls_cert[0] || s->tls_key[0]);
    if (!(s->relay_ctl = rm__ctl_open(s->relay, tls && s->tls_ca[0] ? s->tls_ca : NULL,
                                      tls && s->tls_cert[0] ? s->tls_cert : NULL,
                                      tls && s->tls_key[0] ? s->tls_key : NULL, why,
                                      sizeof why))) {
      RM_WARN("relay %s: %s: Join and Sessions go to the coordinator", s->relay, why);
      s->relay[0] = 0;
    } else {
      RM_INFO("Join and Sessions through relay %s%s", s->relay, tls ? " (mutual TLS)" : "");
    }
  }
  st = form(s);
  if (st == RM_ERR_JOB_ENDED || st == RM_OK || st == RM_ERR_DENIED ||
      st == RM_ERR_NOT_FOUND || st == RM_ERR_UNAVAILABLE || !s->join)
    goto out;
  st = rm_session_reform(s); /* a peer died while we connected */
out:
  if (st != RM_OK) {
    if (err) snprintf(err, errlen, "%s", s->last_error);
    rm_session_close(s);
    return st;
  }
  *out = s;
  return RM_OK;
}

rm_status_t rm_session_join_env(rm_session_t **out, char *err, size_t errlen)
{
  rm_session_config_t cfg;
  rm_session_config_init(&cfg);
  if (rm_session_config_from_env(&cfg) != RM_OK) {
    if (err) snprintf(err, errlen, "RINGMASTER_COORDINATOR, RINGMASTER_JOB and "
                      "RINGMASTER_TOKEN must be set (ringmaster-worker sets them "
                      "for a command job's program)");
    return RM_ERR_INVALID_ARG;
  }
  return rm_session_join(&cfg, out, err, errlen);
}

/* ---- leave ---- */
static rm_status_t leave_call(rm_session_t *s, int ok, const char *error,
                              const char *summary)
{
  Ringmaster__V1__LeaveRequest q = RINGMASTER__V1__LEAVE_REQUEST__INIT;
  Ringmaster__V1__LeaveResponse *r = NULL;
  char msg[256] = "";
  RM__SESSION_IDS(q, s);
  q.ok = ok;
  q.error = (char *)(error ? error : "");
  q.step = s->steps_done;
  q.summary = (char *)(summary ? summary : "");
  for (int i = 0; i < 5; i++) {
    int rc = rm__ctl_call(s->ctl, "/ringmaster.v1.Worker/Leave", &q.base,
                          &ringmaster__v1__leave_response__descriptor,
                          (ProtobufCMessage **)&r, 5000, msg, sizeof msg);
    if (rc == RM__G_OK) {
      pthread_mutex_lock(&s->mu);
      s->job_state = r->job_state;
      pthread_mutex_unlock(&s->mu);
      protobuf_c_message_free_unpacked(&r->base, NULL);
      s->left = 1;
      return RM_OK;
    }
    if (rc == RM__G_FAILED_PRECONDITION) { /* new generation: re-join first */
      RM_INFO("leave refused (%s): the job is re-forming", msg);
      rm__session_mark_stale(s, -1, msg);
      return fail(s, RM_ERR_RECONFIGURED, "leave refused: %s; call "
                  "rm_session_reform", msg);
    }
    if (rc != RM__G_UNAVAILABLE) break;
    sleep_ms(500 << i);
  }
  RM_WARN("leave: %s", msg);
  return fail(s, RM_ERR_UNAVAILABLE, "leave: %s", msg);
}

rm_status_t rm_session_leave(rm_session_t *s, int ok, const char *error,
                             const char *summary_json)
{
  if (!s) return RM_ERR_INVALID_ARG;
  if (s->left) return RM_OK;
  if (s->ended) return fail(s, RM_ERR_JOB_ENDED, "job %llu is %s",
                            (unsigned long long)s->job_id,
                            job_state_word(s->job_state));
  /* the steps before Leave reach the coordinator before it (REPORTER) */
  rm__session_reports_flush(s, 10000);
  rm_status_t st = leave_call(s, ok, error, summary_json);
  if (st == RM_OK) rm__session_hb_stop(s);
  return st;
}

/* ---- re-form ----
 *
 * RE-FORMATION TIMELINE. One member of a 4-worker `train` job on one host
 * SIGKILLed (bench/recovery/fault_campaign.py, shrink and replace, shared
 * memory and TCP; 2-core VM, 2026-12-06; bench/results/2026-12-07-
 * recovery.md). Times after the kill; each step's cost as this file logs
 * it ("generation G re-formed in T ms: decision, old communicator closed,
 * Join, communicator") and the workers' other lines show it:
 *
 *   1. the coordinator declares the member lost            +1-3 ms
 *      (its Session cancelled by its kernel: coordinator/core/recovery.c
 *      source 2) and, under shrink, forms G+1 in the same section (replace:
 *      when a standby completes the group; else the launcher's newcomer);
 *   2. THE NOTICE reaches each survivor's Session stream   +0-1 ms
 *      (session_live.c): the communicator is aborted with that cause
 *      (RM_ERR_RECONFIGURED); a collective blocked on the dead peer returns.
 *      The data plane may be first instead: TCP sees the peer's sockets
 *      close at once, shared memory its pidfd (transport/shm/shm_int.h
 *      DEATH WATCH; it polled the pid every 50 ms: +25 ms on average);
 *      a peer that learned first sends an ABORT frame;
 *   3. decision                                             0-3 ms
 *      0 when the notice came first; else ReportFailure naming the peer,
 *      whose "stale generation" refusal is the decision (it was only
 *      logged, and the wait below slept 200 ms before its next look:
 *      that was most of the 205-450 ms survivors spent here before), or
 *      await_decision, which wakes the moment the session is marked stale;
 *   4. the old communicator closed                          0-1.5 ms
 *   5. Join of G+1 (already formed: answered at once)       0.3-1.5 ms
 *   6. the new communicator (rm_comm_init: shared-memory    0.3-7 ms
 *      inboxes created and attached, naps of 1-5 ms while a peer's is not
 *      there yet; TCP connects, keyed handshakes)
 *   7. the first all-reduce's cost model: rank 0's model of  <1 ms
 *      an earlier communicator of the job, broadcast (collectives/select.c
 *      REUSE; calibrating again cost ~10 ms);
 *   8. the workload's resync (train: an all-reduce of two words; a
 *      replacement first builds its workload and loads the last complete
 *      checkpoint, ~10 ms, then the parameters come by broadcast) and the
 *      first step (2 ms of compute + its all-reduce): the "recovered" line.
 *
 * Kill -> first step of G+1, medians of 20 trials: shrink 16 / 8 ms
 * (shared memory / TCP), replace 18 / 15 ms, from 265 / 215 and 277 /
 * 235 ms. Nothing in this path sleeps on a timer any more; what is left
 * is RPC round trips, segment and socket set-up, and the workload's own
 * work.
 */
/* After a data-plane failure the coordinator gets this many heartbeat
 * intervals to decide (job failed, or a new generation). */
#define DECIDE_INTERVALS 8

/* Sleep up to ns or until the session is marked stale (the cv's broadcast:
 * the notice, a refused heartbeat or ReportFailure); 1 = stale. */
static int wait_stale(rm_session_t *s, int64_t ns)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts); /* the cv's clock */
  int64_t wake = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + (ns > 0 ? ns : 0);
  ts.tv_sec = (time_t)(wake / 1000000000LL);
  ts.tv_nsec = (long)(wake % 1000000000LL);
  pthread_mutex_lock(&s->mu);
  while (!s->stale && pthread_cond_timedwait(&s->cv, &s->mu, &ts) != ETIMEDOUT) {}
  int stale = s->stale;
  pthread_mutex_unlock(&s->mu);
  return stale;
}

/* 1 = the coordinator moved on within DECIDE_INTERVALS; a heartbeat every
 * 200 ms meanwhile, awake the moment the session is marked stale */
static int await_decision(rm_session_t *s)
{
  int64_t until = rm__now_ns() + (int64_t)s->hb_interval_ms * DECIDE_INTERVALS * 1000000;
  int stale = 0;
  while (!stale && rm__now_ns() < until) {
    rm__session_heartbeat(s);
    int64_t nap = until - rm__now_ns();
    stale = wait_stale(s, nap > 200 * 1000000LL ? 200 * 1000000LL : nap);
  }
  return stale;
}

rm_status_t rm_session_reform(rm_session_t *s)
{
  if (!s) return RM_ERR_INVALID_ARG;
  if (s->ended) return fail(s, RM_ERR_JOB_ENDED, "job %llu is %s",
                            (unsigned long long)s->job_id,
                            job_state_word(s->job_state));
  rm_status_t cst = s->comm ? rm_comm_status(s->comm) : RM_ERR_PEER_LOST;
  int stale = rm__session_is_stale(s);
  char err[sizeof s->last_error];
  if (!stale && cst == RM_OK) return RM_OK; /* nothing changed */
  copy(err, sizeof err, s->comm && cst != RM_OK ? rm_comm_last_error(s->comm)
                                                : s->last_error);
  if (!s->broke_wall_ms) {
    s->broke_wall_ms = rm__wall_ms();
    s->broke_gen = s->generation;
  }
  s->rf_t0 = rm__now_ns();
  RM_INFO("generation %llu broke: %s", (unsigned long long)s->generation, err);
  if (!stale) {
    /* our data plane failed, or a peer told us (RM_ERR_RECONFIGURED /
     * JOB_ENDED in its ABORT frame) that the coordinator moved on: name the
     * lost peer in the first case, then hear it from the coordinator itself
     * before re-joining (a Join of a current member would be a new worker) */
    if (cst != RM_ERR_RECONFIGURED && cst != RM_ERR_JOB_ENDED)
      rm__session_report_failure(s, cst);
    if (!await_decision(s)) {
      /* no decision seen (e.g. our heartbeats could not reach a coordinator
       * that restarted meanwhile): Leave reporting the failure; one that
       * refuses it as stale is re-forming the job and wants us back */
      fprintf(stderr, "%s: rank %d failed: %s\n", s->log_prefix, s->rank, err);
      if (leave_call(s, 0, err, NULL) != RM_ERR_RECONFIGURED) {
        s->rf_t0 = 0;
        return fail(s, cst, "%s (the coordinator decided nothing within %d ms)",
                    err, s->hb_interval_ms * 8);
      }
    }
  }
  s->rf_decided = rm__now_ns();
  pthread_mutex_lock(&s->mu);
  rm_comm_t *old = s->comm;
  s->comm = NULL;
  pthread_mutex_unlock(&s->mu);
  rm__session_secure_drop(s);
  rm_comm_destroy(old);
  s->rf_destroyed = rm__now_ns();
  rm_status_t st = form(s);
  s->rf_t0 = 0;
  return st;
}

/* ---- close ---- */
void rm_session_close(rm_session_t *s)
{
  if (!s) return;
  rm__session_reports_stop(s);
  rm__session_hb_stop(s);
  rm__session_stream_stop(s);
  pthread_mutex_lock(&s->mu);
  rm_comm_t *comm = s->comm;
  s->comm = NULL;
  pthread_mutex_unlock(&s->mu);
  rm__session_secure_drop(s);
  rm_comm_destroy(comm);
  if (s->join) protobuf_c_message_free_unpacked(&s->join->base, NULL);
  if (s->pushed) protobuf_c_message_free_unpacked(&s->pushed->base, NULL);
  rm__ctl_close(s->ctl);
  if (s->relay_ctl) rm__ctl_close(s->relay_ctl);
  rm_endpoint_close(s->ep);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->rcv);
  pthread_mutex_destroy(&s->rmu);
  free(s);
}

/* ---- attached communicators ----
 * A program may build communicators beside the session's (a torch
 * sub-group's, a point-to-point lane); their members are this generation's
 * ranks. When the coordinator re-forms the job, a member may be gone or
 * busy recovering, and a wait on it would last until that communicator's
 * own deadline. So the session aborts every attached communicator with
 * its own status and words when it goes stale, and one attached while
 * stale at once. Its verdict replaces a data-plane failure the
 * communicator recorded first (a member that left closed its links while
 * the coordinator was deciding): the generation is over, and what the
 * program must do is re-form, whatever the links saw. Detach before
 * destroying it. */
/* What a stale session's communicators fail with (mu held): the job ended,
 * or the coordinator re-formed it; words say which and why. */
static rm_status_t verdict_locked(const rm_session_t *s, char *words, size_t n)
{
  int ended = s->ended || s->job_state >= RINGMASTER__V1__JOB_STATE__JOB_STATE_SUCCEEDED;
  if (words)
    snprintf(words, n, "%s%s%s", ended ? "the job ended" : "the coordinator re-formed the job",
             s->reason[0] ? ": " : "", s->reason);
  return ended ? RM_ERR_JOB_ENDED : RM_ERR_RECONFIGURED;
}

void rm__session_abort_comms_locked(rm_session_t *s)
{
  char words[sizeof s->reason + 64];
  rm_status_t st = verdict_locked(s, words, sizeof words);
  if (s->comm) rm__comm_abort_with(s->comm, st, words);
  for (int i = 0; i < s->n_attached; i++) rm__comm_supersede(s->attached[i], st, words);
}

rm_status_t rm_session_attach(rm_session_t *s, rm_comm_t *comm)
{
  rm_status_t st = RM_OK;
  if (s == NULL || comm == NULL) return RM_ERR_INVALID_ARG;
  pthread_mutex_lock(&s->mu);
  int i = 0;
  while (i < s->n_attached && s->attached[i] != comm) i++;
  if (i == s->n_attached) {
    if (s->n_attached == RM__ATTACH_MAX) st = RM_ERR_INVALID_ARG;
    else s->attached[s->n_attached++] = comm;
  }
  if (st == RM_OK && s->stale) {
    char words[sizeof s->reason + 64];
    rm__comm_supersede(comm, verdict_locked(s, words, sizeof words), words);
  }
  pthread_mutex_unlock(&s->mu);
  if (st != RM_OK)
    RM_WARN("rm_session_attach: %d communicators attached already", RM__ATTACH_MAX);
  return st;
}

rm_status_t rm_session_verdict(rm_session_t *s, int timeout_ms)
{
  if (s == NULL) return RM_ERR_INVALID_ARG;
  /* the heartbeat thread and the notice stream mark the session stale;
   * nothing here sends, so any thread may wait */
  int64_t ms = timeout_ms >= 0 ? timeout_ms : (int64_t)s->hb_interval_ms * DECIDE_INTERVALS;
  if (!wait_stale(s, ms * 1000000LL)) return RM_OK;
  pthread_mutex_lock(&s->mu);
  rm_status_t st = verdict_locked(s, NULL, 0);
  pthread_mutex_unlock(&s->mu);
  return st;
}

void rm_session_detach(rm_session_t *s, rm_comm_t *comm)
{
  if (s == NULL || comm == NULL) return;
  pthread_mutex_lock(&s->mu);
  for (int i = 0; i < s->n_attached; i++)
    if (s->attached[i] == comm) {
      s->attached[i] = s->attached[--s->n_attached];
      break;
    }
  pthread_mutex_unlock(&s->mu);
}

/* ---- getters ---- */
rm_comm_t *rm_session_comm(rm_session_t *s) { return s ? s->comm : NULL; }
int rm_session_rank(const rm_session_t *s) { return s ? s->rank : -1; }
int rm_session_world(const rm_session_t *s) { return s ? s->world : 0; }
uint64_t rm_session_generation(const rm_session_t *s) { return s ? s->generation : 0; }
uint64_t rm_session_job_id(const rm_session_t *s) { return s ? s->job_id : 0; }
uint64_t rm_session_worker_id(const rm_session_t *s) { return s ? s->worker_id : 0; }
uint64_t rm_session_step(const rm_session_t *s) { return s ? s->steps_done : 0; }

uint64_t rm_session_start_step(const rm_session_t *s)
{
  return s && s->join ? s->join->start_step : 0;
}

const char *rm_session_last_error(const rm_session_t *s)
{
  return s ? s->last_error : "";
}

int rm__session_job_state(rm_session_t *s)
{
  pthread_mutex_lock(&s->mu);
  int js = s->job_state;
  pthread_mutex_unlock(&s->mu);
  return js;
}

void rm__session_set_log_prefix(rm_session_t *s, const char *prefix)
{
  copy(s->log_prefix, sizeof s->log_prefix, prefix);
}

const char *rm_session_spec_string(const rm_session_t *s, const char *name)
{
  const Ringmaster__V1__JobSpec *p = s && s->join ? s->join->spec : NULL;
  if (!p || !name) return NULL;
  static const struct { const char *name; size_t off; } k[] = {
#define F(n) {#n, offsetof(Ringmaster__V1__JobSpec, n)}
      F(name), F(workload), F(workload_options), F(algorithm), F(dtype),
      F(on_failure), F(straggler_policy), F(launcher), F(workdir), F(aggregation),
      F(secagg_neighbours),
#undef F
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (!strcmp(name, k[i].name)) {
      const char *v = *(char *const *)((const char *)p + k[i].off);
      if (!strcmp(name, "aggregation") && (!v || !v[0])) return "mean";
      return v;
    }
  return NULL;
}

double rm_session_spec_double(const rm_session_t *s, const char *name)
{
  const Ringmaster__V1__JobSpec *p = s && s->join ? s->join->spec : NULL;
  if (!p || !name) return 0;
  if (!strcmp(name, "clip_norm")) return p->clip_norm;
  if (!strcmp(name, "aggregation_tau")) return p->aggregation_tau;
  if (!strcmp(name, "secagg_clip")) return p->secagg_clip;
  if (!strcmp(name, "secagg_scale")) return p->secagg_scale;
  return 0;
}

uint64_t rm_session_spec_uint(const rm_session_t *s, const char *name)
{
  const Ringmaster__V1__JoinResponse *r = s ? s->join : NULL;
  const Ringmaster__V1__JobSpec *p = r ? r->spec : NULL;
  if (!r || !name) return 0;
  if (!strcmp(name, "checkpoint_step")) return r->checkpoint_step;
  if (!strcmp(name, "step_quorum")) return r->step_quorum;
  if (!strcmp(name, "coded_s")) return r->coded_s;
  if (!strcmp(name, "heartbeat_interval_ms")) return r->heartbeat_interval_ms;
  if (!strcmp(name, "job_state")) return (uint64_t)s->job_state;
  if (!p) return 0;
  if (!strcmp(name, "steps")) return p->steps;
  if (!strcmp(name, "world_size")) return p->world_size;
  if (!strcmp(name, "min_workers")) return p->min_workers;
  if (!strcmp(name, "max_workers")) return p->max_workers;
  if (!strcmp(name, "checkpoint_every")) return p->checkpoint_every;
  if (!strcmp(name, "backup_workers")) return p->backup_workers;
  if (!strcmp(name, "max_restarts")) return p->max_restarts;
  if (!strcmp(name, "aggregation_f")) return p->aggregation_f;
  if (!strcmp(name, "aggregation_m")) return p->aggregation_m;
  if (!strcmp(name, "aggregation_iterations")) return p->aggregation_iterations;
  if (!strcmp(name, "deterministic")) return p->deterministic;
  if (!strcmp(name, "max_staleness")) return p->max_staleness;
  if (!strcmp(name, "secagg_bits")) return p->secagg_bits;
  if (!strcmp(name, "secagg_threshold")) return p->secagg_threshold;
  return 0;
}
