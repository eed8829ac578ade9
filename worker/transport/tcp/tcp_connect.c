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
 * Keyed communicators (c->keyed; the wire format of the three-step
 * handshake is in tcp_int.h, the MAC in transport/hello_auth.c): the active
 * side sends its nonce with the HELLO, checks the reply's MAC before READY
 * (a bad one: retry, as for a bad reply) and sends its AUTH proof as it
 * goes READY.
 *
 * Passive side: an accepted connection is anonymous until its HELLO (48
 * bytes, plus the 32-byte nonce when keyed) arrives (ANON list). Then, by
 * the HELLO:
 *   not a frame / not HELLO / other job / other world / bad or duplicate
 *     rank / no proof offered while keyed (or one offered while not)
 *           -> warning logged, connection closed, init goes on (a stray,
 *              hostile or misconfigured client must not break a healthy job)
 *   older generation -> ABORT(RM_ERR_STALE_GENERATION) sent, closed
 *   later generation -> stashed on the endpoint for that generation's init
 *   ours, rank j > i, unkeyed -> HELLO reply sent, peer j READY
 *   ours, rank j > i, keyed   -> HELLO reply with our nonce and MAC sent;
 *              the connection becomes a CANDIDATE for rank j, holding no
 *              place: several may wait for one rank (an impostor's and the
 *              real peer's). A candidate whose AUTH proof checks out makes
 *              peer j READY; a wrong proof, a wrong frame, an end of stream
 *              -> warning logged, closed; candidates left when every peer is
 *              READY are closed.
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

/* a keyed HELLO reply: header, nonce_l, MAC */
#define REPLY_MAX (RM__TCP_HDR + RM__AUTH_NONCE + RM__AUTH_MAC)
/* a keyed HELLO or an AUTH: header and 32 bytes */
#define HELLO_MAX (RM__TCP_HDR + RM__AUTH_NONCE)

typedef struct hs_peer {
  int state;
  int fd;
  int got, want;
  unsigned char buf[REPLY_MAX];
  unsigned char nonce[RM__AUTH_NONCE]; /* ours, this attempt (keyed) */
  int64_t retry_at;
  int backoff_ms;
  struct sockaddr_storage ss;
  socklen_t sslen;
  char why[160];
} hs_peer_t;

typedef struct hs_anon {
  int fd;
  int got, want;
  unsigned char buf[HELLO_MAX];
} hs_anon_t;

/* An accepted connection that answered rank's HELLO and waits for its AUTH
 * proof (keyed only). */
typedef struct hs_cand {
  int fd;
  int rank;
  int got;
  unsigned char buf[HELLO_MAX];
  rm__auth_ctx_t x;
} hs_cand_t;

typedef struct hs {
  rm_comm_t *c;
  hs_peer_t *peers;
  hs_anon_t anon[MAX_ANON];
  int nanon;
  hs_cand_t cand[MAX_ANON];
  int ncand;
  int missing;
  rm_status_t fatal; /* set when init must stop now */
  struct pollfd pfds[1 + 2 * MAX_ANON + 1024];
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

/* A header and the f->length bytes after it (a, then b), in one send: a
 * fresh socket's buffer always takes these few bytes whole. */
static int send_frame_with(int fd, const rm__frame_t *f, const unsigned char *a,
                           size_t alen, const unsigned char *b, size_t blen)
{
  unsigned char m[REPLY_MAX];
  size_t n = RM__TCP_HDR + alen + blen;
  rm__frame_encode(f, m);
  memcpy(m + RM__TCP_HDR, a, alen);
  if (blen) memcpy(m + RM__TCP_HDR + alen, b, blen);
  return send(fd, m, n, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)n ? 0 : -1;
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
  q->want = RM__TCP_HDR;
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
  if (h->c->keyed) {
    rm__auth_nonce(q->nonce); /* fresh per attempt: no reply can be replayed */
    f.length = RM__AUTH_NONCE;
  }
  if ((h->c->keyed ? send_frame_with(q->fd, &f, q->nonce, RM__AUTH_NONCE, NULL, 0)
                   : send_frame(q->fd, &f)) != 0) {
    retry_later(h, p, "could not send HELLO");
    return;
  }
  q->got = 0;
  q->want = RM__TCP_HDR;
  q->state = HS_WAIT_REPLY;
}

/* Keyed: the reply's MAC checked, our AUTH proof sent; 0 or -1 (why set). */
static int prove(hs_t *h, int p, const rm__frame_t *f, const char **why)
{
  rm_comm_t *c = h->c;
  hs_peer_t *q = &h->peers[p];
  rm__auth_ctx_t x;
  unsigned char mac[RM__AUTH_MAC];
  rm__frame_t a;
  if (f->length != RM__AUTH_NONCE + RM__AUTH_MAC) {
    *why = "peer answered without proof of membership (it has no data-plane key)";
    return -1;
  }
  x.dialer = c->rank;
  x.listener = p;
  memcpy(x.nonce_d, q->nonce, RM__AUTH_NONCE);
  memcpy(x.nonce_l, q->buf + RM__TCP_HDR, RM__AUTH_NONCE);
  if (!rm__auth_check(c, &x, RM__AUTH_LISTENER, q->buf + RM__TCP_HDR + RM__AUTH_NONCE)) {
    RM_WARN("rank %d: peer rank %d (%s) answered with a proof of membership "
            "that does not check out (another key: not this job's generation)",
            c->rank, p, c->peers[p]);
    *why = "peer's proof of membership does not check out";
    return -1;
  }
  rm__auth_mac(c, &x, RM__AUTH_DIALER, mac);
  rm__frame_init(&a, c, RM__FRAME_AUTH);
  a.seq = (uint64_t)c->rank;
  a.tag = (uint64_t)c->world;
  a.length = RM__AUTH_MAC;
  if (send_frame_with(q->fd, &a, mac, sizeof mac, NULL, 0) != 0) {
    *why = "could not send the AUTH proof";
    return -1;
  }
  return 0;
}

static void on_reply(hs_t *h, int p)
{
  hs_peer_t *q = &h->peers[p];
  rm__frame_t f;
  const char *why;
  ssize_t n = read(q->fd, q->buf + q->got, (size_t)(q->want - q->got));
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    retry_later(h, p, n == 0 ? "peer closed the connection during the handshake"
                             : strerror(errno));
    return;
  }
  q->got += (int)n;
  if (q->got < q->want) return;
  rm__frame_decode(q->buf, &f);
  if (rm__frame_check(&f, &why) != RM_OK) {
    retry_later(h, p, why);
    return;
  }
  if (q->want == RM__TCP_HDR && f.type == RM__FRAME_HELLO && f.length > 0) {
    q->want = RM__TCP_HDR + (int)f.length; /* frame_check bounds it */
    return;
  }
  if (f.type == RM__FRAME_ABORT && f.seq == RM_ERR_STALE_GENERATION) {
    snprintf(q->why, sizeof q->why, "peer is at a later generation");
    h->fatal = RM_ERR_STALE_GENERATION;
  } else if (f.type != RM__FRAME_HELLO || f.job != h->c->job_id ||
             f.generation != h->c->generation || f.seq != (uint64_t)p ||
             f.tag != (uint64_t)h->c->world) {
    retry_later(h, p, "peer answered with a HELLO that does not match");
  } else if (!h->c->keyed && f.length != 0) {
    retry_later(h, p, "peer answered with a proof of membership, but this "
                      "communicator has no data-plane key");
  } else if (h->c->keyed && prove(h, p, &f, &why) != 0) {
    retry_later(h, p, why);
  } else {
    set_ready(h, p, q->fd);
  }
}

/* Keyed: answer rank's HELLO with our nonce and MAC and keep the
 * connection as a candidate for that rank; NULL, or why not. */
static const char *challenge(hs_t *h, int fd, int rank,
                             const unsigned char nonce_d[RM__AUTH_NONCE])
{
  rm_comm_t *c = h->c;
  hs_cand_t *k;
  rm__frame_t r;
  unsigned char mac[RM__AUTH_MAC];
  if (h->ncand == MAX_ANON) return "too many connections waiting to prove membership";
  k = &h->cand[h->ncand];
  k->fd = fd;
  k->rank = rank;
  k->got = 0;
  k->x.dialer = rank;
  k->x.listener = c->rank;
  memcpy(k->x.nonce_d, nonce_d, RM__AUTH_NONCE);
  rm__auth_nonce(k->x.nonce_l);
  rm__auth_mac(c, &k->x, RM__AUTH_LISTENER, mac);
  rm__frame_init(&r, c, RM__FRAME_HELLO);
  r.seq = (uint64_t)c->rank;
  r.tag = (uint64_t)c->world;
  r.length = RM__AUTH_NONCE + RM__AUTH_MAC;
  if (send_frame_with(fd, &r, k->x.nonce_l, RM__AUTH_NONCE, mac, sizeof mac) != 0)
    return "could not answer HELLO";
  h->ncand++;
  return NULL;
}

/* A HELLO (and its nonce when keyed) arrived on an accepted connection:
 * decide (table at the top). */
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
  } else if (f.length != 0 && f.length != RM__AUTH_NONCE) {
    why = "HELLO of a reply's length";
  } else if (f.generation > c->generation) {
    /* that generation's init checks the proof, with its own key */
    rm__endpoint_stash(c->endpoint, fd, &f, buf + RM__TCP_HDR);
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
  } else if (c->keyed && f.length == 0) {
    why = "HELLO without proof of membership (this job's data plane needs "
          "its key; not a member, or a worker without one)";
  } else if (!c->keyed && f.length != 0) {
    why = "HELLO offers a proof of membership, but this communicator has no "
          "data-plane key";
  } else if (c->keyed) {
    why = challenge(h, fd, (int)f.seq, buf + RM__TCP_HDR);
    if (why == NULL) return;
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

static void drop_cand(hs_t *h, int i, const char *why)
{
  hs_cand_t *k = &h->cand[i];
  if (why != NULL) {
    RM_WARN("rank %d: rejected a data-plane connection claiming rank %d: %s",
            h->c->rank, k->rank, why);
    /* the deadline's error names it when that rank never connects */
    snprintf(h->peers[k->rank].why, sizeof h->peers[k->rank].why,
             "a connection claiming it was refused: %s", why);
    close(k->fd);
  }
  h->cand[i] = h->cand[--h->ncand];
}

/* Bytes of a candidate's AUTH proof: READY when it checks out. */
static void on_cand_readable(hs_t *h, int i)
{
  rm_comm_t *c = h->c;
  hs_cand_t *k = &h->cand[i];
  rm__frame_t f;
  const char *why;
  ssize_t n = read(k->fd, k->buf + k->got, (size_t)(HELLO_MAX - k->got));
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    drop_cand(h, i, n == 0 ? "closed before proving membership" : strerror(errno));
    return;
  }
  k->got += (int)n;
  if (k->got < HELLO_MAX) return;
  rm__frame_decode(k->buf, &f);
  if (rm__frame_check(&f, &why) != RM_OK) {
  } else if (f.type != RM__FRAME_AUTH || f.job != c->job_id ||
             f.generation != c->generation || f.seq != (uint64_t)k->rank ||
             f.tag != (uint64_t)c->world) {
    why = "answered the challenge with something other than its AUTH proof";
  } else if (!rm__auth_check(c, &k->x, RM__AUTH_DIALER, k->buf + RM__TCP_HDR)) {
    why = "proof of membership does not check out (wrong key, or a "
          "replayed handshake)";
  } else if (h->peers[k->rank].state == HS_READY) {
    why = "duplicate proof for a connected rank";
  } else if (rm__tcp_set_opts(k->fd) != 0) {
    why = "could not set socket options";
  } else {
    set_ready(h, k->rank, k->fd);
    why = NULL;
  }
  drop_cand(h, i, why);
}

