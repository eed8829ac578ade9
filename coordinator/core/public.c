/*
 * api.c - the public job functions of coord.h (submit, get, list, cancel,
 * workers, barriers, steps, counters). Each takes the coordinator lock for
 * one short critical section; loaded jobs answer from memory, others from
 * SQLite.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"
#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_transports.h"

static void make_token(char *out, size_t len)
{
  unsigned char raw[24];
  FILE *f = fopen("/dev/urandom", "rb");
  if (!f || fread(raw, 1, sizeof raw, f) != sizeof raw) {
    RM_ERROR("cannot read /dev/urandom for a job token");
    abort();
  }
  fclose(f);
  for (size_t i = 0; i < sizeof raw && 2 * i + 2 < len; i++)
    snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

rm_status_t rm__submit_locked(rm_coord_t *c, const rm_job_spec_t *spec,
                              rm_job_info_t *out, rm_coord_error_t *err)
{
  rm_job_spec_t s = *spec;
  rm_status_t st = rm_job_spec_validate(&s, err);
  if (st != RM_OK) return st;
  rm__job_evict(c, rm__wall_ms()); /* job.c retention: the count bound */
  rm__job_t *j = rm__job_new(c, &s);
  make_token(j->info.token, sizeof j->info.token);
  j->info.created_ms = j->info.updated_ms = rm__wall_ms();
  rm__store_job_insert(c->store, j);
  rm__event(c, j, "job_submitted", -1, "job %s submitted: %d workers, "
            "workload %s, %llu steps, launcher %s", s.name,
            s.world_size ? s.world_size : s.max_workers, s.workload,
            (unsigned long long)s.steps, s.launcher);
  rm__after_commit(c, j, RM__AFTER_START); /* "none": nothing to start */
  if (out) *out = j->info;
  return RM_OK;
}

rm_status_t rm_coord_submit(rm_coord_t *c, const rm_job_spec_t *spec,
                            rm_job_info_t *out, rm_coord_error_t *err)
{
  rm__lock(c);
  rm_status_t st = rm__submit_locked(c, spec, out, err);
  if (rm__commit(c) != RM_OK && st == RM_OK) {
    st = RM_ERR_UNAVAILABLE; /* not stored: no id, no job (commit.c) */
    if (out) memset(out, 0, sizeof *out);
    if (err) snprintf(err->message, sizeof err->message, "the job could not be stored");
  }
  return st;
}

rm_status_t rm__job_get_locked(rm_coord_t *c, uint64_t id, rm_job_info_t *out)
{
  rm__job_t *j = rm__job_find(c, id);
  if (j) {
    rm__job_progress(c, j);
    *out = j->info;
    return RM_OK;
  }
  return rm__store_job_get(c->store, id, out);
}

rm_status_t rm_coord_job_get(rm_coord_t *c, uint64_t id, rm_job_info_t *out)
{
  rm__lock(c);
  rm_status_t st = rm__job_get_locked(c, id, out);
  rm__commit(c);
  return st;
}

rm_status_t rm__job_list_locked(rm_coord_t *c, const rm_job_filter_t *f,
                                rm_job_info_t **out, size_t *n, size_t *total)
{
  rm_status_t st = rm__store_job_list(c->store, f, out, n, total);
  for (size_t i = 0; st == RM_OK && i < *n; i++) {
    rm__job_t *j = rm__job_find(c, (*out)[i].id);
    if (j) {
      rm__job_progress(c, j);
      (*out)[i] = j->info;
    }
  }
  return st;
}

rm_status_t rm_coord_job_list(rm_coord_t *c, const rm_job_filter_t *f,
                              rm_job_info_t **out, size_t *n, size_t *total)
{
  rm_job_filter_t any = {-1, 0, 0};
  rm__lock(c);
  rm_status_t st = rm__job_list_locked(c, f ? f : &any, out, n, total);
  rm__commit(c);
  return st;
}

rm_status_t rm_coord_job_result(rm_coord_t *c, uint64_t id, char *buf,
                                size_t len, int *rank)
{
  rm_status_t st = RM_OK;
  char *stored = NULL;
  const char *text = NULL;
  int from = -1;
  rm__lock(c);
  rm__job_t *j = rm__job_find(c, id);
  if (j) {
    text = j->result;
    from = j->result_rank;
  } else if ((st = rm__store_job_result_get(c->store, id, &stored, &from)) == RM_OK) {
    text = stored;
  }
  if (st == RM_OK) {
    size_t n = text ? strlen(text) : 0;
    if (!buf || n >= len) {
      st = RM_ERR_INVALID_ARG;
    } else {
      memcpy(buf, text ? text : "", n + 1);
      if (rank) *rank = text ? from : -1;
    }
  }
  rm__commit(c);
  free(stored);
  return st;
}

