/*
 * emu.h - TEST DOUBLE. librm_verbs_emu.so is an emulated libibverbs provider
 * for tests on machines without an RDMA NIC; it is not a transport, never
 * installed, and not linked into anything but loaded by tests through the
 * verbs table (worker/transport/rdma/ibvwrap.h, RINGMASTER_IBVERBS_LIB).
 *
 * It exports the ibv_* symbols the table resolves and hands out real
 * struct ibv_context / ibv_pd / ibv_mr / ibv_cq / ibv_qp objects whose
 * context->ops.post_send / post_recv / poll_cq are set, so the inline
 * dispatch of verbs.h works on them.
 *
 * What it emulates (between processes on one host):
 *   device  "emu0", one port, ACTIVE, link layer Ethernet (RoCE-like: the
 *           address vector must carry a GRH, lid 0), one GID per context:
 *             fe80:0000:0000:0000 : 'r' 'm' : pid (4 bytes BE) : ctx id (2 BE)
 *           The GID is the locator: the context listens on the abstract
 *           Unix socket "\0rm-verbs-emu.<pid hex>.<ctx id hex>" (nothing in
 *           /tmp or /dev/shm, gone when the process is).
 *   PD, MR  any user memory (not pinned, not checked for validity), lkey ==
 *           rkey, unique per process; iova as given (ibv_reg_mr: = addr).
 *   CQ      a ring of cqe entries; poll never waits (a short mutex only).
 *   RC QP   RESET -> INIT -> RTR -> RTS (and ERR / RESET from any state)
 *           with the attribute masks of the IB spec (the kernel's
 *           ib_modify_qp_is_ok table); dest_qp_num + ah_attr.grh.dgid name
 *           the peer. Ops: RDMA_WRITE, RDMA_WRITE_WITH_IMM, SEND,
 *           SEND_WITH_IMM; signaled / unsignaled / sq_sig_all; inline sends.
 *
 * Files: emu_device.c (device, context, queries), emu_mem.c (PD, MR, CQ),
 * emu_qp.c (QP verbs), emu_progress.c (the thread's loop),
 * emu_requester.c / emu_responder.c (the two ends of a request channel).
 *
 * Mechanism: every QP in RTS opens one stream connection to its peer's
 * context listener (its REQUEST channel: frames out, acks back), so a pair
 * of QPs has two connections, one per direction. A progress thread per
 * context (the "HCA") moves bytes with non-blocking I/O: the requester
 * writes a frame header plus the gathered payload; the responder validates
 * the header and reads the payload straight into the target MR (one copy,
 * no process_vm_writev), then acks. Wire format (host byte order, same
 * host only):
 *
 *   hello  32 B: magic "RMEH", src_qpn, dst_qpn, rnr_retry, pad[3], src_gid[16]
 *   frame  32 B: magic "RMEQ", seq, op, pad[3], len, raddr(8), rkey, imm
 *          then len payload bytes
 *   ack     8 B: seq, kind (OK, RNR_WAIT, NAK_ACCESS, NAK_RNR, NAK_INV,
 *          NAK_REMOP), pad[3]
 *
 * Error semantics (requester completion -> QP moves to ERR, every other
 * outstanding send and posted receive completes IBV_WC_WR_FLUSH_ERR; error
 * completions are generated even for unsignaled WRs; WRs posted to a QP in
 * ERR complete at once with IBV_WC_WR_FLUSH_ERR):
 *   bad rkey / out of bounds / MR or QP lacks REMOTE_WRITE
 *                  -> IBV_WC_REM_ACCESS_ERR (target memory untouched)
 *   no receive posted for WRITE_WITH_IMM / SEND: RETRY semantics - the
 *                  responder waits for a receive up to
 *                  rnr_timer(responder's min_rnr_timer) x requester's
 *                  rnr_retry (7 = forever; 0 = fail at once), then
 *                  -> IBV_WC_RNR_RETRY_EXC_ERR
 *   peer process gone (socket EOF / reset) -> IBV_WC_RETRY_EXC_ERR for
 *                  the oldest outstanding WR, at once (ms); a hung peer (or
 *                  a peer QP never reaching RTR) -> the same after the ack
 *                  timeout 4.096 us x 2^timeout x (retry_cnt + 1), at least
 *                  EMU_ACK_FLOOR_MS (timeout 0 = never)
 *   bad lkey / range on a send WR -> IBV_WC_LOC_PROT_ERR
 *   SEND longer than the receive -> requester IBV_WC_REM_INV_REQ_ERR,
 *                  receive IBV_WC_LOC_LEN_ERR
 * A QP in ERR drops its connections, so the peer's sends then fail with
 * IBV_WC_RETRY_EXC_ERR, as they would on hardware after retries.
 *
 * Differences from hardware (tests must not rely on these):
 *   - peer death is seen at socket EOF, not after the retry timer;
 *   - a responder QP stays in its state after a NAK it sent;
 *   - receive-side completions of a dead peer never come (as on hardware);
 *   - memory is not pinned: deregistering or freeing an MR with WRs in
 *     flight on it is undefined here (hardware: protection error);
 *   - objects do not survive fork(): open the device in the process that
 *     uses it (real verbs without ibv_fork_init are no better);
 *   - no packets: a WR is one frame, PSNs and path_mtu are kept but unused,
 *     lkeys are checked when the WR is posted (hardware: when processed);
 *   - while the responder reports an RNR wait the requester's ack timer is
 *     paused, so a responder that hangs (SIGSTOP) during an RNR wait with
 *     rnr_retry 7 hangs the requester's WR (hardware: retry exceeded);
 *   - the CQ is a plain ring; completion channels, SRQs, UD, atomics,
 *     RDMA READ, memory windows and alternate paths are not emulated.
 * Environment: RM_VERBS_EMU_DEVICES=0 makes ibv_get_device_list empty;
 * RM_VERBS_EMU_TRACE=1 traces connections, NAKs and QP errors to stderr.
 *
 * Locking: ctx->mu guards everything of a context (QPs, MRs, channels);
 * cq->mu (inner) guards a CQ ring. The progress thread holds ctx->mu except
 * while in poll(); poll_cq takes only cq->mu.
 */
