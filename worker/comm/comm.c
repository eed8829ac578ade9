/*
 * comm.c - communicator lifecycle and the sticky error.
 *
 * States of a communicator (invariants in comm_int.h):
 *
 *   rm_comm_init ──► HEALTHY ──first failure (rm__comm_fail)──► FAILED
 *                       │                                          │
 *                       └──── rm_comm_abort (any thread) ──────────┤
 *                                                                  ▼
 *                         rm_comm_destroy (from HEALTHY or FAILED) ──► freed
 *
 * Transitions and who performs them:
 *  - HEALTHY -> FAILED: rm__comm_fail(), called by the progress engine (peer
 *    lost, deadline, protocol) or by rm_comm_abort() from any thread. The
 *    first caller wins under err_lock; status is published with a release
 *    store so lock-free readers (rm_comm_status) see last_error filled in.
 *  - abort also writes one byte to wake_fd so a thread blocked in poll()
 *    inside the progress engine returns at once and sees the failure.
 *  - The progress engine, on seeing FAILED, closes the transports
 *    (rm__transport_close with the failure) so peers learn of it promptly.
 *  - destroy from HEALTHY closes gracefully (peers are told BYE).
 */
#define _GNU_SOURCE /* pipe2, accept4, POLLRDHUP */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_int.h"
#include "rm_check.h"
#include "rm_log.h"
#include "rm_param.h"
#include "rm_transports.h"
#include "device/dev.h"
#include "device/nccl.h"
#include "transport/mr.h"

RM_PARAM(timeout_ms, "RINGMASTER_TIMEOUT_MS", 30000)
RM_PARAM(connect_timeout_ms, "RINGMASTER_CONNECT_TIMEOUT_MS", 0)


void rm_comm_config_init(rm_comm_config_t *cfg)
{
  const char *algo = rm__env_str("RINGMASTER_ALGO", NULL);
  if (cfg == NULL) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->timeout_ms = (int)rm__param_timeout_ms();
  cfg->connect_timeout_ms = (int)rm__param_connect_timeout_ms();
  cfg->algorithm = RM_ALGO_AUTO;
  if (algo != NULL && rm_algo_parse(algo, &cfg->algorithm) != RM_OK) {
    RM_WARN("ignoring RINGMASTER_ALGO=%s: not an algorithm; using auto", algo);
    cfg->algorithm = RM_ALGO_AUTO;
  }
}

size_t rm_comm_config_size(void) { return sizeof(rm_comm_config_t); }

static rm_status_t check_config(const rm_comm_config_t *cfg)
{
  if (cfg->world < 1 || cfg->rank < 0 || cfg->rank >= cfg->world) {
    RM_ERROR("rm_comm_init: rank %d / world %d out of range", cfg->rank,
             cfg->world);
    return RM_ERR_INVALID_ARG;
  }
  if ((unsigned)cfg->algorithm >= RM_ALGO_COUNT) return RM_ERR_INVALID_ARG;
  if (cfg->world > 1 && cfg->peers == NULL) return RM_ERR_INVALID_ARG;
  for (int i = 0; cfg->peers != NULL && i < cfg->world; i++) {
    if (cfg->peers[i] == NULL) {
      RM_ERROR("rm_comm_init: peers[%d] is NULL", i);
      return RM_ERR_INVALID_ARG;
    }
  }
  return RM_OK;
}

static rm_status_t copy_peers(rm_comm_t *c, const rm_comm_config_t *cfg)
{
  c->peers = calloc((size_t)c->world, sizeof *c->peers);
  if (c->peers == NULL) return RM_ERR_NOMEM;
  for (int i = 0; i < c->world; i++) {
    const char *p = cfg->peers ? cfg->peers[i] : "127.0.0.1:0";
    c->peers[i] = strdup(p);
    if (c->peers[i] == NULL) return RM_ERR_NOMEM;
  }
  c->offers = calloc((size_t)c->world, sizeof *c->offers);
  if (c->offers == NULL) return RM_ERR_NOMEM;
  for (int i = 0; i < c->world; i++) {
    const char *o = cfg->transports && cfg->transports[i] ? cfg->transports[i] : "tcp";
    char why[160];
    if (!rm_tp_offer_valid(o, why, sizeof why)) {
      RM_ERROR("rm_comm_init: transports[%d]: %s", i, why);
      return RM_ERR_INVALID_ARG;
    }
    c->offers[i] = strdup(o);
    if (c->offers[i] == NULL) return RM_ERR_NOMEM;
  }
  return RM_OK;
}

