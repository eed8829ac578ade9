/*
 * test_rdma_emu_err.c - the error cases of test_rdma_emu (see there):
 * remote access errors, RNR, a SIGKILLed and a SIGSTOPped peer, flushes,
 * SEND length errors.
 * Error completions must come within BOUND_MS; each case says why.
 */
#include <signal.h>
#include <stdio.h>
#include <sys/types.h>

#include "emu_test.h"

int err_check_failures(void) { return rm_check_failures; }

/* ---------------- rkey ---------------- */
void case_rkey(int role, int fd)
{
  side_t s;
  info_t peer;
  struct ibv_wc wc;
  char done;
  if (side_open(&s, MiB) != 0)
    return;
  CHECK(exchange(fd, &s, &peer) == 0);
  for (int i = 0; i < NQ; i++)
    CHECK(connect_qp(&s, i, &peer, OPTS_DEFAULT) == 0);
  if (role == 0) {
    fill(s.buf, MiB, 7);
    /* QP 0: wrong rkey, then one more WR -> flushed */
    CHECK(post_write(&s, 0, 1, IBV_WR_RDMA_WRITE, 0, 4096, peer.addr, peer.rkey ^ 0x800000u,
                     0, IBV_SEND_SIGNALED) == 0);
    CHECK(post_write(&s, 0, 2, IBV_WR_RDMA_WRITE, 0, 4096, peer.addr, peer.rkey, 0, 0) == 0);
    CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1);
    CHECKF(wc.wr_id == 1 && wc.status == IBV_WC_REM_ACCESS_ERR, "wrong rkey: %s",
           rm__ibv_wc_status_str(wc.status));
    CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1);
    CHECKF(wc.wr_id == 2 && wc.status == IBV_WC_WR_FLUSH_ERR, "after error: %s",
           rm__ibv_wc_status_str(wc.status));
    /* QP 1: a good write, one crossing the MR's end, one after it */
    CHECK(post_write(&s, 1, 3, IBV_WR_RDMA_WRITE, 0, 4096, peer.addr, peer.rkey, 0,
                     IBV_SEND_SIGNALED) == 0);
    CHECK(post_write(&s, 1, 4, IBV_WR_RDMA_WRITE, 0, 4096, peer.addr + peer.len - 100,
                     peer.rkey, 0, 0) == 0);
    CHECK(post_write(&s, 1, 5, IBV_WR_RDMA_WRITE, 0, 64, peer.addr, peer.rkey, 0, 0) == 0);
    CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1 && wc.wr_id == 3 && wc.status == IBV_WC_SUCCESS);
    CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1);
    CHECKF(wc.wr_id == 4 && wc.status == IBV_WC_REM_ACCESS_ERR, "out of bounds: %s",
           rm__ibv_wc_status_str(wc.status));
    CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1 && wc.wr_id == 5 &&
          wc.status == IBV_WC_WR_FLUSH_ERR);
    CHECK(rm__ibv_poll_cq(s.scq, 1, &wc) == 0);
    CHECK(ctl_put(fd, "d", 1) == 0);
  } else {
    size_t bad;
    CHECK(ctl_get(fd, &done, 1) == 0);
    bad = verify(s.buf, 4096, 7);
    CHECKF(bad == 4096, "good write: byte %zu differs", bad);
    for (size_t k = 4096; k < MiB; k++)
      if (s.buf[k] != 0xEE) {
        CHECKF(0, "byte %zu written by a refused write", k);
        break;
      }
    CHECK(rm__ibv_poll_cq(s.rcq, 1, &wc) == 0);
  }
  side_close(&s);
}

