/*
 * store_jobs.c - the jobs table: a job's row from its info and spec and
 * back (command and env as packed lists; the worker token and the env
 * values sealed, store_key.c), insert, update (which moves the job counts,
 * store.c JOB COUNTS), get, list with its filter, and the counts by state.
 */
#include <stdlib.h>
#include <string.h>

#include "store/store_int.h"
#include "rm_alloc.h"
#include "rm_log.h"

#define JOB_COLS                                                              \
  "id,name,world_size,min_workers,max_workers,algorithm,dtype,workload,"      \
  "workload_options,steps,launcher,heartbeat_timeout_ms,barrier_timeout_ms,"  \
  "on_failure,max_restarts,straggler_policy,backup_workers,checkpoint_every," \
  "state,token_verifier,reason,generation,world,step,restarts,created_ms,started_ms,"  \
  "finished_ms,updated_ms,command,env,workdir,aggregation,aggregation_f,"   \
  "aggregation_m,clip_norm,aggregation_tau,aggregation_iterations,"          \
  "deterministic,max_staleness,secagg_bits,secagg_clip,secagg_scale,"       \
  "secagg_threshold,secagg_neighbours,secure_recovered_steps,secure_dropouts"
#define JOB_NCOLS 47 /* in JOB_COLS: the seal columns come after them */
/* ... and what job_get reads to unseal the token (store_key.c) */
#define JOB_SEAL_COLS ",token_salt,token_sealed,env_salt,env_sealed,env_mac"

/* Packed lists (command, env) as BLOBs: their strings end in NULs. */
static void bind_list(sqlite3_stmt *st, int i, const char *buf, size_t cap,
                      int count)
{
  long n = rm_job_spec_packed_len(buf, cap, count);
  sqlite3_bind_blob(st, i, buf, n > 0 ? (int)n : 0, SQLITE_TRANSIENT);
}

/* The list back from a BLOB; the count is its NULs. A blob that does not
 * fit or does not end in a NUL (a hand-edited database) reads as empty. */
static void read_list(sqlite3_stmt *st, int i, char *buf, size_t cap,
                      int *count)
{
  const char *b = sqlite3_column_blob(st, i);
  size_t n = (size_t)sqlite3_column_bytes(st, i);
  *count = 0;
  if (!b || !n || n > cap || b[n - 1] != '\0') return;
  memcpy(buf, b, n);
  for (size_t k = 0; k < n; k++) *count += buf[k] == '\0';
}

