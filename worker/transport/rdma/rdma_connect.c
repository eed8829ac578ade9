/*
 * rdma_connect.c - connect_all of the RDMA transport: device and QPs, the
 * TCP bootstrap (HELLO / HELLO reply / READY, formats in rdma_int.h) and
 * the QP state transitions; plus the control-frame helpers the progress
 * engine shares.
 *
 * Per peer p carried by RDMA, within c->connect_timeout_ms, in one poll()
 * loop over the endpoint's bootstrap listener and every socket:
 *
 *   lower rank (active):  IDLE --connect--> CONNECTING --writable, HELLO
 *     sent--> WAIT_REPLY --valid reply: QP RTR, RTS, READY sent--> DONE
 *     refused / EOF / bad reply --> IDLE again after 5..200 ms (the peer
 *     may not listen yet, or still be in an older generation)
 *   higher rank (passive): accepted socket ANON --valid HELLO: QP RTR,
 *     RTS, reply sent--> WAIT_READY --READY--> DONE
 *     bad magic/version, other job/generation/world, a rank that must not
 *     connect, a duplicate: logged, closed, init goes on
 *
 * Keyed communicators (c->keyed; format in rdma_int.h, MAC in
 * transport/hello_auth.c): a QP is connected only to a peer that proved it
 * holds the generation's key, since a QP cannot be connected twice.
 *
 *   lower rank (active): ... WAIT_REPLY --reply whose MAC checks out: QP
 *     RTR, RTS, PROOF sent--> WAIT_GO --READY--> DONE (a reply without a
 *     proof or with a wrong one: IDLE, retry)
 *   higher rank (passive): accepted socket ANON --valid keyed HELLO: reply
 *     with our nonce and MAC--> CANDIDATE (holds no place; several may wait
 *     for one rank) --PROOF that checks out: QP RTR, RTS, READY sent--> DONE;
 *     a wrong proof, anything else, an end of stream: logged, closed
 *
 * Before any of this, every QP is created, moved to INIT and given its
 * receive WRs, so a peer's first write never meets an empty queue. DONE
 * leaves the socket open as the pair's control channel (k->fd). QPs,
 * HELLO and frames: rdma_qp.c.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rm_clock.h"
#include "rm_le.h"
#include "rm_log.h"
#include "rm_transports.h"
#include "transport/hello_auth.h"
#include "transport/rdma/rdma_int.h"

#define MAX_ANON 64

enum { HS_IDLE, HS_CONNECTING, HS_WAIT_REPLY, HS_WAIT_READY, HS_WAIT_GO, HS_DONE };

/* a keyed HELLO: the 96 bytes, nonce, MAC (zeros in the dialer's) */
#define KEYED_HELLO (RM__RDMA_HELLO + RM__AUTH_NONCE + RM__AUTH_MAC)
/* the dialer's proof: a PROOF control frame and its MAC */
#define PROOF_LEN (RM__RDMA_CTL + RM__AUTH_MAC)

typedef struct hs_peer {
  int state, fd, got, want, backoff_ms;
  int64_t retry_at;
  uint32_t psn;
  struct sockaddr_in sa;
  unsigned char buf[KEYED_HELLO];
  unsigned char nonce[RM__AUTH_NONCE]; /* ours, this attempt (keyed) */
  char why[160];
} hs_peer_t;

typedef struct hs_anon {
  int fd, got, want;
  unsigned char buf[KEYED_HELLO];
} hs_anon_t;

/* Keyed: an accepted socket that was challenged for rank and has not
 * proved membership yet. */
typedef struct hs_cand {
  int fd, rank, got;
  unsigned char hello[KEYED_HELLO]; /* the dialer's, for its QP */
  unsigned char buf[PROOF_LEN];
  rm__auth_ctx_t x;
} hs_cand_t;

/* ---- the handshake ---- */

typedef struct hs {
  rm_comm_t *c;
  hs_peer_t *peers;
  hs_anon_t anon[MAX_ANON];
  hs_cand_t cand[MAX_ANON];
  int nanon, ncand, missing;
} hs_t;