rm_status_t rm__job_stop_locked(rm_coord_t *c, uint64_t id,
                                rm_job_state_t to, const char *reason)
{
  rm__job_t *j = rm__job_find(c, id);
  rm_job_info_t info;
  if (!j) {
    rm_status_t st = rm__store_job_get(c->store, id, &info);
    return st == RM_OK ? RM_ERR_DENIED : st; /* not loaded = terminal */
  }
  if (rm_job_state_terminal(j->info.state)) return RM_ERR_DENIED;
  rm__job_set_state(c, j, to, reason);
  return RM_OK;
}

static rm_status_t stop(rm_coord_t *c, uint64_t id, rm_job_state_t to,
                        const char *reason, const char *dflt)
{
  rm__lock(c);
  rm_status_t st = rm__job_stop_locked(c, id, to, reason && *reason ? reason : dflt);
  if (rm__commit(c) != RM_OK && st == RM_OK) st = RM_ERR_UNAVAILABLE;
  return st;
}

rm_status_t rm_coord_job_cancel(rm_coord_t *c, uint64_t id, const char *reason)
{
  return stop(c, id, RM_JOB_CANCELLED, reason, "cancelled by user");
}

rm_status_t rm_coord_job_fail(rm_coord_t *c, uint64_t id, const char *reason)
{
  return stop(c, id, RM_JOB_FAILED, reason, "failed");
}

static void worker_info(const rm__job_t *j, const rm__worker_t *w,
                        rm_worker_info_t *o, int64_t now_ms)
{
  memset(o, 0, sizeof *o);
  o->id = w->id;
  o->job_id = j->info.id;
  o->rank = w->rank;
  snprintf(o->host, sizeof o->host, "%s", w->host);
  snprintf(o->data_addr, sizeof o->data_addr, "%s", rm__worker_data_addr(w));
  snprintf(o->transports, sizeof o->transports, "%s", rm__worker_transports(w));
  snprintf(o->devices, sizeof o->devices, "%s", rm__worker_devices(w));
  o->state = w->state;
  o->generation = w->generation;
  o->last_heartbeat_ms = w->last_wall_ms;
  o->ms_since_heartbeat = now_ms - w->last_wall_ms;
  o->step = w->step;
  o->step_ms = w->step_ms;
  o->compute_ms = w->compute_ms;
  o->comm_ms = w->comm_ms;
  o->wait_ms = w->wait_ms;
  o->straggler = w->straggler;
  o->suspect = w->suspect;
  o->launch_index = w->launch_index;
}

/* "shm 3, tcp 4": the transports of each member's pairs, by the rule the
 * workers connect with (common/rm_transports.h); a shared-memory pair whose
 * ranks both offer CUDA IPC on that host (rm_tp_cuda_ipc: device buffers go
 * GPU to GPU) counts as "shm+cuda-ipc". O(members^2), so computed
 * once per (generation, members) into j->links and copied from there (the
 * offers of members change only with a new generation); skipped past
 * LINKS_MAX members. out is indexed like j->w. */
#define LINKS_MAX 1024
static void links_compute(rm__job_t *j)
{
  enum { IPC = 0, NKINDS = 5 };
  static const char *const kinds[NKINDS] = {"shm+cuda-ipc", "shm", "rdma", "tcp", "none"};
  j->links = rm__xrealloc(j->links, (size_t)(j->nmembers ? j->nmembers : 1) * sizeof *j->links);
  for (int a = 0; a < j->nmembers; a++) {
    int count[NKINDS] = {0};
    for (int b = 0; b < j->nmembers; b++) {
      if (a == b) continue;
      const rm__worker_t *lo = &j->w[j->members[a < b ? a : b]];
      const rm__worker_t *hi = &j->w[j->members[a < b ? b : a]];
      const char *lt = rm__worker_transports(lo), *ht = rm__worker_transports(hi);
      const char *t = rm_tp_pick(lt, ht);
      int k = NKINDS - 1;
      for (int i = IPC + 1; t && i < NKINDS - 1; i++)
        if (strcmp(t, kinds[i]) == 0) k = i;
      if (t && strcmp(t, "shm") == 0 && rm_tp_cuda_ipc(lt, ht)) k = IPC;
      count[k]++;
    }
    char *o = j->links[a];
    size_t n = sizeof j->links[0], k = 0;
    o[0] = '\0';
    for (int i = 0; i < NKINDS && k < n; i++)
      if (count[i]) k += (size_t)snprintf(o + k, n - k, "%s%s %d", k ? ", " : "", kinds[i], count[i]);
  }
  j->links_gen = j->info.generation;
  j->links_n = j->nmembers;
}

/* FNV-1a over the members' worker ids, by rank (O(members)). */
static uint64_t members_sum(const rm__job_t *j)
{
  uint64_t h = 1469598103934665603ULL;
  for (int a = 0; a < j->nmembers; a++)
    h = (h ^ j->w[j->members[a]].id) * 1099511628211ULL;
  return h;
}

