/*
 * tcp_progress.c - the TCP transport's progress engine and ops table.
 *
 * Per connection and direction a FIFO of posted requests (transport.h). One
 * progress call:
 *   1. optimistic pass: for every connection with posted work, write/read
 *      without blocking (sendmsg/readv, MSG_DONTWAIT); if any byte moved,
 *      return at once (no poll) so the caller can re-check its request.
 *      A socket whose last read came back short is "dry" and one whose last
 *      write came back short is "full": the pass skips those syscalls (they
 *      would fail with EAGAIN) until poll() reports the socket ready;
 *   2. otherwise poll() every connection plus the wake pipe (and, in a
 *      mixed communicator, the poll bell c->bell_fd: transport.c, "Waiting
 *      on several transports") for at most timeout_ms: POLLOUT where sends
 *      are queued, POLLIN where a receive is posted or the next header is
 *      not read yet, POLLRDHUP once to learn of a peer that closed; then
 *      drain the pipe and the bell and serve what became ready.
 *
 * Receive state machine of a connection:
 *
 *   HEADER (rhdr_got < 48) --48 bytes--> check (tcp_int.h rules)
 *      DATA, no receive posted -> HELD (no POLLIN until one is posted)
 *      DATA matching the head receive -> PAYLOAD -> complete -> HEADER
 *      BYE -> HEADER (bye=1; end of stream now means "left")
 *      WAIT -> HEADER (note whom the peer waits on; bytes read past the
 *              header go back to the stream, see reclaim())
 *      ABORT -> fail the communicator with the sender's reason
 *   end of stream: after BYE -> closed quietly (an error only if a request
 *   is posted to that peer); before BYE -> RM_ERR_PEER_LOST.
 *
 * Sends: the head requests of the queue (up to MAX_BATCH) go out in one
 * sendmsg (header + payload iovecs), so small frames share a syscall.
 *
 * Stall reports (tcp_stalled): one WAIT control request per connection,
 * queued at the head of the send queue (after the head when that is
 * partly written) unless the previous one is still queued; sent only to
 * the awaited rank and to ranks that said they wait on us. A WAIT that
 * meets a reset (the peer just left) is dropped, not an error.
 *
 * Closing (close_all): a communicator that fails tells each peer ABORT (when
 * that connection is between frames) and shuts down its write side, so the
 * survivors learn who failed; the fds are closed by rm_comm_destroy, which
 * on a healthy communicator sends BYE first.
 */
#define _GNU_SOURCE /* pipe2, accept4, POLLRDHUP */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"
#include "rm_testhook.h"
#include "transport/tcp/tcp_int.h"

#define MAX_BATCH 8

/* Most bytes one sendmsg/read moves: keeps each copy cache-sized and lets
 * a rank alternate between its send and receive streams. 0 = no cap. */
RM_PARAM(tcp_chunk, "RINGMASTER_TCP_CHUNK", 256 * 1024)

/* Before blocking in poll() when nothing can move, poll without blocking
 * for up to this many microseconds: a reply that comes within it costs no
 * sleep and wake-up (expensive in a VM). -1 = auto: 50 us when this host
 * runs no more ranks of the communicator than it has CPUs online, else 0
 * (oversubscribed, spinning would steal the CPU the peer needs). */
RM_PARAM(tcp_spin_us, "RINGMASTER_TCP_SPIN_US", -1)
/* Oversubscribed (no spin), poll without blocking between sched_yield()s
 * for up to this many microseconds before a blocking poll, handing the
 * CPU to the rank we wait for; -1 = auto (100 when oversubscribed, else
 * 0; as shared memory, shm_progress.c). */
RM_PARAM(tcp_yield_us, "RINGMASTER_TCP_YIELD_US", -1)

static size_t chunk_cap(size_t want)
{
  int64_t cap = rm__param_tcp_chunk();
  return (cap > 0 && want > (size_t)cap) ? (size_t)cap : want;
}

/* The connection to k failed: "peer rank P (ADDR): ..." (abort.c). */
#define conn_fail(c, k, st, ...) \
  rm__transport_conn_fail((c), (k)->peer, (st), NULL, __VA_ARGS__)

