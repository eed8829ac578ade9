/*
 * emu_responder.c - TEST DOUBLE (see emu.h for the wire format and the
 * error semantics): the responder side of an RC QP and the connections not
 * yet attached to a QP, run by the progress thread (emu_progress.c) under
 * ctx->mu.
 *
 * Connection life: listener -> parked (hello read; waits while the target
 * QP is RESET/INIT) -> attached to the QP named by dst_qpn once it is
 * RTR/RTS and its dest_qp_num and dgid name the sender; else closed (the
 * sender's ack timer or EOF turns that into IBV_WC_RETRY_EXC_ERR).
 *
 * Per frame (emu_in.phase):
 *   HDR -> decide: bad op -> DRAIN(NAK_INV); WRITE* with len > 0 needs an
 *          MR of the QP's PD with REMOTE_WRITE covering [raddr, +len) and a
 *          QP with REMOTE_WRITE, else DRAIN(NAK_ACCESS); WRITE_IMM / SEND*
 *          need a receive: none -> RNR (ack RNR_WAIT, wait for post_recv up
 *          to the RNR budget, then DRAIN(NAK_RNR)); SEND* longer than the
 *          receive -> DRAIN(NAK_INV)
 *   PAYLOAD -> bytes go straight into the MR (WRITE*, the MR looked up
 *          again per chunk, so a deregistration midway is NAK_ACCESS) or
 *          the receive's SGEs (SEND*); at the end the receive completes,
 *          then ack OK
 *   DRAIN  -> payload discarded, then the NAK, then DISCARD (everything
 *          after a NAK is dropped until the requester, now in ERR, closes)
 * The requester gone (EOF, reset) closes the channel; the responder QP and
 * its posted receives stay as they are (hardware would not notice either).
 */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "emu.h"

/* IB min_rnr_timer encoding -> units of 10 us (0 = 655.36 ms) */
static const uint32_t rnr_10us[32] = {65536, 1,    2,    3,    4,     6,     8,     12,
                                      16,    24,   32,   48,   64,    96,    128,   192,
                                      256,   384,  512,  768,  1024,  1536,  2048,  3072,
                                      4096,  6144, 8192, 12288, 16384, 24576, 32768, 49152};

static int64_t rnr_budget_ns(const struct emu_qp *q)
{
  if (q->in.peer_rnr_retry >= 7)
    return INT64_MAX;
  return (int64_t)rnr_10us[q->attr.min_rnr_timer & 31] * 10000 * q->in.peer_rnr_retry;
}

static void in_ack(struct emu_in *in, uint8_t kind)
{
  struct emu_ack a = {in->req.seq, kind, {0}};
  memcpy(in->obuf + in->olen, &a, sizeof a);
  in->olen += sizeof a;
}

static int in_flush(struct emu_in *in)
{
  while (in->olen > 0) {
    ssize_t n = send(in->fd, in->obuf, in->olen, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0)
      return emu_again() ? 0 : -1;
    memmove(in->obuf, in->obuf + n, in->olen - (size_t)n);
    in->olen -= (size_t)n;
  }
  return 0;
}

static void in_drain(struct emu_in *in, uint8_t verdict)
{
  emu_trace("frame %u (op %u, %u B, rkey %#x): NAK %u", in->req.seq, in->req.op, in->req.len,
            in->req.rkey, verdict);
  in->verdict = verdict;
  in->phase = IN_DRAIN;
}

static void push_recv(struct emu_qp *q, enum ibv_wc_status st)
{
  struct emu_rwr *rw = &q->rq[q->rq_head % q->cap.max_recv_wr];
  struct emu_req *r = &q->in.req;
  struct ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.wr_id = rw->wr_id;
  wc.status = st;
  wc.opcode = r->op == EMU_OP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
  wc.byte_len = r->len;
  if (st == IBV_WC_SUCCESS && (r->op == EMU_OP_WRITE_IMM || r->op == EMU_OP_SEND_IMM)) {
    wc.imm_data = r->imm;
    wc.wc_flags = IBV_WC_WITH_IMM;
  }
  wc.qp_num = q->qp.qp_num;
  wc.src_qp = q->attr.dest_qp_num;
  emu_cq_push(q->qp.recv_cq, &wc);
  q->rq_head++;
}

