/*
 * emu_qp.c - TEST DOUBLE (see emu.h): RC queue pairs of librm_verbs_emu.so:
 * create / modify / query / destroy, and the post verbs.
 *
 * State machine (ibv_modify_qp; masks as the kernel's ib_modify_qp_is_ok,
 * IBV_QP_STATE always allowed; anything else in the mask -> EINVAL):
 *
 *   from   to    required                                  optional
 *   RESET  INIT  PKEY_INDEX PORT ACCESS_FLAGS              -
 *   INIT   INIT  -                                         PKEY_INDEX PORT ACCESS_FLAGS
 *   INIT   RTR   AV PATH_MTU DEST_QPN RQ_PSN               ACCESS_FLAGS PKEY_INDEX
 *                MAX_DEST_RD_ATOMIC MIN_RNR_TIMER
 *   RTR    RTS   SQ_PSN TIMEOUT RETRY_CNT RNR_RETRY        CUR_STATE ACCESS_FLAGS
 *                MAX_QP_RD_ATOMIC                          MIN_RNR_TIMER PATH_MIG_STATE
 *   RTS    RTS   -                                         same as RTR -> RTS
 *   any    RESET -  (WRs dropped without completions, connections closed)
 *   any    ERR   -  (WRs flushed: emu_qp_to_err)
 *
 * Transition -> effect: -> RTR lets the progress thread attach the peer's
 * connection (it was parked until now); RTR -> RTS starts this QP's own
 * connection (emu_out_start). Alternate paths are not emulated (EINVAL).
 *
 * Posting: post_send is legal in RTS (queued) and ERR (flushed at once),
 * EINVAL before; post_recv from INIT on. lkeys are checked at post time
 * (a bad one completes later with IBV_WC_LOC_PROT_ERR, as hardware would);
 * the SGE addresses are translated to host pointers then. Neither verb
 * blocks beyond ctx->mu.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"

#define M(x) IBV_QP_##x

static uint32_t next_qpn = 0x100; /* atomic; 24-bit QP numbers */

uint32_t emu_ibv_len(const struct ibv_sge *sge, int n)
{
  uint64_t t = 0;
  for (int i = 0; i < n; i++)
    t += sge[i].length;
  return t > EMU_MAX_MSG ? UINT32_MAX : (uint32_t)t;
}

EMU_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
  struct emu_ctx *c = EMU_CTX(pd->context);
  struct ibv_qp_cap *cap = &ia->cap;
  struct emu_qp *q;
  size_t ssge, rsge;
  if (ia->qp_type != IBV_QPT_RC || ia->srq) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  if (!ia->send_cq || !ia->recv_cq || ia->send_cq->context != pd->context ||
      ia->recv_cq->context != pd->context || cap->max_send_wr < 1 ||
      cap->max_send_wr > EMU_MAX_WR || cap->max_recv_wr > EMU_MAX_WR ||
      cap->max_send_sge > EMU_MAX_SGE || cap->max_recv_sge > EMU_MAX_SGE ||
      cap->max_inline_data > EMU_MAX_INLINE) {
    errno = EINVAL;
    return NULL;
  }
  ssge = cap->max_send_sge ? cap->max_send_sge : 1;
  rsge = cap->max_recv_sge ? cap->max_recv_sge : 1;
  q = calloc(1, sizeof *q);
  if (!q)
    goto nomem;
  q->sq = calloc(cap->max_send_wr, sizeof *q->sq);
  q->sq_sge = calloc(cap->max_send_wr * ssge, sizeof *q->sq_sge);
  q->rq = calloc(cap->max_recv_wr ? cap->max_recv_wr : 1, sizeof *q->rq);
  q->rq_sge = calloc((cap->max_recv_wr ? cap->max_recv_wr : 1) * rsge, sizeof *q->rq_sge);
  if (!q->sq || !q->sq_sge || !q->rq || !q->rq_sge)
    goto nomem;
  for (uint32_t i = 0; i < cap->max_send_wr; i++)
    q->sq[i].sge = q->sq_sge + i * ssge;
  for (uint32_t i = 0; i < (cap->max_recv_wr ? cap->max_recv_wr : 1); i++)
    q->rq[i].sge = q->rq_sge + i * rsge;
  q->ctx = c;
  q->cap = *cap;
  q->sig_all = ia->sq_sig_all;
  q->out.fd = q->in.fd = -1;
  q->out.pidx = q->in.pidx = -1;
  q->qp.context = pd->context;
  q->qp.qp_context = ia->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = ia->send_cq;
  q->qp.recv_cq = ia->recv_cq;
  q->qp.qp_num = __atomic_fetch_add(&next_qpn, 1, __ATOMIC_RELAXED) & 0xffffff;
  q->qp.handle = q->qp.qp_num;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  pthread_mutex_init(&q->qp.mutex, NULL);
  pthread_cond_init(&q->qp.cond, NULL);
  pthread_mutex_lock(&c->mu);
  q->next = c->qps;
  c->qps = q;
  ((struct emu_pd *)pd)->nref++;
  ((struct emu_cq *)ia->send_cq)->nref++;
  ((struct emu_cq *)ia->recv_cq)->nref++;
  pthread_mutex_unlock(&c->mu);
  return &q->qp;