static rm_status_t on_abort_frame(rm_comm_t *c, rm__tcp_conn_t *k,
                                  const rm__frame_t *f);

/* A WAIT frame from k: remember whom k says it is blocked on. */
static void note_wait(rm_comm_t *c, rm__tcp_conn_t *k, const rm__frame_t *f)
{
  /* checked as the wire's u64 before it becomes an int (fuzz/fuzz_frame.c) */
  int on = f->tag >= 1 && f->tag <= (uint64_t)c->world ? (int)(f->tag - 1) : -1;
  if (on == k->peer) on = -1;
  k->waits_on = on;
  k->waits_seq = f->seq;
  k->waits_ns = rm__now_ns();
}

/* Look at what waits unread on connection k without blocking: 1 = an ABORT
 * frame (adopted, *st set), 2 = end of stream between frames with no BYE
 * (the peer process died without a word), 0 = nothing conclusive. */
static int probe(rm_comm_t *c, rm__tcp_conn_t *k, rm_status_t *st)
{
  rm__frame_t f;
  const char *why;
  for (;;) {
    int boundary = k->rhdr_got == 0 &&
                   (k->rq_head == NULL || rm__tcp_req(k->rq_head)->hdr_done == 0);
    while (k->rhdr_got < RM__TCP_HDR) {
      ssize_t n = recv(k->fd, k->rhdr + k->rhdr_got,
                       (size_t)(RM__TCP_HDR - k->rhdr_got), MSG_DONTWAIT);
      if (n == 0 && boundary && !k->bye) return 2;
      if (n <= 0) return 0;
      k->rhdr_got += (int)n;
    }
    rm__frame_decode(k->rhdr, &f);
    if (rm__frame_check(&f, &why) != RM_OK || f.job != c->job_id ||
        f.generation != c->generation)
      return 0;
    if (f.type == RM__FRAME_ABORT) {
      *st = on_abort_frame(c, k, &f);
      return 1;
    }
    /* a WAIT read here was never seen by do_recv: consume it and look on */
    if (f.type != RM__FRAME_WAIT || k->carry > 0 ||
        (k->rq_head != NULL && rm__tcp_req(k->rq_head)->hdr_done != 0))
      return 0;
    note_wait(c, k, &f);
    k->rhdr_got = 0;
  }
}

/* Connection k broke without an ABORT from k. k may be only a messenger:
 * a rank that failed while in the middle of a frame toward us cannot send
 * ABORT. Prefer, in order: an ABORT waiting on k or on any connection (it
 * names the rank that failed first); another connection that ended between
 * frames without a word (that process died); else blame k. */
static int root_cause(rm_comm_t *c, rm__tcp_conn_t *k, rm_status_t *st)
{
  int dead = -1;
  if (probe(c, k, st) == 1) return 1;
  for (int p = 0; p < c->world; p++) {
    rm__tcp_conn_t *j = &rm__tcp(c)->conns[p];
    if (j == k || j->fd < 0) continue;
    int r = probe(c, j, st);
    if (r == 1) return 1;
    if (r == 2 && dead < 0) dead = p;
  }
  if (dead < 0) return 0;
  *st = conn_fail(c, &rm__tcp(c)->conns[dead], RM_ERR_PEER_LOST,
                  "connection closed without goodbye (peer died?)");
  return 1;
}

static rm_status_t io_error(rm_comm_t *c, rm__tcp_conn_t *k, int err,
                            const char *what)
{
  rm_status_t st;
  if (err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ETIMEDOUT) {
    if (root_cause(c, k, &st)) return st;
    return conn_fail(c, k, RM_ERR_PEER_LOST, "connection lost while %s: %s",
                     what, strerror(err));
  }
  return conn_fail(c, k, RM_ERR_SYSTEM, "%s failed: %s", what, strerror(err));
}

/* ---- sending ---- */

