/*
 * coord.c - coordinator lifecycle, the lock/commit/answer discipline, the
 * event log, and the public read functions of coord.h.
 *
 * rm__unlock() order (coord_int.h): COMMIT -> send queued answers -> release
 * the mutex -> event callbacks and launcher starts. An answer therefore never
 * reaches a client before the state it acknowledges is in the WAL.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coord_int.h"
#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"

void rm_coord_options_init(rm_coord_options_t *o)
{
  memset(o, 0, sizeof *o);
  o->db_path = "./ringmaster.db";
  o->grpc_addr = "127.0.0.1:7070";
  o->heartbeat_timeout_ms = 10000;
  o->barrier_timeout_ms = 60000;
  o->max_message_bytes = 4 << 20;
  o->step_window = 4096;
}

void rm_coord_free(void *p) { free(p); }

static char *dup_or_null(const char *s) { return s ? rm__xstrdup(s) : NULL; }

void rm__lock(rm_coord_t *c)
{
  pthread_mutex_lock(&c->mu);
  if (c->db && !c->in_txn && rm__stmt_run(c, rm__stmt(c, "BEGIN")) == SQLITE_DONE)
    c->in_txn = 1;
}

static void run_callbacks(rm_coord_t *c, rm_event_t *q, size_t n)
{
  pthread_mutex_lock(&c->sub_mu);
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < 64; k++)
      if (c->subs[k].cb) c->subs[k].cb(c->subs[k].ctx, &q[i]);
  pthread_mutex_unlock(&c->sub_mu);
}

static void run_launches(rm_coord_t *c, uint64_t *ids, size_t n);
static void run_stops(rm_coord_t *c, uint64_t *ids, size_t n);

void rm__unlock(rm_coord_t *c)
{
  rm_event_t *q = NULL;
  uint64_t *launch = NULL, *stop = NULL, *relaunch = NULL;
  size_t nq = 0, nl = 0, ns = 0, nr = 0;
  if (c->in_txn && rm__stmt_run(c, rm__stmt(c, "COMMIT")) != SQLITE_DONE) {
    rm__stmt_run(c, rm__stmt(c, "ROLLBACK"));
    rm__store_count_jobs(c); /* the rolled-back writes moved the counts */
  }
  c->in_txn = 0;
  rm__out_flush(c);
  if (c->ncbq) {
    q = c->cbq, nq = c->ncbq;
    c->cbq = NULL, c->ncbq = c->capcbq = 0;
    pthread_cond_broadcast(&c->ev_cond);
  }
  if (c->nlaunch) {
    launch = c->launch_q, nl = c->nlaunch;
    c->launch_q = NULL, c->nlaunch = c->caplaunch = 0;
  }
  if (c->nstop) {
    stop = c->stop_q, ns = c->nstop;
    c->stop_q = NULL, c->nstop = c->capstop = 0;
  }
  if (c->nrelaunch) {
    relaunch = c->relaunch_q, nr = c->nrelaunch;
    c->relaunch_q = NULL, c->nrelaunch = c->caprelaunch = 0;
  }
  pthread_mutex_unlock(&c->mu);
  if (nq) run_callbacks(c, q, nq);
  if (nl) run_launches(c, launch, nl);
  if (ns) run_stops(c, stop, ns);
  if (nr) rm__recovery_run_relaunches(c, relaunch, nr);
  free(relaunch);
  free(q);
  free(launch);
  free(stop);
}

void rm__event(rm_coord_t *c, rm__job_t *j, const char *kind, int rank,
               const char *fmt, ...)
{
  rm_event_t ev;
  va_list ap;
  memset(&ev, 0, sizeof ev);
  ev.job_id = j ? j->info.id : 0;
  ev.time_ms = rm__wall_ms();
  snprintf(ev.kind, sizeof ev.kind, "%s", kind);
  ev.rank = rank;
  ev.generation = j ? j->info.generation : 0;
  va_start(ap, fmt);
  vsnprintf(ev.message, sizeof ev.message, fmt, ap);
  va_end(ap);
  ev.seq = rm__store_event(c, &ev);
  c->last_seq = ev.seq;
  c->ctr.events_total++;
  RM_INFO("event %llu job %llu %s: %s", (unsigned long long)ev.seq,
          (unsigned long long)ev.job_id, ev.kind, ev.message);
  if (c->ncbq == c->capcbq) {
    c->capcbq = c->capcbq ? c->capcbq * 2 : 16;
    c->cbq = rm__xrealloc(c->cbq, c->capcbq * sizeof *c->cbq);
  }
  c->cbq[c->ncbq++] = ev;
  if (j) rm__watch_kick(c, j);
}