static void drop_anon(hs_t *h, int i)
{
  h->anon[i] = h->anon[--h->nanon];
}

static void on_anon_readable(hs_t *h, int i)
{
  hs_anon_t *a = &h->anon[i];
  ssize_t n = read(a->fd, a->buf + a->got, (size_t)(a->want - a->got));
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    RM_WARN("rank %d: a data-plane connection closed before its HELLO (%s)",
            h->c->rank, n == 0 ? "truncated" : strerror(errno));
    close(a->fd);
    drop_anon(h, i);
    return;
  }
  a->got += (int)n;
  if (a->got < a->want) return;
  if (a->want == RM__TCP_HDR) {
    rm__frame_t f;
    const char *why;
    rm__frame_decode(a->buf, &f);
    if (rm__frame_check(&f, &why) == RM_OK && f.type == RM__FRAME_HELLO &&
        f.length == RM__AUTH_NONCE) {
      a->want = HELLO_MAX; /* its nonce follows */
      return;
    }
  }
  int fd = a->fd;
  unsigned char buf[HELLO_MAX];
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
    h->anon[h->nanon].want = RM__TCP_HDR;
    memset(h->anon[h->nanon].buf, 0, sizeof h->anon[h->nanon].buf);
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
  for (int i = 0; i < h->ncand; i++) {
    h->pfds[n].fd = h->cand[i].fd;
    h->pfds[n].events = POLLIN;
    map[n++] = -1 - MAX_ANON - i;
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
  /* candidates after anonymous ones in pfds: reverse order serves them
   * first, and a candidate made now (on_hello) is not in this round */
  for (int i = n - 1; i >= 1; i--)
    if (map[i] < -MAX_ANON && h->pfds[i].revents) on_cand_readable(h, -1 - MAX_ANON - map[i]);
  for (int i = n - 1; i >= 1; i--)
    if (map[i] < 0 && map[i] >= -MAX_ANON && h->pfds[i].revents)
      on_anon_readable(h, -1 - map[i]);
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
    q->want = RM__TCP_HDR;
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
  for (int i = 0; i < h->ncand; i++) {
    RM_WARN("rank %d: closed a data-plane connection claiming rank %d that "
            "never proved membership", h->c->rank, h->cand[i].rank);
    close(h->cand[i].fd);
  }
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
  int map[1 + 2 * MAX_ANON + 1024];
  unsigned char nonce[RM__AUTH_NONCE];
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
  while ((fd = rm__endpoint_take(c->endpoint, c->job_id, c->generation, &hello,
                                 nonce)) >= 0) {
    unsigned char buf[HELLO_MAX];
    rm__frame_encode(&hello, buf);
    memcpy(buf + RM__TCP_HDR, nonce, RM__AUTH_NONCE);
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