#ifndef RM_TESTS_RDMA_EMU_H
#define RM_TESTS_RDMA_EMU_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define EMU_EXPORT __attribute__((visibility("default")))

#define EMU_MAX_WR 16384
#define EMU_MAX_SGE 16
#define EMU_MAX_INLINE 64
#define EMU_MAX_CQE 4194303
#define EMU_MAX_MSG (1u << 31)
#define EMU_MAX_PEND 1024   /* accepted connections awaiting their QP */
#define EMU_ACK_FLOOR_MS 3000 /* the progress thread may be starved on a busy host */
#define EMU_BUDGET (8u << 20) /* bytes moved per channel per loop turn */

enum { EMU_OP_WRITE = 1, EMU_OP_WRITE_IMM, EMU_OP_SEND, EMU_OP_SEND_IMM };
enum {
  EMU_ACK_OK = 0,
  EMU_ACK_RNR_WAIT,
  EMU_NAK_ACCESS,
  EMU_NAK_RNR,
  EMU_NAK_INV,
  EMU_NAK_REMOP
};
#define EMU_HELLO_MAGIC 0x48454d52u /* "RMEH" */
#define EMU_REQ_MAGIC 0x51454d52u   /* "RMEQ" */

struct emu_hello {
  uint32_t magic, src_qpn, dst_qpn;
  uint8_t rnr_retry, pad[3];
  uint8_t src_gid[16];
};
struct emu_req {
  uint32_t magic, seq;
  uint8_t op, pad[3];
  uint32_t len;
  uint64_t raddr;
  uint32_t rkey, imm;
};
struct emu_ack {
  uint32_t seq;
  uint8_t kind, pad[3];
};

struct emu_ctx;

struct emu_mr {
  struct ibv_mr mr; /* first: ibv_mr * <-> emu_mr * */
  uint64_t iova;
  int access;
  struct emu_mr *next;
};

struct emu_pd {
  struct ibv_pd pd;
  int nref; /* MRs + QPs */
};

struct emu_cq {
  struct ibv_cq cq;
  pthread_mutex_t mu;
  struct ibv_wc *ring;
  int cap, head, count, overrun;
  int nref; /* QPs using it */
};

/* a posted send WR (copied at post time) */
struct emu_swr {
  uint64_t wr_id;
  uint64_t raddr;
  uint32_t rkey, imm, len, seq;
  uint8_t op, signaled, loc_err;
  int nsge;
  struct ibv_sge *sge; /* qp->sq_sge + slot * max_send_sge (+1 for inline) */
  unsigned char inl[EMU_MAX_INLINE];
};
struct emu_rwr {
  uint64_t wr_id;
  uint32_t len;
  uint8_t loc_err;
  int nsge;
  struct ibv_sge *sge;
};

enum { OUT_NONE = 0, OUT_CONNECTING, OUT_UP, OUT_DEAD };
enum { IN_HDR = 0, IN_RNR, IN_PAYLOAD, IN_DRAIN, IN_DISCARD };

