/*
 * coord_bridge.c - the coordinator's launchers (see launch_coord.h).
 *
 * State: a table of entries {job id, handle, stop_at, reported}, guarded by
 * b->mu, and one monitor thread.
 *
 *   start()  -> rm__launch_start; EXTERNAL launches (k8s) are not kept
 *   monitor  every 200 ms, for each entry:
 *              stop_at passed and not cancelled -> rm__launch_cancel
 *              poll: FAILED (not cancelled)     -> queue job_fail(reason)
 *                    final                      -> destroy, drop the entry
 *            then, without b->mu, job_fail for the queued ones
 *   stop()   -> stop_at = now (+ grace_ms when the job succeeded, so workers
 *              that are leaving on their own are not killed mid-exit)
 *   destroy  -> stop the monitor; optionally cancel and wait for the rest
 */
#include "launch_coord.h"
#include "launch_int.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"

#define MONITOR_PERIOD_MS 200

typedef struct {
  uint64_t job;
  rm__launch_t *h;
  int64_t stop_at_ns; /* 0: not asked to stop */
  int cancelled;
} entry_t;

typedef struct {
  rm_launch_coord_t *b;
  const rm__launcher_ops_t *ops;
} reg_ctx_t;

struct rm_launch_coord {
  rm_launch_coord_options_t o;
  char *log_dir, *worker_path, *advertise, *partition, *image, *ns;
  reg_ctx_t regs[3];
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int quit;
  entry_t *e;
  int n, cap;
};

typedef struct {
  uint64_t job;
  char reason[256];
} failure_t;

void rm_launch_coord_options_init(rm_launch_coord_options_t *o)
{
  memset(o, 0, sizeof *o);
  o->log_dir = "ringmaster-logs";
}

static char *dup_or_null(const char *s) { return s != NULL ? rm__xstrdup(s) : NULL; }

void rm_launch_coord_spec(const rm_launch_coord_t *b, const rm_job_info_t *job,
                          const char *coord_addr, char *buf, size_t len,
                          rm_launch_spec_t *s)
{
  int k = snprintf(buf, len, "%" PRIu64, job->id);
  char *logdir = buf + k + 1;
  snprintf(logdir, len - (size_t)k - 1, "%s/job-%" PRIu64, b->log_dir, job->id);
  memset(s, 0, sizeof *s);
  s->job_id = buf;
  s->job_name = job->spec.name;
  s->token = job->token;
  s->coordinator = b->advertise != NULL ? b->advertise : coord_addr;
  s->world = job->spec.world_size > 0 ? job->spec.world_size : job->spec.max_workers;
  s->workload = job->spec.workload[0] ? job->spec.workload : NULL;
  s->worker_path = b->worker_path;
  s->log_dir = logdir;
  s->grace_ms = b->o.grace_ms;
  s->slurm_partition = b->partition;
  s->slurm_time_limit_min = b->o.slurm_time_limit_min;
  s->k8s_image = b->image;
  s->k8s_namespace = b->ns;
}

void rm_launch_coord_log_path(const rm_launch_coord_t *b, uint64_t job_id, int index,
                              char *buf, size_t len)
{
  snprintf(buf, len, "%s/job-%" PRIu64 "/worker-%d.log", b->log_dir, job_id, index);
}

static rm_status_t bridge_start(void *ctx, const rm_job_info_t *job,
                                const char *coord_addr, char *err, size_t errlen)
{
  reg_ctx_t *r = ctx;
  rm_launch_coord_t *b = r->b;
  char buf[4200];
  rm_launch_spec_t spec;
  rm__launch_t *h = NULL;
  rm_launch_state_t st;
  rm_launch_coord_spec(b, job, coord_addr, buf, sizeof buf, &spec);
  rm_status_t rc = rm__launch_start(r->ops, &spec, &h, err, errlen);
  if (rc != RM_OK) {
    RM_WARN("job %s: launcher %s failed: %s", spec.job_id, r->ops->name, err);
    return rc;
  }
  if (rm__launch_poll(h, &st, NULL, 0) == RM_OK && st == RM_LAUNCH_EXTERNAL) {
    rm__launch_destroy(h); /* nothing to watch */
    return RM_OK;
  }
  pthread_mutex_lock(&b->mu);
  if (b->n == b->cap) {
    b->cap = b->cap ? 2 * b->cap : 16;
    b->e = rm__xrealloc(b->e, (size_t)b->cap * sizeof *b->e);
  }
  b->e[b->n++] = (entry_t){.job = job->id, .h = h};
  pthread_mutex_unlock(&b->mu);
  return RM_OK;
}

static void bridge_stop(void *ctx, const rm_job_info_t *job)
{
  rm_launch_coord_t *b = ((reg_ctx_t *)ctx)->b;
  int grace = b->o.grace_ms > 0 ? b->o.grace_ms : RM_LAUNCH_DEFAULT_GRACE_MS;
  int64_t at = rm__now_ns() +
               (job->state == RM_JOB_SUCCEEDED ? (int64_t)grace * 1000000LL : 0);
  pthread_mutex_lock(&b->mu);
  for (int i = 0; i < b->n; i++)
    if (b->e[i].job == job->id && b->e[i].stop_at_ns == 0) b->e[i].stop_at_ns = at;
  pthread_cond_signal(&b->cv);
  pthread_mutex_unlock(&b->mu);
}

