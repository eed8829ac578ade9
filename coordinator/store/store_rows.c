/*
 * store_rows.c - SQLite rows other than jobs: workers, generations,
 * barriers, step summaries, checkpoints, events, and what a restart loads.
 * Same rules as store.c: called under the coordinator lock inside
 * rm__store_begin's transaction;
 * every statement comes from store.c's cache (rm__stmt) and is reset after
 * use (rm__stmt_done), never finalized here.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"
#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"

/* Cached statements (store.c): prepared once, reset after each use. */
static sqlite3_stmt *prep(rm__store_t *c, const char *sql) { return rm__stmt(c, sql); }

static void step_done(rm__store_t *c, sqlite3_stmt *st) { rm__stmt_run(c, st); }

/* ---- workers ---- */
/* Parameters 2..10 and 12 of both worker statements: rank, host,
 * data_addr, devices, state, generation, last_heartbeat_ms, step,
 * launch_index; transports. */
static void bind_worker(sqlite3_stmt *st, const rm__worker_t *w)
{
  sqlite3_bind_int(st, 2, w->rank);
  sqlite3_bind_text(st, 3, w->host, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 4, rm__worker_data_addr(w), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 5, rm__worker_devices(w), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 6, w->state);
  sqlite3_bind_int64(st, 7, (sqlite3_int64)w->generation);
  sqlite3_bind_int64(st, 8, w->last_wall_ms);
  sqlite3_bind_int64(st, 9, (sqlite3_int64)w->step);
  sqlite3_bind_int(st, 10, w->launch_index);
  sqlite3_bind_text(st, 12, rm__worker_transports(w), -1, SQLITE_TRANSIENT);
}

void rm__store_worker_insert(rm__store_t *c, rm__job_t *j, rm__worker_t *w)
{
  rm__store_touch(c, j->info.id);
  sqlite3_stmt *st = prep(c, "INSERT INTO workers(job_id,rank,host,data_addr,"
                          "devices,state,generation,last_heartbeat_ms,step,"
                          "launch_index,joined_ms,transports) "
                          "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)");
  sqlite3_bind_int64(st, 1, (sqlite3_int64)j->info.id);
  bind_worker(st, w);
  sqlite3_bind_int64(st, 11, w->joined_ms);
  step_done(c, st);
  w->id = (uint64_t)sqlite3_last_insert_rowid(c->db);
}

void rm__store_worker_update(rm__store_t *c, rm__job_t *j, rm__worker_t *w)
{
  rm__store_touch(c, j->info.id);
  sqlite3_stmt *st = prep(c, "UPDATE workers SET rank=?2, host=?3, "
                          "data_addr=?4, devices=?5, state=?6, generation=?7, "
                          "last_heartbeat_ms=?8, step=?9, launch_index=?10, "
                          "transports=?12 WHERE id=?1");
  (void)j;
  sqlite3_bind_int64(st, 1, (sqlite3_int64)w->id);
  bind_worker(st, w);
  step_done(c, st);
}

rm_status_t rm__store_workers(rm__store_t *c, uint64_t job_id,
                              rm_worker_info_t **out, size_t *n)
{
  sqlite3_stmt *st = prep(c, "SELECT id,rank,host,data_addr,devices,state,"
                          "generation,last_heartbeat_ms,step,launch_index,"
                          "transports FROM workers WHERE job_id=? "
                          "ORDER BY rank<0, rank, id");
  size_t k = 0, cap = 16;
  rm_worker_info_t *arr = rm__xcalloc(cap, sizeof *arr);
  int64_t now = rm__wall_ms();
  sqlite3_bind_int64(st, 1, (sqlite3_int64)job_id);
  while (sqlite3_step(st) == SQLITE_ROW) {
    if (k == cap) arr = rm__xrealloc(arr, (cap *= 2) * sizeof *arr);
    rm_worker_info_t *w = &arr[k++];
    memset(w, 0, sizeof *w);
    w->id = (uint64_t)sqlite3_column_int64(st, 0);
    w->job_id = job_id;
    w->rank = sqlite3_column_int(st, 1);
    rm__copy_text(w->host, sizeof w->host, sqlite3_column_text(st, 2));
    rm__copy_text(w->data_addr, sizeof w->data_addr, sqlite3_column_text(st, 3));
    rm__copy_text(w->devices, sizeof w->devices, sqlite3_column_text(st, 4));
    w->state = (rm_worker_state_t)sqlite3_column_int(st, 5);
    w->generation = (uint64_t)sqlite3_column_int64(st, 6);
    w->last_heartbeat_ms = sqlite3_column_int64(st, 7);
    w->ms_since_heartbeat = now - w->last_heartbeat_ms;
    w->step = (uint64_t)sqlite3_column_int64(st, 8);
    w->launch_index = sqlite3_column_int(st, 9);
    rm__copy_text(w->transports, sizeof w->transports, sqlite3_column_text(st, 10));
    w->step_ms = w->compute_ms = w->comm_ms = w->wait_ms = NAN;
  }
  rm__stmt_done(c, st);
  *out = arr;
  *n = k;
  return RM_OK;
}