static void pop_send(rm__tcp_conn_t *k)
{
  rm__req_t *r = k->sq_head;
  k->sq_head = r->next;
  if (k->sq_head == NULL) k->sq_tail = NULL;
  r->next = NULL;
  r->complete = 1;
}

/* Account n written bytes to the queued requests, completing whole ones. */
static void advance_sends(rm__tcp_conn_t *k, size_t n)
{
  while (n > 0 && k->sq_head != NULL) {
    rm__req_t *r = k->sq_head;
    size_t h = (size_t)(RM__TCP_HDR - rm__tcp_req(r)->hdr_done);
    size_t take = n < h ? n : h;
    rm__tcp_req(r)->hdr_done += (int)take;
    r->ctl_moved += take;
    n -= take;
    take = n < r->len - r->done ? n : r->len - r->done;
    r->done += take;
    n -= take;
    k->send_mid_frame = 1;
    if (rm__tcp_req(r)->hdr_done == RM__TCP_HDR && r->done == r->len) {
      pop_send(k);
      k->send_mid_frame = 0;
    }
  }
  /* zero-length frames already fully written complete here too */
  while (k->sq_head && rm__tcp_req(k->sq_head)->hdr_done == RM__TCP_HDR &&
         k->sq_head->done == k->sq_head->len)
    pop_send(k);
}

static rm_status_t do_send(rm_comm_t *c, rm__tcp_conn_t *k, int *moved)
{
  while (k->sq_head != NULL && !k->wr_full) {
    struct iovec iov[2 * MAX_BATCH];
    struct msghdr msg;
    int n = 0;
    ssize_t w;
    size_t room = chunk_cap((size_t)-1), total = 0;
    /* each request may add two entries (header rest, payload): stop while two fit */
    for (rm__req_t *r = k->sq_head; r && n + 2 <= 2 * MAX_BATCH && room; r = r->next) {
      if (rm__tcp_req(r)->hdr_done < RM__TCP_HDR) {
        iov[n].iov_base = rm__tcp_req(r)->hdr + rm__tcp_req(r)->hdr_done;
        iov[n++].iov_len = (size_t)(RM__TCP_HDR - rm__tcp_req(r)->hdr_done);
        total += (size_t)(RM__TCP_HDR - rm__tcp_req(r)->hdr_done);
      }
      if (r->done < r->len) {
        size_t take = r->len - r->done < room ? r->len - r->done : room;
        iov[n].iov_base = (char *)r->buf + r->done;
        iov[n++].iov_len = take;
        room -= take;
        total += take;
      }
    }
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)n;
    w = sendmsg(k->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        k->wr_full = 1;
        return RM_OK;
      }
      if ((errno == EPIPE || errno == ECONNRESET) && k->sq_head == &k->ctl &&
          k->ctl.next == NULL && rm__tcp_req(&k->ctl)->hdr_done == 0) {
        /* only our WAIT was queued: a peer that already left needs no
         * stall report; the receive side decides whether it left cleanly
         * (BYE) or died */
        pop_send(k);
        return RM_OK;
      }
      return io_error(c, k, errno, "sending");
    }
    *moved = 1;
    advance_sends(k, (size_t)w);
    if ((size_t)w < total) k->wr_full = 1; /* socket buffer full: POLLOUT */
    if ((size_t)w >= chunk_cap((size_t)-1)) break; /* let receives run */
  }
  return RM_OK;
}

/* ---- receiving ---- */

static rm_status_t on_eof(rm_comm_t *c, rm__tcp_conn_t *k)
{
  rm_status_t st;
  if (k->bye && k->rhdr_got == 0) {
    close(k->fd);
    k->fd = -1;
    if (k->rq_head != NULL)
      return conn_fail(c, k, RM_ERR_PEER_LOST,
                       "peer closed its communicator with a receive pending");
    return RM_OK;
  }
  if (root_cause(c, k, &st)) return st;
  if (k->rhdr_got > 0 || (k->rq_head && rm__tcp_req(k->rq_head)->hdr_done))
    return conn_fail(c, k, RM_ERR_PEER_LOST,
                     "connection closed in the middle of a frame "
                     "(truncated frame; peer died?)");
  return conn_fail(c, k, RM_ERR_PEER_LOST,
                   "connection closed without goodbye (peer died?)");
}

