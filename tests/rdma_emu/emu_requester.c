/*
 * emu_requester.c - TEST DOUBLE (see emu.h for the wire format and the
 * error semantics): the requester side of an RC QP, run by the context's
 * progress thread (emu_progress.c) under ctx->mu.
 *
 * RTR -> RTS opens the QP's request channel to the peer context's listener
 * (emu_out_start; a refused connect = peer gone), writes the hello, then
 * frames in posting order: 32-byte header + payload gathered from the
 * SGEs straight out of user memory (sendmsg, non-blocking, EMU_BUDGET per
 * turn). Acks come back on the same channel in frame order:
 *
 *   OK        the head WR completes (a CQE only when signaled; slots of
 *             unsignaled WRs are reclaimed at the next signaled CQE)
 *   RNR_WAIT  the responder waits for a receive: the ack timer pauses
 *   NAK_*     the head WR completes with the error, the QP goes to ERR
 *
 * Failures of the channel: EOF / reset / write error -> DEAD; a DEAD
 * channel with WRs outstanding fails the head WR with IBV_WC_RETRY_EXC_ERR
 * (at once); so does no progress (bytes written or acks read) for the ack
 * timeout while WRs are outstanding and no RNR wait is reported.
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "emu.h"

static int64_t ack_timeout_ns(const struct emu_qp *q)
{
  int64_t t;
  if (q->attr.timeout == 0)
    return INT64_MAX;
  t = (4096LL << q->attr.timeout) * (q->attr.retry_cnt + 1);
  return t < EMU_ACK_FLOOR_MS * 1000000LL ? EMU_ACK_FLOOR_MS * 1000000LL : t;
}

static void try_connect(struct emu_qp *q)
{
  struct sockaddr_un sa;
  uint32_t pid;
  uint16_t id;
  size_t alen;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  if (emu_gid_parse(&q->attr.ah_attr.grh.dgid, &pid, &id) != 0) {
    q->out.state = OUT_DEAD; /* not an emulator GID: nobody answers */
    return;
  }
  emu_sock_name(sa.sun_path, sizeof sa.sun_path, pid, id, &alen);
  if (connect(q->out.fd, (struct sockaddr *)&sa, (socklen_t)alen) == 0)
    q->out.state = OUT_UP;
  else if (errno != EAGAIN && errno != EINTR)
    q->out.state = OUT_DEAD; /* no such context (process gone) */
}

void emu_out_start(struct emu_qp *q)
{
  struct emu_out *o = &q->out;
  int sz = 4 << 20;
  if (o->fd >= 0)
    close(o->fd);
  memset(o, 0, sizeof *o);
  o->pidx = -1;
  o->hello.magic = EMU_HELLO_MAGIC;
  o->hello.src_qpn = q->qp.qp_num;
  o->hello.dst_qpn = q->attr.dest_qp_num;
  o->hello.rnr_retry = q->attr.rnr_retry;
  memcpy(o->hello.src_gid, q->ctx->gid.raw, 16);
  o->last_ns = emu_now_ns();
  o->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (o->fd < 0) {
    o->state = OUT_DEAD;
    return;
  }
  (void)setsockopt(o->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  o->state = OUT_CONNECTING;
  try_connect(q);
}

static void out_dead(struct emu_out *o, const char *why)
{
  emu_trace("request channel fd %d dead: %s", o->fd, why);
  if (o->fd >= 0)
    close(o->fd);
  o->fd = -1;
  o->pidx = -1;
  o->state = OUT_DEAD;
}

/* Write the hello, then frames from sq_sent; -1 on a socket error. */
static int out_write(struct emu_qp *q)
{
  struct emu_out *o = &q->out;
  size_t budget = EMU_BUDGET;
  ssize_t n;
  while (o->hello_done < sizeof o->hello) {
    n = send(o->fd, (char *)&o->hello + o->hello_done, sizeof o->hello - o->hello_done,
             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0)
      return emu_again() ? 0 : -1;
    o->hello_done += (size_t)n;
  }
  while (q->sq_sent != q->sq_tail && budget > 0) {
    struct emu_swr *w = &q->sq[q->sq_sent % q->cap.max_send_wr];
    struct emu_req h = {EMU_REQ_MAGIC, w->seq, w->op, {0}, w->len, w->raddr, w->rkey, w->imm};
    struct iovec iov[1 + EMU_MAX_SGE];
    struct msghdr mh;
    size_t skip = o->frame_done;
    int niov = 0;
    if (w->loc_err)
      return 0; /* fails once everything before it is acked */
    if (skip < sizeof h)
      iov[niov++] = (struct iovec){(char *)&h + skip, sizeof h - skip};
    skip = skip > sizeof h ? skip - sizeof h : 0;
    for (int i = 0; i < w->nsge; i++) {
      size_t l = w->sge[i].length;
      if (skip >= l) {
        skip -= l;
        continue;
      }
      iov[niov++] = (struct iovec){(char *)(uintptr_t)w->sge[i].addr + skip, l - skip};
      skip = 0;
    }
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)niov;
    n = sendmsg(o->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0)
      return emu_again() ? 0 : -1;
    o->frame_done += (size_t)n;
    o->last_ns = emu_now_ns();
    budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
    if (o->frame_done == sizeof h + w->len) {
      o->frame_done = 0;
      q->sq_sent++;
    }
  }
  return 0;
}

