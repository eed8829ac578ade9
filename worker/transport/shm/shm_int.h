/*
 * shm_int.h - private to the shared-memory transport (worker/transport/shm/).
 *
 * Topology. Every rank r that has shared-memory pairs creates one segment,
 * its INBOX, named "/rm-<nonce_r>-<job>-<generation>" (nonce_r from r's
 * offer, common/rm_transports.h; so names never collide across jobs or
 * coordinators). The inbox holds r's control words and one RING per
 * shared-memory peer s, which s writes (producer) and r reads (consumer).
 * Every rank maps the inboxes of all its shared-memory peers.
 *
 *   inbox  = header (4 KiB) + nslots x ring
 *   ring   = control (256 B: head, tail, acks, cma_ok on their own cache
 *            lines) + data[ring_bytes]
 *   slot   = the position of s among r's shared-memory peers, ascending by
 *            rank (both sides compute it from the offers: shm_seg.c)
 *
 * Header words (all accessed with __atomic; the owner is r unless noted):
 *   magic "RMSH", version, job, generation, rank, world, pid, ring_bytes,
 *   nslots;
 *   bell      futex word: +1 (and FUTEX_WAKE when `sleeping`) by anyone who
 *             did something r may wait for: wrote into one of r's rings,
 *             consumed from a ring r writes, acknowledged r's CMA send,
 *             closed or aborted;
 *   sleeping  1 while r is in FUTEX_WAIT on bell;
 *   polling   1 while r is parked (below: it sleeps in another transport's
 *             poll() and must be woken through its poll bell); the first
 *             peer that rings the bell and sees it takes it (exchange to
 *             0) and sends the poll bell one byte;
 *   attached  +1 by each peer once it mapped this inbox and published its
 *             CMA probe result; at nslots r unlinks the name (it then
 *             lives only as long as the mappings: a SIGKILLed job leaves
 *             nothing in /dev/shm once its processes are gone);
 *   closed    0 open, 1 BYE (graceful), 2 ABORT with abort_status and
 *             abort_blame (the rank it blames, -1 = none);
 *   waits_*   "r is blocked on rank waits_on in collective waits_seq since
 *             waits_ns" (the WAIT frame of TCP, as shared words under the
 *             waits_lock seqlock: odd while being written).
 *
 * Ring stream (one direction s -> r). head and tail count bytes since the
 * start (u64, never wrap); data[i % ring_bytes]; s writes at head only when
 * head - tail < ring_bytes, r reads at tail only when tail < head; each
 * side publishes its counter with release and reads the other's with
 * acquire. The stream is a sequence of messages, each a 48-byte record
 * then, for INLINE, `len` payload bytes (both may wrap around the end):
 *
 *   offset size field
 *        0    4 type     1 INLINE, 2 CMA (the receiver reads the payload
 *                        straight from the sender's memory with
 *                        process_vm_readv, one copy), 3 IPC (device memory
 *                        by reference, below)
 *        4    4 magic    "RMSM"
 *        8    8 seq      collective sequence number
 *       16    8 tag      element offset
 *       24    8 len      payload bytes
 *       32    8 addr     CMA: the payload's address in the sender;
 *                        IPC: its offset in the allocation named next
 *       40    8 job      the communicator's job id
 *
 * An IPC record is followed by the 64-byte CUDA IPC handle of the device
 * allocation holding the payload (device/gpu.h ipc_get; no payload in the
 * ring). Only pairs that both offer cuda:<host>/ipc1 (common/
 * rm_transports.h) see them, and only for messages device/stage.c hands
 * over as device messages (transport.h rm__dev_msg_t), whose producer
 * finished writing them. The receiver maps the allocation (cudaIpcOpen-
 * MemHandle, once per allocation: a per-peer cache of 16, least recently
 * used closed first; all closed with the communicator) and:
 *   device destination (RM__DM_RECV): sets dm->src and completes the
 *     receive; device/stage.c copies device to device on its stream and,
 *     when the copy finished, calls dev_ref_done;
 *   host destination (a host-memory receive: ranks passing buffers of
 *     different kinds): copies device to host at once and finishes;
 * finishing = `ipc_acks` of the ring += 1 and ring the sender, after
 * checking that the sender is still open (as for CMA: a sender that
 * aborted may have freed the memory under the copy). The sender completes
 * its IPC sends in order as ipc_acks grows. Acks are in arrival order: a
 * device collective's receives from one peer are all device messages (one
 * collective, one memory kind), and every ack of a device collective is
 * given before it returns (device/dev.c), so host-destination acks never
 * overtake pending device ones. Version 3 adds IPC.
 *
 * A message is matched strictly in order against the receiver's posted
 * receives (transport.h): seq, tag and len must equal the head receive's,
 * else RM_ERR_PROTOCOL naming the peer; payload is copied only into posted
 * buffers, so a sender whose receiver posts nothing stalls once the ring
 * is full (back-pressure, as with TCP). A CMA send completes when r has
 * read it all: r bumps `acks` of the ring (in r's inbox) and rings s.
 * CMA is used from RINGMASTER_SHM_CMA_MIN bytes (default 0: never, the
 * ring was faster everywhere it was measured: shm_progress.c) only when
 * the receiver's probe at connect (reading 8 known bytes of the sender
 * with process_vm_readv) worked: ring.cma_ok, written by the receiver.
 * A sender keeps the buffer of a CMA send valid until the ack, unless it
 * fails: then it may free it under the read. So a read that fails, and a
 * read that ends, is checked against the sender's `closed` word: closed
 * (ABORT adopted) or its process gone fails the receive; only a sender
 * still open after the read ended vouches for the bytes.
 *
 * Waiting: spin RINGMASTER_SHM_SPIN_US (auto: 50 us unless the host is
 * oversubscribed, as TCP; oversubscribed, sched_yield in a loop for
 * RINGMASTER_SHM_YIELD_US, auto 100 us) re-checking, then FUTEX_WAIT on the own bell for
 * at most 50 ms at a time (the seq of bell is read before the check, so a
 * ring between the check and the wait is never lost). A peer whose
 * process is gone (exited or killed, a zombie included) without a BYE
 * fails the communicator with RM_ERR_PEER_LOST naming the rank and pid,
 * seen by the DEATH WATCH where the kernel has pidfds, else by a pid check
 * each time a wait slice ends with nothing moved (at most every 50 ms). A
 * peer that is alive but silent (SIGSTOP) is caught by the deadline logic
 * of transport.c, which reads waits_* through waits_on().
 *
 * DEATH WATCH (shm_seg.c). A killed peer closes no socket a shared-memory
 * rank would see, so its death was found by polling its pid every 50 ms:
 * 25 ms late on average, 50 ms at worst (measured in the SIGKILL campaign,
 * 2026-12-06: the data plane noticed 78 ms after the kill). Once every
 * peer is attached, the rank opens a pidfd for each shared-memory peer
 * (pidfd_open, Linux 5.3) and one thread per communicator blocks in
 * poll() on them and a stop pipe. A pidfd becomes readable when its
 * process exits: the thread sets the pair's `gone`, writes c->wake_fd
 * and wakes our bell (futex), so a rank sleeping on the futex or parked
 * in another transport's poll() runs its pass at once and check_peers
 * fails the pair (after the peer's BYE or ABORT words, which a peer that
 * closed wrote before it exited). Cost: one sleeping thread and one fd per
 * peer per communicator, pidfd_open once per peer at set-up (microseconds;
 * no work per message). Where pidfd_open fails (an older kernel, a
 * seccomp filter, a pid that is not ours to see) the pid poll stays.
 * Alternatives not taken: a robust futex owned by each rank (the kernel
 * wakes its waiters when the owner dies, but a rank would have to wait on
 * every peer's word and its own bell at once: futex_waitv, Linux 5.16);
 * a socket pair per peer (needs fd passing over a Unix socket at set-up,
 * for the same wake-up).
 *
 * Waiting in a mixed communicator (r also has TCP or RDMA pairs; the
 * generic side: transport.c, "Waiting on several transports"). r cannot
 * sleep on the futex (the other transport's arrivals would not wake it)
 * and the futex cannot be poll()ed, so r owns a POLL BELL: a datagram
 * Unix socket in the abstract namespace named "\0rm-<nonce_r>-<job>-
 * <generation>.bell" (its inbox name without the slash, plus ".bell"; so
 * every peer derives it, and it vanishes with the process: nothing to
 * clean up after SIGKILL). Peers on one host share its network namespace
 * (it is part of the host identity, offer.c), so they can all reach it.
 * park (shm_progress.c), before the other transport blocks in poll() with
 * the bell's fd (c->bell_fd) in its set:
 *   polling = 1; full fence; one pass (rings, acks, peers' words);
 *   moved -> polling = 0, do not block;
 *   else the caller blocks at most until the next pid check is due (so a
 *   peer's death is still seen within about 50 ms); unpark: polling = 0.
 * A peer ringing r's bell (rm__shm_ring_bell): bell += 1 (after publishing
 * what it did), full fence, then if polling: exchange it to 0 and, if it
 * was 1, send one byte to r's poll bell (non-blocking; a full socket buffer
 * or any error is ignored: r is already being woken, or bounded by the pid
 * check). Either r's pass sees the peer's write, or the peer sees
 * polling = 1 (both fence between their store and their load). Every rank
 * with shared-memory pairs has a bell socket (bound only where it parks)
 * to send from. Version 2 adds `polling`.
 */
