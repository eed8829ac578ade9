/*
 * ticker.c - pushes live job progress to SSE clients so the dashboard never
 * polls. Once per tick (default 1 s) it looks at every forming or running
 * job and publishes one `progress` event per job whose state changed since
 * the last tick:
 *
 *   {"job_id", "state", "step", "steps_total", "world", "workers_alive",
 *    "now_ms",                              server wall clock (for ages)
 *    "workers":  [{rank, state, step, step_ms, compute_ms, comm_ms, wait_ms,
 *                  straggler, suspect, ms_since_heartbeat, host, generation,
 *                  transports, links}],
 *    "samples":  [step samples reported since the previous tick, oldest
 *                 first; may repeat the last tick's final millisecond,
 *                 clients dedupe on (generation, rank, step)],
 *    "barriers": [open barriers with their missing ranks]}
 *
 * "Changed" = a hash over state, step, worker states/steps, open barrier
 * arrival counts and the newest sample time differs from the job's previous
 * one. Coordinator events (job/worker state changes) reach clients
 * separately and at once through rm_coord_subscribe (server.c).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_int.h"
#include "rm_alloc.h"
#include "rm_clock.h"

typedef struct {
  uint64_t id;
  int64_t last_sample_ms;
  uint64_t hash;
  int seen;
} jobmem_t;

typedef struct {
  jobmem_t *v;
  size_t n, cap;
} memtab_t;

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ULL; }

static jobmem_t *mem_get(memtab_t *t, uint64_t id)
{
  for (size_t i = 0; i < t->n; i++)
    if (t->v[i].id == id) return &t->v[i];
  if (t->n == t->cap) {
    t->cap = t->cap ? t->cap * 2 : 16;
    t->v = rm__xrealloc(t->v, t->cap * sizeof *t->v);
  }
  memset(&t->v[t->n], 0, sizeof t->v[0]);
  t->v[t->n].id = id;
  return &t->v[t->n++];
}

static json_t *workers_json(rm_api_t *api, uint64_t id, uint64_t *h)
{
  rm_worker_info_t *w = NULL;
  size_t n = 0;
  json_t *arr = json_array();
  if (rm_coord_job_workers(api->coord, id, &w, &n) != RM_OK) return arr;
  for (size_t i = 0; i < n; i++) {
    *h = mix(mix(mix(*h, (uint64_t)w[i].rank), (uint64_t)w[i].state), w[i].step);
    *h = mix(mix(*h, (uint64_t)w[i].straggler), (uint64_t)w[i].launch_index);
    *h = mix(*h, (uint64_t)w[i].suspect);
    json_array_append_new(
        arr, json_pack("{s:i,s:i,s:s,s:I,s:o,s:o,s:o,s:o,s:b,s:b,s:I,s:o,s:I,s:o,s:o}", "rank", w[i].rank,
                       "launch_index", w[i].launch_index,
                       "state", rm_worker_state_name(w[i].state), "step", (json_int_t)w[i].step,
                       "step_ms", rm__json_num(w[i].step_ms), "compute_ms",
                       rm__json_num(w[i].compute_ms), "comm_ms", rm__json_num(w[i].comm_ms),
                       "wait_ms", rm__json_num(w[i].wait_ms), "straggler", w[i].straggler != 0,
                       "suspect", w[i].suspect != 0, "ms_since_heartbeat", (json_int_t)w[i].ms_since_heartbeat, "host",
                       rm__json_str(w[i].host),
                       "generation", (json_int_t)w[i].generation,
                       "transports", rm__json_str(w[i].transports[0] ? w[i].transports : "tcp"),
                       "links", rm__json_str(w[i].links)));
  }
  rm_coord_free(w);
  return arr;
}

/* New samples since the last tick, at most SAMPLES_PER_RANK newest per rank
 * (a fast job reports thousands of steps a second; the chart needs a trace,
 * not every point), in step order. */
#define SAMPLES_PER_RANK 64
#define RANKS_TRACKED 4096
static json_t *samples_json(rm_api_t *api, uint64_t id, jobmem_t *m, uint64_t *h)
{
  rm_step_sample_t *s = NULL;
  size_t n = 0;
  int64_t newest = m->last_sample_ms;
  json_t *arr = json_array();
  unsigned short *per_rank;
  unsigned char *keep;

  if (rm_coord_job_steps(api->coord, id, -1, 8192, &s, &n) != RM_OK) return arr;
  per_rank = rm__xcalloc(RANKS_TRACKED, sizeof *per_rank);
  keep = rm__xcalloc(n ? n : 1, 1);
  for (size_t i = n; i-- > 0;) { /* newest first */
    int r = s[i].rank;
    if (s[i].time_ms < m->last_sample_ms || r < 0 || r >= RANKS_TRACKED) continue;
    if (per_rank[r] >= SAMPLES_PER_RANK) continue;
    per_rank[r]++;
    keep[i] = 1;
    if (s[i].time_ms > newest) newest = s[i].time_ms;
  }
  for (size_t i = 0; i < n; i++)
    if (keep[i]) json_array_append_new(arr, rm__json_step(&s[i]));
  free(keep);
  free(per_rank);
  rm_coord_free(s);
  *h = mix(*h, (uint64_t)newest);
  m->last_sample_ms = newest;
  return arr;
}

