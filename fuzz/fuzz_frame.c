/*
 * fuzz_frame.c - libFuzzer target for the TCP data-plane frame decoder and
 * the transport's real receive path (worker/transport/tcp/).
 *
 * Two parts per input:
 *   A. the pure header codec (tcp_frame.c): rm__frame_decode of the first
 *      48 stream bytes, encode gives the same bytes back, and
 *      rm__frame_check accepts exactly what the rules in tcp_int.h allow;
 *   B. the receive state machine (tcp_progress.c, unchanged): a rank-0
 *      communicator of world 3 built here with rm__tcp_state_new, peer 1 on
 *      one end of an AF_UNIX socketpair (stream sockets, as TCP: readv,
 *      recv, poll with POLLRDHUP all behave alike), peer 2 on another. The
 *      stream bytes are written into peer 1's end (optionally followed by
 *      end of stream); receives are posted through the ops table, upfront
 *      or only once the connection went quiet (the HELD state), and
 *      rm__tcp_transport.progress(c, 0) runs until the communicator fails
 *      or nothing moves; close_all (destroying) then frees it.
 *
 * rm__comm_fail and rm_comm_status are defined below (first failure wins,
 * as in worker/comm/comm.c), so only tcp_progress.c, tcp_frame.c and the
 * common helpers are linked; rm__tcp_connect_all is never called here.
 *
 * Input: byte 0 = flags (bits 0-1: receives to post, 0..3; bit 2: post them
 * only once the connection is quiet; bit 3: no end of stream after the
 * bytes; bits 4-5: peer 2 absent / alive / dead (closed)); then 4 bytes per
 * receive (length u16 LE mod 2049, seq, tag); the rest is the stream.
 * Frames must say job 7, generation 3.
 *
 * Oracle: a reference walk of the stream (the rules of tcp_int.h, written
 * again here plainly: headers in order, WAIT/BYE skipped, DATA matched to
 * the next receive) predicts how many receives complete, with which bytes,
 * and the status of the first bad frame; the real path must agree
 * (abort() otherwise). With peer 2 dead the communicator may fail first
 * (root cause: the dead peer), so then only a prefix is required.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/tcp/tcp_int.h"

#define JOB 7
#define GEN 3
#define MAX_RECV 3
#define MAX_STREAM (64 * 1024)
#define MAX_ITER 20000

/* 1: skip inputs with an ABORT/WAIT tag whose low 32 bits are 0x80000000
 * (the known signed overflow of (int)f->tag - 1 in tcp_progress.c
 * note_wait and on_abort_frame), to explore past it until it is fixed */
#ifndef FUZZ_FRAME_SKIP_KNOWN
#define FUZZ_FRAME_SKIP_KNOWN 0
#endif

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "fuzz_frame: invariant failed: %s (line %d)\n", #cond,  \
              __LINE__);                                                     \
      abort();                                                               \
    }                                                                        \
  } while (0)

/* ---- the communicator's sticky error, as worker/comm/comm.c ---- */
rm_status_t rm__comm_fail(rm_comm_t *c, rm_status_t st, int peer, const char *fmt, ...)
{
  if (c->status == RM_OK) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof c->last_error, fmt, ap);
    va_end(ap);
    c->failed_peer = peer;
    c->status = st;
  }
  return c->status;
}

rm_status_t rm_comm_status(const rm_comm_t *c) { return c->status; }

rm_status_t rm__tcp_connect_all(rm_comm_t *c)
{
  (void)c;
  abort(); /* not reached: connections are made by hand here */
}

static int verbose; /* RM_FUZZ_VERBOSE=1: one line per input (seed checks) */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  verbose = getenv("RM_FUZZ_VERBOSE") != NULL;
  /* small chunks: a header and the start of a payload share reads, and
   * payloads arrive in several pieces */
  setenv("RINGMASTER_TCP_CHUNK", "96", 0);
  setenv("RINGMASTER_TCP_SPIN_US", "0", 0);
  setenv("RINGMASTER_LOG_LEVEL", "error", 0);
  return 0;
}

