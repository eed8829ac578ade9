/*
 * events.c - the event log: rm__event records one (SQLite row, in-memory
 * sequence, watchers kicked, callbacks queued for after COMMIT), and the
 * public event functions of coord.h (read, wait, subscribe).
 *
 * CALLBACK QUEUE. A section's events wait in c->cbq for its COMMIT
 * (commit.c step 3), packed: each is a cb_head_t, its kind and its
 * message (no NULs), padded to 8 bytes; about 110 bytes for a typical
 * event instead of an rm_event_t's 1,096 (its message room is
 * RM_COORD_TEXT_MAX). A Join wave's section records one event a worker
 * (thousands in one group commit), and the queue's room stays resident
 * after it (malloc keeps it), so its size is what a worker costs.
 * rm__event_callbacks unpacks each into one rm_event_t for the
 * subscribers.
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

typedef struct {
  uint64_t seq, job_id, generation;
  int64_t time_ms;
  int32_t rank;
  uint16_t kind_len, msg_len;   /* < sizeof kind, < RM_COORD_TEXT_MAX */
} cb_head_t;

_Static_assert(RM_COORD_TEXT_MAX <= 65536, "msg_len is 16 bits");

static size_t cbq_size(size_t kind_len, size_t msg_len)
{
  return (sizeof(cb_head_t) + kind_len + msg_len + 7) & ~(size_t)7;
}

static void cbq_put(rm_coord_t *c, const rm_event_t *ev)
{
  cb_head_t h = {.seq = ev->seq, .job_id = ev->job_id, .generation = ev->generation,
                 .time_ms = ev->time_ms, .rank = ev->rank,
                 .kind_len = (uint16_t)strlen(ev->kind),
                 .msg_len = (uint16_t)strlen(ev->message)};
  size_t need = cbq_size(h.kind_len, h.msg_len);
  if (c->capcbq - c->ncbq < need) {
    size_t cap = c->capcbq ? c->capcbq : 2048;
    while (cap - c->ncbq < need) cap *= 2;
    c->cbq = rm__xrealloc(c->cbq, cap);
    c->capcbq = cap;
  }
  char *p = c->cbq + c->ncbq;
  memcpy(p, &h, sizeof h);
  memcpy(p + sizeof h, ev->kind, h.kind_len);
  memcpy(p + sizeof h + h.kind_len, ev->message, h.msg_len);
  c->ncbq += need;
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
  ev.seq = rm__store_event(c->store, &ev);
  c->last_seq = ev.seq;
  c->ctr.events_total++;
  RM_INFO("event %llu job %llu %s: %s", (unsigned long long)ev.seq,
          (unsigned long long)ev.job_id, ev.kind, ev.message);
  cbq_put(c, &ev);
  if (j) rm__watch_kick(c, j);
}

void rm__event_callbacks(rm_coord_t *c, const char *q, size_t len)
{
  rm_event_t *ev = rm__xmalloc(sizeof *ev);
  pthread_mutex_lock(&c->sub_mu);
  for (size_t at = 0; at < len;) {
    cb_head_t h;
    memcpy(&h, q + at, sizeof h);
    const char *p = q + at + sizeof h;
    ev->seq = h.seq;
    ev->job_id = h.job_id;
    ev->time_ms = h.time_ms;
    ev->generation = h.generation;
    ev->rank = h.rank;
    memcpy(ev->kind, p, h.kind_len);
    ev->kind[h.kind_len] = '\0';
    memcpy(ev->message, p + h.kind_len, h.msg_len);
    ev->message[h.msg_len] = '\0';
    for (int k = 0; k < 64; k++)
      if (c->subs[k].cb) c->subs[k].cb(c->subs[k].ctx, ev);
    at += cbq_size(h.kind_len, h.msg_len);
  }
  pthread_mutex_unlock(&c->sub_mu);
  free(ev);
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