static void worker_links(rm__job_t *j, rm_worker_info_t *out)
{
  if (j->nmembers > LINKS_MAX || j->nmembers == 0) return;
  uint64_t sum = members_sum(j);
  if (j->links == NULL || j->links_gen != j->info.generation || j->links_n != j->nmembers ||
      j->links_sum != sum) {
    links_compute(j);
    j->links_sum = sum;
  }
  for (int a = 0; a < j->nmembers; a++)
    memcpy(out[j->members[a]].links, j->links[a], sizeof out[0].links);
}

static int by_rank(const void *a, const void *b)
{
  const rm_worker_info_t *x = a, *y = b;
  if ((x->rank < 0) != (y->rank < 0)) return x->rank < 0 ? 1 : -1;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

rm_status_t rm_coord_job_workers(rm_coord_t *c, uint64_t job_id,
                                 rm_worker_info_t **out, size_t *n)
{
  rm_status_t st = RM_OK;
  rm_job_info_t info;
  rm__lock(c);
  rm__job_t *j = rm__job_find(c, job_id);
  if (j) {
    int64_t now = rm__wall_ms();
    *out = rm__xcalloc(j->nw ? j->nw : 1, sizeof **out);
    for (size_t i = 0; i < j->nw; i++) worker_info(j, &j->w[i], &(*out)[i], now);
    worker_links(j, *out);
    *n = j->nw;
    qsort(*out, *n, sizeof **out, by_rank);
  } else if ((st = rm__store_job_get(c->store, job_id, &info)) == RM_OK) {
    st = rm__store_workers(c->store, job_id, out, n);
  }
  rm__commit(c);
  return st;
}

rm_status_t rm_coord_job_steps(rm_coord_t *c, uint64_t job_id, int rank,
                               uint32_t limit, rm_step_sample_t **out,
                               size_t *n)
{
  rm_status_t st = RM_OK;
  rm_job_info_t info;
  rm__lock(c);
  rm__job_t *j = rm__job_find(c, job_id);
  *out = NULL;
  *n = 0;
  if (j) {
    size_t k = 0;
    *out = rm__xcalloc(j->ring_n ? j->ring_n : 1, sizeof **out);
    for (size_t i = 0; i < j->ring_n; i++) {
      size_t at = (j->ring_head + j->ring_cap - j->ring_n + i) % j->ring_cap;
      if (rank < 0 || j->ring[at].rank == rank) (*out)[k++] = j->ring[at];
    }
    if (limit && k > limit) {
      memmove(*out, *out + (k - limit), limit * sizeof **out);
      k = limit;
    }
    *n = k;
  } else if ((st = rm__store_job_get(c->store, job_id, &info)) == RM_OK) {
    /* not loaded (finished): the stored step summaries */
    size_t max = limit ? limit : (size_t)c->opt.step_window, k = 0;
    rm_step_sample_t *all = rm__xcalloc(max, sizeof *all);
    size_t got = rm__store_recent_steps(c->store, job_id, all, max);
    for (size_t i = 0; i < got; i++)
      if (rank < 0 || all[i].rank == rank) all[k++] = all[i];
    *out = all;
    *n = k;
  }
  rm__commit(c);
  return st;
}

void rm_coord_counters(rm_coord_t *c, rm_coord_counters_t *out)
{
  rm__lock(c);
  *out = c->ctr;
  out->store_commits_failed = rm__store_failed_commits(c->store);
  switch (rm__store_failing(c->store, NULL, 0)) {
  case RM__STORE_FULL: out->store_state = RM_COORD_STORE_FULL; break;
  case RM__STORE_ERROR: out->store_state = RM_COORD_STORE_ERROR; break;
  default: out->store_state = RM_COORD_STORE_OK;
  }
  memset(out->jobs_by_state, 0, sizeof out->jobs_by_state);
  memset(out->workers_by_state, 0, sizeof out->workers_by_state);
  rm__store_job_counts(c->store, out->jobs_by_state);
  out->barrier_waits_open = 0;
  out->stragglers_flagged = 0;
  out->byzantine_suspects = 0;
  for (size_t i = 0; i < c->njobs; i++) {
    rm__job_t *j = c->jobs[i];
    if (rm_job_state_terminal(j->info.state)) continue;
    for (size_t k = 0; k < j->nw; k++) {
      out->workers_by_state[j->w[k].state]++;
      out->stragglers_flagged += j->w[k].straggler != 0;
      out->byzantine_suspects += j->w[k].suspect && j->w[k].state <= RM_WORKER_RUNNING;
    }
    for (rm__park_t *p = j->parked.next; p != &j->parked; p = p->next)
      out->barrier_waits_open += p->kind == RM__PARK_BARRIER;
  }
  rm__commit(c);
}
