/*
 * rdma_progress.c - the RDMA transport's progress engine and ops table.
 * Wire formats, the CTS/credit scheme and invariants: rdma_int.h.
 *
 * One progress call, repeated until something moved or timeout_ms passed:
 *   1. poll the CQ (batches of 32): receive completions carry an immediate
 *      (CTS arrived in slot s / DATA for the receive announced in slot s;
 *      the receive WR is reposted at once), send completions retire CTS
 *      writes and payload chunks in posting order (invariant 2);
 *   2. pump every connection: a CTS for each posted receive while credits
 *      last (registering its buffer), payload writes for each send whose
 *      CTS arrived, while the send queue has room;
 *   3. something moved: return (the caller re-checks its request);
 *   4. otherwise poll() the control sockets and c->wake_fd: BYE, ABORT
 *      (adopted), WAIT (noted for waits_on), end of stream without BYE
 *      (RM_ERR_PEER_LOST naming the peer); wake returns at once, and so
 *      does the poll bell of a mixed communicator (transport.c).
 * Waiting: the emulator (and a provider without completion channels) has
 * no fd to sleep on, so an idle call first spins RINGMASTER_RDMA_SPIN_US
 * (auto: 50 us unless the host is oversubscribed) polling the CQ, then
 * sleeps in ppoll() on the control sockets + wake pipe in slices of 16 us
 * doubling up to 1 ms, polling the CQ between slices. Trade-off: a
 * completion that lands while a rank sleeps waits up to the current slice
 * (so a reply within ~100 us costs little, one after a long idle wait up
 * to 1 ms), and an idle rank costs about 1000 wake-ups a second (a real
 * NIC would want a completion channel instead: not done).
 *
 * Control channels (frames, end of stream, WAIT bookkeeping): rdma_ctl.c.
 *
 * Completion errors (invariant 4): IBV_WC_RETRY_EXC_ERR and
 * RNR_RETRY_EXC_ERR map to RM_ERR_PEER_LOST, REM_ACCESS / REM_INV_REQ /
 * REM_OP and LOC_* to RM_ERR_PROTOCOL, WR_FLUSH_ERR (a QP already broken)
 * to RM_ERR_PEER_LOST unless an error of another kind came with or before
 * it (the first error wins, the flushes that follow it are its echo). The
 * verdict waits RM__RDMA_GRACE_MS for a control frame naming the root cause.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "device/gpu.h"
#include "rm_clock.h"
#include "rm_le.h"
#include "rm_log.h"
#include "rm_param.h"
#include "rm_transports.h"
#include "transport/rdma/rdma_int.h"

RM_PARAM(rdma_spin_us, "RINGMASTER_RDMA_SPIN_US", -1)

#define SLICE_MIN_US 16   /* first sleep slice of an idle call */
#define SLICE_MAX_US 1000 /* doubled up to this */
#define BATCH 32

rm_status_t rm__rdma_conn_fail(rm_comm_t *c, int peer, rm_status_t st, const char *fmt, ...)
{
  va_list ap;
  rm_status_t r;
  va_start(ap, fmt);
  r = rm__transport_conn_failv(c, peer, st, "rdma", fmt, ap);
  va_end(ap);
  return r;
}

static uint64_t wr_id(int peer, int kind, uint32_t bytes)
{
  return ((uint64_t)peer << 40) | ((uint64_t)kind << 32) | bytes;
}

static uint32_t imm_make(int type, uint32_t slot, uint64_t seq)
{
  return ((uint32_t)type << 30) | ((slot & 0x3fff) << 16) | (uint32_t)(seq & 0xffff);
}


static void pop(rm_comm_t *c, rm__req_t **head, rm__req_t **tail)
{
  rm__req_t *r = *head;
  *head = r->next;
  if (*head == NULL) *tail = NULL;
  r->next = NULL;
  rm__mr_release(c, rm__rdma_req(r)->mr);
  rm__rdma_req(r)->mr = NULL;
  r->done = r->len;
  r->complete = 1;
}

