/*
 * tcp_connect.c - building the full mesh for one generation (connect_all).
 *
 * Rank i connects to every rank j < i ("active" side) and accepts from every
 * rank j > i on its endpoint ("passive" side). Everything is non-blocking in
 * one poll() loop bounded by c->connect_timeout_ms.
 *
 * Active side, per peer j:
 *
 *   IDLE --retry time reached--> CONNECTING --writable, SO_ERROR 0, HELLO
 *   sent--> WAIT_REPLY --HELLO(j, same job/gen/world) read--> READY
 *   CONNECTING/WAIT_REPLY --refused, reset, EOF, bad reply--> IDLE (retry
 *   after a backoff 5 ms .. 200 ms; the reason is kept for the error)
 *   WAIT_REPLY --ABORT(stale generation)--> init fails: we are the stale one
 *
 * Passive side: an accepted connection is anonymous until its 48-byte HELLO
 * arrives (ANON list). Then, by the HELLO:
 *   not a frame / not HELLO / other job / other world / bad or duplicate
 *     rank  -> warning logged, connection closed, init goes on (a stray or
 *              misconfigured client must not break a healthy job)
 *   older generation -> ABORT(RM_ERR_STALE_GENERATION) sent, closed
 *   later generation -> stashed on the endpoint for that generation's init
 *   ours, rank j > i -> HELLO reply sent, peer j READY
 *
 * Deadline reached with peers not READY: RM_ERR_TIMEOUT naming the first
 * missing peer and why (refused, no HELLO, ...), logged at error level.
 */
#define _GNU_SOURCE /* pipe2, accept4, POLLRDHUP */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rm_clock.h"
#include "rm_log.h"
#include "transport/tcp/tcp_int.h"

#define MAX_ANON 64

enum { HS_IDLE, HS_CONNECTING, HS_WAIT_REPLY, HS_READY };

typedef struct hs_peer {
  int state;
  int fd;
  int got;
  unsigned char buf[RM__TCP_HDR];
  int64_t retry_at;
  int backoff_ms;
  struct sockaddr_storage ss;
  socklen_t sslen;
  char why[160];
} hs_peer_t;

typedef struct hs_anon {
  int fd;
  int got;
  unsigned char buf[RM__TCP_HDR];
} hs_anon_t;

typedef struct hs {
  rm_comm_t *c;
  hs_peer_t *peers;
  hs_anon_t anon[MAX_ANON];
  int nanon;
  int missing;
  rm_status_t fatal; /* set when init must stop now */
  struct pollfd pfds[1 + MAX_ANON + 1024];
} hs_t;

/* Whether TCP carries the pair (c->rank, p) (transport.c chose per pair). */
static int is_tcp_pair(const rm_comm_t *c, int p)
{
  return rm__conn_type(c, p) == &rm__tcp_transport;
}

static int send_frame(int fd, const rm__frame_t *f)
{
  unsigned char h[RM__TCP_HDR];
  rm__frame_encode(f, h);
  return send(fd, h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT) == RM__TCP_HDR ? 0 : -1;
}

static void set_ready(hs_t *h, int p, int fd)
{
  h->peers[p].state = HS_READY;
  h->peers[p].fd = -1;
  rm__tcp(h->c)->conns[p].fd = fd;
  h->missing--;
  RM_DEBUG("rank %d: connected to peer rank %d (%s)", h->c->rank, p,
           h->c->peers[p]);
}

/* Active side lost its attempt: close, remember why, retry later. */
static void retry_later(hs_t *h, int p, const char *why)
{
  hs_peer_t *q = &h->peers[p];
  if (q->fd >= 0) close(q->fd);
  q->fd = -1;
  q->got = 0;
  q->state = HS_IDLE;
  snprintf(q->why, sizeof q->why, "%s", why);
  q->retry_at = rm__now_ns() + (int64_t)q->backoff_ms * 1000000LL;
  q->backoff_ms = q->backoff_ms * 2 > 200 ? 200 : q->backoff_ms * 2;
}

