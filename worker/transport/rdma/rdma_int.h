/*
 * rdma_int.h - private to the RDMA transport (worker/transport/rdma/).
 * Verbs are reached only through ibvwrap.h (dlopen; the library builds and
 * runs without rdma-core). Files: rdma_dev.c (probe, offer, device,
 * reg_mr / dereg_mr for the interface's cache, transport/mr.h), rdma_connect.c (bootstrap handshake), rdma_qp.c
 * (QPs, HELLO, control-frame helpers), rdma_progress.c (data path, ops
 * table), rdma_ctl.c (control channels, WAIT bookkeeping).
 *
 * Topology. One RC queue pair per pair of ranks that RDMA carries, one CQ
 * (send and receive) per communicator, one protection domain per
 * communicator. Every pair also keeps its TCP bootstrap connection open as
 * its CONTROL CHANNEL (BYE, ABORT, WAIT, and end of stream = peer lost).
 * The endpoint (offer(), rdma_dev.c) keeps only the bootstrap listener: the
 * device is opened per communicator in connect_all, because an endpoint may
 * be created before fork() (tests/lib does) and verbs objects do not
 * survive a fork.
 *
 * Token: "rdma:<fabric>/<ipv4>:<port>": <fabric> is the 16 hex digits of
 * the GID subnet prefix of the port used (RINGMASTER_RDMA_FABRIC overrides
 * it; the emulator's prefix is the constant fe80::, so every process on a
 * host agrees), <ipv4>:<port> the bootstrap listener. IPv6 endpoints offer
 * no rdma token (':' is allowed in tokens but '[' is not).
 *
 * Bootstrap (rdma_connect.c): the LOWER rank connects to the higher rank's
 * listener and sends HELLO, the higher answers with its HELLO, the lower
 * moves its QP to RTS and sends READY; the higher marks the pair usable on
 * READY (so no rank writes to a QP that is not yet in RTR). HELLO, 96
 * bytes, little-endian:
 *
 *   offset size field
 *        0    4 magic    "RMRH"
 *        4    2 version  RM__RDMA_VERSION
 *        6    2 flags    1 = reply
 *        8    8 job
 *       16    8 generation
 *       24    4 rank     sender's rank
 *       28    4 world
 *       32    4 qpn      the sender's QP for this pair
 *       36    4 psn      its initial send PSN
 *       40   16 gid      port GID (grh.dgid)
 *       56    2 lid      (InfiniBand without GRH)
 *       58    1 mtu      enum ibv_mtu of the sender's port
 *       59    1 pad
 *       60    4 slots    CTS ring slots the sender accepts (its credits)
 *       64    8 ring     address of the sender's CTS ring for this pair
 *       72    4 rkey     of that ring
 *       76   20 reserved (zero)
 *
 * Keyed communicators (transport/hello_auth.c): byte 7 (the high byte of
 * flags) is 1 and 64 bytes follow the 96:
 *
 *   offset size field
 *       96   32 nonce    fresh random, the sender's (nonce_d / nonce_l)
 *      128   32 mac      reply: MAC(K, 'L', ...); the dialer's HELLO: zero
 *
 * then the dialer sends PROOF (control type 5, a=b=0) followed by 32 bytes
 * MAC(K, 'D', ...), and the listener, once that checks out, connects its
 * QP and sends READY (the other way round from an unkeyed bootstrap, where
 * the dialer sends READY). A keyed rank refuses an unkeyed HELLO and the
 * reverse.
 *
 * A HELLO from another job or generation, a bad magic/version or a rank
 * that must not connect is logged and the connection closed; init goes on
 * (the active side retries until connect_timeout_ms).
 *
 * Control frames on the bootstrap socket, 32 bytes little-endian:
 *   0 magic "RMRC" | 4 type | 8 a | 16 b | 24 generation
 *   READY 1 (a=b=0), BYE 2, ABORT 3 (a = status, b = blamed rank + 1),
 *   WAIT 4 (a = collective seq, b = awaited rank + 1; as TCP's WAIT).
 * End of stream without BYE: RM_ERR_PEER_LOST naming the peer (a SIGKILLed
 * rank is seen at once through this, long before any RDMA retry timer).
 *
 * Data: clear-to-send, zero copy (rdma_progress.c). For each posted receive
 * the receiver registers the buffer (transport/mr.h's cache) and writes a CTS
 * record into the sender's CTS ring with RDMA WRITE WITH IMMEDIATE
 * (imm = CTS | slot). The sender matches CTSs to its sends in FIFO order,
 * checks (seq, tag, len) - a mismatch is RM_ERR_PROTOCOL naming the peer,
 * and nothing is written - and RDMA WRITEs the payload straight into the
 * posted buffer in chunks of CHUNK bytes, the last one WITH IMMEDIATE
 * (imm = DATA | slot | seq low bits), which completes the receive. CTS
 * record (48 bytes): magic "RMCT", slot, seq, tag, len, addr, rkey.
 * Credits: a receiver has at most `slots` CTSs whose data has not arrived
 * (more receives wait in its queue); slot k is reused only after the data
 * answering CTS k arrived, which the sender wrote only after reading slot
 * k, so a slot is never overwritten unread. Receive WRs (no SGE) are
 * pre-posted 2 x slots + 8 per QP and reposted on each completion: at most
 * `slots` CTSs plus `slots` data writes can be in flight toward a QP.
 *
 * Invariants:
 *  1. payload lands only in a posted receive buffer, registered with
 *     REMOTE_WRITE for exactly as long as its CTS is outstanding (pinned
 *     in the cache: an entry in use is never evicted);
 *  2. send completions arrive in posting order per QP (RC), so the send
 *     queue's head is the request the next DATA completion belongs to;
 *  3. close_all moves every QP to ERR before returning, so no peer writes
 *     into a buffer whose owner may free it afterwards;
 *  4. a work-completion error is not blamed at once: for GRACE_MS the
 *     control channels are watched for the ABORT or end of stream that
 *     names the rank that failed first (the QP of a rank that aborted
 *     breaks too, and it is only a messenger).
 */
