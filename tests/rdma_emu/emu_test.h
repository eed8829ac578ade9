/*
 * emu_test.h - helpers of test_rdma_emu.c: one "side" (a process's device
 * context, PD, one send CQ, one receive CQ, NQ RC QPs, one MR over its
 * buffer), the out-of-band exchange over the control socket (QPNs, GID,
 * rkey, address, length: what real code exchanges through a bootstrap),
 * and the RTR/RTS transitions. Everything goes through the verbs table
 * (worker/transport/rdma/ibvwrap.h), never libibverbs directly.
 *
 * Header-only and test-only; CHECK (tests/lib/rm_testcheck.h) counts failures
 * in the calling file (the counter is static: test_rdma_emu_err.c reports
 * its own through err_check_failures()).
 */
#ifndef RM_TESTS_RDMA_EMU_TEST_H
#define RM_TESTS_RDMA_EMU_TEST_H

#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rm_testcheck.h"
#include "transport/rdma/ibvwrap.h"

#define NQ 2
#define MiB (1u << 20)
#define BOUND_MS 10000 /* error completions must come within this */

/* the cases: role 0 = A, 1 = B; fd = the control socket */
void case_device(int role, int fd);
void case_sizes(int role, int fd);
void case_credits(int role, int fd);
void case_rkey(int role, int fd);
void case_rnr(int role, int fd);
void case_peer_kill(int role, int fd);
void case_peer_stop(int role, int fd);
void case_flush(int role, int fd);
void case_send(int role, int fd);
void case_missing_lib(int role, int fd);
int err_check_failures(void);

typedef struct {
  uint8_t rnr_retry, min_rnr_timer, timeout, retry_cnt;
} qp_opts_t;
/* rnr_retry 7 = retry forever; min_rnr_timer 12 = 0.64 ms; timeout 14 = 67 ms */
static const qp_opts_t OPTS_DEFAULT = {7, 12, 14, 7};

typedef struct {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *scq, *rcq;
  struct ibv_qp *qp[NQ];
  struct ibv_mr *mr;
  unsigned char *buf;
  size_t len;
  union ibv_gid gid;
} side_t;

typedef struct {
  uint32_t qpn[NQ];
  uint8_t gid[16];
  uint64_t addr, len;
  uint32_t rkey, pad;
} info_t;

static inline int64_t now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline uint8_t pat(uint32_t seed, size_t k)
{
  uint32_t x = (uint32_t)k * 2654435761u + seed * 40503u + (uint32_t)(k >> 16);
  return (uint8_t)(x >> 24);
}
static inline void fill(unsigned char *p, size_t n, uint32_t seed)
{
  for (size_t k = 0; k < n; k++)
    p[k] = pat(seed, k);
}
/* index of the first byte that differs from the pattern, or n */
static inline size_t verify(const unsigned char *p, size_t n, uint32_t seed)
{
  for (size_t k = 0; k < n; k++)
    if (p[k] != pat(seed, k))
      return k;
  return n;
}

static inline int ctl_put(int fd, const void *p, size_t n)
{
  for (size_t off = 0; off < n;) {
    ssize_t w = write(fd, (const char *)p + off, n - off);
    if (w <= 0)
      return -1;
    off += (size_t)w;
  }
  return 0;
}
static inline int ctl_get(int fd, void *p, size_t n)
{
  for (size_t off = 0; off < n;) {
    ssize_t r = read(fd, (char *)p + off, n - off);
    if (r <= 0)
      return -1;
    off += (size_t)r;
  }
  return 0;
}

/* One completion within timeout_ms: 1, 0 on timeout, -1 on a poll error. */
static inline int wait_cq(struct ibv_cq *cq, struct ibv_wc *wc, int64_t timeout_ms)
{
  int64_t end = now_ms() + timeout_ms;
  for (int spin = 0;; spin++) {
    int n = rm__ibv_poll_cq(cq, 1, wc);
    if (n != 0)
      return n;
    if (now_ms() > end)
      return 0;
    if (spin > 1000)
      usleep(50);
  }
}

static inline int qp_to_init(struct ibv_qp *qp)
{
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  return rm__ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                       IBV_QP_ACCESS_FLAGS);
}

