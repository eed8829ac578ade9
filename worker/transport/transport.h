/*
 * transport.h - the one interface between collectives and the wire.
 *
 * Algorithms (worker/collectives/) see peers only through the request API
 * below: post non-blocking sends and receives to a peer rank, then wait.
 * They never see sockets, frames or which transport carries a pair.
 *
 * Message matching: between one ordered pair of ranks, messages are matched
 * strictly in posting order (FIFO per direction). Every message carries the
 * communicator's current collective sequence number and a `tag` (algorithms
 * pass the element offset of the block it carries); the receiver checks both
 * and the length against what it posted, and a mismatch is RM_ERR_PROTOCOL on
 * that connection, never a write past the posted buffer.
 *
 * Progress: requests advance only inside rm__wait / rm__waitall / rm__test
 * (single-threaded progress engine per communicator; the caller's thread).
 * All posted requests of the communicator progress in any of these calls,
 * so a rank sends and receives at once. Payload lands only in posted
 * receive buffers; what a transport holds for a receive nobody posted yet
 * is bounded (TCP: the socket buffers; shared memory: the ring), so a large
 * send completes only once the peer posts the matching receive: post
 * receives before waiting on sends (rm__sendrecv does).
 *
 * Transports. Each pair of ranks is carried by one transport, chosen from
 * what both ranks offered (c->offers, common/rm_transports.h): shared
 * memory (transport/shm/) between ranks of one host, RDMA (transport/rdma/,
 * verbs through dlopen) between hosts on one fabric, TCP (transport/tcp/)
 * otherwise. The generic request fields above are all an algorithm sees;
 * each transport keeps its per-request state in req->tp and its
 * per-connection state in c->conns[peer].priv / c->tstate[id].
 *
 * Deadlines: a wait fails with RM_ERR_TIMEOUT when the request it waits for
 * sees no byte of progress for comm->timeout_ms (up to twice that when the
 * peer says it is itself blocked on a third rank; see transport.c); RM_ERR_PEER_LOST when the
 * peer's connection closes or resets; RM_ERR_ABORTED after rm_comm_abort().
 * Any failure is made sticky on the communicator (rm__comm_fail) and every
 * outstanding request fails with it.
 *
 * Lifetime: a request struct is owned by the caller and must stay put (not
 * be moved or freed) from post until it completes or the call that posted it
 * returns an error; buffers likewise.
 *
 * Transports implement rm__transport_ops_t (contract beside the struct);
 * rm__transport_select() walks the priority list and takes the first whose
 * can_connect() says yes for a pair.
 */
#ifndef RM_WORKER_TRANSPORT_H
#define RM_WORKER_TRANSPORT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"

struct rm__conn;

typedef enum { RM__REQ_SEND = 1, RM__REQ_RECV = 2 } rm__req_kind_t;

/* Bytes of per-request state private to the transport that carries the
 * request (TCP keeps its frame header there; see tcp_int.h). */
#define RM__REQ_TP_BYTES 64

/* A device message a transport moves by reference (transport ops dev_ref:
 * shared memory's CUDA IPC), set by device/stage.c on the request it
 * hands the transport:
 *   RM__DM_SEND: buf is device memory, final (its producer finished);
 *                handle/off name it for the peer (device/gpu.h ipc_get).
 *                The send completes when the receiver said it copied it.
 *   RM__DM_RECV: the data is for device memory; buf is a host buffer for
 *                a message that comes by value (a sender that did not or
 *                could not send by reference). When it comes by
 *                reference, the transport maps the sender's memory, sets
 *                src (the first byte of the message in this process) and
 *                completes the request without touching buf; the caller
 *                copies from src and then calls dev_ref_done. */
enum { RM__DM_SEND = 1, RM__DM_RECV = 2 };
typedef struct rm__dev_msg {
  int kind;
  unsigned char handle[64]; /* RM__IPC_HANDLE_BYTES (device/gpu.h) */
  uint64_t off;
  void *src;                /* RECV, OUT: set when it came by reference */
} rm__dev_msg_t;

