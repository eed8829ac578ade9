/*
 * model.c - container helpers of the in-memory records (model.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "rm_alloc.h"
#include "rm_clock.h"

rm__worker_t *rm__job_worker(rm__job_t *j, uint64_t id)
{
  size_t lo = 0, hi = j->nw;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (j->w[mid].id == id) return &j->w[mid];
    if (j->w[mid].id < id) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

rm__worker_t *rm__job_worker_add(rm__job_t *j)
{
  if (j->nw == j->capw) {
    j->capw = j->capw ? 2 * j->capw : 8;
    j->w = rm__xrealloc(j->w, j->capw * sizeof *j->w);
  }
  rm__worker_t *w = &j->w[j->nw++];
  memset(w, 0, sizeof *w);
  rm__worker_strs(w, NULL, NULL, NULL, NULL);
  w->rank = w->prev_rank = -1;
  w->rank_hint = w->launch_index = -1;
  w->step_ms = w->compute_ms = w->comm_ms = w->wait_ms = NAN;
  w->acc_loss = w->acc_acc = NAN;
  w->last_ns = rm__now_ns();
  return w;
}

void rm__park_link(rm__job_t *j, rm__park_t *p)
{
  p->next = &j->parked;
  p->prev = j->parked.prev;
  j->parked.prev->next = p;
  j->parked.prev = p;
  p->job = j;
  if (p->kind == RM__PARK_WATCH) {
    p->wnext = &j->watchers;
    p->wprev = j->watchers.wprev;
    j->watchers.wprev->wnext = p;
    j->watchers.wprev = p;
  }
  rm__worker_t *w = p->kind == RM__PARK_JOIN ? rm__job_worker(j, p->worker_id) : NULL;
  if (w) w->joins_parked++;
}

void rm__park_unlink(rm__park_t *p)
{
  if (!p->next) return;
  p->prev->next = p->next;
  p->next->prev = p->prev;
  p->next = p->prev = NULL;
  if (p->kind == RM__PARK_WATCH && p->wnext) {
    p->wprev->wnext = p->wnext;
    p->wnext->wprev = p->wprev;
    p->wnext = p->wprev = NULL;
  }
  rm__worker_t *w = p->kind == RM__PARK_JOIN && p->job ?
                    rm__job_worker(p->job, p->worker_id) : NULL;
  if (w && w->joins_parked > 0) w->joins_parked--;
  p->job = NULL;
}

int rm__worker_member(const rm__job_t *j, const rm__worker_t *w)
{
  return w->state == RM_WORKER_RUNNING && w->generation == j->info.generation;
}

int rm__worker_live(const rm__job_t *j, const rm__worker_t *w)
{
  return rm__worker_member(j, w) || (w->state == RM_WORKER_JOINING && w->in_group);
}

void rm__worker_strs(rm__worker_t *w, const char *host, const char *data_addr,
                     const char *transports, const char *devices)
{
  const char *in[4] = {host ? host : "", data_addr ? data_addr : "",
                       transports ? transports : "", devices ? devices : ""};
  size_t len[4], off[4], total = 0;
  char *old = w->host; /* the old block (NULL for a new record) */
  for (int i = 0; i < 4; i++) { /* Join bounds each (<= 255): the offsets fit 16 bits */
    off[i] = total;
    total += (len[i] = strnlen(in[i], 255)) + 1;
  }
  char *b = rm__xmalloc(total);
  for (int i = 0; i < 4; i++) {
    memcpy(b + off[i], in[i], len[i]);
    b[off[i] + len[i]] = '\0';
  }
  w->host = b;
  w->s_data_addr = (uint16_t)off[1];
  w->s_transports = (uint16_t)off[2];
  w->s_devices = (uint16_t)off[3];
  free(old);
}

static const rm__worker_cold_t cold_none = {.blamed_by = -1};

const rm__worker_cold_t *rm__worker_cold_get(const rm__worker_t *w)
{
  return w->cold ? w->cold : &cold_none;
}

rm__worker_cold_t *rm__worker_cold(rm__worker_t *w)
{
  if (!w->cold) {
    w->cold = rm__xmalloc(sizeof *w->cold);
    *w->cold = cold_none;
  }
  return w->cold;
}

void rm__worker_free(rm__worker_t *w)
{
  free(w->host);
  if (w->cold) free(w->cold->result);
  free(w->cold);
  w->host = NULL;
  w->cold = NULL;
}