/* A frame header is complete (or an RNR wait re-checks): pick the phase. */
static void decide(struct emu_qp *q)
{
  struct emu_in *in = &q->in;
  struct emu_req *r = &in->req;
  struct emu_rwr *rw;
  in->verdict = EMU_ACK_OK;
  if (r->op == EMU_OP_WRITE || r->op == EMU_OP_WRITE_IMM) {
    struct emu_mr *m = emu_mr_find(q->ctx, r->rkey);
    if (r->len > 0 && (!m || m->mr.pd != q->qp.pd || !(m->access & IBV_ACCESS_REMOTE_WRITE) ||
                       !(q->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) ||
                       !emu_mr_covers(m, r->raddr, r->len))) {
      in_drain(in, EMU_NAK_ACCESS);
      return;
    }
    if (r->op == EMU_OP_WRITE) {
      in->phase = IN_PAYLOAD;
      return;
    }
  } else if (r->op != EMU_OP_SEND && r->op != EMU_OP_SEND_IMM) {
    in_drain(in, EMU_NAK_INV);
    return;
  }
  if (q->rq_head == q->rq_tail) { /* receiver not ready */
    int64_t budget = rnr_budget_ns(q);
    if (budget == 0) {
      in_drain(in, EMU_NAK_RNR);
    } else if (in->phase != IN_RNR) {
      in->rnr_since = emu_now_ns();
      in->phase = IN_RNR;
      in_ack(in, EMU_ACK_RNR_WAIT);
    } else if (emu_now_ns() - in->rnr_since >= budget) {
      in_drain(in, EMU_NAK_RNR);
    }
    return;
  }
  rw = &q->rq[q->rq_head % q->cap.max_recv_wr];
  if (r->op != EMU_OP_WRITE_IMM && r->len > rw->len) {
    push_recv(q, IBV_WC_LOC_LEN_ERR);
    in_drain(in, EMU_NAK_INV);
  } else if (r->op != EMU_OP_WRITE_IMM && rw->loc_err) {
    push_recv(q, IBV_WC_LOC_PROT_ERR);
    in_drain(in, EMU_NAK_REMOP);
  } else {
    in->phase = IN_PAYLOAD;
  }
}

/* Where the next payload byte goes: *dst, at most *room bytes; NULL when
 * the target MR vanished meanwhile. */
static char *payload_dst(struct emu_qp *q, size_t *room)
{
  struct emu_req *r = &q->in.req;
  uint64_t done = q->in.done;
  if (r->op == EMU_OP_WRITE || r->op == EMU_OP_WRITE_IMM) {
    struct emu_mr *m = emu_mr_find(q->ctx, r->rkey);
    if (!m || !emu_mr_covers(m, r->raddr, r->len))
      return NULL;
    *room = r->len - done;
    return (char *)m->mr.addr + (r->raddr - m->iova) + done;
  }
  {
    struct emu_rwr *rw = &q->rq[q->rq_head % q->cap.max_recv_wr];
    for (int i = 0; i < rw->nsge; i++) {
      if (done < rw->sge[i].length) {
        *room = rw->sge[i].length - done;
        return (char *)(uintptr_t)rw->sge[i].addr + done;
      }
      done -= rw->sge[i].length;
    }
  }
  return NULL;
}

/* 1 to go on, 0 when the socket has nothing now, -1 when it is gone */
static int in_step(struct emu_qp *q, size_t *budget, short rev)
{
  char *scratch = q->ctx->scratch;
  struct emu_in *in = &q->in;
  size_t want, room = 0;
  char *dst;
  ssize_t n;
  switch (in->phase) {
  case IN_HDR:
    n = recv(in->fd, (char *)&in->req + in->req_got, sizeof in->req - in->req_got, MSG_DONTWAIT);
    if (n <= 0)
      return (n < 0 && emu_again()) ? 0 : -1;
    in->req_got += (size_t)n;
    if (in->req_got < sizeof in->req)
      return 1;
    in->req_got = 0;
    in->done = 0;
    if (in->req.magic != EMU_REQ_MAGIC)
      return -1;
    decide(q);
    return 1;
  case IN_RNR:
    if (rev & (POLLHUP | POLLERR))
      return -1;
    decide(q);
    return in->phase != IN_RNR;
  case IN_PAYLOAD:
    if (in->done == in->req.len) {
      if (in->req.op != EMU_OP_WRITE)
        push_recv(q, IBV_WC_SUCCESS);
      in_ack(in, EMU_ACK_OK);
      in->phase = IN_HDR;
      return 1;
    }
    dst = payload_dst(q, &room);
    if (!dst) {
      in_drain(in, EMU_NAK_ACCESS);
      return 1;
    }
    want = room < *budget ? room : *budget;
    break;
  case IN_DRAIN:
    if (in->done == in->req.len) {
      in_ack(in, in->verdict);
      in->phase = IN_DISCARD;
      return 1;
    }
    dst = scratch;
    want = in->req.len - in->done;
    break;
  default: /* IN_DISCARD */
    dst = scratch;
    want = sizeof q->ctx->scratch;
    break;
  }
  if (dst == scratch && want > sizeof q->ctx->scratch)
    want = sizeof q->ctx->scratch;
  n = recv(in->fd, dst, want, MSG_DONTWAIT);
  if (n <= 0)
    return (n < 0 && emu_again()) ? 0 : -1;
  if (in->phase != IN_DISCARD)
    in->done += (uint64_t)n;
  *budget = (size_t)n >= *budget ? 0 : *budget - (size_t)n;
  return 1;
}