/* ---- results (result.c) ---- */
void rm__store_worker_result(rm__store_t *c, rm__worker_t *w)
{
  sqlite3_stmt *st = prep(c, "UPDATE workers SET result=?2 WHERE id=?1");
  sqlite3_bind_int64(st, 1, (sqlite3_int64)w->id);
  const char *res = rm__worker_cold_get(w)->result;
  sqlite3_bind_text(st, 2, res ? res : "", -1, SQLITE_TRANSIENT);
  step_done(c, st);
}

void rm__store_job_result(rm__store_t *c, rm__job_t *j)
{
  rm__store_touch(c, j->info.id);
  sqlite3_stmt *st = prep(c, "UPDATE jobs SET result=?2, result_rank=?3 "
                          "WHERE id=?1");
  sqlite3_bind_int64(st, 1, (sqlite3_int64)j->info.id);
  sqlite3_bind_text(st, 2, j->result ? j->result : "", -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 3, j->result ? j->result_rank : -1);
  step_done(c, st);
}

rm_status_t rm__store_job_result_get(rm__store_t *c, uint64_t id, char **text,
                                     int *rank)
{
  sqlite3_stmt *st = prep(c, "SELECT result, result_rank FROM jobs WHERE id=?");
  rm_status_t rc = RM_ERR_NOT_FOUND;
  *text = NULL;
  *rank = -1;
  sqlite3_bind_int64(st, 1, (sqlite3_int64)id);
  if (sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char *t = sqlite3_column_text(st, 0);
    if (t && *t) {
      *text = rm__xstrdup((const char *)t);
      *rank = sqlite3_column_int(st, 1);
    }
    rc = RM_OK;
  }
  rm__stmt_done(c, st);
  return rc;
}

/* ---- generations, barriers, step summaries ---- */
void rm__store_generation(rm__store_t *c, rm__job_t *j)
{
  rm__store_touch(c, j->info.id);
  size_t cap = 64 + (size_t)j->nmembers * 200, len = 0;
  char *peers = rm__xmalloc(cap);
  peers[0] = 0;
  for (int r = 0; r < j->nmembers; r++) {
    const rm__worker_t *w = &j->w[j->members[r]];
    len += (size_t)snprintf(peers + len, cap - len, "%d %llu %s %s\n", r,
                            (unsigned long long)w->id, w->host, rm__worker_data_addr(w));
    if (len >= cap) len = cap - 1;
  }
  sqlite3_stmt *st = prep(c, "INSERT OR REPLACE INTO generations(job_id,"
                          "generation,world,formed_ms,start_step,peers) "
                          "VALUES (?,?,?,?,?,?)");
  sqlite3_bind_int64(st, 1, (sqlite3_int64)j->info.id);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)j->info.generation);
  sqlite3_bind_int(st, 3, j->nmembers);
  sqlite3_bind_int64(st, 4, rm__wall_ms());
  sqlite3_bind_int64(st, 5, (sqlite3_int64)j->start_step);
  sqlite3_bind_text(st, 6, peers, -1, SQLITE_TRANSIENT);
  step_done(c, st);
  free(peers);
}

