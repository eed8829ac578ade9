/*
 * comm_int.h - the communicator's insides, shared by core/, collectives/ and
 * transport/. Not installed; nothing outside worker/ includes it.
 *
 * Invariants:
 *  1. rank, world, job_id, generation and peer addresses never change after
 *     rm_comm_init; a new generation is a new communicator.
 *  2. status is RM_OK until the first failure; then it never changes again
 *     (sticky; set only through rm__comm_fail, first writer wins).
 *  3. coll_seq is incremented once per collective call by rm__coll_begin, on
 *     every rank in the same order; frames carry it.
 *  4. aborted is set by rm_comm_abort from any thread; the progress engine
 *     wakes through wake_fd and fails every wait with RM_ERR_ABORTED.
 */
#ifndef RM_WORKER_COMM_INT_H
#define RM_WORKER_COMM_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ringmaster/ringmaster.h"
#include "transport/transport.h"

/* alpha-beta cost model of this communicator's links (collectives/select.c) */
typedef struct rm__cost_model {
  double alpha_us;    /* per-message latency, microseconds */
  double beta_us_per_byte; /* inverse bandwidth */
  double gamma_us_per_byte; /* reduction cost per byte */
  int calibrated;     /* 1 when measured on live links */
  int fixed;          /* 1: never calibrate (a deterministic job: auto is
                         then a function of size and world only) */
} rm__cost_model_t;

struct rm_comm {
  uint64_t job_id;
  uint64_t generation;
  int rank;
  int world;
  char **peers;          /* world "host:port" strings, owned */
  char **offers;         /* world transport offers (rm_transports.h), owned */
  int timeout_ms;
  int connect_timeout_ms;
  rm_algo_t algorithm;   /* default for rm_allreduce */
  /* rm_comm_config_t.data_key copied (transport/hello_auth.c); keyed = 0:
   * handshakes carry no proof (standalone use without a key) */
  int keyed;
  unsigned char data_key[RM_DATA_KEY_BYTES];

  rm_endpoint_t *endpoint;   /* borrowed or owned, see owns_endpoint */
  int owns_endpoint;
  rm__conn_t *conns;     /* world entries: the transport of each pair */
  void *tstate[RM__TP_COUNT]; /* per-transport communicator state */
  /* the transports that carry at least one pair, in id order (transport.c
   * fills it once at connect; the wait loop walks it) */
  const rm__transport_ops_t *tp_used[RM__TP_COUNT];
  int ntp_used;
  /* Mixed communicators (transport.c, "Waiting on several transports"):
   * while bell_on, bell_fd is a poll()-able fd (owned by the shared-memory
   * transport) that peers make readable when this rank is parked; the
   * transport that blocks in poll() adds it to its set, drains it and sets
   * bell_rang (cleared by the generic loop). */
  int bell_on;
  int bell_fd;
  int bell_rang;

  uint64_t coll_seq;     /* invariant 3 */
  rm__cost_model_t cost;
  /* hosts x ranks per host of the hierarchical layout (collectives/hier.c);
   * hier_hosts 0 = not usable; valid once hier_known */
  int hier_known, hier_hosts, hier_local;

  /* sticky error (invariant 2) */
  pthread_mutex_t err_lock;
  rm_status_t status;    /* read with __atomic_load_n */
  int failed_peer;
  char last_error[512];

  int aborted;           /* invariant 4, atomic */
  int wake_fd[2];        /* pipe: abort writes a byte */

  /* memory registrations (transport/mr.h); NULL until first used */
  struct rm__mr_cache *mrc;

  /* device memory (device/dev.h): state made by the first device
   * collective; dev_active inside one; the kind and stream the user set
   * (rm_comm_set_memory, rm_comm_set_stream; stream borrowed) */
  struct rm__dev *dev;
  struct rm__nccl *nccl; /* NCCL backend (device/nccl.c); NULL until asked */
  int dev_active;
  rm_mem_t mem_kind;
  void *user_stream;

  /* scratch memory reused across collectives (grown on demand) */
  void *scratch;
  size_t scratch_size;
  /* rm_aggregate's own working memory (it calls collectives, which use
   * scratch): kept between calls, since a fresh allocation of a gradient's
   * size is a fresh mmap whose pages fault in on every call */
  void *agg_scratch;
  size_t agg_scratch_size;