/* requester side: this QP's connection to the peer's listener */
struct emu_out {
  int fd, state, pidx;
  size_t hello_done, frame_done;
  struct emu_hello hello;
  unsigned char ack[sizeof(struct emu_ack)];
  size_t ack_got;
  int64_t last_ns; /* last progress while WRs were outstanding */
  int rnr_wait;    /* responder said it waits for a receive */
};
/* responder side: the peer's connection to us, attached after its hello */
struct emu_in {
  int fd, phase, pidx;
  uint8_t peer_rnr_retry, verdict;
  struct emu_req req;
  size_t req_got;
  uint64_t done;
  int64_t rnr_since;
  unsigned char obuf[64 * sizeof(struct emu_ack)];
  size_t olen;
};

struct emu_qp {
  struct ibv_qp qp; /* first */
  struct emu_ctx *ctx;
  struct emu_qp *next;
  struct ibv_qp_cap cap;
  int sig_all;
  struct ibv_qp_attr attr; /* what modify_qp set (query_qp) */
  /* SQ: seq numbers head <= sent <= tail; reclaim <= head: slots of
   * unsignaled WRs are free only once a later completion is generated */
  struct emu_swr *sq;
  struct ibv_sge *sq_sge;
  uint32_t sq_reclaim, sq_head, sq_sent, sq_tail;
  struct emu_rwr *rq;
  struct ibv_sge *rq_sge;
  uint32_t rq_head, rq_tail;
  struct emu_out out;
  struct emu_in in;
};

struct emu_pend {
  int fd, pidx;
  size_t got;
  struct emu_hello h;
};

struct emu_ctx {
  struct ibv_context ctx; /* first */
  pthread_mutex_t mu;
  pthread_t thr;
  int stop, lfd, wfd, lpidx, wpidx;
  uint16_t id;
  union ibv_gid gid;
  struct emu_qp *qps;
  struct emu_mr *mrs;
  struct emu_pend pend[EMU_MAX_PEND];
  int npend;
  char scratch[64 << 10]; /* discarded payload bytes (progress thread) */
};

#define EMU_CTX(c) ((struct emu_ctx *)(c))

/* emu_device.c */
/* RM_VERBS_EMU_TRACE=1: one stderr line per state change (debugging). */
void emu_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int64_t emu_now_ns(void);
void emu_wake(struct emu_ctx *c);
/* MR of this context with key `key` (lkey == rkey), or NULL (ctx->mu). */
struct emu_mr *emu_mr_find(struct emu_ctx *c, uint32_t key);
/* Whether [addr, addr + len) lies in mr's iova range, overflow-safe. */
int emu_mr_covers(const struct emu_mr *m, uint64_t addr, uint64_t len);
/* Append a completion; sets overrun when the ring is full. */
void emu_cq_push(struct ibv_cq *cq, const struct ibv_wc *wc);
void emu_gid_make(union ibv_gid *gid, uint32_t pid, uint16_t id);
/* Parse an emulator GID; 0 when it is one. */
int emu_gid_parse(const union ibv_gid *gid, uint32_t *pid, uint16_t *id);
void emu_sock_name(char *buf, size_t len, uint32_t pid, uint16_t id, size_t *addrlen);

/* emu_qp.c */
/* QP -> ERR: the oldest outstanding send completes with head_status (when
 * >= 0), every other WR with IBV_WC_WR_FLUSH_ERR; connections are closed. */
void emu_qp_to_err(struct emu_qp *q, int head_status);
/* Complete the oldest outstanding send WR successfully. */
void emu_sq_complete_head(struct emu_qp *q);
void emu_channels_close(struct emu_qp *q);
uint32_t emu_ibv_len(const struct ibv_sge *sge, int n);

/* emu_mem.c */
int emu_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc); /* context->ops.poll_cq */

/* emu_qp.c: context->ops.post_send / post_recv */
int emu_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int emu_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

/* emu_progress.c */
void *emu_progress_main(void *arg);
/* emu_requester.c (ctx->mu held) */
/* Start the request channel of a QP entering RTS. */
void emu_out_start(struct emu_qp *q);
void emu_out_service(struct emu_qp *q);
/* emu_responder.c (ctx->mu held); rev: the poll revents of q->in.fd */
void emu_in_service(struct emu_qp *q, short rev);
/* Accept new connections, read hellos, attach them to their QPs. */
void emu_pend_service(struct emu_ctx *c, const struct pollfd *pfd);

static inline int emu_again(void)
{
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

#endif