void rm__store_barrier(rm__store_t *c, rm__job_t *j, rm__barrier_t *b)
{
  rm__store_touch(c, j->info.id);
  size_t cap = 16 + (size_t)b->n_missing * 8, len = 0;
  char *missing = rm__xmalloc(cap);
  missing[0] = 0;
  for (int i = 0; i < b->n_missing; i++)
    len += (size_t)snprintf(missing + len, cap - len, "%s%d", i ? " " : "",
                            b->missing[i].rank);
  sqlite3_stmt *st = prep(c, "INSERT INTO barriers(job_id,generation,name,"
                          "state,opened_ms,closed_ms,arrived,expected,reason,"
                          "missing) VALUES (?,?,?,?,?,?,?,?,?,?)");
  sqlite3_bind_int64(st, 1, (sqlite3_int64)j->info.id);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)b->generation);
  sqlite3_bind_text(st, 3, b->name, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 4, b->state);
  sqlite3_bind_int64(st, 5, b->opened_ms);
  sqlite3_bind_int64(st, 6, b->closed_ms);
  sqlite3_bind_int(st, 7, b->arrived);
  sqlite3_bind_int(st, 8, b->expected);
  sqlite3_bind_text(st, 9, b->reason, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, 10, missing, -1, SQLITE_TRANSIENT);
  step_done(c, st);
  free(missing);
}

/* STEP METRICS. A summary row's named metrics as text, one "name value"
 * line each (names have no spaces: common/rm_metrics.c), the value as
 * %.17g so it reads back exactly (migrations/0014_step_metrics.sql). */
static void metrics_text(const rm_step_metric_t *m, uint32_t n,
                         char out[RM_METRICS_MAX * (RM_METRIC_NAME_MAX + 32)])
{
  size_t at = 0;
  out[0] = '\0';
  for (uint32_t i = 0; i < n; i++)
    at += (size_t)snprintf(out + at, RM_METRICS_MAX * (RM_METRIC_NAME_MAX + 32) - at,
                           "%s %.17g\n", m[i].name, m[i].value);
}

_Static_assert(RM_METRIC_NAME_MAX == 32, "metrics_parse reads a name with %31s");
static uint32_t metrics_parse(const unsigned char *text, rm_step_metric_t *m)
{
  const char *p = (const char *)text;
  uint32_t n = 0;
  int used;
  while (p && *p && n < RM_METRICS_MAX &&
         sscanf(p, "%31s %lf%n", m[n].name, &m[n].value, &used) == 2) {
    n++;
    p += used;
    while (*p == '\n') p++;
  }
  return n;
}

void rm__store_step_summary(rm__store_t *c, rm__job_t *j, rm__worker_t *w)
{
  char mt[RM_METRICS_MAX * (RM_METRIC_NAME_MAX + 32)];
  if (!w->acc_count) return;
  double n = (double)w->acc_count;
  sqlite3_stmt *st = prep(c, "INSERT INTO step_summaries(job_id,rank,"
                          "generation,first_step,last_step,count,mean_step_ms,"
                          "max_step_ms,mean_compute_ms,mean_comm_ms,"
                          "mean_wait_ms,last_loss,last_accuracy,"
                          "allreduce_bytes,time_ms,last_metrics) VALUES "
                          "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  sqlite3_bind_int64(st, 1, (sqlite3_int64)j->info.id);
  sqlite3_bind_int(st, 2, w->rank);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)w->generation);
  sqlite3_bind_int64(st, 4, (sqlite3_int64)w->acc_first);
  sqlite3_bind_int64(st, 5, (sqlite3_int64)w->acc_last);
  sqlite3_bind_int64(st, 6, (sqlite3_int64)w->acc_count);
  sqlite3_bind_double(st, 7, w->acc_step / n);
  sqlite3_bind_double(st, 8, w->acc_max);
  sqlite3_bind_double(st, 9, w->acc_compute / n);
  sqlite3_bind_double(st, 10, w->acc_comm / n);
  sqlite3_bind_double(st, 11, w->acc_wait / n);
  if (isnan(w->acc_loss)) sqlite3_bind_null(st, 12);
  else sqlite3_bind_double(st, 12, w->acc_loss);
  if (isnan(w->acc_acc)) sqlite3_bind_null(st, 13);
  else sqlite3_bind_double(st, 13, w->acc_acc);
  sqlite3_bind_int64(st, 14, (sqlite3_int64)w->acc_bytes);
  sqlite3_bind_int64(st, 15, (sqlite3_int64)rm__wall_ms());
  const rm__worker_cold_t *cold = rm__worker_cold_get(w);
  metrics_text(cold->acc_m, cold->acc_nm, mt);
  sqlite3_bind_text(st, 16, mt, -1, SQLITE_TRANSIENT);
  step_done(c, st);
  w->acc_count = w->acc_bytes = 0;
  w->acc_step = w->acc_max = w->acc_compute = w->acc_comm = w->acc_wait = 0;
}

