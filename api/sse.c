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
 *                                              keep-alive deadline, in slices
 *                                              of RM__SSE_PEER_CHECK_MS when
 *                                              the socket is known; peer gone
 *                                              -> end of stream
 *
 * Streams are on a list (hub->live) so watch() can find the stream of an
 * MHD response; `streams` counts slots (live streams + reservations).
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include "sse.h"

#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
  int streams, max_streams; /* slots taken; limit (<= 0: none) */
  struct stream *live;      /* streams MHD has not freed yet */
};

typedef struct stream {
  rm__sse_hub_t *hub;
  struct stream *next, *prev; /* hub->live, under hub->lock */
  struct MHD_Response *resp;  /* identity for watch() */
  int fd;                     /* the client's socket, -1 = unknown */
  char *filter; /* NULL = all */
  uint64_t cursor;
  int started;
  char *pend; /* formatted bytes not yet handed to MHD */
  size_t pend_len, pend_off;
} stream_t;

rm__sse_hub_t *rm__sse_hub_new(size_t capacity, int keepalive_ms, int max_streams)
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
  h->max_streams = max_streams;
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

int rm__sse_reserve(rm__sse_hub_t *h)
{
  int rc = -1;
  pthread_mutex_lock(&h->lock);
  if (!h->closing && (h->max_streams <= 0 || h->streams < h->max_streams)) {
    h->streams++;
    rc = 0;
  }
  pthread_mutex_unlock(&h->lock);
  return rc;
}

void rm__sse_release(rm__sse_hub_t *h)
{
  pthread_mutex_lock(&h->lock);
  h->streams--;
  pthread_mutex_unlock(&h->lock);
}

int rm__sse_max_streams(rm__sse_hub_t *h) { return h->max_streams; }

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

/* 1 when the client has closed its end or the socket failed. A readable
 * socket with data is not a hang-up (the byte stays queued). */
static int peer_gone(int fd)
{
  struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
  char c;
  ssize_t r;

  if (poll(&p, 1, 0) <= 0) return 0;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return 1;
  if (!(p.revents & POLLIN)) return 0;
  r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static struct timespec ts_of(int64_t ns)
{
  return (struct timespec){(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
}

/* Under the lock: produce the next chunk of the stream into b, waiting up to
 * the keep-alive deadline. Returns 0, or -1 when the hub is closing or the
 * peer is gone. */
static int next_chunk(stream_t *s, rm__sse_hub_t *h, rm__sbuf_t *b)
{
  const int64_t slice = (int64_t)RM__SSE_PEER_CHECK_MS * 1000000;
  int64_t deadline = rm__now_ns() + (int64_t)h->keepalive_ms * 1000000;
  int64_t next_check = rm__now_ns() + slice;

  for (;;) {
    uint64_t oldest = h->next_id - h->count;
    int64_t now, until = deadline;
    struct timespec ts;
    int fd = s->fd;

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
    if (fd >= 0 && next_check < deadline) until = next_check;
    ts = ts_of(until);
    if (pthread_cond_timedwait(&h->cond, &h->lock, &ts) == ETIMEDOUT && until == deadline) {
      rm__sbuf_puts(b, ": keep-alive\n\n");
      return 0;
    }
    now = rm__now_ns();
    if (fd >= 0 && now >= next_check) { /* is anyone still there? (not under the lock) */
      int gone;
      pthread_mutex_unlock(&h->lock);
      gone = peer_gone(fd);
      pthread_mutex_lock(&h->lock);
      if (gone) return -1;
      next_check = now + slice;
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
      rc = next_chunk(s, s->hub, &b);
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

static void stream_destroy(stream_t *s)
{
  free(s->filter);
  free(s->pend);
  free(s);
}

/* MHD frees the response: the stream's slot goes back. */
static void stream_free(void *cls)
{
  stream_t *s = cls;
  rm__sse_hub_t *h = s->hub;
  pthread_mutex_lock(&h->lock);
  h->streams--;
  if (s->prev) s->prev->next = s->next;
  else h->live = s->next;
  if (s->next) s->next->prev = s->prev;
  pthread_mutex_unlock(&h->lock);
  stream_destroy(s);
}

struct MHD_Response *rm__sse_response(rm__sse_hub_t *h, const char *job_filter, uint64_t last_id)
{
  stream_t *s = rm__xcalloc(1, sizeof *s);
  struct MHD_Response *r;

  s->hub = h;
  s->fd = -1;
  s->filter = job_filter && *job_filter ? rm__xstrdup(job_filter) : NULL;
  r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
  if (r == NULL) {
    stream_destroy(s); /* the slot stays with the caller */
    return NULL;
  }
  pthread_mutex_lock(&h->lock);
  s->cursor = last_id ? last_id : h->next_id - 1;
  s->resp = r;
  s->next = h->live;
  if (h->live) h->live->prev = s;
  h->live = s;
  pthread_mutex_unlock(&h->lock);
  MHD_add_response_header(r, "Content-Type", "text/event-stream; charset=utf-8");
  MHD_add_response_header(r, "Cache-Control", "no-cache");
  MHD_add_response_header(r, "X-Accel-Buffering", "no");
  return r;
}

void rm__sse_watch(rm__sse_hub_t *h, struct MHD_Response *r, int fd)
{
  if (fd < 0) return;
  pthread_mutex_lock(&h->lock);
  for (stream_t *s = h->live; s; s = s->next)
    if (s->resp == r) {
      s->fd = fd;
      break;
    }
  pthread_mutex_unlock(&h->lock);
}