/* One pass over the table; fills fails (capacity b->n) and returns how many. */
static int monitor_pass(rm_launch_coord_t *b, failure_t *fails)
{
  int nf = 0;
  int64_t now = rm__now_ns();
  for (int i = 0; i < b->n;) {
    entry_t *e = &b->e[i];
    rm_launch_state_t st;
    char msg[256] = "", err[256];
    if (e->stop_at_ns != 0 && !e->cancelled && now >= e->stop_at_ns) {
      if (rm__launch_cancel(e->h, err, sizeof err) != RM_OK)
        RM_WARN("job %" PRIu64 ": cancel failed: %s", e->job, err);
      e->cancelled = 1;
    }
    if (rm__launch_poll(e->h, &st, msg, sizeof msg) != RM_OK || !rm__launch_state_final(st)) {
      i++;
      continue;
    }
    if (st == RM_LAUNCH_FAILED && e->stop_at_ns == 0) {
      fails[nf].job = e->job;
      snprintf(fails[nf].reason, sizeof fails[nf].reason, "%s", msg);
      nf++;
    }
    RM_INFO("job %" PRIu64 ": launch %s %s", e->job, rm__launch_state_name(st), msg);
    rm__launch_destroy(e->h);
    b->e[i] = b->e[--b->n];
  }
  return nf;
}

static void *monitor(void *arg)
{
  rm_launch_coord_t *b = arg;
  pthread_mutex_lock(&b->mu);
  while (!b->quit) {
    failure_t *fails = b->n ? rm__xcalloc((size_t)b->n, sizeof *fails) : NULL;
    int nf = monitor_pass(b, fails);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < nf; i++)
      if (b->o.job_fail != NULL) b->o.job_fail(b->o.coord, fails[i].job, fails[i].reason);
    free(fails);
    pthread_mutex_lock(&b->mu);
    if (b->quit) break;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += MONITOR_PERIOD_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&b->cv, &b->mu, &ts);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

rm_status_t rm_launch_coord_create(const rm_launch_coord_options_t *o,
                                   rm_launch_coord_t **out, char *err, size_t errlen)
{
  rm_launch_coord_t *b = rm__xcalloc(1, sizeof *b);
  b->o = *o;
  b->log_dir = rm__xstrdup(o->log_dir != NULL && *o->log_dir ? o->log_dir : "ringmaster-logs");
  b->worker_path = dup_or_null(o->worker_path);
  b->advertise = dup_or_null(o->advertise_addr);
  b->partition = dup_or_null(o->slurm_partition);
  b->image = dup_or_null(o->k8s_image);
  b->ns = dup_or_null(o->k8s_namespace);
  const rm__launcher_ops_t *ops[3] = {&rm__launcher_local, &rm__launcher_slurm,
                                      &rm__launcher_k8s};
  for (int i = 0; i < 3; i++) b->regs[i] = (reg_ctx_t){b, ops[i]};
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  int rc = pthread_create(&b->thread, NULL, monitor, b);
  if (rc != 0) {
    b->quit = 1; /* destroy must not join */
    rm_launch_coord_destroy(b, 0);
    return rm__launch_err(err, errlen, RM_ERR_SYSTEM, "launcher monitor thread: %s",
                          strerror(rc));
  }
  *out = b;
  return RM_OK;
}

rm_status_t rm_launch_coord_register(rm_launch_coord_t *b, rm_coord_t *c,
                                     rm_status_t (*reg)(rm_coord_t *,
                                                        const rm_coord_launcher_t *))
{
  for (int i = 0; i < 3; i++) {
    rm_coord_launcher_t l = {.name = b->regs[i].ops->name, .start = bridge_start,
                             .stop = bridge_stop, .ctx = &b->regs[i]};
    rm_status_t st = reg(c, &l);
    if (st != RM_OK) return st;
  }
  return RM_OK;
}

int rm_launch_coord_active(rm_launch_coord_t *b)
{
  pthread_mutex_lock(&b->mu);
  int n = b->n;
  pthread_mutex_unlock(&b->mu);
  return n;
}

/* Cancel everything and poll until final or the deadline; destroy all. */
static void cancel_all(rm_launch_coord_t *b)
{
  char err[256];
  rm_launch_state_t st;
  int grace = b->o.grace_ms > 0 ? b->o.grace_ms : RM_LAUNCH_DEFAULT_GRACE_MS;
  for (int i = 0; i < b->n; i++) rm__launch_cancel(b->e[i].h, err, sizeof err);
  for (int i = 0; i < b->n; i++) {
    if (rm__launch_wait(b->e[i].h, grace + 5000, &st, err, sizeof err) != RM_OK)
      RM_WARN("job %" PRIu64 ": workers still running at shutdown", b->e[i].job);
  }
}

void rm_launch_coord_destroy(rm_launch_coord_t *b, int cancel_running)
{
  if (b == NULL) return;
  pthread_mutex_lock(&b->mu);
  int joinable = !b->quit;
  b->quit = 1;
  pthread_cond_signal(&b->cv);
  pthread_mutex_unlock(&b->mu);
  if (joinable) pthread_join(b->thread, NULL);
  if (cancel_running) cancel_all(b);
  for (int i = 0; i < b->n; i++) rm__launch_destroy(b->e[i].h);
  free(b->e);
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->cv);
  free(b->log_dir), free(b->worker_path), free(b->advertise);
  free(b->partition), free(b->image), free(b->ns);
  free(b);
}

rm_status_t rm_launch_k8s_manifest(const rm_job_info_t *job, const char *coord_addr,
                                   const char *image, const char *ns, FILE *out,
                                   char *err, size_t errlen)
{
  rm_launch_coord_t b;
  char buf[4200];
  rm_launch_spec_t spec;
  memset(&b, 0, sizeof b);
  b.log_dir = ".";
  b.image = (char *)image;
  b.ns = (char *)ns;
  rm_launch_coord_spec(&b, job, coord_addr, buf, sizeof buf, &spec);
  spec.log_dir = NULL;
  return rm__launch_render(&rm__launcher_k8s, &spec, out, err, errlen);
}