static void start_connect(hs_t *h, int p)
{
  hs_peer_t *q = &h->peers[p];
  q->fd = socket(q->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (q->fd < 0 || rm__tcp_set_opts(q->fd) != 0) {
    retry_later(h, p, strerror(errno));
    return;
  }
  if (connect(q->fd, (struct sockaddr *)&q->ss, q->sslen) != 0 &&
      errno != EINPROGRESS) {
    retry_later(h, p, strerror(errno));
    return;
  }
  q->state = HS_CONNECTING;
}

static void on_connected(hs_t *h, int p)
{
  hs_peer_t *q = &h->peers[p];
  rm__frame_t f;
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(q->fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    retry_later(h, p, strerror(err));
    return;
  }
  rm__frame_init(&f, h->c, RM__FRAME_HELLO);
  f.seq = (uint64_t)h->c->rank;
  f.tag = (uint64_t)h->c->world;
  if (send_frame(q->fd, &f) != 0) {
    retry_later(h, p, "could not send HELLO");
    return;
  }
  q->state = HS_WAIT_REPLY;
}

static void on_reply(hs_t *h, int p)
{
  hs_peer_t *q = &h->peers[p];
  rm__frame_t f;
  const char *why;
  ssize_t n = read(q->fd, q->buf + q->got, (size_t)(RM__TCP_HDR - q->got));
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    retry_later(h, p, n == 0 ? "peer closed the connection during the handshake"
                             : strerror(errno));
    return;
  }
  q->got += (int)n;
  if (q->got < RM__TCP_HDR) return;
  rm__frame_decode(q->buf, &f);
  if (rm__frame_check(&f, &why) != RM_OK) {
    retry_later(h, p, why);
  } else if (f.type == RM__FRAME_ABORT && f.seq == RM_ERR_STALE_GENERATION) {
    snprintf(q->why, sizeof q->why, "peer is at a later generation");
    h->fatal = RM_ERR_STALE_GENERATION;
  } else if (f.type != RM__FRAME_HELLO || f.job != h->c->job_id ||
             f.generation != h->c->generation || f.seq != (uint64_t)p ||
             f.tag != (uint64_t)h->c->world) {
    retry_later(h, p, "peer answered with a HELLO that does not match");
  } else {
    set_ready(h, p, q->fd);
  }
}

/* A HELLO arrived on an accepted connection: decide (table at the top). */
static void on_hello(hs_t *h, int fd, const unsigned char *buf)
{
  rm_comm_t *c = h->c;
  rm__frame_t f;
  const char *why = NULL, *bad_frame;
  rm__frame_decode(buf, &f);
  if (rm__frame_check(&f, &bad_frame) != RM_OK) {
    why = bad_frame;
  } else if (f.type != RM__FRAME_HELLO) {
    why = "first frame is not HELLO";
  } else if (f.job != c->job_id) {
    why = "HELLO for another job";
  } else if (f.generation > c->generation) {
    rm__endpoint_stash(c->endpoint, fd, &f);
    return;
  } else if (f.generation < c->generation) {
    rm__frame_t a;
    rm__frame_init(&a, c, RM__FRAME_ABORT);
    a.seq = RM_ERR_STALE_GENERATION;
    (void)send_frame(fd, &a);
    why = "HELLO from an older generation";
  } else if (f.tag != (uint64_t)c->world) {
    why = "HELLO with another world size";
  } else if (f.seq <= (uint64_t)c->rank || f.seq >= (uint64_t)c->world ||
             !is_tcp_pair(c, (int)f.seq)) {
    why = "HELLO from a rank that must not connect to us";
  } else if (h->peers[f.seq].state == HS_READY) {
    why = "duplicate HELLO for a connected rank";
  }
  if (why == NULL) {
    rm__frame_t r;
    rm__frame_init(&r, c, RM__FRAME_HELLO);
    r.seq = (uint64_t)c->rank;
    r.tag = (uint64_t)c->world;
    if (send_frame(fd, &r) == 0 && rm__tcp_set_opts(fd) == 0) {
      set_ready(h, (int)f.seq, fd);
      return;
    }
    why = "could not answer HELLO";
  }
  RM_WARN("rank %d: rejected a data-plane connection: %s", c->rank, why);
  close(fd);
}

static void drop_anon(hs_t *h, int i)
{
  h->anon[i] = h->anon[--h->nanon];
}

static void on_anon_readable(hs_t *h, int i)
{
  hs_anon_t *a = &h->anon[i];
  ssize_t n = read(a->fd, a->buf + a->got, (size_t)(RM__TCP_HDR - a->got));
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    RM_WARN("rank %d: a data-plane connection closed before its HELLO (%s)",
            h->c->rank, n == 0 ? "truncated" : strerror(errno));
    close(a->fd);
    drop_anon(h, i);
    return;
  }
  a->got += (int)n;
  if (a->got < RM__TCP_HDR) return;
  int fd = a->fd;
  unsigned char buf[RM__TCP_HDR];
  memcpy(buf, a->buf, sizeof buf);
  drop_anon(h, i);
  on_hello(h, fd, buf);
}