#ifndef RM_WORKER_SHM_INT_H
#define RM_WORKER_SHM_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include "comm/comm_int.h"

#define RM__SHM_MAGIC 0x48534d52u   /* "RMSH" */
#define RM__SHM_MSG_MAGIC 0x4d534d52u /* "RMSM" */
#define RM__SHM_VERSION 3
#define RM__SHM_REC 48
#define RM__SHM_HDR_BYTES 4096
#define RM__SHM_RING_CTL 256

enum { RM__SHM_INLINE = 1, RM__SHM_CMA = 2, RM__SHM_IPC = 3 };
#define RM__SHM_IPC_EXT 64 /* the handle after an IPC record */
#define RM__SHM_IPC_CACHE 16
enum { RM__SHM_OPEN = 0, RM__SHM_BYE = 1, RM__SHM_ABORT = 2 };

typedef struct rm__shm_hdr {
  uint32_t magic;
  uint32_t version;
  uint64_t job;
  uint64_t generation;
  int32_t rank;
  int32_t world;
  int32_t pid;
  uint32_t nslots;
  uint64_t ring_bytes;
  uint64_t probe_addr;     /* address of a word in the owner's own memory
                            * holding RM__SHM_MAGIC: peers' CMA probe */
  uint32_t ready;          /* 1 once the fields above are written */
  uint32_t attached;
  uint32_t closed;
  int32_t abort_status;
  int32_t abort_blame;
  uint32_t pad0_[3];
  _Alignas(64) uint32_t bell;
  uint32_t sleeping;
  uint32_t polling;        /* parked: wake through the poll bell */
  _Alignas(64) uint32_t waits_lock;
  int32_t waits_on;
  uint64_t waits_seq;
  int64_t waits_ns;
} rm__shm_hdr_t;