typedef struct rm__req {
  /* set by the poster */
  int peer;
  rm__req_kind_t kind;
  void *buf;
  size_t len;
  uint64_t tag;
  /* owned by the transport */
  uint64_t seq;
  size_t done;     /* payload bytes moved so far */
  size_t ctl_moved; /* other bytes moved for it (headers, descriptors): with
                     * done, the meter of the wait deadline (transport.c) */
  int complete;    /* 1 when finished */
  rm_status_t status;
  struct rm__req *next; /* per-connection FIFO */
  /* device memory (worker/device/stage.c): the stage record carrying this
   * request while it is unfinished; NULL for host memory */
  struct rm__stage *stg;
  /* a device message for a transport with dev_ref (above); else NULL */
  rm__dev_msg_t *dm;
  /* transport-private; zeroed by post() before the transport sees it */
  union {
    unsigned char bytes[RM__REQ_TP_BYTES];
    uint64_t align_;
  } tp;
} rm__req_t;

/* Post a send of len bytes to peer. buf must stay valid until completion. */
rm_status_t rm__isend(rm_comm_t *c, int peer, const void *buf, size_t len,
                      uint64_t tag, rm__req_t *req);
/* Post a receive of exactly len bytes from peer. */
rm_status_t rm__irecv(rm_comm_t *c, int peer, void *buf, size_t len,
                      uint64_t tag, rm__req_t *req);
/* Drive progress until req completes (or fails / deadline / abort). */
rm_status_t rm__wait(rm_comm_t *c, rm__req_t *req);
/* Until all n complete. NULL entries are skipped. */
rm_status_t rm__waitall(rm_comm_t *c, rm__req_t *const *reqs, int n);
/* Make progress without blocking; *done = req->complete. */
rm_status_t rm__test(rm_comm_t *c, rm__req_t *req, int *done);
/* Progress every posted request, blocking at most timeout_ms for the first
 * byte to move (or the wake pipe / a transport's wake): the point-to-point
 * engine's loop (comm/p2p.c), which keeps its own deadlines. A failure
 * closes the transports and returns the sticky status. */
rm_status_t rm__progress(rm_comm_t *c, int timeout_ms);
/* The transport of the pair says peer closed its communicator. */
int rm__peer_left(const rm_comm_t *c, int peer);
/* Post both, wait both. Either peer may be -1 (skip that side). */
rm_status_t rm__sendrecv(rm_comm_t *c, int send_peer, const void *sbuf,
                         size_t slen, uint64_t stag, int recv_peer, void *rbuf,
                         size_t rlen, uint64_t rtag);

/* ---- transport plug-ins ---- */

/* Transports, in the default priority order (RINGMASTER_TRANSPORTS
 * reorders or restricts it; see transport.c). */
typedef enum {
  RM__TP_SHM = 0,
  RM__TP_RDMA = 1,
  RM__TP_TCP = 2,
  RM__TP_COUNT
} rm__tp_id_t;

/* Contract for every op (the progress engine is single-threaded per
 * communicator: every op runs on the thread inside rm__wait / rm__test /
 * rm_comm_init / rm_comm_destroy, except `wake`):
 *  - no op blocks longer than it says; post, stalled and waits_on never;
 *  - requests are borrowed (transport.h, Lifetime): a transport queues the
 *    pointer, never frees or copies it, and forgets every queued request in
 *    close_all (their owners may free them as soon as it returns);
 *  - a failure goes through rm__comm_fail with words that name the peer
 *    rank and its address, and the op returns the sticky status;
 *  - per-communicator state lives in c->tstate[id] (allocated by
 *    connect_all, freed by close_all when c->destroying), per-connection
 *    state in c->conns[peer].priv; the generic code only reads them. */