/* A late report (rpc.c LATE STEP REPORTS) as a one-step summary row: its
 * own generation and rank, never the worker's current accumulators. */
void rm__store_step_late(rm__store_t *c, uint64_t job_id, const rm_step_sample_t *s)
{
  double ms = s->compute_ms + s->comm_ms + s->wait_ms;
  char mt[RM_METRICS_MAX * (RM_METRIC_NAME_MAX + 32)];
  sqlite3_stmt *st = prep(c, "INSERT INTO step_summaries(job_id,rank,"
                          "generation,first_step,last_step,count,mean_step_ms,"
                          "max_step_ms,mean_compute_ms,mean_comm_ms,"
                          "mean_wait_ms,last_loss,last_accuracy,"
                          "allreduce_bytes,time_ms,last_metrics) VALUES "
                          "(?1,?2,?3,?4,?4,1,?5,?5,?6,?7,?8,?9,?10,?11,?12,?13)");
  sqlite3_bind_int64(st, 1, (sqlite3_int64)job_id);
  sqlite3_bind_int(st, 2, s->rank);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)s->generation);
  sqlite3_bind_int64(st, 4, (sqlite3_int64)s->step);
  sqlite3_bind_double(st, 5, ms);
  sqlite3_bind_double(st, 6, s->compute_ms);
  sqlite3_bind_double(st, 7, s->comm_ms);
  sqlite3_bind_double(st, 8, s->wait_ms);
  if (isnan(s->loss)) sqlite3_bind_null(st, 9);
  else sqlite3_bind_double(st, 9, s->loss);
  if (isnan(s->accuracy)) sqlite3_bind_null(st, 10);
  else sqlite3_bind_double(st, 10, s->accuracy);
  sqlite3_bind_int64(st, 11, (sqlite3_int64)s->allreduce_bytes);
  sqlite3_bind_int64(st, 12, s->time_ms);
  metrics_text(s->metrics, s->n_metrics, mt);
  sqlite3_bind_text(st, 13, mt, -1, SQLITE_TRANSIENT);
  step_done(c, st);
}

/* The rank worker_id had in generation gen of job_id, from the peers text
 * of its generations row ("rank worker_id host data_addr" lines); -1 if it
 * was not a member (or no such generation). */
int rm__store_generation_rank(rm__store_t *c, uint64_t job_id, uint64_t gen,
                              uint64_t worker_id)
{
  sqlite3_stmt *st = prep(c, "SELECT peers FROM generations WHERE job_id=? AND generation=?");
  int rank = -1;
  sqlite3_bind_int64(st, 1, (sqlite3_int64)job_id);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)gen);
  if (sqlite3_step(st) == SQLITE_ROW) {
    const char *p = (const char *)sqlite3_column_text(st, 0);
    while (p && *p && rank < 0) {
      int r;
      unsigned long long id;
      if (sscanf(p, "%d %llu", &r, &id) == 2 && id == worker_id) rank = r;
      p = strchr(p, '\n');
      if (p) p++;
    }
  }
  rm__stmt_done(c, st);
  return rank;
}

