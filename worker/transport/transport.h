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
 * so a rank sends and receives at once. There is no buffering of messages
 * nobody has posted a receive for (TCP reads payload only into posted
 * buffers): a large send completes only once the peer posts the matching
 * receive, so post receives before waiting on sends (rm__sendrecv does).
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

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"

struct rm__conn;

typedef enum { RM__REQ_SEND = 1, RM__REQ_RECV = 2 } rm__req_kind_t;

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
  int hdr_done;    /* header bytes moved so far */
  int complete;    /* 1 when finished */
  rm_status_t status;
  struct rm__req *next; /* per-connection FIFO */
  unsigned char hdr[64];
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
/* Post both, wait both. Either peer may be -1 (skip that side). */
rm_status_t rm__sendrecv(rm_comm_t *c, int send_peer, const void *sbuf,
                         size_t slen, uint64_t stag, int recv_peer, void *rbuf,
                         size_t rlen, uint64_t rtag);

/* ---- transport plug-ins ---- */
typedef struct rm__transport_ops {
  const char *name;
  /* Probe once per process; return 0 when the transport can never be used
   * here (no device, no library). Must not block; logs why at debug. */
  int (*available)(void);
  /* Whether this transport can carry traffic between c->rank and peer. */
  int (*can_connect)(const rm_comm_t *c, int peer);
  /* Establish every connection this transport was selected for, within
   * c->connect_timeout_ms. Must fail with a status naming the peer. */
  rm_status_t (*connect_all)(rm_comm_t *c);
  /* Queue a posted request on its connection; must not block. */
  rm_status_t (*post)(rm_comm_t *c, rm__req_t *req);
  /* Make progress on every connection; block at most timeout_ms (0 = poll). */
  rm_status_t (*progress)(rm_comm_t *c, int timeout_ms);
  /* Close every connection; tell peers why when `reason` != RM_OK. */
  void (*close_all)(rm_comm_t *c, rm_status_t reason);
  /* Tell rank `on`, and every peer that said (at or after since_ns) it
   * waits on us, that this rank is alive and blocked on `on` in collective
   * seq; must not block (queued, sent by progress). */
  void (*stalled)(rm_comm_t *c, int on, uint64_t seq, int64_t since_ns);
  /* The rank `peer` last said it is blocked on, if it said so at or after
   * since_ns (rm__now_ns clock); else -1. *seq = its collective. */
  int (*waits_on)(const rm_comm_t *c, int peer, int64_t since_ns,
                  uint64_t *seq);
} rm__transport_ops_t;

extern const rm__transport_ops_t rm__tcp_transport;

/* ---- used by core/ (transport.c) ---- */
/* Pick a transport for every peer (priority list, first can_connect wins)
 * and run connect_all of each transport picked. */
rm_status_t rm__transport_connect(rm_comm_t *c);
/* close_all of every transport in use; idempotent. reason RM_OK = graceful
 * (peers are told BYE), else peers are told ABORT with the sticky failure. */
void rm__transport_close(rm_comm_t *c, rm_status_t reason);

#endif
