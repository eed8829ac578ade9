/*
 * tcp_int.h - private to the TCP transport (worker/transport/tcp/).
 *
 * Topology: one full-duplex TCP connection per unordered pair of ranks that
 * TCP carries (transport.c picks per pair; pairs on one host usually go over
 * shared memory). Rank i actively connects to every such rank j < i and
 * accepts from every such j > i; the handshake (tcp_connect.c) identifies
 * the accepted side and refuses a HELLO from a rank whose pair is not TCP.
 *
 * Wire format. Every message is a fixed 48-byte header, followed by `length`
 * payload bytes for DATA frames only. All integers little-endian.
 *
 *   offset size field       DATA           HELLO        BYE  ABORT         WAIT
 *   ------ ---- ----------- -------------- ------------ ---- ------------- -------------
 *        0    4 magic       "RMFR" (0x52 0x4d 0x46 0x52)
 *        4    2 version     RM__TCP_VERSION (2)
 *        6    2 type        1              2            3    4             5
 *        8    8 job id      comm job       comm job     job  job           job
 *       16    8 generation  comm gen       comm gen     gen  gen           gen
 *       24    8 seq         collective seq sender rank  0    status code   collective seq
 *       32    8 tag         element offset world size   0    failed rank+1 awaited rank+1
 *       40    8 length      payload bytes  0 / 32 / 64  0    0             0
 *
 *   AUTH (type 6): job, generation, seq = sender rank, tag = world size,
 *   length 32: the dialer's proof of membership, last step of a keyed
 *   handshake.
 *
 * Keyed handshake (the communicator has a data-plane key; MAC and its
 * inputs: transport/hello_auth.c). The bytes after a HELLO or AUTH header
 * are counted in its length:
 *
 *   step  from      header  offset size after the header
 *   ----  --------  ------  ------ ---- ------------------------------------
 *   1     dialer    HELLO   48     32   nonce_d (fresh, random)
 *   2     listener  HELLO   48     32   nonce_l (fresh, random)
 *                           80     32   MAC(K, 'L', ..., nonce_d, nonce_l)
 *   3     dialer    AUTH    48     32   MAC(K, 'D', ..., nonce_d, nonce_l)
 *
 * Without a key every HELLO has length 0 and there is no step 3 (two 48-byte
 * HELLOs, as in version 2 before keys). A keyed rank refuses a HELLO of
 * length 0, an unkeyed one a HELLO of length 32: both sides of a job get
 * the key from the same Join answers, so a mismatch is an outsider or a
 * misconfiguration, named in the log.
 *
 * Rules (a frame that breaks one is an error on that connection, naming it):
 *  - magic or version wrong, unknown type, job or length differs from what
 *    the posted receive expects, seq or tag differs: RM_ERR_PROTOCOL;
 *  - generation differs from the communicator's: RM_ERR_STALE_GENERATION;
 *  - HELLO is only valid during the handshake; BYE announces a graceful
 *    close (the end of stream that follows is not a failure); ABORT carries
 *    the sender's sticky failure (status, rank it blames) and ends the stream;
 *  - WAIT says "I am alive, inside the library, blocked on rank tag-1 in
 *    collective seq". While one of its waits has seen no progress for a
 *    quarter of its deadline (transport.c), a rank sends it every quarter
 *    to the rank it waits on and to the ranks that told it they wait on it,
 *    so a rank stalled on it can tell a rank that is stuck (sends nothing)
 *    from one that is itself waiting on a third rank, and blame the right
 *    one. It may come between any two frames; it is never a payload;
 *  - end of stream or reset without a BYE first: RM_ERR_PEER_LOST (a reset
 *    after BYE is a clean leave: a peer that closes with frames unread,
 *    e.g. our WAITs, resets the connection instead of ending it).
 *
 * Flow control: a DATA payload is read only straight into a posted receive
 * buffer (zero copy). Without a posted receive the connection reads at most
 * the next header and then stops reading, so TCP back-pressure stalls the
 * sender: a send completes when its bytes are in the kernel, and a large send
 * to a peer that never posts the receive does not complete (post receives
 * before waiting on sends, e.g. rm__sendrecv).
 *
 * Control frames inside a read: a header is read together with the start
 * of the posted receive's buffer (one readv). When that header turns out to
 * be a control frame (WAIT, BYE), the bytes that went into the buffer belong
 * to the frames after it: up to 48 go back into rhdr and the rest stay at
 * the start of the buffer, counted in `carry`, until the DATA header they
 * follow is checked (tcp_progress.c reclaim()).
 */
#ifndef RM_WORKER_TCP_INT_H
#define RM_WORKER_TCP_INT_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "comm/comm_int.h"
#include "transport/hello_auth.h"

#define RM__TCP_HDR 48
#define RM__TCP_VERSION 2
#define RM__TCP_MAGIC 0x52464d52u /* "RMFR" read as little-endian u32 */