typedef struct rm__transport_ops {
  const char *name;
  rm__tp_id_t id;
  /* Probe once per process; return 0 when the transport can never be used
   * here (no device, no library). Must not block; says why once per
   * process (info for a missing device, debug otherwise). */
  int (*available)(void);
  /* Whether this transport can carry traffic between c->rank and peer; the
   * answer must be the same on both ranks of the pair (decided from what
   * both advertised: c->offers, rm__tp_offer_*). */
  int (*can_connect)(const rm_comm_t *c, int peer);
  /* Establish every connection whose c->conns[p].type is this transport,
   * within c->connect_timeout_ms. Must fail with a status naming the peer. */
  rm_status_t (*connect_all)(rm_comm_t *c);
  /* Queue a posted request on its connection; must not block. */
  rm_status_t (*post)(rm_comm_t *c, rm__req_t *req);
  /* Make progress on every connection; block at most timeout_ms (0 = poll),
   * and return early when `wake` is called. */
  rm_status_t (*progress)(rm_comm_t *c, int timeout_ms);
  /* Close every connection; tell peers why when `reason` != RM_OK. Runs
   * again (idempotent) from rm_comm_destroy with c->destroying set, which
   * frees everything. */
  void (*close_all)(rm_comm_t *c, rm_status_t reason);
  /* Tell rank `on`, and every peer that said (at or after since_ns) it
   * waits on us, that this rank is alive and blocked on `on` in collective
   * seq; must not block (queued, sent by progress). */
  void (*stalled)(rm_comm_t *c, int on, uint64_t seq, int64_t since_ns);
  /* The rank `peer` last said it is blocked on, if it said so at or after
   * since_ns (rm__now_ns clock); else -1. *seq = its collective. */
  int (*waits_on)(const rm_comm_t *c, int peer, int64_t since_ns,
                  uint64_t *seq);
  /* 1 when `peer` closed its communicator (its BYE or ABORT, as far as
   * this rank has seen); must not block. NULL: never says. */
  int (*left)(const rm_comm_t *c, int peer);
  /* Any thread, async-signal-safe in spirit (no locks, no allocation):
   * make a progress call blocked in this transport return soon (abort).
   * NULL when the transport blocks only in poll() on c->wake_fd. */
  void (*wake)(rm_comm_t *c);
  /* Optional (NULL: the transport only ever waits inside its own
   * progress): for a transport whose own wait cannot be poll()ed (shm's
   * futex) when another transport in use is about to block in poll() with
   * c->bell_fd in its set (transport.c, "Waiting on several transports").
   * park(c, ms, &ok_ms) tells this transport's peers that a wake of this
   * rank must also make c->bell_fd readable, then makes one pass like
   * progress(c, 0). *ok_ms = how long the caller may block now: 0 when the
   * pass moved something (nothing is announced then), else at most ms
   * (less where the transport must look again sooner, or cannot make
   * c->bell_fd readable). unpark withdraws the announcement. Neither
   * blocks. */
  rm_status_t (*park)(rm_comm_t *c, int ms, int *ok_ms);
  void (*unpark)(rm_comm_t *c);
  /* Optional (NULL: the token is built by offer.c, as for shm and tcp):
   * the token this transport adds to a new endpoint's offer, for an
   * endpoint bound to `host` (the host part of its TCP address). Writes a
   * token without spaces into tok (charset of common/rm_transports.h) and
   * may keep per-endpoint state in *state (a bootstrap listener, an opened
   * device), reached later through rm__endpoint_tp_state(c->endpoint, id).
   * 0 = nothing to offer (no device; logged at info once). Runs inside
   * rm_endpoint_open; must not block longer than a device query. */
  int (*offer)(const char *host, char *tok, size_t n, void **state);
  /* Frees what offer() kept; from rm_endpoint_close. */
  void (*offer_close)(void *state);
  /* Optional (NULL: this transport moves any memory as it is): register
   * [addr, addr + len) (page-aligned) with this communicator's transport
   * state and set *mh to the handle. need_write: receives land there by
   * remote write; without it the transport may register a range that
   * allows less (read-only memory, good to send from) and says which in
   * *writable. Only the registration cache calls it (transport/mr.h: a
   * transport asks rm__mr_acquire for its requests' handles); it may take
   * as long as pinning pages does. Fails with a status and errno set,
   * without rm__comm_fail (the caller decides what the failure means). */
  rm_status_t (*reg_mr)(rm_comm_t *c, void *addr, size_t len, int need_write, void **mh,
                        int *writable);
  /* Releases a handle of reg_mr; called before close_all frees the state
   * (rm_comm_destroy deregisters everything first). */
  void (*dereg_mr)(rm_comm_t *c, void *mh);
  /* Optional (NULL: never): 1 when device messages between this rank and
   * peer may travel by reference (rm__dev_msg_t above: the receiver maps
   * the sender's device memory and copies device to device; shared
   * memory's CUDA IPC between processes of one host). Both ranks of the
   * pair must answer alike (decided from both offers). */
  int (*dev_ref)(const rm_comm_t *c, int peer);
  /* With dev_ref: the receiver finished copying the message that came by
   * reference from peer (its request's dm->src), so the sender's send
   * completes. In arrival order per peer. Fails (sticky, naming the peer)
   * when the sender closed or died before the copy ended: its memory may
   * have been reused under the copy. */
  rm_status_t (*dev_ref_done)(rm_comm_t *c, int peer);
  /* Optional (NULL: never): 1 when this transport moves device memory of
   * the pair with peer itself, as it moves host memory (GPUDirect RDMA:
   * reg_mr registers device memory with the NIC). device/stage.c then
   * hands it device buffers: a send once the data is final, a receive once
   * nothing queued on the GPU still reads the range (the NIC writes
   * outside any stream). Each rank decides for itself: the wire is the
   * same either way. */
  int (*dev_direct)(const rm_comm_t *c, int peer);
} rm__transport_ops_t;