nomem:
  if (q) {
    free(q->sq);
    free(q->sq_sge);
    free(q->rq);
    free(q->rq_sge);
  }
  free(q);
  errno = ENOMEM;
  return NULL;
}

void emu_channels_close(struct emu_qp *q)
{
  if (q->out.fd >= 0)
    close(q->out.fd);
  if (q->in.fd >= 0)
    close(q->in.fd);
  memset(&q->out, 0, sizeof q->out);
  memset(&q->in, 0, sizeof q->in);
  q->out.fd = q->in.fd = -1;
  q->out.pidx = q->in.pidx = -1;
}

EMU_EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
  struct emu_qp *q = (struct emu_qp *)qp, **pp;
  struct emu_ctx *c = q->ctx;
  pthread_mutex_lock(&c->mu);
  for (pp = &c->qps; *pp && *pp != q; pp = &(*pp)->next)
    ;
  if (!*pp) {
    pthread_mutex_unlock(&c->mu);
    return EINVAL;
  }
  *pp = q->next;
  emu_channels_close(q);
  ((struct emu_pd *)qp->pd)->nref--;
  ((struct emu_cq *)qp->send_cq)->nref--;
  ((struct emu_cq *)qp->recv_cq)->nref--;
  pthread_mutex_unlock(&c->mu);
  emu_wake(c);
  pthread_mutex_destroy(&qp->mutex);
  pthread_cond_destroy(&qp->cond);
  free(q->sq);
  free(q->sq_sge);
  free(q->rq);
  free(q->rq_sge);
  free(q);
  return 0;
}

static void push_send_wc(struct emu_qp *q, const struct emu_swr *w, enum ibv_wc_status st)
{
  struct ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.wr_id = w->wr_id;
  wc.status = st;
  wc.opcode = (w->op == EMU_OP_WRITE || w->op == EMU_OP_WRITE_IMM) ? IBV_WC_RDMA_WRITE
                                                                    : IBV_WC_SEND;
  wc.byte_len = w->len;
  wc.qp_num = q->qp.qp_num;
  emu_cq_push(q->qp.send_cq, &wc);
}

static void push_recv_flush(struct emu_qp *q, uint64_t wr_id)
{
  struct ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.wr_id = wr_id;
  wc.status = IBV_WC_WR_FLUSH_ERR;
  wc.opcode = IBV_WC_RECV;
  wc.qp_num = q->qp.qp_num;
  emu_cq_push(q->qp.recv_cq, &wc);
}

void emu_sq_complete_head(struct emu_qp *q)
{
  struct emu_swr *w = &q->sq[q->sq_head % q->cap.max_send_wr];
  q->sq_head++;
  if (w->signaled) {
    push_send_wc(q, w, IBV_WC_SUCCESS);
    q->sq_reclaim = q->sq_head;
  }
}