static void on_listen_readable(hs_t *h)
{
  for (;;) {
    int fd = accept4(rm__endpoint_fd(h->c->endpoint), NULL, NULL,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (h->nanon == MAX_ANON) {
      RM_WARN("rank %d: too many anonymous data-plane connections; dropping one",
              h->c->rank);
      close(fd);
      continue;
    }
    h->anon[h->nanon].fd = fd;
    h->anon[h->nanon].got = 0;
    h->nanon++;
  }
}

/* One poll round; returns the ms to wait given the next retry. */
static int build_poll(hs_t *h, int left, int *n_out, int *map)
{
  rm_comm_t *c = h->c;
  int n = 0, wait = left;
  int64_t now = rm__now_ns();
  h->pfds[n].fd = rm__endpoint_fd(c->endpoint);
  h->pfds[n++].events = POLLIN;
  for (int i = 0; i < h->nanon; i++) {
    h->pfds[n].fd = h->anon[i].fd;
    h->pfds[n].events = POLLIN;
    map[n++] = -1 - i;
  }
  for (int p = 0; p < c->rank; p++) {
    hs_peer_t *q = &h->peers[p];
    if (!is_tcp_pair(c, p)) continue;
    if (q->state == HS_IDLE && q->retry_at <= now) start_connect(h, p);
    if (q->state == HS_IDLE) {
      int ms = rm__ms_left(q->retry_at);
      if (ms < wait) wait = ms;
      continue;
    }
    if (q->state == HS_READY) continue;
    h->pfds[n].fd = q->fd;
    h->pfds[n].events = q->state == HS_CONNECTING ? POLLOUT : POLLIN;
    map[n++] = p;
  }
  *n_out = n;
  return wait;
}

static void serve_poll(hs_t *h, int n, const int *map)
{
  /* anonymous entries are served last and in reverse (drop_anon moves the
   * last one into the freed slot) */
  for (int i = 1; i < n; i++) {
    short re = h->pfds[i].revents;
    int p = map[i];
    if (re == 0 || p < 0) continue;
    if (h->peers[p].state == HS_CONNECTING) on_connected(h, p);
    else if (h->peers[p].state == HS_WAIT_REPLY) on_reply(h, p);
  }
  for (int i = n - 1; i >= 1; i--)
    if (map[i] < 0 && h->pfds[i].revents) on_anon_readable(h, -1 - map[i]);
  if (h->pfds[0].revents & POLLIN) on_listen_readable(h);
}

static rm_status_t timeout_error(hs_t *h)
{
  rm_comm_t *c = h->c;
  for (int p = 0; p < c->world; p++) {
    hs_peer_t *q = &h->peers[p];
    if (p == c->rank || q->state == HS_READY || !is_tcp_pair(c, p)) continue;
    RM_ERROR("rank %d: job %llu generation %llu: no connection to peer rank "
             "%d (%s) within %d ms: %s",
             c->rank, (unsigned long long)c->job_id,
             (unsigned long long)c->generation, p, c->peers[p],
             c->connect_timeout_ms,
             q->why[0] ? q->why
                       : (p > c->rank ? "it never connected" : "no answer"));
    return h->fatal != RM_OK ? h->fatal : RM_ERR_TIMEOUT;
  }
  return RM_ERR_INTERNAL;
}

static rm_status_t resolve_active(hs_t *h)
{
  rm_comm_t *c = h->c;
  for (int p = 0; p < c->world; p++) {
    hs_peer_t *q = &h->peers[p];
    q->fd = -1;
    q->backoff_ms = 5;
    if (p == c->rank || !is_tcp_pair(c, p)) continue;
    h->missing++;
    if (p < c->rank &&
        rm__tcp_resolve(c->peers[p], &q->ss, &q->sslen, q->why, sizeof q->why)) {
      RM_ERROR("rank %d: peer rank %d: %s", c->rank, p, q->why);
      return RM_ERR_INVALID_ARG;
    }
  }
  return RM_OK;
}

static void hs_cleanup(hs_t *h)
{
  for (int i = 0; i < h->nanon; i++) close(h->anon[i].fd);
  for (int p = 0; p < h->c->world; p++)
    if (h->peers[p].fd >= 0 && h->peers[p].state != HS_READY)
      close(h->peers[p].fd);
  free(h->peers);
  free(h);
}

rm_status_t rm__tcp_connect_all(rm_comm_t *c)
{
  rm_status_t st;
  int64_t deadline = rm__now_ns() + (int64_t)c->connect_timeout_ms * 1000000LL;
  int map[1 + MAX_ANON + 1024];
  rm__frame_t hello;
  hs_t *h;
  int fd;

  if (c->world > 1024) return RM_ERR_UNSUPPORTED;
  if ((st = rm__tcp_state_new(c)) != RM_OK) return st;
  h = calloc(1, sizeof *h);
  if (h == NULL) return RM_ERR_NOMEM;
  h->c = c;
  h->peers = calloc((size_t)c->world, sizeof *h->peers);
  if (h->peers == NULL) {
    free(h);
    return RM_ERR_NOMEM;
  }
  if ((st = resolve_active(h)) != RM_OK) goto out;
  while ((fd = rm__endpoint_take(c->endpoint, c->job_id, c->generation, &hello)) >= 0) {
    unsigned char buf[RM__TCP_HDR];
    rm__frame_encode(&hello, buf);
    on_hello(h, fd, buf);
  }
  while (h->missing > 0 && h->fatal == RM_OK) {
    int left = rm__ms_left(deadline), n;
    if (left == 0) break;
    int wait = build_poll(h, left, &n, map);
    int r = poll(h->pfds, (nfds_t)n, wait);
    if (r < 0 && errno != EINTR) {
      st = RM_ERR_SYSTEM;
      goto out;
    }
    if (r > 0) serve_poll(h, n, map);
  }
  st = h->missing == 0 ? RM_OK : timeout_error(h);
out:
  hs_cleanup(h);
  return st;
}
