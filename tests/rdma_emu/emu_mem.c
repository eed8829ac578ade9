/*
 * emu_mem.c - TEST DOUBLE (see emu.h): protection domains, memory regions
 * and completion queues of librm_verbs_emu.so.
 *
 * MRs: a list per context (ctx->mu), looked up by key on every use, so a
 * deregistered MR is never touched again by the progress thread. Memory is
 * not pinned or checked. Keys: one counter per process, seeded from pid
 * and time, so keys differ between processes and a stale rkey does not
 * match by accident; lkey == rkey.
 *
 * CQs: a ring of cqe entries under cq->mu (the only lock poll takes, held
 * for a copy). A full ring marks the CQ overrun: the completion is lost and
 * every later poll returns -1 (hardware raises IBV_EVENT_CQ_ERR).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu.h"

static uint32_t next_key; /* atomic; 0 = not seeded */

/* ---- protection domains, memory regions ---- */
EMU_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
  struct emu_pd *p = calloc(1, sizeof *p);
  if (!p) {
    errno = ENOMEM;
    return NULL;
  }
  p->pd.context = context;
  return &p->pd;
}

EMU_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
  struct emu_pd *p = (struct emu_pd *)pd;
  struct emu_ctx *c = EMU_CTX(pd->context);
  pthread_mutex_lock(&c->mu);
  if (p->nref) {
    pthread_mutex_unlock(&c->mu);
    return EBUSY;
  }
  pthread_mutex_unlock(&c->mu);
  free(p);
  return 0;
}

struct emu_mr *emu_mr_find(struct emu_ctx *c, uint32_t key)
{
  for (struct emu_mr *m = c->mrs; m; m = m->next)
    if (m->mr.lkey == key)
      return m;
  return NULL;
}

int emu_mr_covers(const struct emu_mr *m, uint64_t addr, uint64_t len)
{
  return addr >= m->iova && len <= m->mr.length && addr - m->iova <= m->mr.length - len;
}

static uint32_t key_new(void)
{
  uint32_t k = __atomic_load_n(&next_key, __ATOMIC_RELAXED);
  if (k == 0) {
    uint32_t seed = ((uint32_t)getpid() * 2654435761u) ^ (uint32_t)emu_now_ns();
    uint32_t zero = 0;
    __atomic_compare_exchange_n(&next_key, &zero, seed | 1, 0, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
  }
  do
    k = __atomic_add_fetch(&next_key, 0x101, __ATOMIC_RELAXED);
  while (k == 0);
  return k;
}

EMU_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                           uint64_t iova, unsigned int access)
{
  struct emu_ctx *c = EMU_CTX(pd->context);
  unsigned int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                       IBV_ACCESS_RELAXED_ORDERING;
  struct emu_mr *m;
  if ((access & ~known) || (!addr && length) ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
       !(access & IBV_ACCESS_LOCAL_WRITE))) {
    errno = EINVAL;
    return NULL;
  }
  m = calloc(1, sizeof *m);
  if (!m) {
    errno = ENOMEM;
    return NULL;
  }
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.lkey = m->mr.rkey = key_new();
  m->mr.handle = m->mr.lkey;
  m->iova = iova;
  m->access = (int)access;
  pthread_mutex_lock(&c->mu);
  m->next = c->mrs;
  c->mrs = m;
  ((struct emu_pd *)pd)->nref++;
  pthread_mutex_unlock(&c->mu);
  return &m->mr;
}

#undef ibv_reg_mr
EMU_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
  return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

EMU_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
  struct emu_ctx *c = EMU_CTX(mr->context);
  struct emu_mr **pp;
  pthread_mutex_lock(&c->mu);
  for (pp = &c->mrs; *pp && &(*pp)->mr != mr; pp = &(*pp)->next)
    ;
  if (!*pp) {
    pthread_mutex_unlock(&c->mu);
    return EINVAL;
  }
  *pp = (*pp)->next;
  ((struct emu_pd *)mr->pd)->nref--;
  pthread_mutex_unlock(&c->mu);
  free(mr);
  return 0;
}