static int post_write(rm__rdma_conn_t *k, uint64_t id, void *addr, uint32_t len,
                      uint32_t lkey, uint64_t raddr, uint32_t rkey, int imm, uint32_t immv)
{
  struct ibv_sge sge = {(uintptr_t)addr, len, lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = id;
  wr.sg_list = len ? &sge : NULL;
  wr.num_sge = len ? 1 : 0;
  wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(immv);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return rm__ibv_post_send(k->qp, &wr, &bad);
}

/* ---- pump: CTSs for receives, payload for sends ---- */

static rm_status_t pump_recvs(rm_comm_t *c, struct rm__rdma_state *s, rm__rdma_conn_t *k,
                              int *moved)
{
  for (rm__req_t *r = k->rq_head; r; r = r->next) {
    rm__rdma_req_t *q = rm__rdma_req(r);
    unsigned char *rec;
    uint32_t slot;
    int e;
    rm_status_t st;
    if (q->stage) continue;
    if (k->cts_sent - k->data_in >= k->rslots || k->sq_inflight >= RM__RDMA_SQ) break;
    if (r->len > 0 && (q->mr = rm__rdma_reg(c, r->buf, r->len, 1, &st)) == NULL)
      return rm__rdma_conn_fail(c, k->peer, st, "cannot register a %zu-byte receive "
                       "buffer: %s", r->len, strerror(errno));
    slot = (uint32_t)(k->cts_sent % k->rslots);
    rec = k->cts_out + (size_t)slot * RM__RDMA_REC;
    rm__put_le32(rec, RM__RDMA_CTS_MAGIC);
    rm__put_le32(rec + 4, slot);
    rm__put_le64(rec + 8, r->seq);
    rm__put_le64(rec + 16, r->tag);
    rm__put_le64(rec + 24, r->len);
    rm__put_le64(rec + 32, (uint64_t)(uintptr_t)r->buf);
    rm__put_le32(rec + 40, q->mr ? rm__rdma_ibv_mr(q->mr)->rkey : 0);
    e = post_write(k, wr_id(k->peer, RM__WR_CTS, 48), rec, 48, s->ctl_mr->lkey,
                   k->rring + (uint64_t)slot * RM__RDMA_REC, k->rring_rkey, 1,
                   imm_make(RM__IMM_CTS, slot, r->seq));
    if (e != 0)
      return rm__rdma_conn_fail(c, k->peer, RM_ERR_SYSTEM, "posting a clear-to-send failed: %s",
                       strerror(e));
    q->slot = slot;
    q->stage = 1;
    k->sq_inflight++;
    k->cts_sent++;
    r->ctl_moved += 48;
    *moved = 1;
  }
  return RM_OK;
}

/* Match the next CTS to send r: (seq, tag, len) must be what r carries. */
static rm_status_t take_cts(rm_comm_t *c, struct rm__rdma_state *s, rm__rdma_conn_t *k,
                            rm__req_t *r)
{
  rm__rdma_req_t *q = rm__rdma_req(r);
  rm_status_t st;
  uint32_t slot = (uint32_t)(k->cts_used % RM__RDMA_SLOTS);
  const unsigned char *rec = k->ring + (size_t)slot * RM__RDMA_REC;
  uint64_t seq = rm__get_le64(rec + 8), tag = rm__get_le64(rec + 16);
  uint64_t len = rm__get_le64(rec + 24);
  if (rm__get_le32(rec) != RM__RDMA_CTS_MAGIC || rm__get_le32(rec + 4) != slot)
    return rm__rdma_conn_fail(c, k->peer, RM_ERR_PROTOCOL, "bad clear-to-send record in slot %u",
                     slot);
  if (seq != r->seq || tag != r->tag || len != r->len)
    return rm__rdma_conn_fail(c, k->peer, RM_ERR_PROTOCOL,
                     "its posted receive (collective %llu, tag %llu, %llu bytes) does "
                     "not match the message (collective %llu, tag %llu, %zu bytes)",
                     (unsigned long long)seq, (unsigned long long)tag,
                     (unsigned long long)len, (unsigned long long)r->seq,
                     (unsigned long long)r->tag, r->len);
  q->raddr = rm__get_le64(rec + 32);
  q->rkey = rm__get_le32(rec + 40);
  q->slot = slot;
  if (r->len > 0 && (q->mr = rm__rdma_reg(c, r->buf, r->len, 0, &st)) == NULL)
    return rm__rdma_conn_fail(c, k->peer, st, "cannot register a %zu-byte send "
                     "buffer: %s", r->len, strerror(errno));
  k->cts_used++;
  q->stage = 1;
  r->ctl_moved += 48;
  return RM_OK;
}

static rm_status_t pump_sends(rm_comm_t *c, struct rm__rdma_state *s, rm__rdma_conn_t *k,
                              int *moved)
{
  rm_status_t st;
  for (rm__req_t *r = k->sq_head; r; r = r->next) {
    rm__rdma_req_t *q = rm__rdma_req(r);
    if (q->stage == 2) continue;
    if (q->stage == 0) {
      if (k->cts_used >= k->cts_in) return RM_OK;
      if ((st = take_cts(c, s, k, r)) != RM_OK) return st;
      *moved = 1;
    }
    while (q->stage == 1 && k->sq_inflight < RM__RDMA_SQ) {
      size_t n = r->len - q->posted;
      int last, e;
      if (n > RM__RDMA_CHUNK) n = RM__RDMA_CHUNK;
      last = q->posted + n == r->len;
      e = post_write(k, wr_id(k->peer, last ? RM__WR_LAST : RM__WR_DATA, (uint32_t)n),
                     (char *)r->buf + q->posted, (uint32_t)n, q->mr ? rm__rdma_ibv_mr(q->mr)->lkey : 0,
                     q->raddr + q->posted, q->rkey, last,
                     imm_make(RM__IMM_DATA, q->slot, r->seq));
      if (e != 0)
        return rm__rdma_conn_fail(c, k->peer, RM_ERR_SYSTEM, "posting an RDMA write failed: %s",
                         strerror(e));
      k->sq_inflight++;
      q->posted += n;
      if (last) q->stage = 2;
      *moved = 1;
    }
    if (q->stage != 2) return RM_OK;
  }
  return RM_OK;
}

/* ---- completions ---- */

static rm_status_t wc_status(enum ibv_wc_status w)
{
  switch (w) {
  case IBV_WC_RETRY_EXC_ERR:
  case IBV_WC_RNR_RETRY_EXC_ERR:
  case IBV_WC_WR_FLUSH_ERR: return RM_ERR_PEER_LOST;
  default: return RM_ERR_PROTOCOL;
  }
}

/* Keep the first error (a flush only until a real one comes); the verdict
 * waits for the control channels (invariant 4). */
static void note_wc_error(rm_comm_t *c, struct rm__rdma_state *s, int peer,
                          const struct ibv_wc *wc)
{
  rm__rdma_conn_t *k = &s->conns[peer];
  int flush = wc->status == IBV_WC_WR_FLUSH_ERR;
  if ((k->bye || k->rd_eof) && !rm__rdma_pending(k)) return; /* it left cleanly */
  if (s->err_peer >= 0 && (flush || !s->err_flush)) return;
  s->err_peer = peer;
  s->err_flush = flush;
  s->err_st = wc_status(wc->status);
  if (s->err_ns == 0) s->err_ns = rm__now_ns();
  snprintf(s->err_msg, sizeof s->err_msg, "work completion %s (%d) on its queue pair%s",
           rm__ibv_wc_status_str(wc->status), (int)wc->status,
           wc->status == IBV_WC_RETRY_EXC_ERR ? ": the peer does not answer" : "");
}

static rm_status_t on_recv(rm_comm_t *c, rm__rdma_conn_t *k, const struct ibv_wc *wc)
{
  uint32_t imm = ntohl(wc->imm_data), type = imm >> 30, slot = (imm >> 16) & 0x3fff;
  int e = rm__rdma_post_recv(k);
  if (e != 0)
    return rm__rdma_conn_fail(c, k->peer, RM_ERR_SYSTEM, "reposting a receive failed: %s", strerror(e));
  if (!(wc->wc_flags & IBV_WC_WITH_IMM)) type = 0;
  if (type == RM__IMM_CTS) {
    if (slot != k->cts_in % RM__RDMA_SLOTS)
      return rm__rdma_conn_fail(c, k->peer, RM_ERR_PROTOCOL, "clear-to-send in slot %u, expected %u",
                       slot, (unsigned)(k->cts_in % RM__RDMA_SLOTS));
    k->cts_in++;
    return RM_OK;
  }
  if (type == RM__IMM_DATA) {
    rm__req_t *r = k->rq_head;
    if (r == NULL || rm__rdma_req(r)->stage != 1 || rm__rdma_req(r)->slot != slot ||
        (imm & 0xffff) != (uint32_t)(r->seq & 0xffff))
      return rm__rdma_conn_fail(c, k->peer, RM_ERR_PROTOCOL, "payload for slot %u that no "
                       "announced receive expects", slot);
    k->data_in++;
    pop(c, &k->rq_head, &k->rq_tail);
    return RM_OK;
  }
  return rm__rdma_conn_fail(c, k->peer, RM_ERR_PROTOCOL, "unexpected completion (opcode %d, "
                   "immediate 0x%08x)", (int)wc->opcode, imm);
}

static void on_send(rm_comm_t *c, rm__rdma_conn_t *k, int kind, uint32_t bytes)
{
  rm__req_t *r = k->sq_head;
  k->sq_inflight--;
  if (kind == RM__WR_CTS || r == NULL) return;
  r->done += bytes;
  if (kind == RM__WR_LAST) pop(c, &k->sq_head, &k->sq_tail);
}

static rm_status_t poll_cq(rm_comm_t *c, struct rm__rdma_state *s, int *moved)
{
  struct ibv_wc wc[BATCH];
  for (;;) {
    int n = rm__ibv_poll_cq(s->cq, BATCH, wc);
    if (n < 0) return rm__comm_fail(c, RM_ERR_SYSTEM, -1, "rdma: polling the CQ failed");
    for (int i = 0; i < n; i++) {
      int peer = (int)(wc[i].wr_id >> 40), kind = (int)((wc[i].wr_id >> 32) & 0xff);
      rm__rdma_conn_t *k;
      rm_status_t st;
      if (peer < 0 || peer >= c->world || !s->conns[peer].active) continue;
      k = &s->conns[peer];
      *moved = 1;
      if (wc[i].status != IBV_WC_SUCCESS) {
        if (kind != RM__WR_RECV) k->sq_inflight--;
        note_wc_error(c, s, peer, &wc[i]);
        continue;
      }
      if (kind == RM__WR_RECV) {
        if ((st = on_recv(c, k, &wc[i])) != RM_OK) return st;
      } else {
        on_send(c, k, kind, (uint32_t)(wc[i].wr_id & 0xffffffffu));
      }
    }
    if (n < BATCH) return RM_OK;
  }
}

/* ---- ops ---- */

static int rdma_can_connect(const rm_comm_t *c, int peer)
{
  int lo = peer < c->rank ? peer : c->rank, hi = peer < c->rank ? c->rank : peer;
  const char *t = rm_tp_pick(c->offers[lo], c->offers[hi]);
  return t != NULL && strcmp(t, "rdma") == 0 && rm__rdma_listen_fd(c) >= 0;
}

static rm_status_t rdma_post(rm_comm_t *c, rm__req_t *req)
{
  struct rm__rdma_state *s = rm__rdma(c);
  rm__rdma_conn_t *k = &s->conns[req->peer];
  if (s->closed || !k->ready || k->bye || k->rd_eof)
    return rm__rdma_conn_fail(c, req->peer, RM_ERR_PEER_LOST, "peer closed its communicator; "
                     "cannot %s", req->kind == RM__REQ_SEND ? "send" : "receive");
  if (req->kind == RM__REQ_SEND) {
    rm__req_fifo_push(&k->sq_head, &k->sq_tail, req);
  } else {
    rm__req_fifo_push(&k->rq_head, &k->rq_tail, req);
  }
  return RM_OK;
}

/* The peer left (BYE) with requests of ours pending: is every one a send
 * whose payload is all written, waiting for its completion only? Then the
 * peer took it (a receive's completion comes before the write's ack, so
 * the peer finished after this data landed) and the completion is due: it
 * may come late from a starved progress thread (the emulator's, on a busy
 * host), or end in an error (retries exhausted), never in nothing. Any
 * other request pending RM__RDMA_GRACE_MS after the BYE is a failure. */
static int acks_due(rm__rdma_conn_t *k)
{
  if (k->rq_head) return 0;
  for (rm__req_t *r = k->sq_head; r; r = r->next)
    if (rm__rdma_req(r)->stage != 2) return 0;
  return 1;
}

static rm_status_t pass(rm_comm_t *c, struct rm__rdma_state *s, int *moved)
{
  rm_status_t st = poll_cq(c, s, moved);
  for (int p = 0; st == RM_OK && p < c->world; p++) {
    rm__rdma_conn_t *k = &s->conns[p];
    if (!k->active || s->err_peer >= 0) continue;
    if (k->left_ns && rm__rdma_pending(k) && !acks_due(k) &&
        rm__now_ns() - k->left_ns >= (int64_t)RM__RDMA_GRACE_MS * 1000000LL)
      return rm__rdma_conn_fail(c, p, RM_ERR_PEER_LOST,
                       "peer closed its communicator with a request pending");
    if (k->rq_head && (st = pump_recvs(c, s, k, moved)) != RM_OK) break;
    if (k->sq_head && (st = pump_sends(c, s, k, moved)) != RM_OK) break;
    if (k->olen) (void)rm__rdma_ctl_flush(k);
  }
  return st != RM_OK ? st : rm_comm_status(c);
}

static rm_status_t rdma_progress(rm_comm_t *c, int timeout_ms)
{
  struct rm__rdma_state *s = rm__rdma(c);
  int64_t start = rm__now_ns(), end = start + (int64_t)timeout_ms * 1000000LL;
  int64_t spin_end;
  int64_t slice_us = SLICE_MIN_US;
  int first = 1;
  if (s == NULL || s->closed) return rm_comm_status(c);
  spin_end = start + (int64_t)s->spin_us * 1000;
  for (;;) {
    int64_t now, us;
    int moved = 0;
    rm_status_t st = pass(c, s, &moved);
    if (st != RM_OK) return st;
    if (moved && s->err_peer < 0) return RM_OK;
    now = rm__now_ns();
    if (!first && now < spin_end && now < end && s->err_peer < 0) continue;
    /* sleep slices grow while nothing moves: short waits stay short, a
     * long idle wait costs about 1000 wake-ups a second */
    us = first ? 0 : (end - now + 999) / 1000;
    if (us > slice_us) us = slice_us;
    if (us < 0) us = 0;
    if (!first && slice_us < SLICE_MAX_US) slice_us *= 2;
    if ((st = rm__rdma_ctl_poll(c, s, us)) != RM_OK) return st;
    /* mixed communicator: another transport's arrival (its poll bell) */
    if (c->bell_rang && s->err_peer < 0) return RM_OK;
    if (s->err_peer >= 0 && rm__now_ns() - s->err_ns >= (int64_t)RM__RDMA_GRACE_MS * 1000000LL)
      return rm__rdma_conn_fail(c, s->err_peer, s->err_st, "%s", s->err_msg);
    if (!first && rm__now_ns() >= end) return RM_OK;
    first = 0;
  }
}

static void forget(rm_comm_t *c, rm__req_t **head, rm__req_t **tail)
{
  for (rm__req_t *r = *head; r; r = r->next) {
    rm__mr_release(c, rm__rdma_req(r)->mr);
    rm__rdma_req(r)->mr = NULL;
  }
  *head = *tail = NULL;
}

static void rdma_close_all(rm_comm_t *c, rm_status_t reason)
{
  struct rm__rdma_state *s = rm__rdma(c);
  if (s == NULL) return;
  for (int p = 0; s->conns != NULL && p < c->world; p++) {
    rm__rdma_conn_t *k = &s->conns[p];
    /* requests may be freed by their owners once we return: forget them */
    forget(c, &k->sq_head, &k->sq_tail);
    forget(c, &k->rq_head, &k->rq_tail);
    if (s->closed || !k->active) continue;
    if (k->fd >= 0) {
      if (reason == RM_OK) rm__rdma_ctl_send(c, k, RM__RC_BYE, 0, 0);
      else rm__rdma_ctl_send(c, k, RM__RC_ABORT, (uint64_t)reason,
                             (uint64_t)(c->failed_peer + 1));
      shutdown(k->fd, SHUT_WR);
    }
    rm__rdma_qp_err(k); /* invariant 3: no peer writes into our buffers now */
  }
  s->closed = 1;
  if (c->destroying) rm__rdma_state_free(c);
}

static rm_status_t rdma_connect_all(rm_comm_t *c)
{
  rm_status_t st = rm__rdma_connect_all(c);
  struct rm__rdma_state *s = rm__rdma(c);
  if (st == RM_OK && s != NULL) {
    int64_t spin = rm__param_rdma_spin_us();
    if (spin < 0) spin = rm__transport_oversubscribed(c) ? 0 : 50;
    s->spin_us = (int)spin;
  }
  return st;
}

/* GPUDirect RDMA (transport.h dev_direct): the NIC reaches device memory
 * when nvidia-peermem is loaded (device/gpu.c decides, once). */
static int rdma_dev_direct(const rm_comm_t *c, int peer)
{
  (void)c;
  (void)peer;
  return rm__gpu_gdr();
}

const rm__transport_ops_t rm__rdma_transport = {
    .name = "rdma",
    .id = RM__TP_RDMA,
    .available = rm__rdma_available,
    .can_connect = rdma_can_connect,
    .connect_all = rdma_connect_all,
    .post = rdma_post,
    .progress = rdma_progress,
    .close_all = rdma_close_all,
    .stalled = rm__rdma_stalled,
    .waits_on = rm__rdma_waits_on,
    .left = rm__rdma_left,
    .wake = NULL,
    .offer = rm__rdma_offer,
    .offer_close = rm__rdma_offer_close,
    .reg_mr = rm__rdma_reg_mr,
    .dereg_mr = rm__rdma_dereg_mr,
    .dev_direct = rdma_dev_direct,
};
