/*
 * events.c - the event log: rm__event records one (SQLite row, in-memory
 * sequence, watchers kicked, callbacks queued for after COMMIT), and the
 * public event functions of coord.h (read, wait, subscribe).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core_int.h"
#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"

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
  ev.seq = rm__store_event(c->store, &ev);
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
  rm_status_t st = rm__store_events(c->store, job_id, after_seq, limit, out, n);
  rm__commit(c);
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