/* ---- completion queues ---- */
EMU_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
                                        void *cq_context, struct ibv_comp_channel *channel,
                                        int comp_vector)
{
  struct emu_cq *q;
  if (cqe < 1 || cqe > EMU_MAX_CQE || channel || comp_vector != 0) {
    errno = EINVAL;
    return NULL;
  }
  q = calloc(1, sizeof *q);
  if (q)
    q->ring = calloc((size_t)cqe, sizeof *q->ring);
  if (!q || !q->ring) {
    free(q);
    errno = ENOMEM;
    return NULL;
  }
  q->cap = cqe;
  q->cq.context = context;
  q->cq.cq_context = cq_context;
  q->cq.cqe = cqe;
  pthread_mutex_init(&q->mu, NULL);
  pthread_mutex_init(&q->cq.mutex, NULL);
  pthread_cond_init(&q->cq.cond, NULL);
  return &q->cq;
}

EMU_EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
  struct emu_cq *q = (struct emu_cq *)cq;
  struct emu_ctx *c = EMU_CTX(cq->context);
  pthread_mutex_lock(&c->mu);
  if (q->nref) {
    pthread_mutex_unlock(&c->mu);
    return EBUSY;
  }
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_destroy(&q->mu);
  pthread_mutex_destroy(&q->cq.mutex);
  pthread_cond_destroy(&q->cq.cond);
  free(q->ring);
  free(q);
  return 0;
}

void emu_cq_push(struct ibv_cq *cq, const struct ibv_wc *wc)
{
  struct emu_cq *q = (struct emu_cq *)cq;
  pthread_mutex_lock(&q->mu);
  if (q->count == q->cap) {
    if (!q->overrun)
      fprintf(stderr, "rm-verbs-emu: CQ overrun (%d entries); poll_cq now fails\n", q->cap);
    q->overrun = 1;
  } else {
    q->ring[(q->head + q->count) % q->cap] = *wc;
    q->count++;
  }
  pthread_mutex_unlock(&q->mu);
}

/* Never waits for completions. A CQ that overran stays failed (hardware
 * raises IBV_EVENT_CQ_ERR and its QPs go to error). */
int emu_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
  struct emu_cq *q = (struct emu_cq *)cq;
  int got = 0;
  if (n < 0)
    return -1;
  pthread_mutex_lock(&q->mu);
  if (q->overrun) {
    pthread_mutex_unlock(&q->mu);
    return -1;
  }
  while (got < n && q->count > 0) {
    wc[got++] = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
  }
  pthread_mutex_unlock(&q->mu);
  return got;
}

EMU_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
  static const char *const str[] = {
    [IBV_WC_SUCCESS] = "success",
    [IBV_WC_LOC_LEN_ERR] = "local length error",
    [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
    [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
    [IBV_WC_LOC_PROT_ERR] = "local protection error",
    [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
    [IBV_WC_MW_BIND_ERR] = "memory management operation error",
    [IBV_WC_BAD_RESP_ERR] = "bad response error",
    [IBV_WC_LOC_ACCESS_ERR] = "local access error",
    [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
    [IBV_WC_REM_ACCESS_ERR] = "remote access error",
    [IBV_WC_REM_OP_ERR] = "remote operation error",
    [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
    [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
    [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
    [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
    [IBV_WC_REM_ABORT_ERR] = "aborted error",
    [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
    [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
    [IBV_WC_FATAL_ERR] = "fatal error",
    [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
    [IBV_WC_GENERAL_ERR] = "general error",
    [IBV_WC_TM_ERR] = "TM error",
    [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
  };
  if ((unsigned)status >= sizeof str / sizeof str[0] || !str[status])
    return "unknown";
  return str[status];
}