void emu_qp_to_err(struct emu_qp *q, int head_status)
{
  if (q->qp.state == IBV_QPS_ERR)
    return;
  emu_trace("qp %#x -> ERR (%s; %u sends, %u receives outstanding)", q->qp.qp_num,
            head_status >= 0 ? ibv_wc_status_str((enum ibv_wc_status)head_status) : "modify",
            q->sq_tail - q->sq_head, q->rq_tail - q->rq_head);
  q->qp.state = IBV_QPS_ERR;
  emu_channels_close(q);
  for (uint32_t i = q->sq_head; i != q->sq_tail; i++) {
    enum ibv_wc_status st = IBV_WC_WR_FLUSH_ERR;
    if (i == q->sq_head && head_status >= 0)
      st = (enum ibv_wc_status)head_status;
    push_send_wc(q, &q->sq[i % q->cap.max_send_wr], st);
  }
  q->sq_head = q->sq_sent = q->sq_reclaim = q->sq_tail;
  for (uint32_t i = q->rq_head; i != q->rq_tail; i++)
    push_recv_flush(q, q->rq[i % q->cap.max_recv_wr].wr_id);
  q->rq_head = q->rq_tail;
}

/* required / optional masks of cur -> next; -1 when not a transition */
static int transition(enum ibv_qp_state cur, enum ibv_qp_state next, int *req, int *opt)
{
  const int rts_opt = M(CUR_STATE) | M(ACCESS_FLAGS) | M(MIN_RNR_TIMER) | M(PATH_MIG_STATE);
  *req = *opt = 0;
  if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
    return 0;
  if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT)
    *req = M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS);
  else if (cur == IBV_QPS_INIT && next == IBV_QPS_INIT)
    *opt = M(PKEY_INDEX) | M(PORT) | M(ACCESS_FLAGS);
  else if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
    *req = M(AV) | M(PATH_MTU) | M(DEST_QPN) | M(RQ_PSN) | M(MAX_DEST_RD_ATOMIC) |
           M(MIN_RNR_TIMER);
    *opt = M(ACCESS_FLAGS) | M(PKEY_INDEX);
  } else if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
    *req = M(SQ_PSN) | M(TIMEOUT) | M(RETRY_CNT) | M(RNR_RETRY) | M(MAX_QP_RD_ATOMIC);
    *opt = rts_opt;
  } else if (cur == IBV_QPS_RTS && next == IBV_QPS_RTS)
    *opt = rts_opt;
  else
    return -1;
  return 0;
}

