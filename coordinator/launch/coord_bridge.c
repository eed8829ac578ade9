/*
 * coord_bridge.c - the coordinator's launchers (see launch_coord.h).
 *
 * Threads: the coordinator calls start/stop from its threads; one monitor
 * thread owns the table of live launches {job id, handle, stop_at}. start and
 * stop only append to two small queues under b->mu (held for a few
 * instructions, never across a fork or a poll), so they never wait for a
 * squeue that hangs, whatever lock the coordinator holds when calling them.
 *
 *   start()   rm__launch_start (forks here, on the caller's thread); a handle
 *             that is EXTERNAL (k8s) is dropped, others are queued
 *   stop()    queue {job, at = now (+ grace_ms if the job succeeded, so
 *             workers leaving on their own are not killed mid-exit)}
 *   relaunch() queue {job}; the monitor calls rm__launch_add (local forks
 *             one more worker; launchers without add answer at once with
 *             RM_ERR_UNSUPPORTED, so the coordinator can say so)
 *   monitor   every 200 ms (or when woken): take the queues; for each entry:
 *               stop_at passed, not cancelled -> rm__launch_cancel
 *               relaunch asked                -> rm__launch_add; on failure
 *                                                job_fail(coord, id, why)
 *               a worker process died (signal or non-zero exit), no stop
 *               asked                         -> worker_exited(coord, id,
 *                                                index, what): a member loss
 *                                                the job's on_failure decides
 *                                                (relaunch.c), never a
 *                                                job failure by itself
 *               poll FAILED (every worker gone, one failed), no stop asked
 *                                             -> job_fail(coord, id, reason)
 *               final                         -> destroy, drop
 *             job_fail and worker_exited are called with no bridge lock held.
 *   shutdown  stop the monitor, optionally cancel what runs and wait; later
 *             start() answers RM_ERR_UNAVAILABLE, stop() does nothing
 *
 * LOG STORAGE. The workers write their output straight into their log
 * files (local: the file is their stdout and stderr; slurm: srun's
 * --output), so a write that fails there fails in the worker, whose
 * print never says so: a full or read-only file system would lose their
 * output in silence. The monitor looks at each live launch's log folder
 * (statvfs, every LOG_CHECK_MS) and reports each change of its state once,
 * with no lock held: a log line and job_note(coord, id, kind, message),
 * an event on the job:
 *   writable -> full (no block free to this process) or read-only:
 *     "worker_logs_failing", saying the folder, the cause and that the
 *     output written now is lost;
 *   failing -> writable: "worker_logs_ok", with the room there is now.
 * A folder it cannot look at (gone) changes nothing. A fault shorter than
 * LOG_CHECK_MS can pass unseen; a folder that cannot be created or a log
 * that cannot be opened fails the start itself (local.c, slurm.c), with
 * the path and the system's words as the job's reason.
 */
#include "launch_coord.h"
#include "launch_int.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"

#define MONITOR_PERIOD_MS 200
#define LOG_CHECK_MS 1000 /* LOG STORAGE: how often a log folder is looked at */

enum { LOG_OK = 0, LOG_FULL = 1, LOG_READONLY = 2 };

typedef struct {
  uint64_t job;
  rm__launch_t *h;
  int64_t stop_at_ns; /* 0: not asked to stop */
  int cancelled;
  int relaunch;       /* replacements asked, not yet started */
  int nseen;          /* workers whose exit was already looked at */
  int log_state;      /* LOG STORAGE: LOG_OK, LOG_FULL, LOG_READONLY */
  int64_t log_next_ns; /* when its log folder is looked at next */
} entry_t;

typedef struct {
  uint64_t job;
  int64_t at_ns;
} stop_req_t;

typedef struct {
  rm_launch_coord_t *b;
  const rm__launcher_ops_t *ops;
} reg_ctx_t;

/* A growable array of fixed-size items. */
typedef struct {
  void *v;
  int n, cap;
} vec_t;