/* c->jobs is in ascending id order: resume loads ORDER BY id, submit
 * appends a newer (larger) id, nothing is removed. Binary search first (the
 * job list calls this once per listed job: a linear scan made it O(page x
 * jobs)); a linear scan is the fallback, so should the order ever break
 * (e.g. a job appended before its id is set), a lookup is slower, never
 * wrong. */
rm__job_t *rm__job_find(rm_coord_t *c, uint64_t id)
{
  size_t lo = 0, hi = c->njobs;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    uint64_t m = c->jobs[mid]->info.id;
    if (m == id) return c->jobs[mid];
    if (m < id) lo = mid + 1;
    else hi = mid;
  }
  for (size_t i = 0; i < c->njobs; i++)
    if (c->jobs[i]->info.id == id) return c->jobs[i];
  return NULL;
}

/* ---- open / close ---- */
rm_status_t rm_coord_open(const rm_coord_options_t *o, rm_coord_t **out,
                          char *err, size_t errlen)
{
  rm_coord_t *c = rm__xcalloc(1, sizeof *c);
  rm_status_t st;
  c->opt = *o;
  c->opt.db_path = rm__xstrdup(o->db_path ? o->db_path : "./ringmaster.db");
  c->opt.grpc_addr = rm__xstrdup(o->grpc_addr ? o->grpc_addr : "127.0.0.1:7070");
  c->opt.tls_cert = dup_or_null(o->tls_cert);
  c->opt.tls_key = dup_or_null(o->tls_key);
  c->opt.tls_ca = dup_or_null(o->tls_ca);
  c->opt.admin_token = dup_or_null(o->admin_token);
  if (c->opt.heartbeat_timeout_ms <= 0) c->opt.heartbeat_timeout_ms = 10000;
  if (c->opt.barrier_timeout_ms <= 0) c->opt.barrier_timeout_ms = 60000;
  if (c->opt.max_message_bytes <= 0) c->opt.max_message_bytes = 4 << 20;
  if (c->opt.step_window <= 0) c->opt.step_window = 4096;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->sub_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->ev_cond, &ca);
  pthread_condattr_destroy(&ca);
  st = rm__store_open(c, c->opt.db_path, err, errlen);
  if (st != RM_OK) goto fail;
  rm__lock(c);
  {
    sqlite3_stmt *s = NULL;
    sqlite3_prepare_v2(c->db, "SELECT coalesce(max(seq),0) FROM events", -1, &s, NULL);
    if (sqlite3_step(s) == SQLITE_ROW) c->last_seq = (uint64_t)sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
  }
  rm__store_load_active(c);
  rm__unlock(c);
  st = rm__server_start(c, err, errlen);
  if (st != RM_OK) goto fail;
  *out = c;
  return RM_OK;
fail:
  c->srv = NULL;
  rm_coord_close(c);
  return st;
}

const char *rm_coord_grpc_address(const rm_coord_t *c) { return c->grpc_addr; }

void rm_coord_close(rm_coord_t *c)
{
  if (!c) return;
  rm__lock(c);
  c->closing = 1;
  pthread_cond_broadcast(&c->ev_cond);
  rm__unlock(c);
  if (c->srv) rm__server_stop(c);
  rm__lock(c);
  for (size_t i = 0; i < c->njobs; i++) {
    rm__job_t *j = c->jobs[i];
    for (size_t k = 0; k < j->nw; k++) rm__store_step_summary(c, j, &j->w[k]);
  }
  rm__unlock(c);
  for (size_t i = 0; i < c->njobs; i++) rm__job_free(c->jobs[i]);
  free(c->jobs);
  free(c->out);
  free(c->cbq);
  free(c->launch_q);
  free(c->relaunch_q);
  free(c->stop_q);
  rm__store_close(c);
  free((void *)c->opt.db_path);
  free((void *)c->opt.grpc_addr);
  free((void *)c->opt.tls_cert);
  free((void *)c->opt.tls_key);
  free((void *)c->opt.tls_ca);
  free((void *)c->opt.admin_token);
  pthread_cond_destroy(&c->ev_cond);
  pthread_mutex_destroy(&c->sub_mu);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* ---- events API ---- */
uint64_t rm_coord_event_seq(rm_coord_t *c)
{
  pthread_mutex_lock(&c->mu);
  uint64_t s = c->last_seq;
  pthread_mutex_unlock(&c->mu);
  return s;
}

uint64_t rm_coord_event_wait(rm_coord_t *c, uint64_t after_seq, int timeout_ms)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t ns = ts.tv_nsec + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000;
  ts.tv_sec += ns / 1000000000;
  ts.tv_nsec = ns % 1000000000;
  pthread_mutex_lock(&c->mu);
  while (c->last_seq <= after_seq && !c->closing)
    if (pthread_cond_timedwait(&c->ev_cond, &c->mu, &ts) != 0) break;
  uint64_t s = c->last_seq;
  pthread_mutex_unlock(&c->mu);
  return s;
}