  int destroying;         /* set by rm_comm_destroy: close_all may free */
  size_t bytes_sent;     /* by this rank, cumulative */
  /* time in rm_allreduce_ex and payload bytes reduced, cumulative: the
   * session's step reports take differences (session/session_step.c) */
  int64_t allreduce_ns;
  uint64_t allreduce_bytes;
  /* SPEC USE (session/session_use.c): what the program's calls applied,
   * cumulative, counted at the public entry points only. use_internal > 0
   * while a library collective (rm_aggregate, the straggler step engine, a
   * secure sum) runs its own all-reduces: those are neither counted nor
   * guarded. use_guard (set by a command job's session): a float SUM/AVG
   * rm_allreduce of the program's own is refused before anything is sent
   * (RM_ERR_DENIED; use_refused gets the words, on the caller's thread:
   * the session keeps them as its last error and tells the coordinator). */
  int use_internal, use_guard;
  void (*use_refused)(void *ctx, const char *words);
  void *use_ctx;
  uint64_t use_plain_bytes, use_agg_calls;
  int use_agg_method;   /* rm_agg_method_t of the last rm_aggregate */
  /* world bytes (allocated by the first rm_aggregate): rank r was excluded
   * by an rm_aggregate since the session's last step report took them
   * (session_use.c): the step's Byzantine-suspect evidence for programs
   * that report their steps without naming the excluded ranks */
  uint8_t *use_excluded;
  /* point-to-point (comm/p2p.c): its engine, started by the first
   * rm_isend / rm_irecv; from then on collectives are refused */
  struct rm__p2p *p2p;
  /* set with p2p: the transports' waits run on that background thread,
   * which must not spin or yield before sleeping (a spinning background
   * thread takes the CPU its callers and their peers need: with 2 ranks
   * on 2 cores, a 4-byte ping-pong went from 100 us to 3.7-10.6 ms) */
  int bg_progress;
};

/* SPEC USE guard words (session/session_use.c fills use_guard with these). */
#define RM__USE_GUARD_SECURE 1
#define RM__USE_GUARD_AGG 2
/* api_allreduce.c: the guard's refusal words for a plain all-reduce of
 * bytes payload under use_guard; calls c->use_refused. RM_ERR_DENIED. */
rm_status_t rm__use_refuse(rm_comm_t *c, size_t bytes);

/* The connection to peer: its transport and that transport's state. */
static inline const rm__transport_ops_t *rm__conn_type(const rm_comm_t *c,
                                                       int peer)
{
  return c->conns ? c->conns[peer].type : NULL;
}
static inline void *rm__conn_priv(const rm_comm_t *c, int peer)
{
  return c->conns ? c->conns[peer].priv : NULL;
}

/* rm_comm_abort with the status and words the waiters get: the session
 * aborts a communicator whose generation the coordinator replaced with
 * RM_ERR_RECONFIGURED (or RM_ERR_JOB_ENDED) and says why. Any thread. */
void rm__comm_abort_with(rm_comm_t *c, rm_status_t st, const char *why);

/* rm__comm_abort_with for a communicator the session does not own (one
 * attached to it): the coordinator's verdict (st: RM_ERR_RECONFIGURED or
 * RM_ERR_JOB_ENDED) replaces a data-plane failure recorded first, which the
 * words keep. A member that left fails its links with PEER_LOST or
 * ABORTED before the coordinator has decided; on a communicator beside the
 * session's, that first status would hide that the generation is over. */
void rm__comm_supersede(rm_comm_t *c, rm_status_t st, const char *why);

/* Record the first failure (later calls keep the first); returns the sticky
 * status. peer may be -1. fmt describes it in words. */
rm_status_t rm__comm_fail(rm_comm_t *c, rm_status_t st, int peer,
                          const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Start a collective: check the sticky status and abort flag, bump coll_seq.
 * Returns the sticky status if the communicator already failed. */
rm_status_t rm__coll_begin(rm_comm_t *c);

/* rm_comm_destroy: first stop the point-to-point engine (its open requests
 * end, the peers are told), then close the transports, then free what the
 * engine had (the transports held its requests until they closed). */
void rm__p2p_stop(rm_comm_t *c);
void rm__p2p_free(rm_comm_t *c);

/* Scratch buffer of at least n bytes (RM_ERR_NOMEM on failure). Valid until
 * the next rm__scratch call or destroy. */
rm_status_t rm__scratch(rm_comm_t *c, size_t n, void **out);
/* rm_aggregate's working memory, likewise (agg_scratch). */
rm_status_t rm__agg_scratch(rm_comm_t *c, size_t n, void **out);

#endif