static void set_defaults(rm_comm_t *c, const rm_comm_config_t *cfg)
{
  int64_t t = rm__param_timeout_ms();
  c->job_id = cfg->job_id;
  c->generation = cfg->generation;
  c->rank = cfg->rank;
  c->world = cfg->world;
  c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : (int)t;
  c->connect_timeout_ms =
      cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : c->timeout_ms;
  c->algorithm = cfg->algorithm;
  if (cfg->data_key != NULL) {
    memcpy(c->data_key, cfg->data_key, sizeof c->data_key);
    c->keyed = 1;
  }
  c->status = RM_OK;
  c->failed_peer = -1;
  c->wake_fd[0] = c->wake_fd[1] = -1;
  /* uncalibrated guesses for loopback TCP; collectives/select.c calibrates
   * on the live links the first time `auto` has to choose (lazily, so that
   * creating a communicator stays cheap) */
  c->cost.alpha_us = 25.0;
  c->cost.beta_us_per_byte = 1.0 / 2000.0;  /* 2 GB/s */
  c->cost.gamma_us_per_byte = 1.0 / 4000.0; /* 4 GB/s reduce */
  c->cost.calibrated = 0;
}

/* Frees what rm_comm_init allocated; safe on a partly built communicator. */
static void comm_free(rm_comm_t *c)
{
  if (c->owns_endpoint) rm_endpoint_close(c->endpoint);
  for (int i = 0; c->peers != NULL && i < c->world; i++) free(c->peers[i]);
  free(c->peers);
  for (int i = 0; c->offers != NULL && i < c->world; i++) free(c->offers[i]);
  free(c->offers);
  free(c->conns);
  free(c->scratch);
  free(c->agg_scratch);
  free(c->use_excluded);
  if (c->wake_fd[0] >= 0) close(c->wake_fd[0]);
  if (c->wake_fd[1] >= 0) close(c->wake_fd[1]);
  pthread_mutex_destroy(&c->err_lock);
  explicit_bzero(c->data_key, sizeof c->data_key);
  free(c);
}

/* Without a key, anyone who can reach the data port and guess (job,
 * generation, world, rank) is admitted as that rank: say so, once. */