static rm_status_t on_abort_frame(rm_comm_t *c, rm__tcp_conn_t *k,
                                  const rm__frame_t *f)
{
  /* tag = blamed rank + 1, 0 = nobody; any other value from the wire
   * (found by fuzz/fuzz_frame.c: 2^31 overflowed an int) blames nobody */
  int blamed = f->tag >= 1 && f->tag <= (uint64_t)c->world ? (int)(f->tag - 1) : -1;
  return rm__transport_adopt_abort(c, k->peer, (rm_status_t)f->seq, blamed);
}

/* A full header is in k->rhdr. RM_OK with *held = 1 when it waits for a
 * receive to be posted. */
static rm_status_t on_header(rm_comm_t *c, rm__tcp_conn_t *k, int *held)
{
  rm__frame_t f;
  const char *why;
  rm__req_t *r = k->rq_head;

  *held = 0;
  rm__frame_decode(k->rhdr, &f);
  if (rm__frame_check(&f, &why) != RM_OK)
    return conn_fail(c, k, RM_ERR_PROTOCOL, "%s", why);
  if (f.job != c->job_id)
    return conn_fail(c, k, RM_ERR_PROTOCOL, "frame for job %llu, expected %llu",
                     (unsigned long long)f.job, (unsigned long long)c->job_id);
  if (f.generation != c->generation)
    return conn_fail(c, k, RM_ERR_STALE_GENERATION,
                     "frame of generation %llu, expected %llu",
                     (unsigned long long)f.generation,
                     (unsigned long long)c->generation);
  switch (f.type) {
  case RM__FRAME_ABORT: return on_abort_frame(c, k, &f);
  case RM__FRAME_HELLO:
  case RM__FRAME_AUTH:
    return conn_fail(c, k, RM_ERR_PROTOCOL, "%s after the handshake",
                     f.type == RM__FRAME_HELLO ? "HELLO" : "AUTH");
  case RM__FRAME_BYE: k->bye = 1; k->rhdr_got = 0; return RM_OK;
  case RM__FRAME_WAIT: note_wait(c, k, &f); k->rhdr_got = 0; return RM_OK;
  default: break;
  }
  if (r == NULL) {
    *held = 1;
    return RM_OK;
  }
  if (f.seq != r->seq || f.tag != r->tag || f.length != r->len)
    return conn_fail(c, k, RM_ERR_PROTOCOL,
                     "frame (collective %llu, tag %llu, %llu bytes) does not "
                     "match the posted receive (collective %llu, tag %llu, "
                     "%zu bytes)",
                     (unsigned long long)f.seq, (unsigned long long)f.tag,
                     (unsigned long long)f.length, (unsigned long long)r->seq,
                     (unsigned long long)r->tag, r->len);
  rm__tcp_req(r)->hdr_done = RM__TCP_HDR;
  r->ctl_moved += RM__TCP_HDR;
  return RM_OK;
}

static void pop_recv(rm__tcp_conn_t *k)
{
  rm__req_t *r = k->rq_head;
  k->rq_head = r->next;
  if (k->rq_head == NULL) k->rq_tail = NULL;
  r->next = NULL;
  r->complete = 1;
  k->rhdr_got = 0;
  rm__testhook_tap(r->buf, r->len); /* tcp_tap.c; a no-op without test hooks */
}

/* A control frame was just consumed, and the first n bytes of r's buffer
 * were read past it: they are the next bytes of the stream. Put back up to
 * a header's worth into rhdr; the rest stay at the start of the buffer as
 * `carry` (payload of the DATA frame whose header that is, or more frames). */
static void reclaim(rm__tcp_conn_t *k, rm__req_t *r, size_t n)
{
  size_t h = n < RM__TCP_HDR ? n : RM__TCP_HDR;
  memcpy(k->rhdr, r->buf, h);
  k->rhdr_got = (int)h;
  if (n > h) memmove(r->buf, (char *)r->buf + h, n - h);
  k->carry = n - h;
}