struct rm_launch_coord {
  rm_launch_coord_options_t o;
  char *log_dir, *worker_path, *advertise, *partition, *image, *ns, *relay;
  reg_ctx_t regs[3];
  pthread_mutex_t mu; /* guards the queues, quit, closed */
  pthread_cond_t cv;
  pthread_t thread;
  int started, quit, closed;
  vec_t q_start, q_stop; /* entry_t, stop_req_t: filled by start/stop */
  vec_t q_relaunch;      /* uint64_t job ids: filled by relaunch */
  vec_t table;           /* entry_t: the monitor's own (after shutdown: destroy's) */
  int live;              /* table.n as last published by the monitor */
};

typedef struct {
  uint64_t job;
  int index;          /* worker launch index; -1: the whole launch failed;
                         NOTE_FAILING / NOTE_OK: LOG STORAGE, an event */
  char reason[320];
} failure_t;

#define NOTE_FAILING (-2)
#define NOTE_OK (-3)

static void *vec_push(vec_t *v, size_t size)
{
  if (v->n == v->cap) {
    v->cap = v->cap ? 2 * v->cap : 16;
    v->v = rm__xrealloc(v->v, (size_t)v->cap * size);
  }
  return (char *)v->v + (size_t)v->n++ * size;
}

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
  s->slurm_relay = b->relay;
  s->k8s_image = b->image;
  s->k8s_namespace = b->ns;
  s->k8s_replacements = !strcmp(job->spec.on_failure, "replace") ? job->spec.max_restarts : 0;
}

void rm_launch_coord_log_path(const rm_launch_coord_t *b, uint64_t job_id, int index,
                              char *buf, size_t len)
{
  snprintf(buf, len, "%s/job-%" PRIu64 "/worker-%d.log", b->log_dir, job_id, index);
}