static void warn_unkeyed(const rm_comm_t *c)
{
  static int warned;
  if (c->keyed || c->world < 2 || __atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    return;
  RM_WARN("communicator job %llu generation %llu has no data-plane key: peers "
          "are admitted on job, generation and rank alone, which anyone who "
          "reaches the data port can claim (docs/data-plane-security.md; "
          "sessions get a key from the coordinator)",
          (unsigned long long)c->job_id, (unsigned long long)c->generation);
}

rm_status_t rm_comm_init(const rm_comm_config_t *cfg, rm_comm_t **out)
{
  rm_status_t st;
  rm_comm_t *c;

  if (cfg == NULL || out == NULL) return RM_ERR_INVALID_ARG;
  RM_CHECK(check_config(cfg));
  c = calloc(1, sizeof *c);
  if (c == NULL) return RM_ERR_NOMEM;
  pthread_mutex_init(&c->err_lock, NULL);
  set_defaults(c, cfg);
  RM_CHECK_GOTO(copy_peers(c, cfg), st, fail);
  warn_unkeyed(c);
  if (pipe2(c->wake_fd, O_NONBLOCK | O_CLOEXEC) != 0) {
    RM_ERROR("rm_comm_init: pipe2: %s", strerror(errno));
    st = RM_ERR_SYSTEM;
    goto fail;
  }
  c->endpoint = cfg->endpoint;
  if (c->endpoint == NULL && c->world > 1) {
    RM_CHECK_GOTO(rm_endpoint_open(c->peers[c->rank], &c->endpoint), st, fail);
    c->owns_endpoint = 1;
  }
  RM_CHECK_GOTO(rm__transport_connect(c), st, fail_transport);
  RM_DEBUG("communicator job %llu gen %llu rank %d/%d ready",
           (unsigned long long)c->job_id, (unsigned long long)c->generation,
           c->rank, c->world);
  *out = c;
  return RM_OK;

fail_transport:
  c->destroying = 1;
  rm__transport_close(c, st);
fail:
  comm_free(c);
  return st;
}

void rm__comm_abort_with(rm_comm_t *c, rm_status_t st, const char *why)
{
  char b = 1;
  ssize_t n;
  if (c == NULL) return;
  __atomic_store_n(&c->aborted, 1, __ATOMIC_RELEASE);
  rm__comm_fail(c, st, -1, "%s", why);
  n = write(c->wake_fd[1], &b, 1); /* full pipe is fine: already awake */
  (void)n;
  rm__transport_wake(c); /* a transport that sleeps elsewhere (shm: futex) */
}

void rm__comm_supersede(rm_comm_t *c, rm_status_t st, const char *why)
{
  if (c == NULL) return;
  pthread_mutex_lock(&c->err_lock);
  rm_status_t cur = __atomic_load_n(&c->status, __ATOMIC_ACQUIRE);
  if (cur != RM_OK && cur != RM_ERR_RECONFIGURED && cur != RM_ERR_JOB_ENDED) {
    char was[sizeof c->last_error];
    memcpy(was, c->last_error, sizeof was);
    int n = snprintf(c->last_error, sizeof c->last_error, "%s: %s (this communicator "
                     "had failed first: ", rm_status_name(st), why);
    if (n > 0 && (size_t)n + 2 < sizeof c->last_error) { /* the first words, cut to fit */
      size_t k = strnlen(was, sizeof c->last_error - (size_t)n - 2);
      memcpy(c->last_error + n, was, k);
      memcpy(c->last_error + n + k, ")", 2);
    }
    __atomic_store_n(&c->status, st, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&c->err_lock);
  rm__comm_abort_with(c, st, why); /* OK before: records st; wakes the waiters */
}

void rm_comm_abort(rm_comm_t *c)
{
  rm__comm_abort_with(c, RM_ERR_ABORTED, "communicator aborted by the user");
}

void rm_comm_destroy(rm_comm_t *c)
{
  if (c == NULL) return;
  rm__p2p_stop(c); /* its thread drives the transports: it ends first */
  c->destroying = 1;
  rm__nccl_destroy(c); /* NCCL's kernels end before its streams' state goes */
  rm__dev_destroy(c); /* quiesces device work before staging memory goes */
  rm__mr_free_all(c); /* before the transports free what registered them */
  rm__transport_close(c, rm_comm_status(c));
  rm__p2p_free(c);
  comm_free(c);
}

int rm_comm_rank(const rm_comm_t *c) { return c ? c->rank : -1; }

const char *rm_comm_transport(const rm_comm_t *c, int peer)
{
  if (c == NULL || peer < 0 || peer >= c->world || c->conns == NULL ||
      c->conns[peer].type == NULL)
    return NULL;
  return c->conns[peer].type->name;
}
int rm_comm_world(const rm_comm_t *c) { return c ? c->world : 0; }
uint64_t rm_comm_generation(const rm_comm_t *c) { return c ? c->generation : 0; }

rm_status_t rm_comm_status(const rm_comm_t *c)
{
  if (c == NULL) return RM_ERR_INVALID_ARG;
  return __atomic_load_n(&c->status, __ATOMIC_ACQUIRE);
}

const char *rm_comm_last_error(const rm_comm_t *c)
{
  if (c == NULL || rm_comm_status(c) == RM_OK) return "";
  return c->last_error; /* written once, before status was published */
}

int rm_comm_failed_peer(const rm_comm_t *c)
{
  if (c == NULL || rm_comm_status(c) == RM_OK) return -1;
  return c->failed_peer;
}

rm_status_t rm_comm_set_algorithm(rm_comm_t *c, rm_algo_t a)
{
  if (c == NULL || (unsigned)a >= RM_ALGO_COUNT) return RM_ERR_INVALID_ARG;
  c->algorithm = a;
  return RM_OK;
}

rm_status_t rm_comm_set_timeout(rm_comm_t *c, int timeout_ms)
{
  if (c == NULL || timeout_ms <= 0) return RM_ERR_INVALID_ARG;
  /* the wait loop (worker/transport/transport.c) reads it at each wait */
  c->timeout_ms = timeout_ms;
  return RM_OK;
}

rm_status_t rm__comm_fail(rm_comm_t *c, rm_status_t st, int peer,
                          const char *fmt, ...)
{
  va_list ap;
  rm_status_t cur;

  pthread_mutex_lock(&c->err_lock);
  cur = __atomic_load_n(&c->status, __ATOMIC_ACQUIRE);
  if (cur == RM_OK && st != RM_OK) {
    int n = snprintf(c->last_error, sizeof c->last_error, "%s: ",
                     rm_status_name(st));
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof c->last_error)
      vsnprintf(c->last_error + n, sizeof c->last_error - (size_t)n, fmt, ap);
    va_end(ap);
    c->failed_peer = peer;
    __atomic_store_n(&c->status, st, __ATOMIC_RELEASE);
    cur = st;
    if (st != RM_ERR_ABORTED && st != RM_ERR_RECONFIGURED && st != RM_ERR_JOB_ENDED)
      RM_WARN("rank %d: %s", c->rank, c->last_error);
  }
  pthread_mutex_unlock(&c->err_lock);
  return cur;
}

rm_status_t rm__coll_begin(rm_comm_t *c)
{
  rm_status_t st = rm_comm_status(c);
  if (st != RM_OK) return st;
  if (__atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE))
    return rm__comm_fail(c, RM_ERR_ABORTED, -1, "communicator aborted");
  if (c->p2p != NULL) { /* its lanes carry point-to-point (p2p.c) */
    RM_ERROR("rank %d: a collective on a communicator that carries point-to-point "
             "messages (make one for them with rm_comm_dup)", c->rank);
    return RM_ERR_INVALID_ARG;
  }
  c->coll_seq++;
  return RM_OK;
}