/* Open emu0 and build the side; 0 on success. */
static inline int side_open(side_t *s, size_t len)
{
  char why[256] = "";
  struct ibv_device **list;
  int n = 0;
  memset(s, 0, sizeof s[0]);
  CHECKF(rm__ibv_load(why, sizeof why) == RM_OK, "load: %s", why);
  if (why[0])
    return -1;
  list = rm__ibv_get_device_list(&n);
  CHECK(list && n == 1);
  if (!list || n < 1)
    return -1;
  s->ctx = rm__ibv_open_device(list[0]);
  rm__ibv_free_device_list(list);
  CHECK(s->ctx != NULL);
  if (!s->ctx)
    return -1;
  CHECK(rm__ibv_query_gid(s->ctx, 1, 0, &s->gid) == 0);
  s->pd = rm__ibv_alloc_pd(s->ctx);
  s->scq = rm__ibv_create_cq(s->ctx, 8192, NULL, NULL, 0);
  s->rcq = rm__ibv_create_cq(s->ctx, 8192, NULL, NULL, 0);
  s->len = len;
  CHECK(posix_memalign((void **)&s->buf, 4096, len) == 0);
  CHECK(s->pd && s->scq && s->rcq && s->buf);
  if (!s->pd || !s->scq || !s->rcq || !s->buf)
    return -1;
  memset(s->buf, 0xEE, len);
  s->mr = rm__ibv_reg_mr(s->pd, s->buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  CHECK(s->mr != NULL);
  for (int i = 0; i < NQ; i++) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = s->scq;
    ia.recv_cq = s->rcq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 256;
    ia.cap.max_recv_wr = 256;
    ia.cap.max_send_sge = 4;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = 64;
    s->qp[i] = rm__ibv_create_qp(s->pd, &ia);
    CHECK(s->qp[i] != NULL);
    if (!s->qp[i] || !s->mr)
      return -1;
    CHECK(qp_to_init(s->qp[i]) == 0);
  }
  return 0;
}

static inline void side_close(side_t *s)
{
  for (int i = 0; i < NQ; i++)
    if (s->qp[i])
      CHECK(rm__ibv_destroy_qp(s->qp[i]) == 0);
  if (s->mr)
    CHECK(rm__ibv_dereg_mr(s->mr) == 0);
  if (s->scq)
    CHECK(rm__ibv_destroy_cq(s->scq) == 0);
  if (s->rcq)
    CHECK(rm__ibv_destroy_cq(s->rcq) == 0);
  if (s->pd)
    CHECK(rm__ibv_dealloc_pd(s->pd) == 0);
  if (s->ctx)
    CHECK(rm__ibv_close_device(s->ctx) == 0);
  free(s->buf);
}

/* Swap infos over the control socket: both write, then both read. */
static inline int exchange(int fd, const side_t *s, info_t *peer)
{
  info_t me;
  memset(&me, 0, sizeof me);
  for (int i = 0; i < NQ; i++)
    me.qpn[i] = s->qp[i]->qp_num;
  memcpy(me.gid, s->gid.raw, 16);
  me.addr = (uintptr_t)s->buf;
  me.len = s->len;
  me.rkey = s->mr->rkey;
  if (ctl_put(fd, &me, sizeof me) != 0 || ctl_get(fd, peer, sizeof *peer) != 0)
    return -1;
  return 0;
}

/* INIT -> RTR -> RTS towards the peer's QP i. */
static inline int connect_qp(side_t *s, int i, const info_t *peer, qp_opts_t o)
{
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer->qpn[i];
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = o.min_rnr_timer;
  a.ah_attr.is_global = 1;
  memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
  a.ah_attr.grh.sgid_index = 0;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  if (rm__ibv_modify_qp(s->qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                          IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = o.timeout;
  a.retry_cnt = o.retry_cnt;
  a.rnr_retry = o.rnr_retry;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  return rm__ibv_modify_qp(s->qp[i], &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                             IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                             IBV_QP_MAX_QP_RD_ATOMIC);
}

/* Post one WRITE / WRITE_WITH_IMM of [off, off + len) of the own MR to the
 * peer's address raddr; returns the post_send result. */
static inline int post_write(side_t *s, int i, uint64_t wr_id, enum ibv_wr_opcode op,
                             size_t off, uint32_t len, uint64_t raddr, uint32_t rkey,
                             uint32_t imm, unsigned flags)
{
  struct ibv_sge sge = {(uintptr_t)s->buf + off, len, s->mr->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = flags;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return rm__ibv_post_send(s->qp[i], &wr, &bad);
}

static inline int post_recv(side_t *s, int i, uint64_t wr_id)
{
  struct ibv_recv_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id; /* no SGE: WRITE_WITH_IMM consumes the WR, not its buffer */
  return rm__ibv_post_recv(s->qp[i], &wr, &bad);
}

#endif