/* ---------------- rnr ---------------- */
void case_rnr(int role, int fd)
{
  /* QP 0: A's rnr_retry 7 (forever). QP 1: A's rnr_retry 1 and B's
   * min_rnr_timer 20 (10.24 ms): one timer's wait, then the error. */
  qp_opts_t o1 = OPTS_DEFAULT;
  side_t s;
  info_t peer;
  struct ibv_wc wc;
  char c;
  if (side_open(&s, 4096) != 0)
    return;
  o1.rnr_retry = 1;
  o1.min_rnr_timer = 20;
  CHECK(exchange(fd, &s, &peer) == 0);
  CHECK(connect_qp(&s, 0, &peer, OPTS_DEFAULT) == 0);
  CHECK(connect_qp(&s, 1, &peer, o1) == 0);
  if (role == 0) {
    int64_t t0;
    CHECK(ctl_get(fd, &c, 1) == 0);
    t0 = now_ms();
    CHECK(post_write(&s, 1, 1, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 16, peer.addr, peer.rkey, 1,
                     IBV_SEND_SIGNALED) == 0);
    CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1);
    CHECKF(wc.wr_id == 1 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR, "no receive: %s",
           rm__ibv_wc_status_str(wc.status));
    printf("rnr: RNR_RETRY_EXC_ERR after %lld ms\n", (long long)(now_ms() - t0));
    t0 = now_ms();
    CHECK(post_write(&s, 0, 2, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 16, peer.addr, peer.rkey, 2,
                     IBV_SEND_SIGNALED) == 0);
    CHECK(ctl_put(fd, "p", 1) == 0);
    CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1);
    CHECKF(wc.wr_id == 2 && wc.status == IBV_WC_SUCCESS, "late receive: %s",
           rm__ibv_wc_status_str(wc.status));
    CHECKF(now_ms() - t0 >= 250, "completed after %lld ms, before the receive was posted",
           (long long)(now_ms() - t0));
    CHECK(ctl_get(fd, &c, 1) == 0);
  } else {
    CHECK(ctl_put(fd, "r", 1) == 0);
    CHECK(ctl_get(fd, &c, 1) == 0);
    usleep(300 * 1000);
    CHECK(rm__ibv_poll_cq(s.rcq, 1, &wc) == 0);
    CHECK(post_recv(&s, 0, 9) == 0);
    CHECK(wait_cq(s.rcq, &wc, BOUND_MS) == 1 && wc.wr_id == 9 && wc.status == IBV_WC_SUCCESS &&
          ntohl(wc.imm_data) == 2);
    CHECK(ctl_put(fd, "d", 1) == 0);
  }
  side_close(&s);
}

/* ---------------- peer_kill ---------------- */
void case_peer_kill(int role, int fd)
{
  side_t s;
  info_t peer;
  struct ibv_wc wc;
  char c;
  if (side_open(&s, 64 * MiB) != 0)
    return;
  if (role == 1)
    CHECK(post_recv(&s, 0, 1) == 0);
  else
    for (int k = 0; k < 4; k++)
      CHECK(post_recv(&s, 0, 50 + (uint64_t)k) == 0);
  CHECK(exchange(fd, &s, &peer) == 0);
  for (int i = 0; i < NQ; i++)
    CHECK(connect_qp(&s, i, &peer, OPTS_DEFAULT) == 0);
  if (role == 1) {
    volatile unsigned char *first = s.buf;
    CHECK(ctl_put(fd, "r", 1) == 0);
    CHECK(wait_cq(s.rcq, &wc, BOUND_MS) == 1 && wc.status == IBV_WC_SUCCESS);
    while (*first == 0xEE) /* the 64 MiB write has begun to land */
      ;
    CHECK(ctl_put(fd, "k", 1) == 0);
    fflush(NULL);
    raise(SIGKILL);
  }
  {
    int64_t t0;
    fill(s.buf, 64 * MiB, 3);
    CHECK(ctl_get(fd, &c, 1) == 0);
    CHECK(post_write(&s, 0, 1, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 4096, peer.addr + 4096,
                     peer.rkey, 1, IBV_SEND_SIGNALED) == 0);
    CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1 && wc.status == IBV_WC_SUCCESS);
    t0 = now_ms();
    CHECK(post_write(&s, 1, 2, IBV_WR_RDMA_WRITE, 0, 64 * MiB, peer.addr, peer.rkey, 0,
                     IBV_SEND_SIGNALED) == 0);
    CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1);
    /* B dies once the first bytes land, so the write fails; should B's
     * death come only after the whole 64 MiB, the next write fails */
    CHECKF(wc.wr_id == 2 && (wc.status == IBV_WC_RETRY_EXC_ERR || wc.status == IBV_WC_SUCCESS),
           "64 MiB to a dying peer: %s", rm__ibv_wc_status_str(wc.status));
    printf("peer_kill: 64 MiB write ended %s after %lld ms\n", rm__ibv_wc_status_str(wc.status),
           (long long)(now_ms() - t0));
    CHECK(ctl_get(fd, &c, 1) == 0 && c == 'k');
    CHECK(ctl_get(fd, &c, 1) != 0); /* EOF: B is gone */
    t0 = now_ms();
    for (uint64_t k = 0; k < 5; k++)
      CHECK(post_write(&s, 0, 10 + k, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 4096, peer.addr,
                       peer.rkey, 0, (k == 0 || k == 4) ? IBV_SEND_SIGNALED : 0) == 0);
    for (uint64_t k = 0; k < 5; k++) { /* error completions even for unsignaled WRs */
      enum ibv_wc_status want = k == 0 ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR;
      CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1);
      CHECKF(wc.wr_id == 10 + k && wc.status == want, "WR %llu: %s",
             (unsigned long long)wc.wr_id, rm__ibv_wc_status_str(wc.status));
    }
    CHECKF(now_ms() - t0 < BOUND_MS, "errors after %lld ms", (long long)(now_ms() - t0));
    printf("peer_kill: RETRY_EXC_ERR + 4 flushed after %lld ms\n", (long long)(now_ms() - t0));
    for (uint64_t k = 0; k < 4; k++)
      CHECK(wait_cq(s.rcq, &wc, BOUND_MS) == 1 && wc.wr_id == 50 + k &&
            wc.status == IBV_WC_WR_FLUSH_ERR);
    /* in ERR now: new WRs are flushed at once */
    CHECK(post_write(&s, 0, 20, IBV_WR_RDMA_WRITE, 0, 8, peer.addr, peer.rkey, 0, 0) == 0);
    CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1 && wc.wr_id == 20 &&
          wc.status == IBV_WC_WR_FLUSH_ERR);
    CHECK(post_recv(&s, 0, 21) == 0);
    CHECK(wait_cq(s.rcq, &wc, BOUND_MS) == 1 && wc.wr_id == 21 &&
          wc.status == IBV_WC_WR_FLUSH_ERR);
  }
  side_close(&s);
}

