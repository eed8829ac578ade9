/*
 * sse.c - server-sent events hub (wire format, ids, resume rules R1-R5 and
 * threading in sse.h).
 *
 * Ring: msgs[cap], the oldest at `head`, `count` of them, at positions
 * contiguous from oldest_pos = next_pos - count (positions are the hub's
 * own publish counter, not ids: an event whose callback arrives late has a
 * smaller id than the progress published before it). A position's slot is
 * (head + (pos - oldest_pos)) % cap, so a stream finds its next message
 * without a search. A stream keeps `cursor` = the last position it has
 * consumed (sent or skipped by its filter).
 *
 * What the ring remembers of what it dropped: `dropped_seq` (newest event
 * seq dropped; raises the floor F) and `lost_progress` (newest progress id
 * dropped; R3/R5 reset when it is newer than the client's id).
 *
 * Stream modes:  RESUME  first chunk after the preamble: apply R1-R5
 *                        (under the lock) -> LIVE or REPLAY, or `reset`
 *                REPLAY  one batch of stored events per chunk, read with
 *                        no lock held; a short batch -> LIVE
 *                LIVE    the ring from cursor on, skipping events with
 *                        seq <= skip_seq (sent by REPLAY)
 *
 * Stream callback (LIVE), never blocking (it runs on one of libmicrohttpd's
 * few worker threads, http.c):
 *                           pending bytes?  -> copy them out
 *                           hub closing / peer gone -> end of stream
 *                           cursor too old  -> emit `reset`, jump to newest
 *                           next match      -> format it, advance cursor
 *                           keep-alive due  -> ": keep-alive"
 *                           none            -> park: suspended = 1 (under
 *                                              the lock), then
 *                                              MHD_suspend_connection, return 0
 *
 * Parked streams (the state machine of one stream's connection):
 *
 *   ACTIVE --reader finds nothing (lock: suspended = 1)--> PARKED
 *   PARKED --waker (lock: suspended = 0), then MHD_resume_connection--> ACTIVE
 *
 *   P1 Only the waker thread clears `suspended`, and it calls
 *      MHD_resume_connection exactly once per clearing, outside the lock
 *      (MHD's cleanup mutex is never taken under the hub lock).
 *   P2 So while suspended == 1 the connection is, or is about to be,
 *      suspended in MHD: MHD neither closes it nor frees the stream, and
 *      its fd stays this connection's. The waker may poll that fd and touch
 *      the stream's cursor (under the lock) without racing the reader.
 *   P3 A resume that overtakes the reader's MHD_suspend_connection (the
 *      reader dropped the lock in between) cancels that suspend (MHD 0.9.75
 *      internal_suspend_connection_: `resuming` set -> no suspend), and MHD
 *      calls the reader again: no wake-up is lost.
 *   P4 The waker resumes a parked stream when: its ring has a message the
 *      stream wants (unwanted ones are skipped there and then, so a filtered
 *      stream never falls behind the ring), its cursor fell out of the ring
 *      (reset), its keep-alive is due, its peer is gone, or the hub closes.
 *      It wakes on publish (wake_pending + cond), at the earliest keep-alive
 *      due, and every RM__SSE_PEER_CHECK_MS to poll every parked socket in
 *      one poll() (no lock held: P2).
 *   P5 close(): closing = 1 under the lock (no reader parks after that), the
 *      waker resumes every parked stream and exits, close() joins it; only
 *      then may MHD_stop_daemon run (MHD panics on suspended connections).
 *
 * Streams are on a list (hub->live) so watch() can find the stream of an
 * MHD response; `streams` counts slots (live streams + reservations).
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include "sse.h"

#include <errno.h>
#include <jansson.h>
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

#define NO_FLOOR UINT64_MAX /* not seeded: every resume is older than the ring */

typedef struct {
  uint64_t id;
  uint64_t seq; /* the event's seq; 0 for progress and other types */
  char *job;
  char *type;
  char *data;
} msg_t;