static int values_ok(const struct ibv_qp_attr *a, int mask, enum ibv_qp_state cur)
{
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if ((mask & M(CUR_STATE)) && a->cur_qp_state != cur)
    return 0;
  if ((mask & M(PORT)) && a->port_num != 1)
    return 0;
  if ((mask & M(PKEY_INDEX)) && a->pkey_index != 0)
    return 0;
  if ((mask & M(ACCESS_FLAGS)) && (a->qp_access_flags & ~(unsigned)access))
    return 0;
  /* Ethernet link layer: the address vector must carry a GRH */
  if ((mask & M(AV)) && (!a->ah_attr.is_global || a->ah_attr.port_num != 1 ||
                         a->ah_attr.grh.sgid_index != 0))
    return 0;
  if ((mask & M(PATH_MTU)) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
    return 0;
  if ((mask & M(DEST_QPN)) && a->dest_qp_num > 0xffffff)
    return 0;
  if ((mask & M(MIN_RNR_TIMER)) && a->min_rnr_timer > 31)
    return 0;
  if ((mask & M(TIMEOUT)) && a->timeout > 31)
    return 0;
  if ((mask & M(RETRY_CNT)) && a->retry_cnt > 7)
    return 0;
  if ((mask & M(RNR_RETRY)) && a->rnr_retry > 7)
    return 0;
  if ((mask & M(MAX_QP_RD_ATOMIC)) && a->max_rd_atomic > 16)
    return 0;
  if ((mask & M(MAX_DEST_RD_ATOMIC)) && a->max_dest_rd_atomic > 16)
    return 0;
  return 1;
}

static void keep_attrs(struct emu_qp *q, const struct ibv_qp_attr *a, int mask)
{
  struct ibv_qp_attr *k = &q->attr;
#define KEEP(bit, field)                                                       \
  if (mask & M(bit))                                                           \
    k->field = a->field;
  KEEP(PKEY_INDEX, pkey_index)
  KEEP(PORT, port_num)
  KEEP(ACCESS_FLAGS, qp_access_flags)
  KEEP(AV, ah_attr)
  KEEP(PATH_MTU, path_mtu)
  KEEP(DEST_QPN, dest_qp_num)
  KEEP(RQ_PSN, rq_psn)
  KEEP(MAX_DEST_RD_ATOMIC, max_dest_rd_atomic)
  KEEP(MIN_RNR_TIMER, min_rnr_timer)
  KEEP(SQ_PSN, sq_psn)
  KEEP(TIMEOUT, timeout)
  KEEP(RETRY_CNT, retry_cnt)
  KEEP(RNR_RETRY, rnr_retry)
  KEEP(MAX_QP_RD_ATOMIC, max_rd_atomic)
  KEEP(PATH_MIG_STATE, path_mig_state)
#undef KEEP
}

EMU_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
  struct emu_qp *q = (struct emu_qp *)qp;
  struct emu_ctx *c = q->ctx;
  enum ibv_qp_state cur, next;
  int req, opt, err = 0;
  pthread_mutex_lock(&c->mu);
  cur = q->qp.state;
  next = (mask & M(STATE)) ? attr->qp_state : cur;
  if (transition(cur, next, &req, &opt) != 0 || (mask & req) != req ||
      (mask & ~(req | opt | M(STATE))) || !values_ok(attr, mask, cur)) {
    err = EINVAL;
    goto out;
  }
  keep_attrs(q, attr, mask);
  if (next == IBV_QPS_ERR) {
    emu_qp_to_err(q, -1);
  } else if (next == IBV_QPS_RESET) {
    emu_channels_close(q);
    q->sq_reclaim = q->sq_head = q->sq_sent = q->sq_tail = 0;
    q->rq_head = q->rq_tail = 0;
    memset(&q->attr, 0, sizeof q->attr);
    q->qp.state = IBV_QPS_RESET;
  } else {
    q->qp.state = next;
    if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS)
      emu_out_start(q);
  }
out:
  pthread_mutex_unlock(&c->mu);
  emu_wake(c);
  if (err)
    errno = err;
  return err;
}

EMU_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
                            struct ibv_qp_init_attr *ia)
{
  struct emu_qp *q = (struct emu_qp *)qp;
  pthread_mutex_lock(&q->ctx->mu);
  *attr = q->attr;
  attr->qp_state = attr->cur_qp_state = q->qp.state;
  attr->cap = q->cap;
  if (ia) {
    memset(ia, 0, sizeof *ia);
    ia->qp_context = q->qp.qp_context;
    ia->send_cq = q->qp.send_cq;
    ia->recv_cq = q->qp.recv_cq;
    ia->cap = q->cap;
    ia->qp_type = IBV_QPT_RC;
    ia->sq_sig_all = q->sig_all;
  }
  pthread_mutex_unlock(&q->ctx->mu);
  return 0;
}

/* Copy and translate the SGEs; 0 when every non-empty one names a local MR
 * of the QP's PD covering it (with LOCAL_WRITE when `write`). */
static int sges_take(struct emu_qp *q, struct ibv_sge *dst, const struct ibv_sge *src, int n,
                     int write)
{
  int ok = 1;
  for (int i = 0; i < n; i++) {
    struct emu_mr *m = NULL;
    dst[i] = src[i];
    if (src[i].length == 0)
      continue;
    m = emu_mr_find(q->ctx, src[i].lkey);
    if (!m || m->mr.pd != q->qp.pd || !emu_mr_covers(m, src[i].addr, src[i].length) ||
        (write && !(m->access & IBV_ACCESS_LOCAL_WRITE))) {
      ok = 0;
      continue;
    }
    dst[i].addr = (uintptr_t)m->mr.addr + (src[i].addr - m->iova);
  }
  return ok ? 0 : -1;
}

static int send_op(enum ibv_wr_opcode op)
{
  switch (op) {
  case IBV_WR_RDMA_WRITE: return EMU_OP_WRITE;
  case IBV_WR_RDMA_WRITE_WITH_IMM: return EMU_OP_WRITE_IMM;
  case IBV_WR_SEND: return EMU_OP_SEND;
  case IBV_WR_SEND_WITH_IMM: return EMU_OP_SEND_IMM;
  default: return 0;
  }
}