/* Read acks; a NAK moves the QP to ERR. */
static void out_read(struct emu_qp *q)
{
  struct emu_out *o = &q->out;
  for (;;) {
    struct emu_ack a;
    ssize_t n = recv(o->fd, o->ack + o->ack_got, sizeof o->ack - o->ack_got, MSG_DONTWAIT);
    if (n < 0 && emu_again())
      return;
    if (n <= 0) {
      out_dead(o, n == 0 ? "EOF" : strerror(errno)); /* the peer context is gone */
      return;
    }
    o->ack_got += (size_t)n;
    if (o->ack_got < sizeof a)
      continue;
    o->ack_got = 0;
    memcpy(&a, o->ack, sizeof a);
    o->last_ns = emu_now_ns();
    /* acks come in order for fully written frames; RNR_WAIT may come for
     * the head frame while its payload is still being written */
    if (q->sq_head == q->sq_tail || a.seq != q->sq[q->sq_head % q->cap.max_send_wr].seq ||
        (q->sq_head == q->sq_sent && a.kind != EMU_ACK_RNR_WAIT)) {
      out_dead(o, "ack out of order");
      return;
    }
    switch (a.kind) {
    case EMU_ACK_OK:
      o->rnr_wait = 0;
      emu_sq_complete_head(q);
      break;
    case EMU_ACK_RNR_WAIT: o->rnr_wait = 1; break;
    case EMU_NAK_ACCESS: emu_qp_to_err(q, IBV_WC_REM_ACCESS_ERR); return;
    case EMU_NAK_RNR: emu_qp_to_err(q, IBV_WC_RNR_RETRY_EXC_ERR); return;
    case EMU_NAK_INV: emu_qp_to_err(q, IBV_WC_REM_INV_REQ_ERR); return;
    default: emu_qp_to_err(q, IBV_WC_REM_OP_ERR); return;
    }
  }
}

void emu_out_service(struct emu_qp *q)
{
  struct emu_out *o = &q->out;
  int outstanding;
  if (q->qp.state != IBV_QPS_RTS)
    return;
  if (o->state == OUT_CONNECTING)
    try_connect(q);
  if (o->state == OUT_UP) {
    int werr = out_write(q);
    out_read(q);
    if (q->qp.state != IBV_QPS_RTS)
      return;
    if (werr && o->state == OUT_UP)
      out_dead(o, "write failed");
  }
  outstanding = q->sq_head != q->sq_tail;
  if (!outstanding)
    return;
  if (o->state == OUT_DEAD)
    emu_qp_to_err(q, IBV_WC_RETRY_EXC_ERR);
  else if (q->sq_head == q->sq_sent && q->sq[q->sq_head % q->cap.max_send_wr].loc_err)
    emu_qp_to_err(q, IBV_WC_LOC_PROT_ERR);
  else if (!o->rnr_wait && emu_now_ns() - o->last_ns > ack_timeout_ns(q)) {
    emu_trace("qp %#x: no progress for %lld ms (state %d, head %u sent %u tail %u, frame at %zu)",
              q->qp.qp_num, (long long)((emu_now_ns() - o->last_ns) / 1000000), o->state,
              q->sq_head, q->sq_sent, q->sq_tail, o->frame_done);
    emu_qp_to_err(q, IBV_WC_RETRY_EXC_ERR);
  }
}