typedef enum {
  RM__FRAME_DATA = 1,
  RM__FRAME_HELLO = 2,
  RM__FRAME_BYE = 3,
  RM__FRAME_ABORT = 4,
  RM__FRAME_WAIT = 5,
  RM__FRAME_AUTH = 6
} rm__frame_type_t;

typedef struct rm__frame {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint64_t job;
  uint64_t generation;
  uint64_t seq;
  uint64_t tag;
  uint64_t length;
} rm__frame_t;

/* A request's TCP state, in its transport-private bytes (transport.h). */
typedef struct rm__tcp_req {
  unsigned char hdr[RM__TCP_HDR]; /* the frame header (sends) */
  int hdr_done;                   /* header bytes moved so far */
} rm__tcp_req_t;
_Static_assert(sizeof(rm__tcp_req_t) <= RM__REQ_TP_BYTES,
               "TCP request state must fit the transport-private bytes");

static inline rm__tcp_req_t *rm__tcp_req(rm__req_t *r)
{
  return (rm__tcp_req_t *)(void *)r->tp.bytes;
}

/* tcp_frame.c */
void rm__frame_encode(const rm__frame_t *f, unsigned char out[RM__TCP_HDR]);
void rm__frame_decode(const unsigned char in[RM__TCP_HDR], rm__frame_t *f);
/* A header with (magic, version, type, job, generation) of c. */
void rm__frame_init(rm__frame_t *f, const rm_comm_t *c, rm__frame_type_t t);
/* Check magic, version, type range; RM_OK or RM_ERR_PROTOCOL with a reason. */
rm_status_t rm__frame_check(const rm__frame_t *f, const char **why);

/* One connection (one peer). Queues hold borrowed requests (transport.h). */
typedef struct rm__tcp_conn {
  int fd;                /* -1 when not connected / closed */
  int peer;
  rm__req_t *sq_head, *sq_tail; /* sends, FIFO */
  rm__req_t *rq_head, *rq_tail; /* receives, FIFO */
  unsigned char rhdr[RM__TCP_HDR]; /* header being read ahead */
  int rhdr_got;
  int send_mid_frame;    /* 1 while a frame is partly written */
  int bye;               /* peer announced a graceful close */
  int rdhup;             /* peer shut its write side; stop asking POLLRDHUP */
  int rd_dry;            /* last read came back short or EAGAIN: the socket
                          * is drained, wait for POLLIN before reading again */
  int wr_full;           /* last write came back short or EAGAIN: wait for
                          * POLLOUT before writing again */
  size_t carry;          /* stream bytes parked at the start of the head
                          * receive's buffer after a control frame */
  int waits_on;          /* rank the peer's last WAIT named, -1 = none */
  uint64_t waits_seq;    /* collective that WAIT was sent from */
  int64_t waits_ns;      /* when it arrived (rm__now_ns) */
  rm__req_t ctl;         /* our WAIT to this peer; queued at most once */
  int ctl_queued;        /* ctl is in sq (until it completes) */
} rm__tcp_conn_t;

struct rm__tcp_state {
  rm__tcp_conn_t *conns; /* world entries; conns[rank].fd == -1 */
  struct pollfd *pfds;   /* world + 2 (wake fd, poll bell) */
  int *pfd_peer;         /* pfds index -> peer */
  int nfixed;            /* pfds before the connections: 1, 2 with bell */
  int closed;            /* close_all ran */
  int spin_us;           /* poll(0) this long before a blocking poll */
  int yield_us;          /* oversubscribed: poll(0) + sched_yield this long */
};

static inline struct rm__tcp_state *rm__tcp(const rm_comm_t *c)
{
  return (struct rm__tcp_state *)c->tstate[RM__TP_TCP];
}

/* tcp_endpoint.c: socket helpers shared by endpoint and handshake. */
int rm__tcp_set_opts(int fd); /* TCP_NODELAY, buffers; 0 or -1 */
/* Resolve "host:port" to a sockaddr; 0 or -1 (msg in why). */
int rm__tcp_resolve(const char *addr, struct sockaddr_storage *ss,
                    socklen_t *sslen, char *why, size_t whylen);
/* Listening socket of an endpoint (-1 if none). */
int rm__endpoint_fd(const rm_endpoint_t *ep);
/* Connections accepted for a later generation, kept on the endpoint: push
 * one (fd + its HELLO), or take one whose generation matches (fd or -1). */
/* The nonce after a keyed HELLO travels with it (zeros when length 0). */
int rm__endpoint_stash(rm_endpoint_t *ep, int fd, const rm__frame_t *hello,
                       const unsigned char nonce[RM__AUTH_NONCE]);
int rm__endpoint_take(rm_endpoint_t *ep, uint64_t job, uint64_t gen,
                      rm__frame_t *hello, unsigned char nonce[RM__AUTH_NONCE]);

/* tcp_connect.c */
rm_status_t rm__tcp_connect_all(rm_comm_t *c);
/* tcp_progress.c */
rm_status_t rm__tcp_state_new(rm_comm_t *c);
void rm__tcp_state_free(rm_comm_t *c);

#endif
