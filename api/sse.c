/*
 * sse.c - server-sent events hub (wire format and threading in sse.h).
 *
 * Ring: events[cap], the oldest at `head`, `count` of them, ids contiguous
 * from oldest_id = next_id - count. An id's slot is therefore
 * (head + (id - oldest_id)) % cap, so a stream finds its next event without
 * a search. A stream keeps `cursor` = the last id it has consumed (sent or
 * skipped by its filter).
 *
 * Stream callback states:   pending bytes?  -> copy them out
 *                           hub closing     -> end of stream
 *                           cursor too old  -> emit `reset`, jump to oldest
 *                           next match      -> format it, advance cursor
 *                           none            -> wait (cond) until publish or
 *                                              keep-alive deadline
 */
#include "sse.h"

#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rm_alloc.h"
#include "rm_clock.h"
#include "sbuf.h"

typedef struct {
  uint64_t id;
  char *job;
  char *type;
  char *data;
} event_t;

struct rm__sse_hub {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  event_t *events;
  size_t cap, head, count;
  uint64_t next_id;
  int keepalive_ms;
  int closing;
  int streams;
};

typedef struct {
  rm__sse_hub_t *hub;
  char *filter; /* NULL = all */
  uint64_t cursor;
  int started;
  char *pend; /* formatted bytes not yet handed to MHD */
  size_t pend_len, pend_off;
} stream_t;

rm__sse_hub_t *rm__sse_hub_new(size_t capacity, int keepalive_ms)
{
  rm__sse_hub_t *h = rm__xcalloc(1, sizeof *h);
  pthread_condattr_t ca;

  pthread_mutex_init(&h->lock, NULL);
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&h->cond, &ca);
  pthread_condattr_destroy(&ca);
  h->cap = capacity ? capacity : 1024;
  h->events = rm__xcalloc(h->cap, sizeof *h->events);
  h->next_id = (uint64_t)rm__wall_ms() * 1000u;
  h->keepalive_ms = keepalive_ms > 0 ? keepalive_ms : 15000;
  return h;
}

static void event_clear(event_t *e)
{
  free(e->job);
  free(e->type);
  free(e->data);
  memset(e, 0, sizeof *e);
}

void rm__sse_hub_close(rm__sse_hub_t *h)
{
  pthread_mutex_lock(&h->lock);
  h->closing = 1;
  pthread_cond_broadcast(&h->cond);
  pthread_mutex_unlock(&h->lock);
}

void rm__sse_hub_free(rm__sse_hub_t *h)
{
  if (h == NULL) return;
  for (size_t i = 0; i < h->cap; i++) event_clear(&h->events[i]);
  free(h->events);
  pthread_cond_destroy(&h->cond);
  pthread_mutex_destroy(&h->lock);
  free(h);
}

uint64_t rm__sse_publish(rm__sse_hub_t *h, const char *job, const char *type, const char *data)
{
  event_t *slot;
  uint64_t id = 0;

  pthread_mutex_lock(&h->lock);
  if (h->closing) goto exit;
  if (h->count == h->cap) { /* drop the oldest */
    event_clear(&h->events[h->head]);
    h->head = (h->head + 1) % h->cap;
    h->count--;
  }
  slot = &h->events[(h->head + h->count) % h->cap];
  id = h->next_id++;
  slot->id = id;
  slot->job = rm__xstrdup(job ? job : "");
  slot->type = rm__xstrdup(type);
  slot->data = rm__xstrdup(data ? data : "{}");
  h->count++;
  pthread_cond_broadcast(&h->cond);
exit:
  pthread_mutex_unlock(&h->lock);
  return id;
}

int rm__sse_streams(rm__sse_hub_t *h)
{
  int n;
  pthread_mutex_lock(&h->lock);
  n = h->streams;
  pthread_mutex_unlock(&h->lock);
  return n;
}

uint64_t rm__sse_last_id(rm__sse_hub_t *h)
{
  uint64_t id;
  pthread_mutex_lock(&h->lock);
  id = h->next_id - 1;
  pthread_mutex_unlock(&h->lock);
  return id;
}