static void retry_later(hs_t *h, int p, const char *why)
{
  hs_peer_t *q = &h->peers[p];
  if (q->fd >= 0) close(q->fd);
  q->fd = -1;
  q->got = 0;
  q->want = RM__RDMA_HELLO;
  q->state = HS_IDLE;
  snprintf(q->why, sizeof q->why, "%s", why);
  q->retry_at = rm__now_ns() + (int64_t)q->backoff_ms * 1000000LL;
  q->backoff_ms = q->backoff_ms * 2 > 200 ? 200 : q->backoff_ms * 2;
}

static void set_done(hs_t *h, int p, int fd)
{
  rm__rdma_conn_t *k = &rm__rdma(h->c)->conns[p];
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  h->peers[p].state = HS_DONE;
  h->peers[p].fd = -1;
  k->fd = fd;
  k->ready = 1;
  h->missing--;
  RM_DEBUG("rank %d: rdma: connected to peer rank %d (%s), qp %u", h->c->rank, p,
           h->c->peers[p], k->qp->qp_num);
}

static void start_connect(hs_t *h, int p)
{
  hs_peer_t *q = &h->peers[p];
  q->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (q->fd < 0) {
    retry_later(h, p, strerror(errno));
    return;
  }
  if (connect(q->fd, (struct sockaddr *)&q->sa, sizeof q->sa) != 0 && errno != EINPROGRESS) {
    retry_later(h, p, strerror(errno));
    return;
  }
  q->state = HS_CONNECTING;
}

static void on_connected(hs_t *h, int p)
{
  hs_peer_t *q = &h->peers[p];
  unsigned char b[KEYED_HELLO] = {0};
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(q->fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    retry_later(h, p, strerror(err));
    return;
  }
  size_t n = h->c->keyed ? KEYED_HELLO : RM__RDMA_HELLO;
  rm__rdma_hello_encode(h->c, &rm__rdma(h->c)->conns[p], q->psn, 0, b);
  if (h->c->keyed) {
    b[7] = 1; /* keyed: nonce (and a zero MAC) follow */
    rm__auth_nonce(q->nonce); /* fresh per attempt: no reply can be replayed */
    memcpy(b + RM__RDMA_HELLO, q->nonce, RM__AUTH_NONCE);
  }
  if (send(q->fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)n) {
    retry_later(h, p, "could not send HELLO");
    return;
  }
  q->got = 0;
  q->want = RM__RDMA_HELLO;
  q->state = HS_WAIT_REPLY;
}