static uint64_t le(const uint8_t *p, int n)
{
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* tcp_int.h: DATA any length; a HELLO 0, or 32 / 64 in a keyed handshake;
 * AUTH 32; every other control frame 0 */
static int length_ok(uint64_t type, uint64_t len)
{
  if (type == RM__FRAME_DATA) return 1;
  if (type == RM__FRAME_HELLO) return len == 0 || len == 32 || len == 64;
  if (type == RM__FRAME_AUTH) return len == 32;
  return len == 0;
}

/* ---- A. the header codec ---- */
static void check_codec(const uint8_t *h)
{
  rm__frame_t f;
  unsigned char out[RM__TCP_HDR];
  const char *why = NULL;
  rm__frame_decode(h, &f);
  rm__frame_encode(&f, out);
  CHECK(memcmp(out, h, RM__TCP_HDR) == 0);
  int ok = h[0] == 'R' && h[1] == 'M' && h[2] == 'F' && h[3] == 'R' && h[4] == 2 && h[5] == 0 &&
           h[7] == 0 && h[6] >= 1 && h[6] <= 6;
  if (ok) ok = length_ok(h[6], le(h + 40, 8));
  rm_status_t st = rm__frame_check(&f, &why);
  CHECK(why != NULL);
  CHECK(ok ? st == RM_OK : (st == RM_ERR_PROTOCOL && why[0] != '\0'));
}

/* ---- the reference walk ---- */
typedef struct {
  size_t len;
  uint8_t seq, tag;
} spec_t;

typedef struct {
  int done;           /* receives a correct receiver completes */
  size_t off[MAX_RECV]; /* where each one's payload starts in the stream */
  rm_status_t bad;    /* status of the first bad frame; RM_OK if none */
} expect_t;


static void reference(const uint8_t *s, size_t n, const spec_t *sp, int nrecv, expect_t *e)
{
  size_t pos = 0;
  memset(e, 0, sizeof *e);
  e->bad = RM_OK;
  while (n - pos >= RM__TCP_HDR) {
    const uint8_t *h = s + pos;
    uint64_t type = le(h + 6, 2), len = le(h + 40, 8);
    if (memcmp(h, "RMFR", 4) != 0 || le(h + 4, 2) != 2 || type < 1 || type > 6 ||
        !length_ok(type, len) || le(h + 8, 8) != JOB) {
      e->bad = RM_ERR_PROTOCOL;
      return;
    }
    if (le(h + 16, 8) != GEN) {
      e->bad = RM_ERR_STALE_GENERATION;
      return;
    }
    if (type == RM__FRAME_ABORT) {
      e->bad = RM_ERR_ABORTED; /* stands for "whatever the ABORT says" */
      return;
    }
    if (type == RM__FRAME_HELLO || type == RM__FRAME_AUTH) { /* handshake only */
      e->bad = RM_ERR_PROTOCOL;
      return;
    }
    pos += RM__TCP_HDR;
    if (type != RM__FRAME_DATA) continue;
    if (e->done == nrecv) return; /* held: nobody posted a receive */
    const spec_t *r = &sp[e->done];
    if (le(h + 24, 8) != r->seq || le(h + 32, 8) != r->tag || len != r->len) {
      e->bad = RM_ERR_PROTOCOL;
      return;
    }
    if (n - pos < r->len) return; /* truncated */
    e->off[e->done++] = pos;
    pos += r->len;
  }
}

/* ---- B. the real receive path ---- */
typedef struct {
  int rhdr_got, bye, fd, ncomplete;
  size_t carry, done[MAX_RECV];
  const void *head;
} snap_t;

static void snapshot(const rm__tcp_conn_t *k, rm__req_t *rq, int nposted, snap_t *sn)
{
  memset(sn, 0, sizeof *sn);
  sn->rhdr_got = k->rhdr_got;
  sn->bye = k->bye;
  sn->fd = k->fd;
  sn->carry = k->carry;
  sn->head = k->rq_head;
  for (int i = 0; i < nposted; i++) {
    sn->done[i] = rq[i].done + rq[i].ctl_moved;
    sn->ncomplete += rq[i].complete;
  }
}

static int make_pair(int sv[2])
{
  int big = 1 << 20;
  /* both ends non-blocking, as tcp_connect.c makes every connection */
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static char p0[] = "127.0.0.1:1", p1[] = "127.0.0.1:2", p2[] = "127.0.0.1:3";
  char *peers[3] = {p0, p1, p2};
  rm_comm_t c;
  spec_t sp[MAX_RECV];
  rm__req_t rq[MAX_RECV];
  uint8_t *buf[MAX_RECV] = {NULL, NULL, NULL};
  int s1[2] = {-1, -1}, s2[2] = {-1, -1};
  expect_t e;

  if (size < 1) return 0;
  int nrecv = data[0] & 3, lazy = (data[0] >> 2) & 1, no_eof = (data[0] >> 3) & 1;
  int peer2 = (data[0] >> 4) & 3; /* 0, 3: absent; 1: alive; 2: dead */
  if (nrecv > MAX_RECV) nrecv = MAX_RECV;
  if (size < 1 + 4 * (size_t)nrecv) return 0;
  for (int i = 0; i < nrecv; i++) {
    const uint8_t *p = data + 1 + 4 * i;
    sp[i].len = (size_t)le(p, 2) % 2049;
    sp[i].seq = p[2];
    sp[i].tag = p[3];
  }
  const uint8_t *stream = data + 1 + 4 * nrecv;
  size_t slen = size - 1 - 4 * (size_t)nrecv;
  if (slen > MAX_STREAM) slen = MAX_STREAM;
  if (slen >= RM__TCP_HDR) check_codec(stream);
  if (FUZZ_FRAME_SKIP_KNOWN)
    for (size_t i = 0; i + RM__TCP_HDR <= slen; i++)
      if (memcmp(stream + i, "RMFR", 4) == 0 && le(stream + i + 32, 4) == 0x80000000u)
        return 0;

  memset(&c, 0, sizeof c);
  c.job_id = JOB;
  c.generation = GEN;
  c.rank = 0;
  c.world = 3;
  c.peers = peers;
  c.failed_peer = -1;
  c.wake_fd[0] = c.wake_fd[1] = -1;
  if (pipe2(c.wake_fd, O_NONBLOCK | O_CLOEXEC) != 0) return 0;
  CHECK(rm__tcp_state_new(&c) == RM_OK);
  rm__tcp(&c)->spin_us = 0;
  if (make_pair(s1) != 0) goto out;
  rm__tcp(&c)->conns[1].fd = s1[0];
  s1[0] = -1; /* owned by the state now */
  if (peer2 == 1 || peer2 == 2) {
    if (make_pair(s2) != 0) goto out;
    rm__tcp(&c)->conns[2].fd = s2[0];
    s2[0] = -1;
    if (peer2 == 2) {
      close(s2[1]);
      s2[1] = -1;
    }
  }

  /* the peer's bytes; what does not fit in the socket is cut off */
  size_t sent = 0;
  while (sent < slen) {
    ssize_t w = send(s1[1], stream + sent, slen - sent, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    sent += (size_t)w;
  }
  if (!no_eof) shutdown(s1[1], SHUT_WR);
  reference(stream, sent, sp, nrecv, &e);

  int nposted = 0, idle = 0;
  snap_t before, after;
  for (int i = 0; i < nrecv; i++) {
    buf[i] = sp[i].len ? malloc(sp[i].len) : NULL; /* exact size: ASan */
    if (sp[i].len && buf[i] == NULL) goto out;
    memset(&rq[i], 0, sizeof rq[i]);
  }
  for (int iter = 0; iter < MAX_ITER && c.status == RM_OK; iter++) {
    if (nposted < nrecv && (!lazy || idle >= 2)) {
      for (; nposted < nrecv && c.status == RM_OK; nposted++) {
        rm__req_t *r = &rq[nposted];
        r->peer = 1;
        r->kind = RM__REQ_RECV;
        r->buf = buf[nposted];
        r->len = sp[nposted].len;
        r->tag = sp[nposted].tag;
        r->seq = sp[nposted].seq;
        if (rm__tcp_transport.post(&c, r) != RM_OK) break;
      }
      idle = 0;
    }
    snapshot(&rm__tcp(&c)->conns[1], rq, nposted, &before);
    rm_status_t st = rm__tcp_transport.progress(&c, 0);
    CHECK(st == c.status || st == RM_ERR_SYSTEM);
    if (st != RM_OK) break;
    snapshot(&rm__tcp(&c)->conns[1], rq, nposted, &after);
    idle = memcmp(&before, &after, sizeof before) == 0 ? idle + 1 : 0;
    if (idle >= 4 && nposted == nrecv) break;
  }

  /* completed receives: a prefix, each with the bytes the stream has */
  int got = 0;
  while (got < nposted && rq[got].complete) got++;
  for (int i = got; i < nposted; i++) CHECK(!rq[i].complete);
  if (verbose)
    fprintf(stderr, "fuzz_frame: %d/%d receives complete, expected %d; status %s (%s), "
            "first bad frame %s\n", got, nrecv, e.done, rm_status_name(c.status), c.last_error,
            rm_status_name(e.bad));
  CHECK(got <= e.done);
  for (int i = 0; i < got; i++)
    CHECK(sp[i].len == 0 || memcmp(buf[i], stream + e.off[i], sp[i].len) == 0);
  CHECK((unsigned)c.status <= RM_ERR_JOB_ENDED);
  if (c.status != RM_OK) CHECK(memchr(c.last_error, '\0', sizeof c.last_error) && c.last_error[0]);
  if (peer2 != 2 && nposted == nrecv) {
    CHECK(got == e.done);
    if (e.bad == RM_ERR_PROTOCOL || e.bad == RM_ERR_STALE_GENERATION) CHECK(c.status == e.bad);
    if (e.bad == RM_ERR_ABORTED) CHECK(c.status != RM_OK);
    if (e.bad == RM_OK && no_eof) CHECK(c.status == RM_OK);
  }
out:
  if (rm__tcp(&c) != NULL) {
    c.destroying = 1;
    rm__tcp_transport.close_all(&c, c.status);
    CHECK(rm__tcp(&c) == NULL);
  }
  for (int i = 0; i < MAX_RECV; i++) free(buf[i]);
  if (s1[0] >= 0) close(s1[0]);
  if (s1[1] >= 0) close(s1[1]);
  if (s2[0] >= 0) close(s2[0]);
  if (s2[1] >= 0) close(s2[1]);
  close(c.wake_fd[0]);
  close(c.wake_fd[1]);
  return 0;
}