struct rm__sse_hub {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  msg_t *msgs;
  size_t cap, head, count;
  uint64_t next_pos;
  uint64_t cur_seq, nprog;   /* progress ids: cur_seq * SCALE + nprog */
  uint64_t seed_floor;       /* NO_FLOOR until rm__sse_hub_seed */
  uint64_t dropped_seq;      /* newest event seq dropped from the ring */
  uint64_t lost_progress;    /* newest progress id dropped from the ring */
  int keepalive_ms;
  int closing;
  int streams, max_streams; /* slots taken; limit (<= 0: none) */
  int parked;               /* streams with suspended == 1 */
  struct stream *live;      /* streams MHD has not freed yet */
  /* the waker (P1-P5): cond is signalled on publish, close and when a
   * stream parks with a keep-alive due before waker_due */
  pthread_t waker;
  int waker_started, wake_pending;
  int64_t waker_due; /* when the waker next wakes by itself (ns) */
};

enum { MODE_RESUME, MODE_REPLAY, MODE_LIVE };

typedef struct stream {
  rm__sse_hub_t *hub;
  struct stream *next, *prev; /* hub->live, under hub->lock */
  struct MHD_Response *resp;  /* identity for watch() */
  struct MHD_Connection *conn; /* from watch(); NULL: the stream cannot park */
  int fd;                     /* the client's socket, -1 = unknown */
  int suspended;              /* parked (P1, P2); under hub->lock */
  int gone;                   /* the waker saw the peer hang up */
  int64_t last_sent;          /* rm__now_ns() of the last bytes produced */
  char *filter; /* NULL = all */
  uint64_t cursor;
  int started, mode;
  rm__sse_resume_t resume;
  uint64_t replay_after, replayed, skip_seq;
  char *pend; /* formatted bytes not yet handed to MHD */
  size_t pend_len, pend_off;
} stream_t;

static void *waker_main(void *arg);

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
  h->msgs = rm__xcalloc(h->cap, sizeof *h->msgs);
  h->next_pos = 1;
  h->seed_floor = NO_FLOOR;
  h->keepalive_ms = keepalive_ms > 0 ? keepalive_ms : 15000;
  h->max_streams = max_streams;
  if (pthread_create(&h->waker, NULL, waker_main, h) != 0) {
    rm__sse_hub_free(h);
    return NULL;
  }
  h->waker_started = 1;
  return h;
}

static void msg_clear(msg_t *m)
{
  free(m->job);
  free(m->type);
  free(m->data);
  memset(m, 0, sizeof *m);
}

void rm__sse_hub_close(rm__sse_hub_t *h)
{
  pthread_mutex_lock(&h->lock);
  h->closing = 1;
  pthread_cond_broadcast(&h->cond);
  pthread_mutex_unlock(&h->lock);
  if (h->waker_started) { /* P5: it resumes every parked stream, then exits */
    pthread_join(h->waker, NULL);
    h->waker_started = 0;
  }
}

void rm__sse_hub_free(rm__sse_hub_t *h)
{
  if (h == NULL) return;
  rm__sse_hub_close(h);
  for (size_t i = 0; i < h->cap; i++) msg_clear(&h->msgs[i]);
  free(h->msgs);
  pthread_cond_destroy(&h->cond);
  pthread_mutex_destroy(&h->lock);
  free(h);
}

/* Under the lock. */
static void raise_seq(rm__sse_hub_t *h, uint64_t seq)
{
  if (seq > h->cur_seq) {
    h->cur_seq = seq;
    h->nprog = 0;
  }
}

void rm__sse_hub_seed(rm__sse_hub_t *h, uint64_t newest_seq)
{
  pthread_mutex_lock(&h->lock);
  if (h->seed_floor == NO_FLOOR) h->seed_floor = newest_seq;
  raise_seq(h, newest_seq);
  pthread_mutex_unlock(&h->lock);
}

/* Under the lock: F of sse.h. */
static uint64_t ring_floor(const rm__sse_hub_t *h)
{
  if (h->seed_floor == NO_FLOOR) return NO_FLOOR;
  return h->seed_floor > h->dropped_seq ? h->seed_floor : h->dropped_seq;
}

static msg_t *at(rm__sse_hub_t *h, uint64_t pos)
{
  return &h->msgs[(h->head + (pos - (h->next_pos - h->count))) % h->cap];
}

/* Under the lock: the id a stream that continues from the newest message
 * is at (what `reset` carries). */
