/*
 * commit.c - the coordinator lock and the POST-COMMIT QUEUE.
 *
 * Every entry point (a gRPC handler, an API call, the 100 ms tick) runs
 *
 *   rm__lock(c)      mutex + BEGIN
 *   ... change the records, write rows, queue answers and launcher work ...
 *   rm__commit(c)    COMMIT, then the post-commit queue, in this order:
 *     1. answers      the RPC adapter's queued replies (rm__out_flush), sent
 *                     only now, so no client sees state that is not in the
 *                     WAL; still under the mutex, so a parked call cannot
 *                     be freed underneath
 *     2.              release the mutex
 *     3. callbacks    event subscribers (SSE, tickers) for the events of
 *                     this section
 *     4. launchers    starts, stops and relaunches, in the order queued,
 *                     each with the launcher and a copy of the job taken
 *                     when it was queued (rm__after_commit): no job is
 *                     re-read and no lock taken to run them
 *
 * A section that writes no row (a finished send, a call's normal close)
 * takes rm__lock_ro: the mutex without BEGIN, so rm__commit has nothing to
 * COMMIT (rm__store_commit is a no-op outside a transaction) and the
 * post-commit queue runs as above. Should such a section write after all,
 * SQLite's autocommit makes each statement durable when it returns, so an
 * answer queued after it still goes out after its row is in the WAL: the
 * rule above holds, only one BEGIN/COMMIT pair is saved.
 *
 * A section that rolls back (a write step or the COMMIT failed: a full
 * disk, an I/O error; store.c WRITE FAILURES) acknowledges nothing:
 *   - every answer it queued becomes the storage failure
 *     (rm__out_fail: RESOURCE_EXHAUSTED for a full disk, else UNAVAILABLE,
 *     with SQLite's words), so no client is told of a row that is gone;
 *   - its event callbacks and launcher work are dropped (they describe rows
 *     that do not exist: a launcher must not start a job nobody stored);
 *   - the jobs it inserted are dropped from memory, so no id is handed out
 *     twice (SQLite gives a rolled-back rowid to the next INSERT) and no job
 *     exists only in memory; the loaded jobs whose rows it changed are read
 *     again from the store (job.c RELOAD: their parked calls get the
 *     failure, a running one resumes as after a restart), so no state,
 *     worker or generation lives only in memory; the event sequence is
 *     re-read from the store;
 *   - rm__commit returns RM_ERR_UNAVAILABLE for the public functions to
 *     pass on (the REST layer asks rm_coord_store_state for 507 or 503).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"
#include "rm_alloc.h"
#include "rm_log.h"

void rm__lock(rm_coord_t *c)
{
  pthread_mutex_lock(&c->mu);
  rm__store_begin(c->store);
}

void rm__lock_ro(rm_coord_t *c)
{
  pthread_mutex_lock(&c->mu);
}

const rm_coord_launcher_t *rm__coord_launcher_find(const rm_coord_t *c, const char *name)
{
  for (int k = 0; k < c->nlaunchers; k++)
    if (name && !strcmp(c->launchers[k].name, name)) return &c->launchers[k];
  return NULL;
}

void rm__after_commit(rm_coord_t *c, rm__job_t *j, rm__after_kind_t kind)
{
  const rm_coord_launcher_t *l = rm__coord_launcher_find(c, j->info.spec.launcher);
  if (!strcmp(j->info.spec.launcher, "none")) return;
  if (!l) {
    if (kind == RM__AFTER_START)
      rm__event(c, j, "launcher_missing", -1, "launcher '%s' is not available "
                "in this coordinator; start the workers by hand",
                j->info.spec.launcher);
    if (kind != RM__AFTER_RELAUNCH) return;
  }
  if (kind == RM__AFTER_RELAUNCH && (!l || !l->relaunch)) {
    rm__event(c, j, "relaunch_unsupported", -1, "launcher %s cannot start a "
              "replacement worker; start one by hand (same command line) or "
              "run standbys (workers beyond world_size)", j->info.spec.launcher);
    return;
  }
  if (kind == RM__AFTER_STOP && !l->stop) return;
  if (c->nafter == c->capafter) {
    c->capafter = c->capafter ? 2 * c->capafter : 4;
    c->after = rm__xrealloc(c->after, c->capafter * sizeof *c->after);
  }
  rm__after_t *a = &c->after[c->nafter++];
  a->kind = kind;
  a->launcher = *l;
  a->job = j->info;
}

void rm__after_commit_free(rm_coord_t *c)
{
  free(c->after);
  free(c->cbq);
  c->after = NULL;
  c->cbq = NULL;
}

/* Step 4: launcher work, no lock held (coord.h: launcher hook). */
static void run_after(rm_coord_t *c, rm__after_t *q, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    rm__after_t *a = &q[i];
    const rm_coord_launcher_t *l = &a->launcher;
    char err[256] = "";
    switch (a->kind) {
    case RM__AFTER_START:
      if (l->start(l->ctx, &a->job, c->grpc_addr, err, sizeof err) != RM_OK)
        rm_coord_job_fail(c, a->job.id, err[0] ? err : "launcher failed");
      break;
    case RM__AFTER_STOP:
      l->stop(l->ctx, &a->job);
      break;
    case RM__AFTER_RELAUNCH:
      if (l->relaunch(l->ctx, &a->job, c->grpc_addr, err, sizeof err) != RM_OK)
        rm__relaunch_outcome(c, a->job.id, l->name, err[0] ? err : "unknown error");
      else
        rm__relaunch_outcome(c, a->job.id, l->name, NULL);
      break;
    }
  }
}