typedef struct rm__shm_ring {
  _Alignas(64) uint64_t head;  /* producer */
  _Alignas(64) uint64_t tail;  /* consumer */
  _Alignas(64) uint64_t acks;  /* consumer: CMA messages fully read */
  uint64_t ipc_acks;           /* consumer: IPC messages copied */
  _Alignas(64) uint32_t cma_ok; /* consumer: it can read the producer */
} rm__shm_ring_t;

_Static_assert(sizeof(rm__shm_hdr_t) <= RM__SHM_HDR_BYTES, "shm header size");
_Static_assert(sizeof(rm__shm_ring_t) <= RM__SHM_RING_CTL, "shm ring control");

/* A request's shm state (transport-private bytes, transport.h). */
typedef struct rm__shm_req {
  unsigned char rec[RM__SHM_REC]; /* the record (sends) */
  int rec_done;                   /* record bytes written / read */
  int cma;                        /* message goes / came by CMA */
  int ipc;                        /* message goes / came by CUDA IPC */
} rm__shm_req_t;
_Static_assert(sizeof(rm__shm_req_t) <= RM__REQ_TP_BYTES, "shm request state");

static inline rm__shm_req_t *rm__shm_req(rm__req_t *r)
{
  return (rm__shm_req_t *)(void *)r->tp.bytes;
}