static uint64_t newest_id(rm__sse_hub_t *h)
{
  if (h->count) return at(h, h->next_pos - 1)->id;
  return h->cur_seq * RM__SSE_ID_SCALE;
}

uint64_t rm__sse_publish_seq(rm__sse_hub_t *h, const char *job, const char *type,
                             const char *data, uint64_t seq)
{
  msg_t *slot;
  uint64_t id = 0;

  if (seq >= UINT64_MAX / RM__SSE_ID_SCALE) seq = 0; /* cannot be an id: progress-like */
  pthread_mutex_lock(&h->lock);
  if (h->closing) goto exit;
  if (h->count == h->cap) { /* drop the oldest, remembering what it was */
    msg_t *old = &h->msgs[h->head];
    if (old->seq && old->seq > h->dropped_seq) h->dropped_seq = old->seq;
    if (!old->seq && old->id > h->lost_progress) h->lost_progress = old->id;
    msg_clear(old);
    h->head = (h->head + 1) % h->cap;
    h->count--;
  }
  if (seq) {
    raise_seq(h, seq);
    id = seq * RM__SSE_ID_SCALE;
  } else {
    if (h->nprog < RM__SSE_ID_SCALE - 1) h->nprog++;
    id = h->cur_seq * RM__SSE_ID_SCALE + h->nprog;
  }
  slot = &h->msgs[(h->head + h->count) % h->cap];
  slot->id = id;
  slot->seq = seq;
  slot->job = rm__xstrdup(job ? job : "");
  slot->type = rm__xstrdup(type);
  slot->data = rm__xstrdup(data ? data : "{}");
  h->count++;
  h->next_pos++;
  if (h->parked && !h->wake_pending) {
    h->wake_pending = 1;
    pthread_cond_signal(&h->cond);
  }
exit:
  pthread_mutex_unlock(&h->lock);
  return id;
}

/* data.seq of a coordinator event; 0 when there is none. */
static uint64_t event_seq(const char *data)
{
  json_t *j = data ? json_loads(data, 0, NULL) : NULL;
  json_t *v = json_object_get(j, "seq");
  uint64_t seq = json_is_integer(v) && json_integer_value(v) > 0
                     ? (uint64_t)json_integer_value(v) : 0;
  json_decref(j);
  return seq;
}