static json_t *barriers_json(rm_api_t *api, uint64_t id, uint64_t *h)
{
  rm_barrier_info_t *b = NULL;
  size_t n = 0;
  json_t *arr = json_array();
  if (rm_coord_job_barriers(api->coord, id, &b, &n) != RM_OK) return arr;
  for (size_t i = 0; i < n; i++) {
    if (b[i].state != RM_BARRIER_OPEN) continue;
    *h = mix(mix(*h, (uint64_t)b[i].arrived), (uint64_t)b[i].opened_ms);
    json_array_append_new(arr, rm__json_barrier(&b[i]));
  }
  rm_coord_free(b);
  return arr;
}

static void tick_job(rm_api_t *api, memtab_t *t, const rm_job_info_t *j)
{
  jobmem_t *m = mem_get(t, j->id);
  uint64_t h = mix(mix(14695981039346656037ULL, (uint64_t)j->state), j->step);
  json_t *workers, *samples, *barriers, *ev;
  char id[24], *text;

  m->seen = 1;
  workers = workers_json(api, j->id, &h);
  samples = samples_json(api, j->id, m, &h);
  barriers = barriers_json(api, j->id, &h);
  if (h == m->hash) {
    json_decref(workers);
    json_decref(samples);
    json_decref(barriers);
    return;
  }
  m->hash = h;
  ev = json_pack("{s:I,s:s,s:I,s:I,s:i,s:i,s:I,s:o,s:o,s:o}", "job_id", (json_int_t)j->id,
                 "state", rm_job_state_name(j->state), "step", (json_int_t)j->step,
                 "steps_total", (json_int_t)rm_job_steps_total(j), "world", j->world, "workers_alive",
                 j->workers_alive, "now_ms", (json_int_t)rm__wall_ms(), "workers", workers,
                 "samples", samples, "barriers", barriers);
  text = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
  json_decref(ev);
  if (text) {
    snprintf(id, sizeof id, "%llu", (unsigned long long)j->id);
    rm__sse_publish(api->hub, id, "progress", text);
    free(text);
  }
}

static void tick(rm_api_t *api, memtab_t *t)
{
  static const rm_job_state_t live[] = {RM_JOB_FORMING, RM_JOB_RUNNING};
  for (size_t i = 0; i < t->n; i++) t->v[i].seen = 0;
  for (size_t k = 0; k < 2; k++) {
    rm_job_filter_t f = {.state = (int)live[k], .offset = 0, .limit = 1000};
    rm_job_info_t *jobs = NULL;
    size_t n = 0;
    if (rm_coord_job_list(api->coord, &f, &jobs, &n, NULL) != RM_OK) continue;
    for (size_t i = 0; i < n; i++) tick_job(api, t, &jobs[i]);
    rm_coord_free(jobs);
  }
  for (size_t i = 0; i < t->n;) { /* forget jobs that are no longer live */
    if (!t->v[i].seen) t->v[i] = t->v[--t->n];
    else i++;
  }
}

static void *ticker_main(void *arg)
{
  rm_api_t *api = arg;
  memtab_t t = {NULL, 0, 0};

  pthread_mutex_lock(&api->tick_lock);
  while (!api->stopping) {
    int64_t deadline = rm__now_ns() + (int64_t)api->tick_ms * 1000000;
    struct timespec ts = {(time_t)(deadline / 1000000000), (long)(deadline % 1000000000)};
    pthread_mutex_unlock(&api->tick_lock);
    tick(api, &t);
    pthread_mutex_lock(&api->tick_lock);
    while (!api->stopping && pthread_cond_timedwait(&api->tick_cond, &api->tick_lock, &ts) == 0) {
    }
  }
  pthread_mutex_unlock(&api->tick_lock);
  free(t.v);
  return NULL;
}

int rm__ticker_start(rm_api_t *api)
{
  pthread_condattr_t ca;
  pthread_mutex_init(&api->tick_lock, NULL);
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&api->tick_cond, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&api->ticker, NULL, ticker_main, api) != 0) return -1;
  api->ticker_started = 1;
  return 0;
}

void rm__ticker_stop(rm_api_t *api)
{
  if (!api->ticker_started) return;
  pthread_mutex_lock(&api->tick_lock);
  api->stopping = 1;
  pthread_cond_broadcast(&api->tick_cond);
  pthread_mutex_unlock(&api->tick_lock);
  pthread_join(api->ticker, NULL);
  api->ticker_started = 0;
  pthread_cond_destroy(&api->tick_cond);
  pthread_mutex_destroy(&api->tick_lock);
}