#ifndef RM_WORKER_RDMA_INT_H
#define RM_WORKER_RDMA_INT_H

#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/comm_int.h"
#include "transport/mr.h"
#include "transport/rdma/ibvwrap.h"

#define RM__RDMA_VERSION 1
#define RM__RDMA_HELLO_MAGIC 0x48524d52u /* "RMRH" */
#define RM__RDMA_CTL_MAGIC 0x43524d52u   /* "RMRC" */
#define RM__RDMA_CTS_MAGIC 0x54434d52u   /* "RMCT" */
#define RM__RDMA_HELLO 96
#define RM__RDMA_CTL 32
#define RM__RDMA_SLOTS 64         /* CTS slots per pair (credits) */
#define RM__RDMA_REC 64           /* bytes per CTS slot */
#define RM__RDMA_RQ (2 * RM__RDMA_SLOTS + 8)
#define RM__RDMA_SQ 256
#define RM__RDMA_CHUNK (1u << 20)

enum { RM__RC_READY = 1, RM__RC_BYE = 2, RM__RC_ABORT = 3, RM__RC_WAIT = 4,
       RM__RC_PROOF = 5 };
/* immediate: type in bits 31..30, slot in 29..16, seq low 16 bits */
enum { RM__IMM_CTS = 1, RM__IMM_DATA = 2 };
/* wr_id: peer in bits 63..40, kind in 39..32, bytes in 31..0 */
enum { RM__WR_RECV = 1, RM__WR_CTS = 2, RM__WR_DATA = 3, RM__WR_LAST = 4 };

/* ---- rdma_dev.c: probe, endpoint, device, memory registration ---- */

/* What the once-per-process probe found (the device is reopened per
 * communicator by name). */
typedef struct rm__rdma_probe {
  int ok;
  char dev[64];
  uint8_t port;
  int gid_index;
  char fabric[24];
} rm__rdma_probe_t;

const rm__rdma_probe_t *rm__rdma_probe(void);
int rm__rdma_available(void);
int rm__rdma_offer(const char *host, char *tok, size_t n, void **state);
void rm__rdma_offer_close(void *state);
/* The endpoint's bootstrap listener fd (-1 if none). */
int rm__rdma_listen_fd(const rm_comm_t *c);

/* ---- per request (transport-private bytes) ---- */
typedef struct rm__rdma_req {
  rm__mr_t *mr;       /* held registration (len > 0), else NULL */
  uint64_t raddr;     /* sends: the receiver's buffer (from the CTS) */
  uint32_t rkey;
  uint32_t slot;      /* the CTS slot it answers / was announced in */
  size_t posted;      /* sends: payload bytes handed to the QP */
  int stage;          /* sends: 0 waiting CTS, 1 writing, 2 all posted;
                       * receives: 0 queued, 1 CTS written */
} rm__rdma_req_t;
_Static_assert(sizeof(rm__rdma_req_t) <= RM__REQ_TP_BYTES, "rdma request state");

static inline rm__rdma_req_t *rm__rdma_req(rm__req_t *r)
{
  return (rm__rdma_req_t *)(void *)r->tp.bytes;
}

typedef struct rm__rdma_conn {
  int active, peer, ready;
  int fd;                        /* control channel, -1 when closed */
  struct ibv_qp *qp;
  uint32_t rslots;               /* peer's CTS slots */
  uint64_t rring;                /* peer's CTS ring for us */
  uint32_t rring_rkey;
  unsigned char *ring;           /* our CTS ring for this peer (peer writes) */
  unsigned char *cts_out;        /* staging of the CTSs we write to it */
  /* sends: sq = waiting for CTS or being written (FIFO, completions in
   * order); cts_in counts CTS records arrived, cts_used those matched */
  rm__req_t *sq_head, *sq_tail;
  uint64_t cts_in, cts_used;
  /* receives: rq = all posted, FIFO; the first cts_out_n of them have a
   * CTS written (data answers them in order) */
  rm__req_t *rq_head, *rq_tail;
  uint64_t cts_sent, data_in;
  int sq_inflight;               /* send WRs not completed */
  int bye, rd_eof;
  int64_t left_ns;               /* BYE + end of stream with requests
                                  * pending: completions may still come */
  unsigned char ibuf[RM__RDMA_CTL];
  int igot;
  unsigned char obuf[8 * RM__RDMA_CTL];
  int olen;
  int waits_on;
  uint64_t waits_seq;
  int64_t waits_ns;
} rm__rdma_conn_t;