/* ---------------- peer_stop ---------------- */
static int is_stopped(pid_t pid)
{
  char path[64], buf[256], *p;
  FILE *f;
  size_t n;
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  f = fopen(path, "r");
  if (!f)
    return 0;
  n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  p = strrchr(buf, ')'); /* "pid (comm) S ..." */
  return p && p[1] == ' ' && p[2] == 'T';
}

/* B stops itself (alive, silent: a hung host): A's write fails by the ack
 * timeout with IBV_WC_RETRY_EXC_ERR, not before the hardware's
 * 4.096 us x 2^14 x 8 = 0.54 s and within BOUND_MS. */
void case_peer_stop(int role, int fd)
{
  side_t s;
  info_t peer;
  struct ibv_wc wc;
  char c;
  if (side_open(&s, 16 * MiB) != 0)
    return;
  CHECK(exchange(fd, &s, &peer) == 0);
  CHECK(connect_qp(&s, 0, &peer, OPTS_DEFAULT) == 0);
  if (role == 1) {
    pid_t me = getpid();
    CHECK(ctl_put(fd, &me, sizeof me) == 0);
    raise(SIGSTOP); /* A continues us once its write failed */
    CHECK(ctl_get(fd, &c, 1) == 0);
  } else {
    pid_t b = 0;
    int64_t t0, el;
    CHECK(ctl_get(fd, &b, sizeof b) == 0);
    for (int i = 0; i < 500 && !is_stopped(b); i++)
      usleep(10 * 1000);
    CHECK(is_stopped(b));
    t0 = now_ms();
    CHECK(post_write(&s, 0, 1, IBV_WR_RDMA_WRITE, 0, 16 * MiB, peer.addr, peer.rkey, 0,
                     IBV_SEND_SIGNALED) == 0);
    CHECK(wait_cq(s.scq, &wc, 2 * BOUND_MS) == 1);
    el = now_ms() - t0;
    CHECKF(wc.wr_id == 1 && wc.status == IBV_WC_RETRY_EXC_ERR, "to a stopped peer: %s",
           rm__ibv_wc_status_str(wc.status));
    CHECKF(el >= 500 && el < BOUND_MS, "error after %lld ms", (long long)el);
    printf("peer_stop: RETRY_EXC_ERR after %lld ms\n", (long long)el);
    if (b > 0)
      kill(b, SIGCONT);
    CHECK(ctl_put(fd, "c", 1) == 0);
  }
  side_close(&s);
}