/* ---- events ---- */
uint64_t rm__store_event(rm__store_t *c, const rm_event_t *ev)
{
  sqlite3_stmt *st = prep(c, "INSERT INTO events(job_id,time_ms,kind,rank,"
                          "generation,message) VALUES (?,?,?,?,?,?)");
  sqlite3_bind_int64(st, 1, (sqlite3_int64)ev->job_id);
  sqlite3_bind_int64(st, 2, ev->time_ms);
  sqlite3_bind_text(st, 3, ev->kind, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, 4, ev->rank);
  sqlite3_bind_int64(st, 5, (sqlite3_int64)ev->generation);
  sqlite3_bind_text(st, 6, ev->message, -1, SQLITE_TRANSIENT);
  step_done(c, st);
  return (uint64_t)sqlite3_last_insert_rowid(c->db);
}

rm_status_t rm__store_events(rm__store_t *c, uint64_t job_id, uint64_t after,
                             uint32_t limit, rm_event_t **out, size_t *n)
{
  sqlite3_stmt *st = prep(c, "SELECT seq,job_id,time_ms,kind,rank,generation,"
                          "message FROM events WHERE seq>?1 AND (?2=0 OR "
                          "job_id=?2) ORDER BY seq LIMIT ?3");
  size_t k = 0, cap = 16;
  rm_event_t *arr = rm__xcalloc(cap, sizeof *arr);
  if (!limit) limit = 1000;
  sqlite3_bind_int64(st, 1, (sqlite3_int64)after);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)job_id);
  sqlite3_bind_int64(st, 3, limit);
  while (sqlite3_step(st) == SQLITE_ROW) {
    if (k == cap) arr = rm__xrealloc(arr, (cap *= 2) * sizeof *arr);
    rm_event_t *e = &arr[k++];
    e->seq = (uint64_t)sqlite3_column_int64(st, 0);
    e->job_id = (uint64_t)sqlite3_column_int64(st, 1);
    e->time_ms = sqlite3_column_int64(st, 2);
    rm__copy_text(e->kind, sizeof e->kind, sqlite3_column_text(st, 3));
    e->rank = sqlite3_column_int(st, 4);
    e->generation = (uint64_t)sqlite3_column_int64(st, 5);
    rm__copy_text(e->message, sizeof e->message, sqlite3_column_text(st, 6));
  }
  rm__stmt_done(c, st);
  *out = arr;
  *n = k;
  return RM_OK;
}

/* ---- restart ---- */
void rm__store_load_workers(rm__store_t *c, rm__job_t *j)
{
  sqlite3_stmt *st = prep(c, "SELECT id,rank,host,data_addr,devices,state,"
                          "generation,joined_ms,last_heartbeat_ms,step,result,"
                          "launch_index,transports FROM workers WHERE job_id=? "
                          "ORDER BY id");
  sqlite3_bind_int64(st, 1, (sqlite3_int64)j->info.id);
  while (sqlite3_step(st) == SQLITE_ROW) {
    rm__worker_t *w = rm__job_worker_add(j);
    w->id = (uint64_t)sqlite3_column_int64(st, 0);
    w->rank = sqlite3_column_int(st, 1);
    rm__worker_strs(w, (const char *)sqlite3_column_text(st, 2),
                    (const char *)sqlite3_column_text(st, 3),
                    (const char *)sqlite3_column_text(st, 12),
                    (const char *)sqlite3_column_text(st, 4));
    w->state = (rm_worker_state_t)sqlite3_column_int(st, 5);
    w->generation = (uint64_t)sqlite3_column_int64(st, 6);
    w->joined_ms = sqlite3_column_int64(st, 7);
    w->last_wall_ms = sqlite3_column_int64(st, 8);
    w->step = w->steps_done = (uint64_t)sqlite3_column_int64(st, 9);
    const unsigned char *res = sqlite3_column_text(st, 10);
    if (res && *res) rm__worker_cold(w)->result = rm__xstrdup((const char *)res);
    w->launch_index = sqlite3_column_int(st, 11);
  }
  rm__stmt_done(c, st);
}