uint64_t rm__sse_publish(rm__sse_hub_t *h, const char *job, const char *type, const char *data)
{
  uint64_t seq = type && strcmp(type, "event") == 0 ? event_seq(data) : 0;
  return rm__sse_publish_seq(h, job, type, data, seq);
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
  id = h->count ? at(h, h->next_pos - 1)->id : 0;
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

static int wanted(const stream_t *s, const char *job)
{
  return s->filter == NULL || job[0] == '\0' || strcmp(job, s->filter) == 0;
}

/* Under the lock: tell the client to re-fetch, continue live at the newest. */
static void go_reset(stream_t *s, rm__sse_hub_t *h, rm__sbuf_t *b)
{
  s->cursor = h->next_pos - 1;
  s->mode = MODE_LIVE;
  format_event(b, newest_id(h), "reset", "{\"reason\":\"events were missed; re-fetch state\"}");
}

/* Under the lock: rules R1-R5 of sse.h for the stream's Last-Event-ID. */
static void resume_decide(stream_t *s, rm__sse_hub_t *h, rm__sbuf_t *b)
{
  uint64_t id = s->resume.last_id, seq = id / RM__SSE_ID_SCALE, k = id % RM__SSE_ID_SCALE;
  uint64_t newest = h->cur_seq > s->resume.newest_seq ? h->cur_seq : s->resume.newest_seq;
  uint64_t floor = ring_floor(h), oldest = h->next_pos - h->count;

  s->mode = MODE_LIVE;
  s->cursor = h->next_pos - 1;
  if (id == 0) return;                                   /* R1 */
  if (seq > newest) return go_reset(s, h, b);            /* R2 */
  if (floor != NO_FLOOR && seq >= floor) {               /* R3 */
    for (uint64_t pos = h->next_pos - 1; pos >= oldest && pos > 0; pos--)
      if (at(h, pos)->id <= id) {
        s->cursor = pos;
        return;
      }
    s->cursor = oldest - 1;
    if (h->lost_progress > id) go_reset(s, h, b);
    return;
  }
  if (k > 0 || s->resume.history == NULL || newest - seq > RM__SSE_REPLAY_MAX ||
      h->lost_progress > id)
    return go_reset(s, h, b);                            /* R4, R5 cannot */
  s->mode = MODE_REPLAY;                                 /* R5 */
  s->cursor = oldest - 1;
  s->replay_after = seq - 1; /* the first batch starts with event seq itself */
  s->skip_seq = seq;
}

/* No lock held: one batch of stored events into b. Returns 0 while there
 * may be more, 1 when the replay is complete, -1 when it cannot be done
 * (the caller resets). */
static int replay_batch(stream_t *s, rm__sbuf_t *b)
{
  rm__sse_stored_t items[RM__SSE_REPLAY_BATCH];
  int n = s->resume.history(s->resume.history_ctx, s->replay_after, items, RM__SSE_REPLAY_BATCH);
  int rc = 0, first = s->replay_after + 1 == s->skip_seq;

  if (n < 0) return -1;
  if (first && (n == 0 || items[0].seq != s->skip_seq)) rc = -1; /* event S is not stored */
  for (int i = 0; i < n; i++) {
    if (rc == 0 && items[i].seq > s->skip_seq && wanted(s, items[i].job)) {
      format_event(b, items[i].seq * RM__SSE_ID_SCALE, "event", items[i].data);
      s->replayed++;
    }
    if (items[i].seq > s->replay_after) s->replay_after = items[i].seq;
    free(items[i].data);
  }
  if (rc != 0) return rc;
  if (s->replay_after > s->skip_seq) s->skip_seq = s->replay_after;
  if (n < RM__SSE_REPLAY_BATCH || s->replayed >= RM__SSE_REPLAY_MAX) return 1;
  return 0;
}

/* 1 when poll() says the client has closed its end or the socket failed.
 * A readable socket with data is not a hang-up (the byte stays queued). */
static int peer_gone(int fd, short revents)
{
  char c;
  ssize_t r;

  if (revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return 1;
  if (!(revents & POLLIN)) return 0;
  r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static struct timespec ts_of(int64_t ns)
{
  return (struct timespec){(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
}

static int64_t keepalive_due(const stream_t *s, const rm__sse_hub_t *h)
{
  return s->last_sent + (int64_t)h->keepalive_ms * 1000000;
}

/* Under the lock, for a LIVE stream: 1 when the reader has something to do
 * now (P4). Consumes (skips) the messages the stream does not want. */
static int has_work(stream_t *s, rm__sse_hub_t *h, int64_t now)
{
  uint64_t oldest = h->next_pos - h->count;

  if (h->closing || s->gone || s->mode != MODE_LIVE) return 1;
  if (s->cursor + 1 < oldest || s->cursor >= h->next_pos) return 1; /* reset */
  while (s->cursor + 1 < h->next_pos) {
    msg_t *m = at(h, s->cursor + 1);
    if ((!m->seq || m->seq > s->skip_seq) && wanted(s, m->job)) return 1;
    s->cursor++;
  }
  return now >= keepalive_due(s, h);
}

/* Under the lock: the next chunk of a LIVE stream into b, or nothing (b
 * empty). Returns 0, or -1 when the hub is closing or the peer is gone. */
static int next_chunk(stream_t *s, rm__sse_hub_t *h, rm__sbuf_t *b)
{
  uint64_t oldest = h->next_pos - h->count;

  if (h->closing || s->gone) return -1;
  if (s->cursor + 1 < oldest || s->cursor >= h->next_pos) {
    /* The client re-fetches state over REST on reset, so replaying what
     * is left of the ring is pointless: continue live. */
    go_reset(s, h, b);
    return 0;
  }
  while (s->cursor + 1 < h->next_pos) {
    msg_t *m = at(h, ++s->cursor);
    if (m->seq && m->seq <= s->skip_seq) continue; /* sent by the replay */
    if (wanted(s, m->job)) {
      format_event(b, m->id, m->type, m->data);
      return 0;
    }
  }
  if (rm__now_ns() >= keepalive_due(s, h)) rm__sbuf_puts(b, ": keep-alive\n\n");
  return 0;
}

/* The next chunk of any stream after its preamble; b stays empty when there
 * is nothing to send now. */
static int produce(stream_t *s, rm__sse_hub_t *h, rm__sbuf_t *b)
{
  int rc = 0;

  pthread_mutex_lock(&h->lock);
  if (s->mode == MODE_RESUME) resume_decide(s, h, b);
  pthread_mutex_unlock(&h->lock);
  while (s->mode == MODE_REPLAY && b->len == 0) {
    int r = replay_batch(s, b);
    pthread_mutex_lock(&h->lock);
    if (h->closing) rc = -1;
    else if (r < 0) go_reset(s, h, b);
    else if (r > 0) s->mode = MODE_LIVE;
    pthread_mutex_unlock(&h->lock);
    if (rc) return rc;
  }
  if (b->len) return 0;
  pthread_mutex_lock(&h->lock);
  rc = next_chunk(s, h, b);
  pthread_mutex_unlock(&h->lock);
  return rc;
}

/* Nothing to send: park the stream (P1-P3). 1 when parked (the reader
 * returns 0 and MHD calls it again once resumed), 0 when there is work
 * after all (the reader produces again). */
static int park(stream_t *s, rm__sse_hub_t *h)
{
  int parked = 0;

  pthread_mutex_lock(&h->lock);
  if (!has_work(s, h, rm__now_ns())) {
    s->suspended = 1;
    h->parked++;
    parked = 1;
    if (keepalive_due(s, h) < h->waker_due) pthread_cond_signal(&h->cond);
  }
  pthread_mutex_unlock(&h->lock);
  if (parked) MHD_suspend_connection(s->conn);
  return parked;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
  stream_t *s = cls;
  size_t n;

  (void)pos;
  while (s->pend_off == s->pend_len) {
    rm__sbuf_t b;
    int rc = 0;
    rm__sbuf_init(&b);
    free(s->pend);
    s->pend = NULL;
    if (s->conn == NULL) { /* never watched: it could only spin */
      rc = -1;
    } else if (!s->started) {
      rm__sbuf_puts(&b, "retry: 2000\n: connected\n\n");
      s->started = 1;
    } else {
      rc = produce(s, s->hub, &b);
    }
    s->pend = rm__sbuf_take(&b, &s->pend_len);
    s->pend_off = 0;
    if (rc != 0) return MHD_CONTENT_READER_END_OF_STREAM;
    if (s->pend_len) s->last_sent = rm__now_ns();
    else if (park(s, s->hub)) return 0;
  }
  n = s->pend_len - s->pend_off;
  if (n > max) n = max;
  memcpy(buf, s->pend + s->pend_off, n);
  s->pend_off += n;
  return (ssize_t)n;
}

/* ---- the waker (P1-P5) ---- */

typedef struct {
  struct MHD_Connection **conn; /* to resume */
  size_t nconn, cap;
  struct pollfd *pfd;           /* parked sockets to check */
  stream_t **ps;
  size_t npfd, pcap;
} wake_set_t;

static void push_conn(wake_set_t *w, struct MHD_Connection *c)
{
  if (w->nconn == w->cap) {
    w->cap = w->cap ? w->cap * 2 : 256;
    w->conn = rm__xrealloc(w->conn, w->cap * sizeof *w->conn);
  }
  w->conn[w->nconn++] = c;
}

static void push_fd(wake_set_t *w, stream_t *s)
{
  if (w->npfd == w->pcap) {
    w->pcap = w->pcap ? w->pcap * 2 : 256;
    w->pfd = rm__xrealloc(w->pfd, w->pcap * sizeof *w->pfd);
    w->ps = rm__xrealloc(w->ps, w->pcap * sizeof *w->ps);
  }
  w->pfd[w->npfd] = (struct pollfd){s->fd, POLLIN | POLLRDHUP, 0};
  w->ps[w->npfd++] = s;
}

/* Under the lock: a parked stream becomes active again (P1). */
static void unpark(rm__sse_hub_t *h, stream_t *s, wake_set_t *w)
{
  s->suspended = 0;
  h->parked--;
  push_conn(w, s->conn);
}

/* No lock held: resume what was collected. */
static void resume_all(wake_set_t *w)
{
  for (size_t i = 0; i < w->nconn; i++) MHD_resume_connection(w->conn[i]);
  w->nconn = 0;
}

/* Under the lock: one pass over the parked streams. Returns the earliest
 * keep-alive due of those left parked (or `until`). */
static int64_t waker_pass(rm__sse_hub_t *h, wake_set_t *w, int64_t now, int check,
                          int64_t until)
{
  for (stream_t *s = h->live; s; s = s->next) {
    if (!s->suspended) continue;
    if (has_work(s, h, now)) {
      unpark(h, s, w);
      continue;
    }
    if (keepalive_due(s, h) < until) until = keepalive_due(s, h);
    if (check && s->fd >= 0) push_fd(w, s);
  }
  return until;
}

static void *waker_main(void *arg)
{
  rm__sse_hub_t *h = arg;
  const int64_t slice = (int64_t)RM__SSE_PEER_CHECK_MS * 1000000;
  wake_set_t w = {0};
  int64_t next_check = rm__now_ns() + slice;

  pthread_mutex_lock(&h->lock);
  for (;;) {
    int64_t now = rm__now_ns(), due;
    int check = now >= next_check, closing = h->closing;

    h->wake_pending = 0;
    if (check) next_check = now + slice;
    due = waker_pass(h, &w, now, check, next_check);
    h->waker_due = due;
    pthread_mutex_unlock(&h->lock);
    resume_all(&w);
    if (w.npfd) { /* P2: parked sockets stay valid with no lock held */
      if (poll(w.pfd, w.npfd, 0) > 0) {
        pthread_mutex_lock(&h->lock);
        for (size_t i = 0; i < w.npfd; i++)
          if (w.pfd[i].revents && peer_gone(w.pfd[i].fd, w.pfd[i].revents)) {
            w.ps[i]->gone = 1;
            unpark(h, w.ps[i], &w);
          }
        pthread_mutex_unlock(&h->lock);
        resume_all(&w);
      }
      w.npfd = 0;
    }
    pthread_mutex_lock(&h->lock);
    if (closing) break; /* P5: that pass resumed every parked stream */
    if (!h->wake_pending && !h->closing) { /* publish, close, an earlier keep-alive */
      struct timespec ts = ts_of(h->waker_due);
      pthread_cond_timedwait(&h->cond, &h->lock, &ts);
    }
  }
  pthread_mutex_unlock(&h->lock);
  free(w.conn);
  free(w.pfd);
  free(w.ps);
  return NULL;
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
  if (s->suspended) h->parked--; /* (cannot happen: MHD frees no suspended connection) */
  if (s->prev) s->prev->next = s->next;
  else h->live = s->next;
  if (s->next) s->next->prev = s->prev;
  pthread_mutex_unlock(&h->lock);
  stream_destroy(s);
}

struct MHD_Response *rm__sse_response(rm__sse_hub_t *h, const char *job_filter,
                                      const rm__sse_resume_t *resume)
{
  stream_t *s = rm__xcalloc(1, sizeof *s);
  struct MHD_Response *r;

  s->hub = h;
  s->fd = -1;
  s->last_sent = rm__now_ns();
  s->filter = job_filter && *job_filter ? rm__xstrdup(job_filter) : NULL;
  if (resume) s->resume = *resume;
  r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
  if (r == NULL) {
    stream_destroy(s); /* the slot stays with the caller */
    return NULL;
  }
  if (resume) rm__sse_hub_seed(h, resume->newest_seq);
  pthread_mutex_lock(&h->lock);
  /* Live streams start at the newest message now, not when MHD first
   * asks for bytes; a resume decides then (resume_decide). */
  s->cursor = h->next_pos - 1;
  s->mode = s->resume.last_id ? MODE_RESUME : MODE_LIVE;
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

void rm__sse_watch(rm__sse_hub_t *h, struct MHD_Response *r, struct MHD_Connection *conn, int fd)
{
  pthread_mutex_lock(&h->lock);
  for (stream_t *s = h->live; s; s = s->next)
    if (s->resp == r) {
      s->conn = conn;
      s->fd = fd;
      break;
    }
  pthread_mutex_unlock(&h->lock);
}