/* Queue one WR at sq_tail (ctx->mu held, QP in RTS or ERR). */
static int post_one(struct emu_qp *q, const struct ibv_send_wr *wr)
{
  int op = send_op(wr->opcode), inl = !!(wr->send_flags & IBV_SEND_INLINE);
  uint32_t len;
  struct emu_swr *w;
  if (!op || wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_send_sge)
    return EINVAL;
  len = emu_ibv_len(wr->sg_list, wr->num_sge);
  if (len == UINT32_MAX || (inl && len > q->cap.max_inline_data))
    return EINVAL;
  if (q->sq_tail - q->sq_reclaim >= q->cap.max_send_wr)
    return ENOMEM;
  w = &q->sq[q->sq_tail % q->cap.max_send_wr];
  w->wr_id = wr->wr_id;
  w->op = (uint8_t)op;
  w->signaled = (wr->send_flags & IBV_SEND_SIGNALED) || q->sig_all;
  w->raddr = wr->wr.rdma.remote_addr;
  w->rkey = wr->wr.rdma.rkey;
  w->imm = wr->imm_data;
  w->len = len;
  w->seq = q->sq_tail;
  w->loc_err = 0;
  if (inl) {
    size_t off = 0;
    for (int i = 0; i < wr->num_sge; i++) {
      memcpy(w->inl + off, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
      off += wr->sg_list[i].length;
    }
    w->nsge = 1;
    w->sge[0].addr = (uintptr_t)w->inl;
    w->sge[0].length = len;
  } else {
    w->nsge = wr->num_sge;
    w->loc_err = sges_take(q, w->sge, wr->sg_list, wr->num_sge, 0) != 0;
  }
  if (q->sq_tail == q->sq_head)
    q->out.last_ns = emu_now_ns(); /* the ack timer starts now */
  q->sq_tail++;
  return 0;
}

int emu_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
  struct emu_qp *q = (struct emu_qp *)qp;
  int err = 0;
  pthread_mutex_lock(&q->ctx->mu);
  for (; wr; wr = wr->next) {
    if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR)
      err = EINVAL;
    else
      err = post_one(q, wr);
    if (err) {
      *bad = wr;
      break;
    }
    if (q->qp.state == IBV_QPS_ERR) { /* flushed at once */
      push_send_wc(q, &q->sq[q->sq_head % q->cap.max_send_wr], IBV_WC_WR_FLUSH_ERR);
      q->sq_reclaim = q->sq_head = q->sq_sent = q->sq_tail;
    }
  }
  pthread_mutex_unlock(&q->ctx->mu);
  emu_wake(q->ctx);
  return err;
}

int emu_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
  struct emu_qp *q = (struct emu_qp *)qp;
  int err = 0;
  pthread_mutex_lock(&q->ctx->mu);
  for (; wr; wr = wr->next) {
    struct emu_rwr *r;
    if (q->qp.state == IBV_QPS_RESET || wr->num_sge < 0 ||
        (uint32_t)wr->num_sge > q->cap.max_recv_sge ||
        emu_ibv_len(wr->sg_list, wr->num_sge) == UINT32_MAX)
      err = EINVAL;
    else if (q->rq_tail - q->rq_head >= q->cap.max_recv_wr)
      err = ENOMEM;
    if (err) {
      *bad = wr;
      break;
    }
    if (q->qp.state == IBV_QPS_ERR) {
      push_recv_flush(q, wr->wr_id);
      continue;
    }
    r = &q->rq[q->rq_tail % q->cap.max_recv_wr];
    r->wr_id = wr->wr_id;
    r->nsge = wr->num_sge;
    r->len = emu_ibv_len(wr->sg_list, wr->num_sge);
    r->loc_err = sges_take(q, r->sge, wr->sg_list, wr->num_sge, 1) != 0;
    q->rq_tail++;
  }
  pthread_mutex_unlock(&q->ctx->mu);
  emu_wake(q->ctx);
  return err;
}