/* Read the rest of a header; when a receive is posted, read straight on
 * into its buffer (the header is checked before those bytes count).
 * *want: bytes asked for. */
static ssize_t read_header(rm__tcp_conn_t *k, size_t *extra, size_t *want)
{
  struct iovec iov[2];
  int n = 1;
  ssize_t got;
  iov[0].iov_base = k->rhdr + k->rhdr_got;
  iov[0].iov_len = (size_t)(RM__TCP_HDR - k->rhdr_got);
  *want = iov[0].iov_len;
  if (k->rq_head != NULL && k->rq_head->len > 0) {
    iov[1].iov_base = k->rq_head->buf;
    iov[1].iov_len = chunk_cap(k->rq_head->len);
    *want += iov[1].iov_len;
    n = 2;
  }
  got = readv(k->fd, iov, n);
  *extra = 0;
  if (got > 0) {
    size_t h = iov[0].iov_len;
    k->rhdr_got += (int)((size_t)got < h ? (size_t)got : h);
    *extra = (size_t)got > h ? (size_t)got - h : 0;
  }
  return got;
}

/* Read what the socket holds into the head receive (or the next header).
 * A read that comes back short marks the socket drained (rd_dry): no
 * further read until poll() reports POLLIN, which saves the read that
 * would fail with EAGAIN. Work that needs no syscall (a held header whose
 * receive is now posted, a completed request) is done even when dry. */
static rm_status_t do_recv(rm_comm_t *c, rm__tcp_conn_t *k, int *moved)
{
  rm_status_t st;
  for (;;) {
    rm__req_t *r = k->rq_head;
    ssize_t got;
    size_t want;
    if (k->rhdr_got < RM__TCP_HDR) {
      size_t extra;
      int held;
      if (k->rd_dry) return RM_OK;
      got = read_header(k, &extra, &want);
      if (got == 0) return on_eof(c, k);
      if (got < 0) goto io;
      *moved = 1;
      if ((size_t)got < want) k->rd_dry = 1;
      if (k->rhdr_got < RM__TCP_HDR) continue;
      if ((st = on_header(c, k, &held)) != RM_OK || held) return st;
      if (r == NULL) continue;
      if (rm__tcp_req(r)->hdr_done == 0) { /* a control frame: give back what followed */
        if (extra > 0) reclaim(k, r, extra);
        continue;
      }
      r->done = extra;
    } else if (r == NULL) {
      return RM_OK; /* HELD */
    } else if (rm__tcp_req(r)->hdr_done == 0) {
      /* a header that was parked by reclaim() or left by probe() */
      int held;
      size_t carry = k->carry;
      k->carry = 0;
      if ((st = on_header(c, k, &held)) != RM_OK) return st;
      if (rm__tcp_req(r)->hdr_done == 0) {
        if (carry > 0) reclaim(k, r, carry);
        continue;
      }
      r->done = carry;
    } else if (r->done < r->len) {
      if (k->rd_dry) return RM_OK;
      want = chunk_cap(r->len - r->done);
      got = read(k->fd, (char *)r->buf + r->done, want);
      if (got == 0) return on_eof(c, k);
      if (got < 0) goto io;
      *moved = 1;
      r->done += (size_t)got;
      if ((size_t)got < want) k->rd_dry = 1;
      else if ((size_t)got >= chunk_cap((size_t)-1) && r->done < r->len)
        return RM_OK; /* one chunk per call: let sends run */
    }
    if (r != NULL && rm__tcp_req(r)->hdr_done == RM__TCP_HDR && r->done == r->len)
      pop_recv(k);
    continue;
  io:
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      k->rd_dry = 1;
      return RM_OK;
    }
    /* a peer that said BYE and closed with our WAIT unread resets instead
     * of ending the stream: still a clean leave */
    if ((errno == ECONNRESET || errno == EPIPE) && k->bye && k->rhdr_got == 0)
      return on_eof(c, k);
    return io_error(c, k, errno, "receiving");
  }
}