static void bind_job(sqlite3_stmt *st, const rm_job_info_t *in)
{
  const rm_job_spec_t *s = &in->spec;
  int i = 1;
  sqlite3_bind_int64(st, i++, (sqlite3_int64)in->id);
  sqlite3_bind_text(st, i++, s->name, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, i++, s->world_size);
  sqlite3_bind_int(st, i++, s->min_workers);
  sqlite3_bind_int(st, i++, s->max_workers);
  sqlite3_bind_text(st, i++, s->algorithm, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, i++, s->dtype, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, i++, s->workload, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, i++, s->workload_options, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, i++, (sqlite3_int64)s->steps);
  sqlite3_bind_text(st, i++, s->launcher, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, i++, s->heartbeat_timeout_ms);
  sqlite3_bind_int(st, i++, s->barrier_timeout_ms);
  sqlite3_bind_text(st, i++, s->on_failure, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, i++, s->max_restarts);
  sqlite3_bind_text(st, i++, s->straggler_policy, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, i++, s->backup_workers);
  sqlite3_bind_int64(st, i++, (sqlite3_int64)s->checkpoint_every);
  sqlite3_bind_int(st, i++, in->state);
  sqlite3_bind_text(st, i++, in->token_verifier, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, i++, in->reason, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, i++, (sqlite3_int64)in->generation);
  sqlite3_bind_int(st, i++, in->world);
  sqlite3_bind_int64(st, i++, (sqlite3_int64)in->step);
  sqlite3_bind_int(st, i++, in->restarts);
  sqlite3_bind_int64(st, i++, in->created_ms);
  sqlite3_bind_int64(st, i++, in->started_ms);
  sqlite3_bind_int64(st, i++, in->finished_ms);
  sqlite3_bind_int64(st, i++, in->updated_ms);
  bind_list(st, i++, s->command, sizeof s->command, s->command_argc);
  { /* the column holds keys only: the values go sealed (store_key.c ENV) */
    char masked[RM_COORD_ENV_BYTES];
    int mc = rm_job_spec_env_mask(s->env, s->env_count, masked, sizeof masked);
    bind_list(st, i++, masked, sizeof masked, mc);
  }
  sqlite3_bind_text(st, i++, s->workdir, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, i++, s->aggregation, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, i++, s->aggregation_f);
  sqlite3_bind_int(st, i++, s->aggregation_m);
  sqlite3_bind_double(st, i++, s->clip_norm);
  sqlite3_bind_double(st, i++, s->aggregation_tau);
  sqlite3_bind_int(st, i++, s->aggregation_iterations);
  sqlite3_bind_int(st, i++, s->deterministic);
  sqlite3_bind_int(st, i++, s->max_staleness);
  sqlite3_bind_int(st, i++, s->secagg_bits);
  sqlite3_bind_double(st, i++, s->secagg_clip);
  sqlite3_bind_double(st, i++, s->secagg_scale);
  sqlite3_bind_int(st, i++, s->secagg_threshold);
  sqlite3_bind_text(st, i++, s->secagg_neighbours, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(st, i++, in->secure_recovered_steps);
  sqlite3_bind_int(st, i++, in->secure_dropouts);
}

static void read_job(sqlite3_stmt *st, rm_job_info_t *o)
{
  rm_job_spec_t *s = &o->spec;
  int i = 0;
  memset(o, 0, sizeof *o);
  o->id = (uint64_t)sqlite3_column_int64(st, i++);
  rm__copy_text(s->name, sizeof s->name, sqlite3_column_text(st, i++));
  s->world_size = sqlite3_column_int(st, i++);
  s->min_workers = sqlite3_column_int(st, i++);
  s->max_workers = sqlite3_column_int(st, i++);
  rm__copy_text(s->algorithm, sizeof s->algorithm, sqlite3_column_text(st, i++));
  rm__copy_text(s->dtype, sizeof s->dtype, sqlite3_column_text(st, i++));
  rm__copy_text(s->workload, sizeof s->workload, sqlite3_column_text(st, i++));
  rm__copy_text(s->workload_options, sizeof s->workload_options,
            sqlite3_column_text(st, i++));
  s->steps = (uint64_t)sqlite3_column_int64(st, i++);
  rm__copy_text(s->launcher, sizeof s->launcher, sqlite3_column_text(st, i++));
  s->heartbeat_timeout_ms = sqlite3_column_int(st, i++);
  s->barrier_timeout_ms = sqlite3_column_int(st, i++);
  rm__copy_text(s->on_failure, sizeof s->on_failure, sqlite3_column_text(st, i++));
  s->max_restarts = sqlite3_column_int(st, i++);
  rm__copy_text(s->straggler_policy, sizeof s->straggler_policy,
            sqlite3_column_text(st, i++));
  s->backup_workers = sqlite3_column_int(st, i++);
  s->checkpoint_every = (uint64_t)sqlite3_column_int64(st, i++);
  o->state = (rm_job_state_t)sqlite3_column_int(st, i++);
  rm__copy_text(o->token_verifier, sizeof o->token_verifier, sqlite3_column_text(st, i++));
  rm__copy_text(o->reason, sizeof o->reason, sqlite3_column_text(st, i++));
  o->generation = (uint64_t)sqlite3_column_int64(st, i++);
  o->world = sqlite3_column_int(st, i++);
  o->step = (uint64_t)sqlite3_column_int64(st, i++);
  o->restarts = sqlite3_column_int(st, i++);
  o->created_ms = sqlite3_column_int64(st, i++);
  o->started_ms = sqlite3_column_int64(st, i++);
  o->finished_ms = sqlite3_column_int64(st, i++);
  o->updated_ms = sqlite3_column_int64(st, i++);
  read_list(st, i++, s->command, sizeof s->command, &s->command_argc);
  read_list(st, i++, s->env, sizeof s->env, &s->env_count);
  rm__copy_text(s->workdir, sizeof s->workdir, sqlite3_column_text(st, i++));
  rm__copy_text(s->aggregation, sizeof s->aggregation, sqlite3_column_text(st, i++));
  s->aggregation_f = sqlite3_column_int(st, i++);
  s->aggregation_m = sqlite3_column_int(st, i++);
  s->clip_norm = sqlite3_column_double(st, i++);
  s->aggregation_tau = sqlite3_column_double(st, i++);
  s->aggregation_iterations = sqlite3_column_int(st, i++);
  s->deterministic = sqlite3_column_int(st, i++);
  s->max_staleness = sqlite3_column_int(st, i++);
  s->secagg_bits = sqlite3_column_int(st, i++);
  s->secagg_clip = sqlite3_column_double(st, i++);
  s->secagg_scale = sqlite3_column_double(st, i++);
  s->secagg_threshold = sqlite3_column_int(st, i++);
  rm__copy_text(s->secagg_neighbours, sizeof s->secagg_neighbours, sqlite3_column_text(st, i++));
  o->secure_recovered_steps = sqlite3_column_int(st, i++);
  o->secure_dropouts = sqlite3_column_int(st, i++);
}

/* The row gets the token's verifier and sealed copy, never the token (its
 * column, NOT NULL since 0001, gets ''); j->info.token_verifier is set. */
void rm__store_job_insert(rm__store_t *c, rm__job_t *j)
{
  sqlite3_stmt *st = rm__stmt(c, "INSERT INTO jobs(" JOB_COLS JOB_SEAL_COLS ",token) VALUES (?,"
                          "?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,"
                          "?,?,?,?,?,?,?,"
                          "?,?,?,?,?,'')");
  char salt[RM__SALT_HEX + 1], sealed[2 * sizeof j->info.token];
  char esalt[RM__SALT_HEX + 1], esealed[2 * RM_COORD_ENV_BYTES + 1], emac[RM__VERIFIER_HEX + 1];
  const rm_job_spec_t *sp = &j->info.spec;
  long el = rm_job_spec_packed_len(sp->env, sizeof sp->env, sp->env_count);
  rm__store_verifier(j->info.token, j->info.token_verifier);
  rm__store_seal(c, j->info.token, salt, sealed, sizeof sealed);
  bind_job(st, &j->info);
  sqlite3_bind_null(st, 1);
  sqlite3_bind_text(st, JOB_NCOLS + 1, salt, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, JOB_NCOLS + 2, sealed, -1, SQLITE_TRANSIENT);
  if (el > 0) {
    rm__store_env_seal(c, sp->env, (size_t)el, esalt, esealed, emac);
  } else {
    esalt[0] = esealed[0] = emac[0] = '\0';
  }
  sqlite3_bind_text(st, JOB_NCOLS + 3, esalt, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, JOB_NCOLS + 4, esealed, -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st, JOB_NCOLS + 5, emac, -1, SQLITE_TRANSIENT);
  if (rm__stmt_run(c, st) == SQLITE_DONE) {
    c->job_counts[j->info.state]++;
    j->stored_state = (int)j->info.state;
    j->info.id = (uint64_t)sqlite3_last_insert_rowid(c->db);
  } else {
    j->info.id = 0; /* no row: the id is nobody's (the core drops the job) */
  }
  if (c->in_txn) rm__store_id_add(&c->txn_new, &c->ntxn_new, &c->captxn_new, j->info.id);
}

void rm__store_job_update(rm__store_t *c, rm__job_t *j)
{
  rm__store_touch(c, j->info.id);
  sqlite3_stmt *st = rm__stmt(c, "UPDATE jobs SET state=?2, reason=?3, "
                          "generation=?4, world=?5, step=?6, restarts=?7, "
                          "started_ms=?8, finished_ms=?9, updated_ms=?10, "
                          "secure_recovered_steps=?11, secure_dropouts=?12 "
                          "WHERE id=?1");
  const rm_job_info_t *in = &j->info;
  sqlite3_bind_int64(st, 1, (sqlite3_int64)in->id);
  sqlite3_bind_int(st, 2, in->state);
  sqlite3_bind_text(st, 3, in->reason, -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 4, (sqlite3_int64)in->generation);
  sqlite3_bind_int(st, 5, in->world);
  sqlite3_bind_int64(st, 6, (sqlite3_int64)in->step);
  sqlite3_bind_int(st, 7, in->restarts);
  sqlite3_bind_int64(st, 8, in->started_ms);
  sqlite3_bind_int64(st, 9, in->finished_ms);
  sqlite3_bind_int64(st, 10, in->updated_ms);
  sqlite3_bind_int(st, 11, in->secure_recovered_steps);
  sqlite3_bind_int(st, 12, in->secure_dropouts);
  if (rm__stmt_run(c, st) == SQLITE_DONE) j->stored_step = in->step;
  if (j->stored_step == in->step && j->stored_state != (int)in->state) {
    if (j->stored_state >= 0 && j->stored_state < RM_JOB_STATE_COUNT &&
        c->job_counts[j->stored_state] > 0)
      c->job_counts[j->stored_state]--;
    c->job_counts[in->state]++;
    j->stored_state = (int)in->state;
  }
}

/* The env list from the seal columns of a job_get row (store_key.c ENV);
 * a row with nothing sealed keeps the masked column read_job copied. */
static void unseal_env(rm__store_t *c, sqlite3_stmt *st, uint64_t id, rm_job_spec_t *s)
{
  const char *salt = (const char *)sqlite3_column_text(st, JOB_NCOLS + 2);
  const char *sealed = (const char *)sqlite3_column_text(st, JOB_NCOLS + 3);
  const char *mac = (const char *)sqlite3_column_text(st, JOB_NCOLS + 4);
  char buf[RM_COORD_ENV_BYTES];
  long n;
  int count = 0;
  if (!sealed || !sealed[0]) return;
  n = rm__store_env_unseal(c, salt ? salt : "", sealed, mac ? mac : "", buf, sizeof buf);
  if (n <= 0 || buf[n - 1] != '\0') {
    RM_WARN("job %llu: its env cannot be unsealed (key file or row changed); its "
            "program would start without the values", (unsigned long long)id);
    return;
  }
  for (long k = 0; k < n; k++) count += buf[k] == '\0';
  memcpy(s->env, buf, (size_t)n);
  s->env_count = count;
  memset(buf, 0, sizeof buf);
}

rm_status_t rm__store_job_get(rm__store_t *c, uint64_t id, rm_job_info_t *out)
{
  sqlite3_stmt *st = rm__stmt(c, "SELECT " JOB_COLS JOB_SEAL_COLS " FROM jobs WHERE id=?");
  rm_status_t rc = RM_ERR_NOT_FOUND;
  sqlite3_bind_int64(st, 1, (sqlite3_int64)id);
  if (sqlite3_step(st) == SQLITE_ROW) {
    read_job(st, out);
    const char *salt = (const char *)sqlite3_column_text(st, JOB_NCOLS);
    const char *sealed = (const char *)sqlite3_column_text(st, JOB_NCOLS + 1);
    if (rm__store_unseal(c, salt ? salt : "", sealed ? sealed : "", out->token_verifier,
                         out->token, sizeof out->token) != 0)
      RM_WARN("job %llu: its worker token cannot be unsealed (key file or row "
              "changed); workers still authenticate, relaunch cannot",
              (unsigned long long)id);
    unseal_env(c, st, id, &out->spec);
    rc = RM_OK;
  }
  rm__stmt_done(c, st);
  return rc;
}

/* One page, newest first. Two statements rather than "?<0 OR state=?", so
 * a state filter walks the jobs_state (state, id) index backwards instead
 * of scanning every job; the total comes from c->job_counts. */
rm_status_t rm__store_job_list(rm__store_t *c, const rm_job_filter_t *f,
                               rm_job_info_t **out, size_t *n, size_t *total)
{
  uint32_t limit = f->limit ? (f->limit > 1000 ? 1000 : f->limit) : 100;
  int any = f->state < 0 || f->state >= RM_JOB_STATE_COUNT;
  sqlite3_stmt *st;
  if (any)
    st = rm__stmt(c, "SELECT " JOB_COLS " FROM jobs ORDER BY id DESC LIMIT ?2 OFFSET ?3");
  else
    st = rm__stmt(c, "SELECT " JOB_COLS " FROM jobs WHERE state=?1 ORDER BY id DESC "
              "LIMIT ?2 OFFSET ?3");
  rm_job_info_t *arr = rm__xcalloc(limit ? limit : 1, sizeof *arr);
  size_t k = 0;
  if (!any) sqlite3_bind_int(st, 1, f->state);
  sqlite3_bind_int64(st, 2, limit);
  sqlite3_bind_int64(st, 3, (sqlite3_int64)f->offset);
  while (k < limit && sqlite3_step(st) == SQLITE_ROW) read_job(st, &arr[k++]);
  rm__stmt_done(c, st);
  if (total) {
    uint64_t t = 0;
    for (int s = 0; s < RM_JOB_STATE_COUNT; s++)
      if (any || s == f->state) t += c->job_counts[s];
    *total = (size_t)t;
  }
  *out = arr;
  *n = k;
  return RM_OK;
}

void rm__store_job_counts(rm__store_t *c, uint64_t *by_state)
{
  memcpy(by_state, c->job_counts, sizeof c->job_counts);
}

void rm__store_count_jobs(rm__store_t *c)
{
  sqlite3_stmt *st = rm__stmt(c, "SELECT state, count(*) FROM jobs GROUP BY state");
  memset(c->job_counts, 0, sizeof c->job_counts);
  while (sqlite3_step(st) == SQLITE_ROW) {
    int s = sqlite3_column_int(st, 0);
    if (s >= 0 && s < RM_JOB_STATE_COUNT)
      c->job_counts[s] = (uint64_t)sqlite3_column_int64(st, 1);
  }
  rm__stmt_done(c, st);
}