/* A rolled-back section (see the top): the jobs it inserted leave memory,
 * the loaded jobs whose rows it changed are read again from the store
 * (job.c RELOAD). The id lists are copied first: a reload's own
 * transaction starts new ones. */
static void roll_back_memory(rm_coord_t *c, int full, const char *why)
{
  size_t nn = 0, nt = 0;
  const uint64_t *nw = rm__store_txn_new(c->store, &nn);
  const uint64_t *tw = rm__store_txn_touched(c->store, &nt);
  uint64_t *ids = rm__xmalloc((nn + nt + 1) * sizeof *ids);
  if (nn) memcpy(ids, nw, nn * sizeof *ids);
  if (nt) memcpy(ids + nn, tw, nt * sizeof *ids);
  for (size_t i = 0; i < nn + nt; i++)
    if (ids[i] != 0) rm__job_reload(c, ids[i], full, why);
  while (rm__job_reload(c, 0, full, why)) {} /* every job whose insert failed */
  free(ids);
}

rm_status_t rm__commit(rm_coord_t *c)
{
  char *q = NULL;
  rm__after_t *after = NULL;
  size_t nq = 0, na = 0;
  rm_status_t st = RM_OK;
  if (rm__store_commit(c->store) != 0) {
    char why[200];
    int kind = rm__store_failing(c->store, why, sizeof why);
    roll_back_memory(c, kind == RM__STORE_FULL, why);
    rm__out_fail(c, kind == RM__STORE_FULL, why);
    free(c->cbq);
    c->cbq = NULL, c->ncbq = c->capcbq = 0;
    c->nafter = 0;
    c->last_seq = rm__store_last_seq(c->store);
    st = RM_ERR_UNAVAILABLE;
  }
  rm__out_flush(c);                 /* 1 */
  if (c->ncbq) {
    q = c->cbq, nq = c->ncbq;
    c->cbq = NULL, c->ncbq = c->capcbq = 0;
    pthread_cond_broadcast(&c->ev_cond);
  }
  if (c->nafter) {
    after = c->after, na = c->nafter;
    c->after = NULL, c->nafter = c->capafter = 0;
  }
  pthread_mutex_unlock(&c->mu);     /* 2 */
  if (nq) rm__event_callbacks(c, q, nq); /* 3 */
  if (na) run_after(c, after, na);  /* 4 */
  free(q);
  free(after);
  return st;
}

static int store_state(rm_coord_t *c, int probe, char *why, size_t len)
{
  pthread_mutex_lock(&c->mu);
  if (probe && rm__store_failing(c->store, NULL, 0) != RM__STORE_OK) rm__store_probe(c->store);
  int st = rm__store_failing(c->store, why, len);
  pthread_mutex_unlock(&c->mu);
  return st == RM__STORE_FULL ? RM_COORD_STORE_FULL
         : st == RM__STORE_ERROR ? RM_COORD_STORE_ERROR : RM_COORD_STORE_OK;
}

int rm_coord_store_state(rm_coord_t *c, char *why, size_t len)
{
  return store_state(c, 1, why, len);
}

int rm_coord_store_state_last(rm_coord_t *c, char *why, size_t len)
{
  return store_state(c, 0, why, len);
}