extern const rm__transport_ops_t rm__tcp_transport;
extern const rm__transport_ops_t rm__shm_transport;
#ifdef RM_HAVE_RDMA
extern const rm__transport_ops_t rm__rdma_transport; /* transport/rdma/ */
#endif

/* What a transport's offer() kept for this endpoint (NULL if none). */
void *rm__endpoint_tp_state(const rm_endpoint_t *ep, rm__tp_id_t id);

/* Append r to a per-connection FIFO (head, tail; r->next must be NULL). */
static inline void rm__req_fifo_push(rm__req_t **head, rm__req_t **tail, rm__req_t *r)
{
  if (*tail) (*tail)->next = r;
  else *head = r;
  *tail = r;
}

/* Whether this host runs more ranks of c than it has CPUs online (ranks
 * whose address has the same host part as this rank's; abort.c):
 * a transport then gives its CPU away while it waits instead of spinning. */
int rm__transport_oversubscribed(const rm_comm_t *c);

/* One connection: which transport carries the pair and its private state
 * (Redis connection.h habit: type + private data behind small wrappers). */
typedef struct rm__conn {
  const rm__transport_ops_t *type; /* NULL for c->rank itself */
  void *priv;
} rm__conn_t;

/* ---- used by core/ (transport.c) ---- */
/* Pick a transport for every peer (priority list, first can_connect wins)
 * and run connect_all of each transport picked. */
rm_status_t rm__transport_connect(rm_comm_t *c);
/* close_all of every transport in use; idempotent. reason RM_OK = graceful
 * (peers are told BYE), else peers are told ABORT with the sticky failure. */
void rm__transport_close(rm_comm_t *c, rm_status_t reason);
/* A failure of the connection to peer (abort.c): the sticky failure st
 * blaming peer, in words "peer rank P (ADDR[, via]): what", so every
 * transport names a peer alike; via (may be NULL) says which transport /
 * process ("shm, pid 42"). Returns the sticky status. */
rm_status_t rm__transport_conn_failv(rm_comm_t *c, int peer, rm_status_t st,
                                     const char *via, const char *fmt,
                                     va_list ap);
rm_status_t rm__transport_conn_fail(rm_comm_t *c, int peer, rm_status_t st,
                                    const char *via, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* A peer said it failed with st blaming rank `blamed` (-1 = nobody): make
 * that this rank's sticky failure, blaming whom the rules say (TCP's ABORT
 * frame, shared memory's abort word; the rules are in transport.c). */
rm_status_t rm__transport_adopt_abort(rm_comm_t *c, int peer, rm_status_t st,
                                      int blamed);
/* wake of every transport in use (rm_comm_abort, any thread). */
void rm__transport_wake(rm_comm_t *c);

#endif