rm_status_t rm_comm_set_memory(rm_comm_t *c, rm_mem_t kind)
{
  if (c == NULL || (unsigned)kind > RM_MEM_DEVICE) return RM_ERR_INVALID_ARG;
  c->mem_kind = kind;
  return RM_OK;
}

rm_status_t rm_comm_set_stream(rm_comm_t *c, void *stream)
{
  if (c == NULL) return RM_ERR_INVALID_ARG;
  c->user_stream = stream;
  return RM_OK;
}

rm_status_t rm__agg_scratch(rm_comm_t *c, size_t n, void **out)
{
  if (n > c->agg_scratch_size) {
    free(c->agg_scratch); /* contents need not survive */
    c->agg_scratch = malloc(n);
    c->agg_scratch_size = c->agg_scratch ? n : 0;
    if (c->agg_scratch == NULL) return RM_ERR_NOMEM;
  }
  *out = c->agg_scratch;
  return RM_OK;
}

rm_status_t rm__scratch(rm_comm_t *c, size_t n, void **out)
{
  if (c->dev_active) return rm__dev_scratch(c, n, out);
  if (n > c->scratch_size) {
    void *p;
    free(c->scratch); /* contents need not survive: avoid realloc's copy */
    c->scratch = NULL;
    c->scratch_size = 0;
    p = malloc(n);
    if (p == NULL) return RM_ERR_NOMEM;
    c->scratch = p;
    c->scratch_size = n;
  }
  *out = c->scratch;
  return RM_OK;
}