/* Read into buf up to want bytes; 1 complete, 0 not yet, -1 EOF/error. */
static int read_some(int fd, unsigned char *buf, int *got, int want)
{
  ssize_t n = recv(fd, buf + *got, (size_t)(want - *got), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
  if (n <= 0) return -1;
  *got += (int)n;
  return *got == want;
}

static void on_reply(hs_t *h, int p)
{
  hs_peer_t *q = &h->peers[p];
  rm__rdma_conn_t *k = &rm__rdma(h->c)->conns[p];
  unsigned char rd[RM__RDMA_CTL];
  const char *why;
  int r = read_some(q->fd, q->buf, &q->got, q->want), rank = -1;
  if (r == 0) return;
  if (r < 0) {
    retry_later(h, p, "peer closed the bootstrap connection during the handshake");
    return;
  }
  if (q->want == RM__RDMA_HELLO && q->buf[7] == 1 && h->c->keyed) {
    q->want = KEYED_HELLO; /* its nonce and MAC follow */
    return;
  }
  if ((why = rm__rdma_hello_check(h->c, q->buf, 1, &rank)) != NULL || rank != p) {
    retry_later(h, p, why ? why : "reply from another rank");
    return;
  }
  if (h->c->keyed != (q->buf[7] == 1)) {
    retry_later(h, p, h->c->keyed ? "peer answered without proof of membership (it "
                                    "has no data-plane key)"
                                  : "peer answered with a proof of membership, but "
                                    "this communicator has no data-plane key");
    return;
  }
  rm__auth_ctx_t x;
  if (h->c->keyed) {
    x.dialer = h->c->rank;
    x.listener = p;
    memcpy(x.nonce_d, q->nonce, RM__AUTH_NONCE);
    memcpy(x.nonce_l, q->buf + RM__RDMA_HELLO, RM__AUTH_NONCE);
    if (!rm__auth_check(h->c, &x, RM__AUTH_LISTENER,
                        q->buf + RM__RDMA_HELLO + RM__AUTH_NONCE)) {
      RM_WARN("rank %d: rdma: peer rank %d (%s) answered with a proof of membership "
              "that does not check out", h->c->rank, p, h->c->peers[p]);
      retry_later(h, p, "peer's proof of membership does not check out");
      return;
    }
  }
  if (rm__rdma_qp_connect(h->c, k, q->psn, q->buf) != 0) {
    snprintf(q->why, sizeof q->why, "QP to RTR/RTS failed: %s", strerror(errno));
    q->state = HS_IDLE;
    q->retry_at = INT64_MAX; /* fatal for this pair: reported at the deadline */
    close(q->fd);
    q->fd = -1;
    return;
  }
  if (h->c->keyed) {
    /* our proof; the passive side connects its QP only after checking it,
     * and says READY then: write nothing before */
    unsigned char pr[PROOF_LEN];
    rm__rdma_ctl_encode(h->c, pr, RM__RC_PROOF, 0, 0);
    rm__auth_mac(h->c, &x, RM__AUTH_DIALER, pr + RM__RDMA_CTL);
    if (send(q->fd, pr, sizeof pr, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof pr) {
      snprintf(q->why, sizeof q->why, "could not send the proof of membership");
      q->state = HS_IDLE;
      q->retry_at = INT64_MAX; /* our QP is in RTS: fatal for this pair */
      close(q->fd);
      q->fd = -1;
      return;
    }
    q->got = 0;
    q->state = HS_WAIT_GO;
    return;
  }
  rm__rdma_ctl_encode(h->c, rd, RM__RC_READY, 0, 0);
  if (send(q->fd, rd, sizeof rd, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof rd) {
    retry_later(h, p, "could not send READY");
    return;
  }
  set_done(h, p, q->fd);
}

/* Keyed, active side: the passive side checked our proof and connected
 * its QP. */
static void on_go(hs_t *h, int p)
{
  hs_peer_t *q = &h->peers[p];
  int r = read_some(q->fd, q->buf, &q->got, RM__RDMA_CTL);
  if (r == 0) return;
  if (r < 0 || rm__get_le32(q->buf) != RM__RDMA_CTL_MAGIC ||
      rm__get_le32(q->buf + 4) != RM__RC_READY) {
    /* our QP is in RTS and cannot be connected twice: report at the deadline */
    snprintf(q->why, sizeof q->why, "peer refused our proof of membership (another "
             "key?) or ended the bootstrap before READY");
    close(q->fd);
    q->fd = -1;
    q->state = HS_IDLE;
    q->retry_at = INT64_MAX;
    return;
  }
  set_done(h, p, q->fd);
}

/* Keyed, passive side: answer rank's HELLO with our nonce and MAC and keep
 * the socket as a candidate; NULL or why not. */
static const char *challenge(hs_t *h, int fd, int rank, const unsigned char *b)
{
  rm_comm_t *c = h->c;
  hs_cand_t *k;
  unsigned char rb[KEYED_HELLO];
  if (h->ncand == MAX_ANON) return "too many connections waiting to prove membership";
  k = &h->cand[h->ncand];
  k->fd = fd;
  k->rank = rank;
  k->got = 0;
  memcpy(k->hello, b, KEYED_HELLO);
  k->x.dialer = rank;
  k->x.listener = c->rank;
  memcpy(k->x.nonce_d, b + RM__RDMA_HELLO, RM__AUTH_NONCE);
  rm__auth_nonce(k->x.nonce_l);
  rm__rdma_hello_encode(c, &rm__rdma(c)->conns[rank], h->peers[rank].psn, 1, rb);
  rb[7] = 1;
  memcpy(rb + RM__RDMA_HELLO, k->x.nonce_l, RM__AUTH_NONCE);
  rm__auth_mac(c, &k->x, RM__AUTH_LISTENER, rb + RM__RDMA_HELLO + RM__AUTH_NONCE);
  if (send(fd, rb, sizeof rb, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof rb)
    return "could not answer HELLO";
  h->ncand++;
  return NULL;
}

static void drop_cand(hs_t *h, int i, const char *why)
{
  hs_cand_t *k = &h->cand[i];
  if (why != NULL) {
    RM_WARN("rank %d: rdma: refused a bootstrap connection claiming rank %d: %s",
            h->c->rank, k->rank, why);
    snprintf(h->peers[k->rank].why, sizeof h->peers[k->rank].why,
             "a connection claiming it was refused: %s", why);
    close(k->fd);
  }
  h->cand[i] = h->cand[--h->ncand];
}

static void on_cand(hs_t *h, int i)
{
  rm_comm_t *c = h->c;
  hs_cand_t *k = &h->cand[i];
  int r = read_some(k->fd, k->buf, &k->got, PROOF_LEN), p = k->rank;
  const char *why = NULL;
  if (r == 0) return;
  if (r < 0) {
    why = "closed before proving membership";
  } else if (rm__get_le32(k->buf) != RM__RDMA_CTL_MAGIC ||
             rm__get_le32(k->buf + 4) != RM__RC_PROOF ||
             rm__get_le64(k->buf + 24) != c->generation) {
    why = "answered the challenge with something other than its proof";
  } else if (!rm__auth_check(c, &k->x, RM__AUTH_DIALER, k->buf + RM__RDMA_CTL)) {
    why = "proof of membership does not check out (wrong key, or a replayed "
          "handshake)";
  } else if (h->peers[p].state != HS_IDLE) {
    why = "duplicate proof for a connected rank";
  } else {
    hs_peer_t *q = &h->peers[p];
    unsigned char rd[RM__RDMA_CTL];
    if (rm__rdma_qp_connect(c, &rm__rdma(c)->conns[p], q->psn, k->hello) != 0) {
      snprintf(q->why, sizeof q->why, "QP to RTR/RTS failed: %s", strerror(errno));
      q->state = HS_WAIT_READY; /* the QP is spent: reported at the deadline */
      why = "cannot bring the QP up";
    } else {
      rm__rdma_ctl_encode(c, rd, RM__RC_READY, 0, 0);
      if (send(k->fd, rd, sizeof rd, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof rd) {
        set_done(h, p, k->fd);
      } else {
        q->state = HS_WAIT_READY;
        why = "could not send READY";
      }
    }
  }
  drop_cand(h, i, why);
}

/* A full HELLO on an accepted socket (passive side). */
static void on_hello(hs_t *h, int fd, const unsigned char *b)
{
  rm_comm_t *c = h->c;
  int p = -1;
  const char *why = rm__rdma_hello_check(c, b, 0, &p);
  if (why == NULL && p >= c->rank) why = "HELLO from a rank that must not connect to us";
  if (why == NULL && h->peers[p].state != HS_IDLE) why = "duplicate HELLO";
  if (why == NULL && c->keyed && b[7] != 1)
    why = "HELLO without proof of membership (this job's data plane needs its key; "
          "not a member, or a worker without one)";
  if (why == NULL && !c->keyed && b[7] != 0)
    why = "HELLO offers a proof of membership, but this communicator has no "
          "data-plane key";
  if (why == NULL && c->keyed) {
    if ((why = challenge(h, fd, p, b)) == NULL) return;
  }
  if (why == NULL) {
    hs_peer_t *q = &h->peers[p];
    rm__rdma_conn_t *k = &rm__rdma(c)->conns[p];
    unsigned char rb[RM__RDMA_HELLO];
    if (rm__rdma_qp_connect(c, k, q->psn, b) != 0) {
      snprintf(q->why, sizeof q->why, "QP to RTR/RTS failed: %s", strerror(errno));
      why = "cannot bring the QP up";
    } else {
      rm__rdma_hello_encode(c, k, q->psn, 1, rb);
      if (send(fd, rb, sizeof rb, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof rb) {
        q->fd = fd;
        q->got = 0;
        q->state = HS_WAIT_READY;
        return;
      }
      why = "could not answer HELLO";
    }
  }
  RM_WARN("rank %d: rdma: refused a bootstrap connection: %s", c->rank, why);
  close(fd);
}

static void on_ready(hs_t *h, int p)
{
  hs_peer_t *q = &h->peers[p];
  int r = read_some(q->fd, q->buf, &q->got, RM__RDMA_CTL);
  if (r == 0) return;
  if (r < 0 || rm__get_le32(q->buf) != RM__RDMA_CTL_MAGIC ||
      rm__get_le32(q->buf + 4) != RM__RC_READY) {
    /* the active side retries from scratch; our QP is already in RTS and
     * cannot be connected twice: report at the deadline */
    snprintf(q->why, sizeof q->why, "bootstrap ended before READY");
    close(q->fd);
    q->fd = -1;
    q->state = HS_WAIT_READY;
    return;
  }
  set_done(h, p, q->fd);
}

static void on_listen(hs_t *h, int lfd)
{
  for (;;) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (h->nanon == MAX_ANON) {
      close(fd);
      continue;
    }
    h->anon[h->nanon].fd = fd;
    h->anon[h->nanon].want = RM__RDMA_HELLO;
    memset(h->anon[h->nanon].buf, 0, sizeof h->anon[h->nanon].buf);
    h->anon[h->nanon++].got = 0;
  }
}

static void on_anon(hs_t *h, int i)
{
  hs_anon_t *a = &h->anon[i];
  int r = read_some(a->fd, a->buf, &a->got, a->want);
  unsigned char b[KEYED_HELLO];
  int fd = a->fd;
  if (r == 0) return;
  if (r > 0 && a->want == RM__RDMA_HELLO && a->buf[7] == 1) {
    a->want = KEYED_HELLO; /* nonce and MAC follow */
    return;
  }
  memcpy(b, a->buf, sizeof b);
  h->anon[i] = h->anon[--h->nanon];
  if (r < 0) {
    close(fd);
    return;
  }
  on_hello(h, fd, b);
}

static rm_status_t hs_loop(hs_t *h, int64_t deadline)
{
  rm_comm_t *c = h->c;
  int lfd = rm__rdma_listen_fd(c);
  struct pollfd pf[1 + 2 * MAX_ANON + 1024];
  int map[1 + 2 * MAX_ANON + 1024];
  while (h->missing > 0) {
    int n = 0, wait = rm__ms_left(deadline);
    int64_t now = rm__now_ns();
    if (wait == 0) return RM_ERR_TIMEOUT;
    pf[n].fd = lfd;
    pf[n].events = POLLIN;
    map[n++] = INT32_MIN;
    for (int i = 0; i < h->nanon; i++) {
      pf[n].fd = h->anon[i].fd;
      pf[n].events = POLLIN;
      map[n++] = -1 - i;
    }
    for (int i = 0; i < h->ncand; i++) {
      pf[n].fd = h->cand[i].fd;
      pf[n].events = POLLIN;
      map[n++] = -1 - MAX_ANON - i;
    }
    for (int p = 0; p < c->world; p++) {
      hs_peer_t *q = &h->peers[p];
      if (c->conns[p].type != &rm__rdma_transport || p == c->rank) continue;
      if (p > c->rank && q->state == HS_IDLE && q->retry_at <= now) start_connect(h, p);
      if (q->state == HS_IDLE && p > c->rank) {
        int ms = q->retry_at == INT64_MAX ? wait : rm__ms_left(q->retry_at);
        if (ms < wait) wait = ms;
      }
      if (q->fd < 0 || q->state == HS_DONE || q->state == HS_IDLE) continue;
      pf[n].fd = q->fd;
      pf[n].events = q->state == HS_CONNECTING ? POLLOUT : POLLIN;
      map[n++] = p;
    }
    if (poll(pf, (nfds_t)n, wait) <= 0) continue;
    for (int i = 1; i < n; i++) {
      int p = map[i];
      if (pf[i].revents == 0 || p < 0) continue;
      if (h->peers[p].state == HS_CONNECTING) on_connected(h, p);
      else if (h->peers[p].state == HS_WAIT_REPLY) on_reply(h, p);
      else if (h->peers[p].state == HS_WAIT_READY) on_ready(h, p);
      else if (h->peers[p].state == HS_WAIT_GO) on_go(h, p);
    }
    /* candidates sit after the anonymous sockets: reverse order serves them
     * first, and one made in this round (on_hello) is not served yet */
    for (int i = n - 1; i >= 1; i--)
      if (map[i] < -MAX_ANON && map[i] != INT32_MIN && pf[i].revents)
        on_cand(h, -1 - MAX_ANON - map[i]);
    for (int i = n - 1; i >= 1; i--)
      if (map[i] < 0 && map[i] >= -MAX_ANON && pf[i].revents) on_anon(h, -1 - map[i]);
    if (pf[0].revents & POLLIN) on_listen(h, lfd);
  }
  return RM_OK;
}

static rm_status_t hs_fail(hs_t *h)
{
  rm_comm_t *c = h->c;
  for (int p = 0; p < c->world; p++) {
    hs_peer_t *q = &h->peers[p];
    if (p == c->rank || c->conns[p].type != &rm__rdma_transport || q->state == HS_DONE)
      continue;
    RM_ERROR("rank %d: job %llu generation %llu: no RDMA connection to peer rank "
             "%d (%s) within %d ms: %s", c->rank, (unsigned long long)c->job_id,
             (unsigned long long)c->generation, p, c->peers[p], c->connect_timeout_ms,
             q->why[0] ? q->why : p < c->rank ? "it never connected" : "no answer");
    return RM_ERR_TIMEOUT;
  }
  return RM_ERR_INTERNAL;
}

static rm_status_t setup(rm_comm_t *c, struct rm__rdma_state *s, hs_t *h)
{
  rm_status_t st;
  uint64_t seed = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)rm__now_ns();
  if ((st = rm__rdma_dev_open(c, s)) != RM_OK) return st;
  for (int p = 0; p < c->world; p++) {
    rm__rdma_conn_t *k = &s->conns[p];
    hs_peer_t *q = &h->peers[p];
    q->fd = -1;
    q->want = RM__RDMA_HELLO;
    q->backoff_ms = 5;
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    q->psn = (uint32_t)(seed >> 40) & 0xffffff;
    if (p == c->rank || c->conns[p].type != &rm__rdma_transport) continue;
    k->active = 1;
    h->missing++;
    if (rm__rdma_qp_create(s, k) != 0) {
      RM_ERROR("rank %d: rdma: cannot create the QP for peer rank %d (%s): %s",
               c->rank, p, c->peers[p], strerror(errno));
      return RM_ERR_SYSTEM;
    }
    if (p > c->rank && rm__rdma_peer_boot(c, p, &q->sa) != 0) {
      RM_ERROR("rank %d: rdma: peer rank %d (%s) offers no usable bootstrap "
               "address: \"%s\"", c->rank, p, c->peers[p], c->offers[p]);
      return RM_ERR_INVALID_ARG;
    }
  }
  if (rm__rdma_listen_fd(c) < 0) {
    RM_ERROR("rank %d: rdma: this endpoint has no bootstrap listener", c->rank);
    return RM_ERR_INTERNAL;
  }
  return RM_OK;
}

rm_status_t rm__rdma_connect_all(rm_comm_t *c)
{
  int64_t deadline = rm__now_ns() + (int64_t)c->connect_timeout_ms * 1000000LL;
  struct rm__rdma_state *s = calloc(1, sizeof *s);
  hs_t *h = NULL;
  rm_status_t st;

  if (s == NULL) return RM_ERR_NOMEM;
  c->tstate[RM__TP_RDMA] = s;
  s->err_peer = -1;
  s->conns = calloc((size_t)c->world, sizeof *s->conns);
  s->pfds = calloc((size_t)c->world + 1, sizeof *s->pfds);
  s->pfd_peer = calloc((size_t)c->world + 1, sizeof *s->pfd_peer);
  h = calloc(1, sizeof *h);
  if (s->conns == NULL || s->pfds == NULL || s->pfd_peer == NULL || h == NULL ||
      c->world > 1024) {
    free(h);
    return c->world > 1024 ? RM_ERR_UNSUPPORTED : RM_ERR_NOMEM;
  }
  for (int p = 0; p < c->world; p++) {
    s->conns[p].fd = -1;
    s->conns[p].peer = p;
    s->conns[p].waits_on = -1;
  }
  h->c = c;
  if ((h->peers = calloc((size_t)c->world, sizeof *h->peers)) == NULL) {
    free(h);
    return RM_ERR_NOMEM;
  }
  st = setup(c, s, h);
  if (st == RM_OK) st = hs_loop(h, deadline) == RM_OK ? RM_OK : hs_fail(h);
  for (int i = 0; i < h->nanon; i++) close(h->anon[i].fd);
  for (int i = 0; i < h->ncand; i++) {
    RM_WARN("rank %d: rdma: closed a bootstrap connection claiming rank %d that "
            "never proved membership", c->rank, h->cand[i].rank);
    close(h->cand[i].fd);
  }
  for (int p = 0; p < c->world; p++)
    if (h->peers[p].fd >= 0 && h->peers[p].state != HS_DONE) close(h->peers[p].fd);
  free(h->peers);
  free(h);
  return st;
}