/* ---------------- flush ---------------- */
void case_flush(int role, int fd)
{
  side_t s;
  info_t peer;
  struct ibv_wc wc;
  struct ibv_qp_attr a;
  char c;
  if (side_open(&s, 4096) != 0)
    return;
  CHECK(exchange(fd, &s, &peer) == 0);
  CHECK(connect_qp(&s, 0, &peer, OPTS_DEFAULT) == 0);
  if (role == 0) {
    for (uint64_t k = 0; k < 3; k++)
      CHECK(post_recv(&s, 0, 30 + k) == 0);
    for (uint64_t k = 0; k < 4; k++) /* B posts no receive: they wait (RNR) */
      CHECK(post_write(&s, 0, k, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 64, peer.addr, peer.rkey, 0,
                       IBV_SEND_SIGNALED) == 0);
    usleep(200 * 1000);
    CHECK(rm__ibv_poll_cq(s.scq, 1, &wc) == 0);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_ERR;
    CHECK(rm__ibv_modify_qp(s.qp[0], &a, IBV_QP_STATE) == 0);
    for (uint64_t k = 0; k < 4; k++)
      CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1 && wc.wr_id == k &&
            wc.status == IBV_WC_WR_FLUSH_ERR);
    for (uint64_t k = 0; k < 3; k++)
      CHECK(wait_cq(s.rcq, &wc, BOUND_MS) == 1 && wc.wr_id == 30 + k &&
            wc.status == IBV_WC_WR_FLUSH_ERR);
    CHECK(ctl_put(fd, "e", 1) == 0);
    CHECK(ctl_get(fd, &c, 1) == 0);
  } else {
    int64_t t0;
    CHECK(ctl_get(fd, &c, 1) == 0); /* A's QP is in ERR */
    t0 = now_ms();
    CHECK(post_write(&s, 0, 7, IBV_WR_RDMA_WRITE, 0, 64, peer.addr, peer.rkey, 0,
                     IBV_SEND_SIGNALED) == 0);
    CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1);
    CHECKF(wc.wr_id == 7 && wc.status == IBV_WC_RETRY_EXC_ERR, "to a QP in ERR: %s",
           rm__ibv_wc_status_str(wc.status));
    CHECKF(now_ms() - t0 < BOUND_MS, "after %lld ms", (long long)(now_ms() - t0));
    CHECK(ctl_put(fd, "d", 1) == 0);
  }
  side_close(&s);
}

/* ---------------- send ---------------- */
void case_send(int role, int fd)
{
  side_t s;
  info_t peer;
  struct ibv_wc wc;
  char c;
  if (side_open(&s, 16384) != 0)
    return;
  if (role == 1)
    for (uint64_t k = 0; k < 2; k++) { /* two 4 KiB receive buffers */
      struct ibv_sge sge = {(uintptr_t)s.buf + k * 4096, 4096, s.mr->lkey};
      struct ibv_recv_wr wr, *bad;
      memset(&wr, 0, sizeof wr);
      wr.wr_id = 1 + k;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      CHECK(rm__ibv_post_recv(s.qp[0], &wr, &bad) == 0);
    }
  CHECK(exchange(fd, &s, &peer) == 0);
  CHECK(connect_qp(&s, 0, &peer, OPTS_DEFAULT) == 0);
  if (role == 0) {
    fill(s.buf, 8192, 11);
    CHECK(post_write(&s, 0, 1, IBV_WR_SEND_WITH_IMM, 0, 100, 0, 0, 77, IBV_SEND_SIGNALED) == 0);
    CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1);
    CHECKF(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND,
           "send: %s", rm__ibv_wc_status_str(wc.status));
    CHECK(post_write(&s, 0, 2, IBV_WR_SEND, 0, 5000, 0, 0, 0, IBV_SEND_SIGNALED) == 0);
    CHECK(wait_cq(s.scq, &wc, BOUND_MS) == 1);
    CHECKF(wc.wr_id == 2 && wc.status == IBV_WC_REM_INV_REQ_ERR, "send too long: %s",
           rm__ibv_wc_status_str(wc.status));
    CHECK(ctl_get(fd, &c, 1) == 0);
  } else {
    size_t bad;
    CHECK(wait_cq(s.rcq, &wc, BOUND_MS) == 1);
    CHECKF(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
               (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 77 && wc.byte_len == 100,
           "recv: %s len %u", rm__ibv_wc_status_str(wc.status), wc.byte_len);
    bad = verify(s.buf, 100, 11);
    CHECKF(bad == 100, "byte %zu differs", bad);
    CHECK(s.buf[100] == 0xEE);
    CHECK(wait_cq(s.rcq, &wc, BOUND_MS) == 1);
    CHECKF(wc.wr_id == 2 && wc.status == IBV_WC_LOC_LEN_ERR, "recv too short: %s",
           rm__ibv_wc_status_str(wc.status));
    CHECK(ctl_put(fd, "d", 1) == 0);
  }
  side_close(&s);
}