rm_status_t rm_coord_events(rm_coord_t *c, uint64_t job_id, uint64_t after_seq,
                            uint32_t limit, rm_event_t **out, size_t *n)
{
  rm__lock(c);
  rm_status_t st = rm__store_events(c, job_id, after_seq, limit, out, n);
  rm__unlock(c);
  return st;
}

int rm_coord_subscribe(rm_coord_t *c, rm_coord_event_cb cb, void *ctx)
{
  int id = 0;
  pthread_mutex_lock(&c->sub_mu);
  for (int k = 0; k < 64 && cb; k++)
    if (!c->subs[k].cb) {
      c->subs[k].cb = cb;
      c->subs[k].ctx = ctx;
      c->subs[k].id = id = ++c->next_sub_id;
      break;
    }
  pthread_mutex_unlock(&c->sub_mu);
  return id;
}

void rm_coord_unsubscribe(rm_coord_t *c, int id)
{
  pthread_mutex_lock(&c->sub_mu);
  for (int k = 0; k < 64; k++)
    if (c->subs[k].cb && c->subs[k].id == id) c->subs[k].cb = NULL;
  pthread_mutex_unlock(&c->sub_mu);
}

/* ---- launchers ---- */
rm_status_t rm_coord_register_launcher(rm_coord_t *c,
                                       const rm_coord_launcher_t *l)
{
  rm_status_t st = RM_ERR_INVALID_ARG;
  rm__lock(c);
  if (l && l->name && l->start && c->nlaunchers < 8) {
    c->launchers[c->nlaunchers++] = *l;
    st = RM_OK;
  }
  rm__unlock(c);
  return st;
}

static void run_launches(rm_coord_t *c, uint64_t *ids, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    rm_job_info_t job;
    rm_coord_launcher_t l;
    int found = 0;
    char err[256] = "";
    if (rm_coord_job_get(c, ids[i], &job) != RM_OK) continue;
    rm__lock(c);
    for (int k = 0; k < c->nlaunchers; k++)
      if (!strcmp(c->launchers[k].name, job.spec.launcher)) {
        l = c->launchers[k];
        found = 1;
      }
    rm__job_t *j = rm__job_find(c, ids[i]);
    if (!found && j)
      rm__event(c, j, "launcher_missing", -1, "launcher '%s' is not available "
                "in this coordinator; start the workers by hand",
                job.spec.launcher);
    rm__unlock(c);
    if (found && l.start(l.ctx, &job, c->grpc_addr, err, sizeof err) != RM_OK)
      rm_coord_job_fail(c, ids[i], err[0] ? err : "launcher failed");
  }
}

/* A job became terminal: its launcher's stop() (cancel what still runs, or
 * let succeeded workers exit). No lock held (coord.h: launcher hook). */
static void run_stops(rm_coord_t *c, uint64_t *ids, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    rm_job_info_t job;
    rm_coord_launcher_t l;
    int found = 0;
    memset(&l, 0, sizeof l);
    if (rm_coord_job_get(c, ids[i], &job) != RM_OK) continue;
    pthread_mutex_lock(&c->mu);
    for (int k = 0; k < c->nlaunchers; k++)
      if (!strcmp(c->launchers[k].name, job.spec.launcher)) {
        l = c->launchers[k];
        found = 1;
      }
    pthread_mutex_unlock(&c->mu);
    if (found && l.stop) l.stop(l.ctx, &job);
  }
}