static int wants_read(const rm__tcp_conn_t *k)
{
  return k->rq_head != NULL || k->rhdr_got < RM__TCP_HDR;
}

/* ---- ops ---- */

static int tcp_available(void) { return 1; }
static int tcp_can_connect(const rm_comm_t *c, int peer) { return 1; }

static rm_status_t tcp_post(rm_comm_t *c, rm__req_t *req)
{
  rm__tcp_conn_t *k = &rm__tcp(c)->conns[req->peer];
  if (k->fd < 0)
    return conn_fail(c, k, RM_ERR_PEER_LOST,
                     "peer closed its communicator; cannot %s",
                     req->kind == RM__REQ_SEND ? "send" : "receive");
  if (req->kind == RM__REQ_SEND) {
    rm__frame_t f;
    rm__frame_init(&f, c, RM__FRAME_DATA);
    f.seq = req->seq;
    f.tag = req->tag;
    f.length = req->len;
    rm__frame_encode(&f, rm__tcp_req(req)->hdr);
    rm__req_fifo_push(&k->sq_head, &k->sq_tail, req);
  } else {
    rm__req_fifo_push(&k->rq_head, &k->rq_tail, req);
  }
  return RM_OK;
}

static rm_status_t serve(rm_comm_t *c, rm__tcp_conn_t *k, int rd, int *moved)
{
  rm_status_t st = RM_OK;
  if (k->fd >= 0 && k->sq_head != NULL) st = do_send(c, k, moved);
  if (st == RM_OK && k->fd >= 0 && rd) st = do_recv(c, k, moved);
  return st;
}

static int build_pollset(rm_comm_t *c)
{
  struct rm__tcp_state *s = rm__tcp(c);
  int n = 1;
  s->pfds[0].fd = c->wake_fd[0];
  s->pfds[0].events = POLLIN;
  if (c->bell_on) {
    s->pfds[n].fd = c->bell_fd;
    s->pfds[n++].events = POLLIN;
  }
  s->nfixed = n;
  for (int p = 0; p < c->world; p++) {
    rm__tcp_conn_t *k = &s->conns[p];
    short ev = 0;
    if (k->fd < 0) continue;
    if (k->sq_head) ev |= POLLOUT;
    if (wants_read(k)) ev |= POLLIN;
    if (!k->rdhup) ev |= POLLRDHUP;
    s->pfds[n].fd = k->fd;
    s->pfds[n].events = ev;
    s->pfd_peer[n++] = p;
  }
  return n;
}

static rm_status_t serve_ready(rm_comm_t *c, int n)
{
  struct rm__tcp_state *s = rm__tcp(c);
  int moved = 0;
  for (int i = s->nfixed; i < n; i++) {
    short re = s->pfds[i].revents;
    rm__tcp_conn_t *k = &s->conns[s->pfd_peer[i]];
    rm_status_t st;
    if (re == 0) continue;
    if ((re & POLLRDHUP) && !(s->pfds[i].events & POLLIN)) k->rdhup = 1;
    if (re & (POLLIN | POLLHUP | POLLRDHUP | POLLERR)) k->rd_dry = 0;
    if (re & (POLLOUT | POLLHUP | POLLERR)) k->wr_full = 0;
    if (re & POLLERR) {
      /* read what the peer sent before the error first (its last data,
       * its BYE): the read that meets the error then judges it */
      int err = 0;
      socklen_t len = sizeof err;
      if ((st = serve(c, k, 1, &moved)) != RM_OK) return st;
      if (k->fd < 0) continue; /* it had said BYE: closed quietly */
      getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0) continue;  /* a read or write above already met it */
      return io_error(c, k, err, "polling");
    }
    st = serve(c, k, (re & (POLLIN | POLLHUP | POLLRDHUP)) && wants_read(k),
               &moved);
    if (st != RM_OK) return st;
  }
  return RM_OK;
}