typedef struct rm__shm_conn {
  int peer;
  int active;              /* 1 for a shared-memory pair */
  pid_t pid;               /* the peer's process */
  rm__shm_hdr_t *phdr;     /* the peer's inbox header (mapped) */
  rm__shm_ring_t *out;     /* ring we write: in the peer's inbox */
  unsigned char *out_data;
  rm__shm_ring_t *in;      /* ring we read: in our inbox */
  unsigned char *in_data;
  void *pmap;              /* mapping of the peer's inbox */
  size_t pmap_len;
  rm__req_t *sq_head, *sq_tail;   /* sends not yet fully in the ring */
  rm__req_t *cq_head, *cq_tail;   /* CMA sends in the ring, not yet read */
  uint64_t cma_sent;       /* CMA records written */
  uint64_t cma_done;       /* of them, acknowledged */
  rm__req_t *rq_head, *rq_tail;   /* receives, FIFO */
  unsigned char rrec[RM__SHM_REC]; /* record of the message being read */
  int rrec_got;            /* 48 once it is parsed */
  int bye;                 /* peer closed gracefully */
  /* CUDA IPC (above) */
  int ipc;                 /* the pair offers it both ways */
  rm__req_t *iq_head, *iq_tail;   /* IPC sends in the ring, not yet acked */
  uint64_t ipc_sent, ipc_done;
  unsigned char rext[RM__SHM_IPC_EXT]; /* handle of the record being read */
  int ipc_owed;            /* device-destination arrivals not yet acked */
  struct rm__shm_ipc_map *ipc_maps; /* RM__SHM_IPC_CACHE, or NULL */
  uint64_t ipc_clock;
  struct sockaddr_un bell_addr; /* the peer's poll bell (abstract) */
  socklen_t bell_len;
  int pidfd;               /* DEATH WATCH: the peer's pidfd, -1 none */
  uint32_t gone;           /* DEATH WATCH: 1 once its process exited
                            * (written by the watch thread, atomic) */
} rm__shm_conn_t;

struct rm__shm_state {
  rm__shm_conn_t *conns;   /* world entries; active ones are shm pairs */
  void *map;               /* our inbox */
  size_t map_len;
  rm__shm_hdr_t *hdr;
  char name[96];           /* our inbox's name while it exists */
  int unlinked;
  uint64_t ring_bytes;
  int nslots;
  int spin_us, yield_us;
  size_t cma_min;          /* 0 = never */
  int64_t last_pid_check;  /* rm__now_ns */
  int closed;
  uint64_t probe_word;     /* RM__SHM_MAGIC; hdr->probe_addr points here */
  int bell_fd;             /* our bell socket (-1 none): bound when parks,
                            * and what we send peers' bells from */
  int parks;               /* mixed: bell_fd is bound, c->bell_on */
  int watch_on;            /* DEATH WATCH: it watches (no pid poll); its
                            * thread clears it (atomic) if its poll fails */
  int watch_started;       /* the thread exists: join it */
  int watch_stop[2];       /* its stop pipe */
  pthread_t watch;
};

static inline struct rm__shm_state *rm__shm(const rm_comm_t *c)
{
  return (struct rm__shm_state *)c->tstate[RM__TP_SHM];
}

/* shm_seg.c */
rm_status_t rm__shm_connect_all(rm_comm_t *c);
void rm__shm_state_free(rm_comm_t *c);
/* Ring peer k's bell: +1 and wake it if it sleeps (futex) or is parked
 * (one byte to its poll bell, sent from s->bell_fd). */
void rm__shm_ring_bell(const struct rm__shm_state *s, const rm__shm_conn_t *k);
/* 0 alive, 1 gone (no such process, or a zombie). */
int rm__shm_pid_gone(pid_t pid);
/* Remove "/rm-*" segments of processes that no longer exist (start-up). */
void rm__shm_sweep(void);

/* shm_progress.c (the ops table lives there): spin and CMA threshold. */
void rm__shm_tune(rm_comm_t *c);
/* Finish a by-reference arrival (CMA: acks, IPC: ipc_acks): the sender
 * must still be open (closed, aborted or gone: its status, `when` in the
 * words), then *acks += 1 and ring it. */
rm_status_t rm__shm_ack(rm_comm_t *c, struct rm__shm_state *s, rm__shm_conn_t *k,
                        uint64_t *acks, const char *when);
/* The connection failed: "shm, pid P" and the words, as the transport's
 * rm__transport_conn_fail. */
rm_status_t rm__shm_conn_fail(rm_comm_t *c, rm__shm_conn_t *k, rm_status_t st,
                              const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* shm_ipc.c: the receiving side of CUDA IPC (above). */
/* An IPC record (k->rrec, k->rext) arrived for receive r. */
rm_status_t rm__shm_ipc_arrive(rm_comm_t *c, struct rm__shm_state *s, rm__shm_conn_t *k,
                               rm__req_t *r);
/* Close every mapping of k (communicator end). */
void rm__shm_ipc_unmap_all(rm__shm_conn_t *k);

#endif