static void format_event(rm__sbuf_t *b, uint64_t id, const char *type, const char *data)
{
  const char *line = data;
  rm__sbuf_printf(b, "id: %llu\nevent: %s\n", (unsigned long long)id, type);
  for (;;) { /* one data: line per text line, so a newline cannot end the event */
    const char *nl = strchr(line, '\n');
    size_t n = nl ? (size_t)(nl - line) : strlen(line);
    rm__sbuf_puts(b, "data: ");
    rm__sbuf_append(b, line, n);
    rm__sbuf_puts(b, "\n");
    if (nl == NULL) break;
    line = nl + 1;
  }
  rm__sbuf_puts(b, "\n");
}

/* Under the lock: produce the next chunk of the stream into b, waiting up to
 * the keep-alive deadline. Returns 0, or -1 when the hub is closing. */
static int next_chunk(stream_t *s, rm__sbuf_t *b)
{
  rm__sse_hub_t *h = s->hub;
  int64_t deadline = rm__now_ns() + (int64_t)h->keepalive_ms * 1000000;
  struct timespec ts = {(time_t)(deadline / 1000000000), (long)(deadline % 1000000000)};

  for (;;) {
    uint64_t oldest = h->next_id - h->count;
    if (h->closing) return -1;
    if (s->cursor + 1 < oldest || s->cursor >= h->next_id) {
      /* The client re-fetches state over REST on reset, so replaying what
       * is left of the ring is pointless: continue live. */
      s->cursor = h->next_id - 1;
      format_event(b, s->cursor, "reset",
                   "{\"reason\":\"events were missed; re-fetch state\"}");
      return 0;
    }
    while (s->cursor + 1 < h->next_id) {
      event_t *e = &h->events[(h->head + (s->cursor + 1 - oldest)) % h->cap];
      s->cursor = e->id;
      if (s->filter == NULL || e->job[0] == '\0' || strcmp(e->job, s->filter) == 0) {
        format_event(b, e->id, e->type, e->data);
        return 0;
      }
    }
    if (pthread_cond_timedwait(&h->cond, &h->lock, &ts) == ETIMEDOUT) {
      rm__sbuf_puts(b, ": keep-alive\n\n");
      return 0;
    }
  }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
  stream_t *s = cls;
  size_t n;

  if (s->pend_off == s->pend_len) {
    rm__sbuf_t b;
    int rc = 0;
    rm__sbuf_init(&b);
    free(s->pend);
    s->pend = NULL;
    if (!s->started) {
      rm__sbuf_puts(&b, "retry: 2000\n: connected\n\n");
      s->started = 1;
    } else {
      pthread_mutex_lock(&s->hub->lock);
      rc = next_chunk(s, &b);
      pthread_mutex_unlock(&s->hub->lock);
    }
    s->pend = rm__sbuf_take(&b, &s->pend_len);
    s->pend_off = 0;
    if (rc != 0) return MHD_CONTENT_READER_END_OF_STREAM;
  }
  n = s->pend_len - s->pend_off;
  if (n > max) n = max;
  memcpy(buf, s->pend + s->pend_off, n);
  s->pend_off += n;
  return (ssize_t)n;
}

static void stream_free(void *cls)
{
  stream_t *s = cls;
  pthread_mutex_lock(&s->hub->lock);
  s->hub->streams--;
  pthread_mutex_unlock(&s->hub->lock);
  free(s->filter);
  free(s->pend);
  free(s);
}

struct MHD_Response *rm__sse_response(rm__sse_hub_t *h, const char *job_filter, uint64_t last_id)
{
  stream_t *s = rm__xcalloc(1, sizeof *s);
  struct MHD_Response *r;

  s->hub = h;
  s->filter = job_filter && *job_filter ? rm__xstrdup(job_filter) : NULL;
  pthread_mutex_lock(&h->lock);
  s->cursor = last_id ? last_id : h->next_id - 1;
  h->streams++;
  pthread_mutex_unlock(&h->lock);
  r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
  if (r == NULL) {
    stream_free(s);
    return NULL;
  }
  MHD_add_response_header(r, "Content-Type", "text/event-stream; charset=utf-8");
  MHD_add_response_header(r, "Cache-Control", "no-cache");
  MHD_add_response_header(r, "X-Accel-Buffering", "no");
  return r;
}