static rm_status_t tcp_progress(rm_comm_t *c, int timeout_ms)
{
  struct rm__tcp_state *s = rm__tcp(c);
  int moved = 0, n, r;
  char drain[64];

  if (s == NULL || s->closed) return rm_comm_status(c);
  for (int p = 0; p < c->world; p++) {
    rm__tcp_conn_t *k = &s->conns[p];
    if (k->sq_head == NULL && k->rq_head == NULL) continue;
    rm_status_t st = serve(c, k, k->rq_head != NULL, &moved);
    if (st != RM_OK) return st;
  }
  /* bytes moved: the caller re-checks its request first; poll only when
   * nothing could move (every socket with work is dry or full) */
  if (moved) return rm_comm_status(c);
  n = build_pollset(c);
  r = 0;
  if (s->spin_us > 0 && timeout_ms > 0 && !c->bg_progress) {
    int64_t end = rm__now_ns() + (int64_t)s->spin_us * 1000;
    while ((r = poll(s->pfds, (nfds_t)n, 0)) == 0 && rm__now_ns() < end &&
           rm_comm_status(c) == RM_OK) {
    }
  } else if (s->yield_us > 0 && timeout_ms > 0 && !c->bg_progress) {
    int64_t end = rm__now_ns() + (int64_t)s->yield_us * 1000;
    while ((r = poll(s->pfds, (nfds_t)n, 0)) == 0 && rm__now_ns() < end &&
           rm_comm_status(c) == RM_OK)
      sched_yield();
  }
  if (r == 0) r = poll(s->pfds, (nfds_t)n, timeout_ms);
  if (r < 0) return errno == EINTR ? RM_OK : RM_ERR_SYSTEM;
  if (s->pfds[0].revents & POLLIN)
    while (read(c->wake_fd[0], drain, sizeof drain) > 0) {
    }
  if (s->nfixed > 1 && (s->pfds[1].revents & POLLIN)) {
    while (recv(c->bell_fd, drain, sizeof drain, MSG_DONTWAIT) > 0) {
    }
    c->bell_rang = 1;
  }
  if (r > 0) return serve_ready(c, n);
  return rm_comm_status(c);
}

/* Tell the peers that care that this rank is blocked on `on` in collective
 * seq: `on` itself, and every peer whose WAIT since since_ns said it waits
 * on us (so a chain of waits learns where it ends). Not every peer: a peer
 * that already left would answer an unsolicited frame with a reset. One
 * WAIT request per connection, ahead of queued data that has not started. */
static void tcp_stalled(rm_comm_t *c, int on, uint64_t seq, int64_t since_ns)
{
  struct rm__tcp_state *s = rm__tcp(c);
  if (s == NULL || s->closed) return;
  for (int p = 0; p < c->world; p++) {
    rm__tcp_conn_t *k = &s->conns[p];
    rm__req_t *r = &k->ctl;
    rm__frame_t f;
    int cares = p == on || (k->waits_on == c->rank && k->waits_ns >= since_ns);
    if (!cares || k->fd < 0 || k->bye || (k->ctl_queued && !r->complete))
      continue;
    memset(r, 0, sizeof *r);
    r->peer = p;
    r->kind = RM__REQ_SEND;
    rm__frame_init(&f, c, RM__FRAME_WAIT);
    f.seq = seq;
    f.tag = (uint64_t)on + 1;
    rm__frame_encode(&f, rm__tcp_req(r)->hdr);
    if (k->sq_head != NULL && k->send_mid_frame) {
      r->next = k->sq_head->next;
      k->sq_head->next = r;
      if (k->sq_tail == k->sq_head) k->sq_tail = r;
    } else {
      r->next = k->sq_head;
      k->sq_head = r;
      if (k->sq_tail == NULL) k->sq_tail = r;
    }
    k->ctl_queued = 1;
  }
}

/* The rank peer last said (WAIT, at or after since_ns) it is blocked on. */
static int tcp_left(const rm_comm_t *c, int peer)
{
  if (rm__tcp(c) == NULL || peer < 0 || peer >= c->world) return 0;
  const rm__tcp_conn_t *k = &rm__tcp(c)->conns[peer];
  return k->bye || k->fd < 0;
}