int rm_launch_coord_log_location(void *ctx, uint64_t job_id, int index, char *dir,
                                 size_t dirlen, char *file, size_t filelen)
{
  const rm_launch_coord_t *b = ctx;
  int n = snprintf(dir, dirlen, "%s/job-%" PRIu64, b->log_dir, job_id);
  int m = snprintf(file, filelen, "worker-%d.log", index);
  return n < 0 || (size_t)n >= dirlen || m < 0 || (size_t)m >= filelen ? -1 : 0;
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
  pthread_mutex_lock(&b->mu);
  int closed = b->closed;
  pthread_mutex_unlock(&b->mu);
  if (closed)
    return rm__launch_err(err, errlen, RM_ERR_UNAVAILABLE, "coordinator is shutting down");
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
  *(entry_t *)vec_push(&b->q_start, sizeof(entry_t)) = (entry_t){.job = job->id, .h = h};
  pthread_cond_signal(&b->cv);
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
  if (!b->closed) {
    *(stop_req_t *)vec_push(&b->q_stop, sizeof(stop_req_t)) = (stop_req_t){job->id, at};
    pthread_cond_signal(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
}

static rm_status_t bridge_relaunch(void *ctx, const rm_job_info_t *job,
                                   const char *coord_addr, char *err, size_t errlen)
{
  reg_ctx_t *r = ctx;
  rm_launch_coord_t *b = r->b;
  (void)coord_addr;
  if (r->ops == &rm__launcher_k8s) {
    /* Kubernetes replaces the pod itself: the Indexed Job's backoffLimit is
     * the job's max_restarts (k8s.c), and a new pod of the lost index joins
     * as the replacement. Nothing to start here. */
    if (strcmp(job->spec.on_failure, "replace") || job->spec.max_restarts <= 0)
      return rm__launch_err(err, errlen, RM_ERR_UNSUPPORTED, "the Indexed Job of a job "
                            "without on_failure replace replaces no pod");
    return RM_OK;
  }
  if (!rm__launch_can_add(r->ops))
    return rm__launch_err(err, errlen, RM_ERR_UNSUPPORTED, "launcher %s cannot "
                          "start one more worker (not supported)", r->ops->name);
  pthread_mutex_lock(&b->mu);
  int closed = b->closed;
  if (!closed) {
    *(uint64_t *)vec_push(&b->q_relaunch, sizeof(uint64_t)) = job->id;
    pthread_cond_signal(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
  return closed ? rm__launch_err(err, errlen, RM_ERR_UNAVAILABLE,
                                 "coordinator is shutting down")
                : RM_OK;
}

/* Move the queues into the table (caller holds b->mu). */
static void take_queues(rm_launch_coord_t *b)
{
  entry_t *qs = b->q_start.v;
  stop_req_t *qp = b->q_stop.v;
  for (int i = 0; i < b->q_start.n; i++)
    *(entry_t *)vec_push(&b->table, sizeof(entry_t)) = qs[i];
  entry_t *e = b->table.v;
  for (int k = 0; k < b->q_stop.n; k++)
    for (int i = 0; i < b->table.n; i++)
      if (e[i].job == qp[k].job && e[i].stop_at_ns == 0) e[i].stop_at_ns = qp[k].at_ns;
  uint64_t *qr = b->q_relaunch.v;
  for (int k = 0; k < b->q_relaunch.n; k++) {
    int found = 0;
    for (int i = 0; i < b->table.n; i++)
      if (e[i].job == qr[k]) e[i].relaunch++, found = 1;
    if (!found) /* its launch is over: nothing to add to */
      RM_WARN("job %" PRIu64 ": relaunch asked, but its workers are all gone", qr[k]);
  }
  b->q_start.n = b->q_stop.n = b->q_relaunch.n = 0;
}

static failure_t *note(failure_t **fails, int *nf, int *cap, uint64_t job, int index)
{
  if (*nf == *cap) {
    *cap = *cap ? 2 * *cap : 8;
    *fails = rm__xrealloc(*fails, (size_t)*cap * sizeof **fails);
  }
  failure_t *f = &(*fails)[(*nf)++];
  f->job = job;
  f->index = index;
  f->reason[0] = '\0';
  return f;
}

/* Relaunches asked for e, and exits of its workers not yet looked at. */
static void entry_workers(entry_t *e, failure_t **fails, int *nf, int *cap)
{
  rm_launch_worker_t w;
  char err[256];
  for (; e->relaunch > 0 && e->stop_at_ns == 0; e->relaunch--) {
    int index = -1;
    if (rm__launch_add(e->h, &index, err, sizeof err) != RM_OK)
      snprintf(note(fails, nf, cap, e->job, -1)->reason, sizeof fails[0]->reason,
               "relaunch of a replacement worker failed: %s", err);
  }
  e->relaunch = 0;
  for (; rm__launch_worker(e->h, e->nseen, &w) == RM_OK && w.exited; e->nseen++) {
    if (e->stop_at_ns != 0 || (w.exit_code == 0 && w.term_signal == 0)) continue;
    failure_t *f = note(fails, nf, cap, e->job, e->nseen);
    if (w.term_signal != 0)
      snprintf(f->reason, sizeof f->reason, "worker %d (pid %d) killed by signal "
               "%d (%s); log %s", e->nseen, (int)w.pid, w.term_signal,
               strsignal(w.term_signal), w.log_path);
    else
      snprintf(f->reason, sizeof f->reason, "worker %d (pid %d) exited with "
               "status %d; log %s", e->nseen, (int)w.pid, w.exit_code, w.log_path);
  }
}

/* LOG STORAGE: the state of a log folder's file system, and the bytes a
 * write by this process may still take there; -1 when it cannot be
 * looked at. Blocks reserved for root count for root (they are what its
 * workers write into). */
static int log_room(const char *dir, uint64_t *room)
{
  struct statvfs v;
  if (statvfs(dir, &v) != 0) return -1;
  uint64_t blocks = geteuid() == 0 ? (uint64_t)v.f_bfree : (uint64_t)v.f_bavail;
  *room = blocks * (uint64_t)v.f_frsize;
  if (v.f_flag & ST_RDONLY) return LOG_READONLY;
  return blocks == 0 ? LOG_FULL : LOG_OK;
}

/* The last n bytes of a long path ("...tail"), so a message keeps its
 * cause: a per-call static buffer, one use per call. */
static const char *path_tail(const char *path, size_t n)
{
  static __thread char buf[128];
  size_t len = strlen(path);
  if (n > sizeof buf - 4) n = sizeof buf - 4;
  if (len <= n) return path;
  snprintf(buf, sizeof buf, "...%s", path + len - n);
  return buf;
}

static void log_check(rm_launch_coord_t *b, entry_t *e, int64_t now, failure_t **fails,
                      int *nf, int *cap)
{
  char dir[4200];
  uint64_t room = 0;
  if (now < e->log_next_ns) return;
  e->log_next_ns = now + (int64_t)LOG_CHECK_MS * 1000000LL;
  snprintf(dir, sizeof dir, "%s/job-%" PRIu64, b->log_dir, e->job);
  int st = log_room(dir, &room);
  if (st < 0 || st == e->log_state) return;
  failure_t *f = note(fails, nf, cap, e->job, st == LOG_OK ? NOTE_OK : NOTE_FAILING);
  if (st == LOG_OK)
    snprintf(f->reason, sizeof f->reason, "worker logs in %s can be written again "
             "(%" PRIu64 " bytes free); what the workers printed meanwhile is missing "
             "from them", path_tail(dir, 120), room);
  else
    snprintf(f->reason, sizeof f->reason, "worker logs in %s cannot be written: its "
             "file system is %s; what the workers print is lost until it can be written",
             path_tail(dir, 120), st == LOG_FULL ? "full (no space left)" : "read-only");
  e->log_state = st;
}

/* One pass over the table (no lock held); returns the failures to report:
 * worker exits (index >= 0) and whole launches that failed (index -1). */
static int monitor_pass(rm_launch_coord_t *b, failure_t **out)
{
  int nf = 0, cap = 0;
  int64_t now = rm__now_ns();
  entry_t *e = b->table.v;
  failure_t *fails = NULL;
  for (int i = 0; i < b->table.n;) {
    rm_launch_state_t st;
    char msg[256] = "", err[256];
    if (e[i].stop_at_ns != 0 && !e[i].cancelled && now >= e[i].stop_at_ns) {
      if (rm__launch_cancel(e[i].h, err, sizeof err) != RM_OK)
        RM_WARN("job %" PRIu64 ": cancel failed: %s", e[i].job, err);
      e[i].cancelled = 1;
    }
    rm_status_t pst = rm__launch_poll(e[i].h, &st, msg, sizeof msg);
    entry_workers(&e[i], &fails, &nf, &cap); /* after poll: exits reaped */
    log_check(b, &e[i], now, &fails, &nf, &cap);
    if (pst != RM_OK || !rm__launch_state_final(st)) {
      i++;
      continue;
    }
    if (st == RM_LAUNCH_FAILED && e[i].stop_at_ns == 0) {
      /* msg may be as long as the reason field: cut it, visibly */
      char *r = note(&fails, &nf, &cap, e[i].job, -1)->reason;
      if (snprintf(r, sizeof fails[0].reason, "every worker process is gone "
                   "before the job finished; first failure: %s",
                   msg) >= (int)sizeof fails[0].reason)
        memcpy(r + sizeof fails[0].reason - 4, "...", 4);
    }
    RM_INFO("job %" PRIu64 ": launch %s %s", e[i].job, rm__launch_state_name(st), msg);
    rm__launch_destroy(e[i].h);
    e[i] = e[--b->table.n];
  }
  *out = fails;
  return nf;
}

static void *monitor(void *arg)
{
  rm_launch_coord_t *b = arg;
  pthread_mutex_lock(&b->mu);
  while (!b->quit) {
    take_queues(b);
    pthread_mutex_unlock(&b->mu);
    failure_t *fails = NULL;
    int nf = monitor_pass(b, &fails);
    for (int i = 0; i < nf; i++) {
      if (fails[i].index == NOTE_FAILING || fails[i].index == NOTE_OK) { /* LOG STORAGE */
        const char *kind = fails[i].index == NOTE_OK ? "worker_logs_ok" : "worker_logs_failing";
        if (fails[i].index == NOTE_OK)
          RM_INFO("job %" PRIu64 ": %s", fails[i].job, fails[i].reason);
        else
          RM_WARN("job %" PRIu64 ": %s", fails[i].job, fails[i].reason);
        if (b->o.job_note != NULL) b->o.job_note(b->o.coord, fails[i].job, kind, fails[i].reason);
        continue;
      }
      if (fails[i].index >= 0 && b->o.worker_exited != NULL)
        b->o.worker_exited(b->o.coord, fails[i].job, fails[i].index, fails[i].reason);
      else if (fails[i].index < 0 && b->o.job_fail != NULL)
        b->o.job_fail(b->o.coord, fails[i].job, fails[i].reason);
    }
    free(fails);
    pthread_mutex_lock(&b->mu);
    b->live = b->table.n;
    if (b->quit || b->q_start.n || b->q_stop.n || b->q_relaunch.n) continue;
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
  b->relay = dup_or_null(o->slurm_relay);
  b->image = dup_or_null(o->k8s_image);
  b->ns = dup_or_null(o->k8s_namespace);
  const rm__launcher_ops_t *ops[3] = {&rm__launcher_local, &rm__launcher_slurm,
                                      &rm__launcher_k8s};
  for (int i = 0; i < 3; i++) b->regs[i] = (reg_ctx_t){b, ops[i]};
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  int rc = pthread_create(&b->thread, NULL, monitor, b);
  if (rc != 0) {
    rm_launch_coord_destroy(b, 0);
    return rm__launch_err(err, errlen, RM_ERR_SYSTEM, "launcher monitor thread: %s",
                          strerror(rc));
  }
  b->started = 1;
  *out = b;
  return RM_OK;
}

rm_status_t rm_launch_coord_register(rm_launch_coord_t *b, rm_coord_t *c,
                                     rm_status_t (*reg)(rm_coord_t *,
                                                        const rm_coord_launcher_t *))
{
  for (int i = 0; i < 3; i++) {
    rm_coord_launcher_t l = {.name = b->regs[i].ops->name, .start = bridge_start,
                             .stop = bridge_stop, .ctx = &b->regs[i],
                             .relaunch = bridge_relaunch};
    rm_status_t st = reg(c, &l);
    if (st != RM_OK) return st;
  }
  return RM_OK;
}

int rm_launch_coord_active(rm_launch_coord_t *b)
{
  pthread_mutex_lock(&b->mu);
  int n = b->live + b->q_start.n;
  pthread_mutex_unlock(&b->mu);
  return n;
}

void rm_launch_coord_shutdown(rm_launch_coord_t *b, int cancel_running)
{
  char err[256];
  rm_launch_state_t st;
  pthread_mutex_lock(&b->mu);
  int join = b->started && !b->quit;
  b->quit = b->closed = 1;
  pthread_cond_signal(&b->cv);
  pthread_mutex_unlock(&b->mu);
  if (join) pthread_join(b->thread, NULL);
  take_queues(b); /* the monitor is gone: the table is ours */
  if (!cancel_running) return;
  int grace = b->o.grace_ms > 0 ? b->o.grace_ms : RM_LAUNCH_DEFAULT_GRACE_MS;
  entry_t *e = b->table.v;
  for (int i = 0; i < b->table.n; i++) rm__launch_cancel(e[i].h, err, sizeof err);
  for (int i = 0; i < b->table.n; i++)
    if (rm__launch_wait(e[i].h, grace + 5000, &st, err, sizeof err) != RM_OK)
      RM_WARN("job %" PRIu64 ": workers still running at shutdown", e[i].job);
}

void rm_launch_coord_destroy(rm_launch_coord_t *b, int cancel_running)
{
  if (b == NULL) return;
  rm_launch_coord_shutdown(b, cancel_running);
  entry_t *e = b->table.v;
  for (int i = 0; i < b->table.n; i++) rm__launch_destroy(e[i].h);
  free(b->table.v), free(b->q_start.v), free(b->q_stop.v), free(b->q_relaunch.v);
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->cv);
  free(b->log_dir), free(b->worker_path), free(b->advertise), free(b->relay);
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