struct rm__rdma_state {
  rm__rdma_conn_t *conns;        /* world entries */
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_port_attr port;
  union ibv_gid gid;
  unsigned char *ctl;            /* rings + staging of every peer */
  size_t ctl_len;
  struct ibv_mr *ctl_mr;
  struct pollfd *pfds;           /* world + 1 (wake) */
  int *pfd_peer;
  int closed, spin_us;
  /* invariant 4: a completion error waiting for its root cause */
  int err_peer, err_flush;
  rm_status_t err_st;
  int64_t err_ns;
  char err_msg[200];
};

static inline struct rm__rdma_state *rm__rdma(const rm_comm_t *c)
{
  return (struct rm__rdma_state *)c->tstate[RM__TP_RDMA];
}

/* Open the device / PD / CQ of the probe and the control region; frees
 * nothing on failure (rm__rdma_state_free does). */
rm_status_t rm__rdma_dev_open(rm_comm_t *c, struct rm__rdma_state *s);
void rm__rdma_state_free(rm_comm_t *c);
/* Memory registration (the transport's reg_mr / dereg_mr; the cache is
 * the interface's, transport/mr.h). rm__rdma_reg: the registration of a
 * request's buffer, held until rm__mr_release; NULL with errno and *st. */
rm_status_t rm__rdma_reg_mr(rm_comm_t *c, void *addr, size_t len, int need_write, void **mh,
                            int *writable);
void rm__rdma_dereg_mr(rm_comm_t *c, void *mh);
static inline rm__mr_t *rm__rdma_reg(rm_comm_t *c, void *buf, size_t len, int need_write,
                                     rm_status_t *st)
{
  return rm__mr_acquire(c, RM__TP_RDMA, buf, len, need_write, st);
}
static inline struct ibv_mr *rm__rdma_ibv_mr(const rm__mr_t *m)
{
  return (struct ibv_mr *)rm__mr_handle(m, RM__TP_RDMA);
}

/* ---- rdma_connect.c ---- */
rm_status_t rm__rdma_connect_all(rm_comm_t *c);

/* ---- rdma_qp.c ---- */
/* Create the QP of k, INIT, receive WRs posted; 0 or -1 (errno). */
int rm__rdma_qp_create(struct rm__rdma_state *s, rm__rdma_conn_t *k);
void rm__rdma_hello_encode(const rm_comm_t *c, const rm__rdma_conn_t *k, uint32_t psn,
                           int reply, unsigned char *b);
/* NULL when HELLO b is good (*rank = its sender), else why. */
const char *rm__rdma_hello_check(const rm_comm_t *c, const unsigned char *b, int reply,
                                 int *rank);
/* INIT -> RTR -> RTS toward the sender of HELLO b; 0 or -1 (errno). */
int rm__rdma_qp_connect(rm_comm_t *c, rm__rdma_conn_t *k, uint32_t psn,
                        const unsigned char *b);
/* Peer p's bootstrap address from its offer; 0 or -1. */
int rm__rdma_peer_boot(const rm_comm_t *c, int p, struct sockaddr_in *sa);
/* Non-blocking best effort: queue a control frame and flush what fits. */
void rm__rdma_ctl_send(rm_comm_t *c, rm__rdma_conn_t *k, uint32_t type,
                       uint64_t a, uint64_t b);
int rm__rdma_ctl_flush(rm__rdma_conn_t *k);
void rm__rdma_ctl_encode(const rm_comm_t *c, unsigned char *out, uint32_t type,
                         uint64_t a, uint64_t b);
/* Post a receive WR (no SGE) for peer; 0 or an errno. */
int rm__rdma_post_recv(rm__rdma_conn_t *k);
/* Move the QP to ERR (close_all: invariant 3). */
void rm__rdma_qp_err(rm__rdma_conn_t *k);

/* ---- rdma_progress.c / rdma_ctl.c ---- */
#define RM__RDMA_GRACE_MS 200
/* rm__comm_fail with "peer rank P (addr, rdma): ..." */
rm_status_t rm__rdma_conn_fail(rm_comm_t *c, int peer, rm_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline int rm__rdma_pending(const rm__rdma_conn_t *k)
{
  return k->sq_head != NULL || k->rq_head != NULL;
}
/* ppoll() the control sockets and c->wake_fd for at most us; serve frames. */
rm_status_t rm__rdma_ctl_poll(rm_comm_t *c, struct rm__rdma_state *s, int64_t us);
void rm__rdma_stalled(rm_comm_t *c, int on, uint64_t seq, int64_t since_ns);
int rm__rdma_waits_on(const rm_comm_t *c, int peer, int64_t since_ns, uint64_t *seq);
int rm__rdma_left(const rm_comm_t *c, int peer);

#endif