void emu_in_service(struct emu_qp *q, short rev)
{
  struct emu_in *in = &q->in;
  size_t budget = EMU_BUDGET;
  int rc = 1;
  if (in->fd < 0 || (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS))
    return;
  /* past the budget only to finish a frame whose bytes are all in: no
   * poll event would come for that */
  while (rc > 0 && in->olen + 2 * sizeof(struct emu_ack) <= sizeof in->obuf &&
         (budget > 0 || ((in->phase == IN_PAYLOAD || in->phase == IN_DRAIN) &&
                         in->done == in->req.len)))
    rc = in_step(q, &budget, rev);
  if (rc < 0 || in_flush(in) < 0) { /* the requester is gone */
    close(in->fd);
    memset(in, 0, sizeof *in);
    in->fd = in->pidx = -1;
  }
}

/* ---- connections being set up ---- */

static void pend_drop(struct emu_ctx *c, int i, int close_fd)
{
  if (close_fd)
    close(c->pend[i].fd);
  c->pend[i] = c->pend[--c->npend];
}

static struct emu_qp *qp_by_num(struct emu_ctx *c, uint32_t qpn)
{
  for (struct emu_qp *q = c->qps; q; q = q->next)
    if (q->qp.qp_num == qpn)
      return q;
  return NULL;
}

void emu_pend_service(struct emu_ctx *c, const struct pollfd *pfd)
{
  for (int fd; (fd = accept4(c->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
    if (c->npend == EMU_MAX_PEND) {
      close(fd);
      continue;
    }
    memset(&c->pend[c->npend], 0, sizeof c->pend[0]);
    c->pend[c->npend].fd = fd;
    c->pend[c->npend++].pidx = -1;
  }
  for (int i = c->npend - 1; i >= 0; i--) {
    struct emu_pend *p = &c->pend[i];
    short rev = p->pidx >= 0 ? pfd[p->pidx].revents : 0;
    struct emu_qp *q;
    if (p->got < sizeof p->h) {
      ssize_t n = recv(p->fd, (char *)&p->h + p->got, sizeof p->h - p->got, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && !emu_again())) {
        pend_drop(c, i, 1);
        continue;
      }
      if (n > 0)
        p->got += (size_t)n;
      if (p->got < sizeof p->h)
        continue;
      rev = 0; /* the hello just completed: decide now */
    }
    q = qp_by_num(c, p->h.dst_qpn);
    if (p->h.magic != EMU_HELLO_MAGIC || !q || q->qp.state == IBV_QPS_ERR ||
        (rev & (POLLHUP | POLLERR))) {
      pend_drop(c, i, 1);
      continue;
    }
    if (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS)
      continue; /* parked until the QP reaches RTR */
    if (p->h.src_qpn != q->attr.dest_qp_num ||
        memcmp(p->h.src_gid, q->attr.ah_attr.grh.dgid.raw, 16) != 0) {
      emu_trace("qp %#x: hello from qp %#x refused (not its peer)", q->qp.qp_num, p->h.src_qpn);
      pend_drop(c, i, 1); /* not the peer this QP was connected to */
      continue;
    }
    if (q->in.fd >= 0)
      close(q->in.fd); /* the peer reconnected (its QP was reset) */
    memset(&q->in, 0, sizeof q->in);
    q->in.fd = p->fd;
    q->in.pidx = -1;
    q->in.peer_rnr_retry = p->h.rnr_retry;
    emu_trace("qp %#x: peer qp %#x attached (fd %d)", q->qp.qp_num, p->h.src_qpn, p->fd);
    pend_drop(c, i, 0);
  }
}