size_t rm__store_recent_steps(rm__store_t *c, uint64_t job_id, rm_step_sample_t *out,
                              size_t max)
{
  sqlite3_stmt *st = prep(c, "SELECT rank,generation,last_step,time_ms,count,"
                          "mean_compute_ms,mean_comm_ms,mean_wait_ms,last_loss,"
                          "last_accuracy,allreduce_bytes,last_metrics FROM step_summaries "
                          "WHERE job_id=? ORDER BY id DESC LIMIT ?");
  size_t n = 0;
  sqlite3_bind_int64(st, 1, (sqlite3_int64)job_id);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)max);
  while (n < max && sqlite3_step(st) == SQLITE_ROW) {
    rm_step_sample_t *s = &out[n++];
    int64_t count = sqlite3_column_int64(st, 4);
    s->rank = sqlite3_column_int(st, 0);
    s->generation = (uint64_t)sqlite3_column_int64(st, 1);
    s->step = (uint64_t)sqlite3_column_int64(st, 2);
    s->time_ms = sqlite3_column_int64(st, 3);
    s->compute_ms = sqlite3_column_double(st, 5);
    s->comm_ms = sqlite3_column_double(st, 6);
    s->wait_ms = sqlite3_column_double(st, 7);
    s->loss = sqlite3_column_type(st, 8) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 8);
    s->accuracy = sqlite3_column_type(st, 9) == SQLITE_NULL ? NAN
                                                           : sqlite3_column_double(st, 9);
    s->allreduce_bytes = count > 0 ? (uint64_t)sqlite3_column_int64(st, 10) / (uint64_t)count
                                   : 0;
    s->n_metrics = metrics_parse(sqlite3_column_text(st, 11), s->metrics);
  }
  rm__stmt_done(c, st);
  for (size_t i = 0; i < n / 2; i++) { /* oldest first */
    rm_step_sample_t t = out[i];
    out[i] = out[n - 1 - i];
    out[n - 1 - i] = t;
  }
  return n;
}

void rm__store_active_jobs(rm__store_t *c, uint64_t **out, size_t *nout)
{
  sqlite3_stmt *st = prep(c, "SELECT id FROM jobs WHERE state<3 ORDER BY id");
  size_t n = 0, cap = 16;
  uint64_t *ids = rm__xmalloc(cap * sizeof *ids);
  while (sqlite3_step(st) == SQLITE_ROW) {
    if (n == cap) ids = rm__xrealloc(ids, (cap *= 2) * sizeof *ids);
    ids[n++] = (uint64_t)sqlite3_column_int64(st, 0);
  }
  rm__stmt_done(c, st);
  *out = ids;
  *nout = n;
}

/* ---- checkpoints (recovery.c) ---- */
void rm__store_checkpoint(rm__store_t *c, rm__job_t *j)
{
  rm__store_touch(c, j->info.id);
  sqlite3_stmt *st = prep(c, "INSERT OR REPLACE INTO checkpoints(job_id,step,"
                          "generation,world,time_ms) VALUES(?,?,?,?,?)");
  sqlite3_bind_int64(st, 1, (sqlite3_int64)j->info.id);
  sqlite3_bind_int64(st, 2, (sqlite3_int64)j->ckpt_step);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)j->info.generation);
  sqlite3_bind_int(st, 4, j->nmembers);
  sqlite3_bind_int64(st, 5, (sqlite3_int64)rm__wall_ms());
  step_done(c, st);
}

uint64_t rm__store_checkpoint_get(rm__store_t *c, uint64_t job_id)
{
  uint64_t step = 0;
  sqlite3_stmt *st = prep(c, "SELECT max(step) FROM checkpoints WHERE job_id = ?");
  sqlite3_bind_int64(st, 1, (sqlite3_int64)job_id);
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
    step = (uint64_t)sqlite3_column_int64(st, 0);
  rm__stmt_done(c, st);
  return step;
}

uint64_t rm__store_last_seq(rm__store_t *c)
{
  uint64_t seq = 0;
  sqlite3_stmt *st = prep(c, "SELECT coalesce(max(seq),0) FROM events");
  if (sqlite3_step(st) == SQLITE_ROW) seq = (uint64_t)sqlite3_column_int64(st, 0);
  rm__stmt_done(c, st);
  return seq;
}