static int tcp_waits_on(const rm_comm_t *c, int peer, int64_t since_ns,
                        uint64_t *seq)
{
  const rm__tcp_conn_t *k;
  if (rm__tcp(c) == NULL || peer < 0 || peer >= c->world) return -1;
  k = &rm__tcp(c)->conns[peer];
  if (k->waits_on < 0 || k->waits_ns < since_ns) return -1;
  *seq = k->waits_seq;
  return k->waits_on;
}

/* Best-effort, non-blocking: one control frame to a connection that is
 * between frames. */
static void send_control(rm_comm_t *c, rm__tcp_conn_t *k, rm_status_t reason)
{
  rm__frame_t f;
  unsigned char h[RM__TCP_HDR];
  ssize_t w;
  if (k->send_mid_frame) return;
  rm__frame_init(&f, c, reason == RM_OK ? RM__FRAME_BYE : RM__FRAME_ABORT);
  if (reason != RM_OK) {
    f.seq = (uint64_t)reason;
    f.tag = (uint64_t)(c->failed_peer + 1);
  }
  rm__frame_encode(&f, h);
  w = send(k->fd, h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)w;
}

static void tcp_close_all(rm_comm_t *c, rm_status_t reason)
{
  struct rm__tcp_state *s = rm__tcp(c);
  if (s == NULL) return;
  for (int p = 0; p < c->world; p++) {
    rm__tcp_conn_t *k = &s->conns[p];
    /* requests may be freed by their owners once we return: forget them */
    k->sq_head = k->sq_tail = k->rq_head = k->rq_tail = NULL;
    if (k->fd < 0) continue;
    if (!s->closed) {
      send_control(c, k, reason);
      shutdown(k->fd, SHUT_WR);
    }
    if (c->destroying) {
      close(k->fd);
      k->fd = -1;
    }
  }
  s->closed = 1;
  if (c->destroying) rm__tcp_state_free(c);
}

rm_status_t rm__tcp_state_new(rm_comm_t *c)
{
  struct rm__tcp_state *s = calloc(1, sizeof *s);
  if (s == NULL) return RM_ERR_NOMEM;
  s->conns = calloc((size_t)c->world, sizeof *s->conns);
  s->pfds = calloc((size_t)c->world + 2, sizeof *s->pfds);
  s->pfd_peer = calloc((size_t)c->world + 2, sizeof *s->pfd_peer);
  c->tstate[RM__TP_TCP] = s;
  if (s->conns == NULL || s->pfds == NULL || s->pfd_peer == NULL) {
    rm__tcp_state_free(c);
    return RM_ERR_NOMEM;
  }
  for (int p = 0; p < c->world; p++) {
    s->conns[p].fd = -1;
    s->conns[p].peer = p;
    s->conns[p].waits_on = -1;
  }
  s->spin_us = (int)rm__param_tcp_spin_us();
  if (s->spin_us < 0)
    s->spin_us = rm__transport_oversubscribed(c) ? 0 : 50;
  s->yield_us = (int)rm__param_tcp_yield_us();
  if (s->yield_us < 0)
    s->yield_us = s->spin_us == 0 && rm__transport_oversubscribed(c) ? 100 : 0;
  return RM_OK;
}

void rm__tcp_state_free(rm_comm_t *c)
{
  struct rm__tcp_state *s = rm__tcp(c);
  if (s == NULL) return;
  for (int p = 0; s->conns != NULL && p < c->world; p++)
    if (s->conns[p].fd >= 0) close(s->conns[p].fd);
  free(s->conns);
  free(s->pfds);
  free(s->pfd_peer);
  free(s);
  c->tstate[RM__TP_TCP] = NULL;
}

const rm__transport_ops_t rm__tcp_transport = {
    .name = "tcp",
    .id = RM__TP_TCP,
    .available = tcp_available,
    .can_connect = tcp_can_connect,
    .connect_all = rm__tcp_connect_all,
    .post = tcp_post,
    .progress = tcp_progress,
    .close_all = tcp_close_all,
    .stalled = tcp_stalled,
    .waits_on = tcp_waits_on,
    .left = tcp_left,
};
