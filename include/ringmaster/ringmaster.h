/*
 * ringmaster.h - the public C API of libringmaster, the worker data plane.
 *
 * A communicator is (job, generation, rank, world, peer addresses). It is
 * built either directly from those values (no coordinator needed) or from what
 * the coordinator hands out; both paths end in rm_comm_init().
 *
 * Lifecycle (symmetric, NCCL-style):
 *
 *   rm_endpoint_open()   listen on a data-plane address (may be "host:0")
 *   rm_comm_init()       connect to every peer of one generation
 *   rm_allreduce() ...   collectives, one at a time per communicator
 *   rm_comm_abort()      from ANY thread: in-flight and later calls return
 *                        RM_ERR_ABORTED promptly; then rm_comm_destroy()
 *   rm_comm_destroy()    close connections, free memory
 *   rm_endpoint_close()  stop listening
 *
 * An endpoint is borrowed by the communicators built on it and must outlive
 * them; it can serve one communicator per generation in turn, so a worker
 * keeps its advertised address across re-formations.
 *
 * Threading: one thread at a time may call collectives on a communicator.
 * rm_comm_abort() and rm_comm_last_error() may be called from any thread.
 *
 * Errors are sticky: the first failure of a communicator (peer lost,
 * deadline, protocol error, abort) is stored and returned by every later
 * call; rm_comm_last_error() says which peer and why, in words.
 *
 * Every blocking wait has a deadline (rm_comm_config_t.timeout_ms, default
 * from RINGMASTER_TIMEOUT_MS, else 30000): a wait that sees no progress from
 * the peer it needs for that long fails with RM_ERR_TIMEOUT naming that peer.
 */
#ifndef RINGMASTER_RINGMASTER_H
#define RINGMASTER_RINGMASTER_H

#include <stddef.h>
#include <stdint.h>

#include "ringmaster/status.h"
#include "ringmaster/types.h"
#include "ringmaster/aggregation.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RM_VERSION_MAJOR 0
#define RM_VERSION_MINOR 1
#define RM_VERSION_PATCH 0

/* Status codes (rm_status_t, RM_STATUS_MAP, rm_status_name/_string) are in
 * ringmaster/status.h; element types, operators and algorithms (rm_dtype_t,
 * rm_op_t, rm_algo_t, their names and parsers) in ringmaster/types.h. */

/* ---- endpoints ---- */
typedef struct rm_endpoint rm_endpoint_t;

/* Listen on "host:port" (port 0 = any free port). OUT: *out on success. */
RM_EXTERN rm_status_t rm_endpoint_open(const char *bind_addr,
                                       rm_endpoint_t **out);
/* "host:port" actually bound; borrowed, valid until rm_endpoint_close. */
RM_EXTERN const char *rm_endpoint_address(const rm_endpoint_t *ep);
/* The transports this endpoint offers, in priority order (RINGMASTER_
 * TRANSPORTS, default "shm,rdma,tcp"): e.g. "shm:3f9c01d2a4b5e6f7/8c1e0a2b3c4d5e6f
 * tcp". Hand every rank's string to rm_comm_init (config.transports) and
 * pairs on one host use shared memory. Borrowed, valid until close. */
RM_EXTERN const char *rm_endpoint_transports(const rm_endpoint_t *ep);
RM_EXTERN void rm_endpoint_close(rm_endpoint_t *ep);

/* ---- communicators ---- */
typedef struct rm_comm rm_comm_t;

typedef struct rm_comm_config {
  uint64_t job_id;
  uint64_t generation;
  int rank;
  int world;
  /* world entries "host:port"; peers[rank] is this rank's own address.
   * Borrowed: copied by rm_comm_init. */
  const char *const *peers;
  /* Optional: an endpoint already listening on peers[rank]. When NULL,
   * rm_comm_init opens one on peers[rank] and owns it. Borrowed. */
  rm_endpoint_t *endpoint;
  /* Deadline of every blocking wait, ms; 0 = RINGMASTER_TIMEOUT_MS or 30000. */
  int timeout_ms;
  /* Deadline for connecting to every peer, ms; 0 = same as timeout_ms. */
  int connect_timeout_ms;
  /* Default all-reduce algorithm; RM_ALGO_AUTO unless RINGMASTER_ALGO says. */
  rm_algo_t algorithm;
  /* Optional: world entries, what rm_endpoint_transports() said on each
   * rank. Each pair uses the first transport of the lower rank's list that
   * the other offers too (shared memory on one host, else TCP). NULL (or a
   * NULL entry) = that rank offers TCP only. Borrowed: copied. */
  const char *const *transports;
  /* Optional: the data-plane key, RM_DATA_KEY_BYTES bytes, the same on
   * every rank of (job, generation); a session sets the one the coordinator
   * handed out in the Join answer. With it, a TCP or RDMA bootstrap
   * connection is accepted as a rank only once it proves it holds the key
   * (challenge-response over fresh nonces, docs/data-plane-security.md).
   * NULL: peers are admitted on (job, generation, world, rank) alone, as
   * before; a warning is logged once per process. Borrowed: copied. */
  const unsigned char *data_key;
} rm_comm_config_t;

#define RM_DATA_KEY_BYTES 32

/* Fill *cfg with defaults (reads RINGMASTER_* once). */
RM_EXTERN void rm_comm_config_init(rm_comm_config_t *cfg);
/* sizeof(rm_comm_config_t) of this library: a binding that mirrors the
 * struct checks it before use (the Python package does). */
RM_EXTERN size_t rm_comm_config_size(void);

/* Connect to every peer and check they agree on (job, generation, world).
 * Blocks up to connect_timeout_ms. OUT: *out only on success. */
RM_EXTERN rm_status_t rm_comm_init(const rm_comm_config_t *cfg,
                                   rm_comm_t **out);
/* Safe from any thread, any number of times; never blocks on peers. */
RM_EXTERN void rm_comm_abort(rm_comm_t *comm);
/* The transport that carries the pair (this rank, peer): "shm", "rdma" or "tcp";
 * NULL for this rank itself or a bad peer. Borrowed, static. */
RM_EXTERN const char *rm_comm_transport(const rm_comm_t *comm, int peer);
/* Frees everything; the communicator must not be in use by another thread.
 * Registrations (rm_comm_register) still held are released with it. */
RM_EXTERN void rm_comm_destroy(rm_comm_t *comm);

/* Memory registration (NCCL's ncclCommRegister habit). Transports that
 * must register memory before moving it (RDMA) do so on first use and
 * cache the registration (RINGMASTER_REG_CACHE entries, default 64, least
 * recently used out). A buffer used over and over (gradient buckets,
 * scratch) can be registered once instead: rm_comm_register registers
 * [buf, buf + len) with every transport of comm that registers memory, and
 * every collective on memory inside that range uses it until
 * rm_comm_deregister. The memory must stay allocated while registered.
 * Over TCP and shared memory only it succeeds and changes nothing, so code
 * need not know the transports. Not concurrently with a collective on the
 * same communicator. RM_ERR_INVALID_ARG: NULL or empty range; a transport
 * that cannot register (pinned-memory limit) says so in the log, with the
 * status. */
typedef struct rm_mr rm_mr_t;
RM_EXTERN rm_status_t rm_comm_register(rm_comm_t *comm, void *buf, size_t len,
                                       rm_mr_t **out);
/* RM_ERR_INVALID_ARG if mr is not a registration of comm. */
RM_EXTERN rm_status_t rm_comm_deregister(rm_comm_t *comm, rm_mr_t *mr);

RM_EXTERN int rm_comm_rank(const rm_comm_t *comm);
RM_EXTERN int rm_comm_world(const rm_comm_t *comm);
RM_EXTERN uint64_t rm_comm_generation(const rm_comm_t *comm);
/* The sticky error: RM_OK while healthy. */
RM_EXTERN rm_status_t rm_comm_status(const rm_comm_t *comm);
/* Words about the sticky error ("peer rank 3 (127.0.0.1:4411) lost: ...").
 * Borrowed; "" while healthy. */
RM_EXTERN const char *rm_comm_last_error(const rm_comm_t *comm);
/* Rank of the peer named by the sticky error, or -1. */
RM_EXTERN int rm_comm_failed_peer(const rm_comm_t *comm);
RM_EXTERN rm_status_t rm_comm_set_algorithm(rm_comm_t *comm, rm_algo_t a);
/* The deadline of every later blocking wait (timeout_ms of the config),
 * for a communicator built by another (a session's): a framework whose
 * groups carry their own timeout (torch.distributed) sets it. Not while a
 * collective runs on comm. RM_ERR_INVALID_ARG: NULL or ms <= 0. */
RM_EXTERN rm_status_t rm_comm_set_timeout(rm_comm_t *comm, int timeout_ms);

/* ---- device (GPU) memory ----
 * Every collective takes host or device memory. In a build with CUDA on a
 * machine with a GPU, the library asks the CUDA runtime
 * (cudaPointerGetAttributes) what each buffer is; device and managed
 * memory are device buffers. All buffers of one call must be of one kind
 * (else RM_ERR_INVALID_ARG), on one device, and a communicator serves one
 * device. Device data never goes through a CPU reduction: it is staged
 * through page-locked host buffers in pipelined segments (device-to-host
 * copy, the wire, host-to-device copy overlap on two CUDA streams) and
 * reduced on the GPU; between two ranks of one host both on device memory
 * it may instead move by CUDA IPC, device to device. Ranks need not agree
 * on the kind: the wire is the same.
 *
 * Ordering: the call first waits (on the GPU, not the host) for the work
 * enqueued so far on the communicator's stream (rm_comm_set_stream; the
 * legacy default stream when unset), so it reads what your kernels wrote;
 * on return the result is in device memory and everything the call
 * enqueued has finished. Without a GPU runtime every pointer is host
 * memory. */
typedef enum rm_mem {
  RM_MEM_AUTO = 0,   /* ask the runtime per call (default) */
  RM_MEM_HOST = 1,   /* every buffer is host memory: no query */
  RM_MEM_DEVICE = 2  /* every buffer is device memory (checked once) */
} rm_mem_t;
RM_EXTERN rm_status_t rm_comm_set_memory(rm_comm_t *comm, rm_mem_t kind);
/* A cudaStream_t (as void *), borrowed; NULL = the default stream. */
RM_EXTERN rm_status_t rm_comm_set_stream(rm_comm_t *comm, void *cuda_stream);

/* ---- collectives ----
 * send == recv means in place. count is in elements. Buffers are host or
 * device memory (above).
 * All ranks must call the same collectives in the same order with the same
 * count, dtype, op and root. */

typedef struct rm_allreduce_info {
  rm_algo_t algorithm; /* the one that ran (auto resolved) */
  double predicted_us; /* cost model's estimate for it */
  double elapsed_us;   /* measured */
  size_t bytes_sent;   /* by this rank */
} rm_allreduce_info_t;

RM_EXTERN rm_status_t rm_allreduce(rm_comm_t *comm, const void *send,
                                   void *recv, size_t count, rm_dtype_t dt,
                                   rm_op_t op);
/* algo RM_ALGO_AUTO means "the communicator's default". info may be NULL. */
RM_EXTERN rm_status_t rm_allreduce_ex(rm_comm_t *comm, const void *send,
                                      void *recv, size_t count, rm_dtype_t dt,
                                      rm_op_t op, rm_algo_t algo,
                                      rm_allreduce_info_t *info);
/* send holds world * recv_count elements; rank r gets block r reduced. */
RM_EXTERN rm_status_t rm_reduce_scatter(rm_comm_t *comm, const void *send,
                                        void *recv, size_t recv_count,
                                        rm_dtype_t dt, rm_op_t op);
/* recv holds world * send_count elements, block r from rank r. */
RM_EXTERN rm_status_t rm_allgather(rm_comm_t *comm, const void *send,
                                   void *recv, size_t send_count,
                                   rm_dtype_t dt);
RM_EXTERN rm_status_t rm_broadcast(rm_comm_t *comm, void *buf, size_t count,
                                   rm_dtype_t dt, int root);
/* Reduce to root only; recv is ignored on other ranks (may be NULL). */
RM_EXTERN rm_status_t rm_reduce(rm_comm_t *comm, const void *send, void *recv,
                                size_t count, rm_dtype_t dt, rm_op_t op,
                                int root);
/* send and recv hold world * count elements; block j of send goes to rank j,
 * block i of recv came from rank i. Not in place (send != recv). */
RM_EXTERN rm_status_t rm_alltoall(rm_comm_t *comm, const void *send,
                                  void *recv, size_t count, rm_dtype_t dt);
/* Counted all-to-all: send_counts[j] elements at send + send_displs[j] go
 * to rank j; recv_counts[i] elements from rank i land at recv +
 * recv_displs[i] (world entries each, in elements). Every pair must agree
 * (rank i's send_counts[j] == rank j's recv_counts[i]): a disagreeing pair
 * fails with RM_ERR_PROTOCOL, naming the peer. send_counts[rank] must equal
 * recv_counts[rank]. Not in place. Counts of 0 are fine; each pair's message
 * is exactly its bytes (no padding to the largest). */
RM_EXTERN rm_status_t rm_alltoallv(rm_comm_t *comm, const void *send,
                                   const size_t *send_counts,
                                   const size_t *send_displs, void *recv,
                                   const size_t *recv_counts,
                                   const size_t *recv_displs, rm_dtype_t dt);
/* Gather to root: on root, recv holds world * count elements, block r from
 * rank r (send may be recv's own block: in place); recv is ignored on the
 * other ranks (may be NULL). Only the root receives. */
RM_EXTERN rm_status_t rm_gather(rm_comm_t *comm, const void *send, void *recv,
                                size_t count, rm_dtype_t dt, int root);
/* Scatter from root: on root, send holds world * count elements, block r
 * goes to rank r; send is ignored on the other ranks (may be NULL). */
RM_EXTERN rm_status_t rm_scatter(rm_comm_t *comm, const void *send,
                                 void *recv, size_t count, rm_dtype_t dt,
                                 int root);
RM_EXTERN rm_status_t rm_barrier(rm_comm_t *comm);

/* ---- point-to-point ----
 * Tagged messages between two ranks, matched as MPI matches them: a
 * receive takes the first message from its source (or RM_ANY_SOURCE) with
 * its tag; messages of one (source, tag) arrive in the order sent. They run
 * on a communicator of their own (rm_comm_dup): once a point-to-point call
 * was made on a communicator, its collectives return RM_ERR_INVALID_ARG.
 * The first call starts the communicator's progress thread, which moves
 * every message while the callers compute; the calls below are safe from
 * any thread. Host memory only. Sends are eager (the receiver buffers a
 * message nobody waits for yet), so two ranks that send to each other
 * before receiving do not deadlock.
 *
 * Deadlines: timeout_ms (0 = the communicator's, rm_comm_set_timeout).
 * A receive that no message matched by then ends with RM_ERR_TIMEOUT and
 * the communicator stays usable; a send not taken by then, or a message
 * stopped halfway, fails the communicator (RM_ERR_TIMEOUT naming the
 * peer). A received message whose size differs from the receive's ends it
 * with RM_ERR_INVALID_ARG (both sizes in rm_p2p_error). Design and wire
 * format: worker/comm/p2p.c. */
typedef struct rm_p2p_req rm_p2p_req_t;
#define RM_ANY_SOURCE (-1)

/* Collective over comm: a new communicator over the same ranks (new
 * connections; the same job, generation, transports, key and deadline),
 * for point-to-point beside comm's collectives. Destroy it separately. */
RM_EXTERN rm_status_t rm_comm_dup(rm_comm_t *comm, rm_comm_t **out);
/* Post; *req until rm_p2p_free. buf must stay valid until the request
 * ended. RM_ERR_INVALID_ARG: bad peer (this rank included), NULL buf with
 * bytes > 0, device memory, timeout_ms < 0. */
RM_EXTERN rm_status_t rm_isend(rm_comm_t *comm, const void *buf, size_t bytes,
                               int peer, uint64_t tag, int timeout_ms,
                               rm_p2p_req_t **req);
RM_EXTERN rm_status_t rm_irecv(rm_comm_t *comm, void *buf, size_t bytes,
                               int peer, uint64_t tag, int timeout_ms,
                               rm_p2p_req_t **req);
/* Wait up to timeout_ms (0: just look; < 0: until it ends, which its own
 * deadline bounds). *done = 1: it ended, and its status is returned;
 * *done = 0: still open (RM_OK). Any thread, several at once. */
RM_EXTERN rm_status_t rm_p2p_wait(rm_comm_t *comm, rm_p2p_req_t *req,
                                  int timeout_ms, int *done);
/* Of an ended request: the rank whose message a receive got (-1 before),
 * its bytes, and the words of a failure ("" when none). */
RM_EXTERN int rm_p2p_source(const rm_p2p_req_t *req);
RM_EXTERN size_t rm_p2p_bytes(const rm_p2p_req_t *req);
RM_EXTERN const char *rm_p2p_error(const rm_p2p_req_t *req);
/* Release the caller's hold; an open request still ends (its buffer must
 * stay valid until then). rm_comm_destroy frees requests still held. */
RM_EXTERN void rm_p2p_free(rm_comm_t *comm, rm_p2p_req_t *req);
/* Blocking forms; *source (may be NULL) gets the sender. */
RM_EXTERN rm_status_t rm_send(rm_comm_t *comm, const void *buf, size_t bytes,
                              int peer, uint64_t tag);
RM_EXTERN rm_status_t rm_recv(rm_comm_t *comm, void *buf, size_t bytes,
                              int peer, uint64_t tag, int *source);

/* Algorithm auto would choose for this call, and its predicted time. */
RM_EXTERN rm_algo_t rm_allreduce_choose(const rm_comm_t *comm, size_t bytes,
                                        double *predicted_us);


/* ---- aggregation: clipping and Byzantine-robust aggregation ----
 * Methods, their rules and the config: ringmaster/aggregation.h. */
typedef struct rm_agg_info {
  size_t struct_size;     /* sizeof(rm_agg_info_t), set by the caller */
  int contributors;       /* rows the method combined (n) */
  double norm;            /* this rank's L2 norm before clipping */
  int clipped;            /* this rank's vector was clipped */
  size_t bytes_sent;      /* by this rank in this call */
  /* Optional, caller-owned, world entries each (NULL = not wanted):
   * excluded[r] = 1 when rank r was left out or down-weighted this call
   * (Krum family: not selected; median / trimmed mean: more than half its
   * coordinates trimmed; centered_clip: clipped in the last round);
   * scores[r] = its Krum score, fraction of coordinates trimmed, or
   * centered-clip weight (method-specific, NaN when not meaningful). */
  uint8_t *excluded;
  double *scores;
} rm_agg_info_t;

/* Collective: every rank calls it with the same count, dtype and config.
 * send == recv is in place. info may be NULL. RM_ERR_INVALID_ARG when the
 * rule does not hold for the communicator's world (nothing moved; the
 * communicator stays usable). */
RM_EXTERN rm_status_t rm_aggregate(rm_comm_t *comm, const void *send,
                                   void *recv, size_t count, rm_dtype_t dt,
                                   const rm_agg_config_t *cfg,
                                   rm_agg_info_t *info);

/* ---- worker sessions ----------------------------------------------------
 *
 * A session is one worker's membership of one coordinator job: it joins
 * (long-poll until the group forms), owns this generation's communicator,
 * sends heartbeats and keeps a session stream open (so the coordinator
 * learns at once when this process dies), reports step timings, passes
 * named barriers, and leaves. `ringmaster-worker` runs the built-in
 * workloads on a session; a user's program (a "command" job) opens its own
 * with rm_session_join_env() from the variables the agent sets.
 *
 * States and the calls that move between them:
 *
 *   rm_session_join[_env] --> MEMBER (rank, world, generation, comm)
 *   MEMBER --(peer lost, replacement joined, coordinator restarted,
 *             job re-formed)--> RECONFIGURING: the communicator is aborted;
 *             the running collective or the next step / barrier call
 *             returns RM_ERR_RECONFIGURED (or the data plane's own
 *             RM_ERR_PEER_LOST / RM_ERR_TIMEOUT naming the peer, when it
 *             saw the failure first); rm_session_last_error() says what
 *             happened
 *   RECONFIGURING --rm_session_reform--> MEMBER of the next generation, in
 *             the same process (new rank, world, communicator; the
 *             previous rm_session_comm() pointer is freed)
 *   any --(job cancelled, failed or succeeded)--> ENDED: calls return
 *             RM_ERR_JOB_ENDED with the job's reason
 *   MEMBER --rm_session_leave--> LEFT; rm_session_close frees
 *
 * Threading: the calls are made from one thread at a time (the training
 * loop); the session's own threads (heartbeats, session stream) only read
 * shared state under a lock and abort the communicator.
 *
 * ABI: config structs carry struct_size and version, filled by
 * rm_session_config_init (the NCCL_CONFIG_INITIALIZER habit); bindings in
 * other languages use the getters and rm_session_config_size() instead of
 * mirroring a struct. */
typedef struct rm_session rm_session_t;

#define RM_SESSION_CONFIG_VERSION 1

typedef struct rm_session_config {
  size_t struct_size;       /* sizeof(rm_session_config_t), set by init */
  unsigned version;         /* RM_SESSION_CONFIG_VERSION, set by init */
  const char *coordinator;  /* "host:port" of the coordinator's gRPC port */
  uint64_t job_id;
  const char *token;        /* the job's worker token */
  const char *host;         /* NULL = gethostname() */
  const char *data_addr;    /* data-plane bind "host:port"; NULL = "127.0.0.1:0" */
  int rank_hint;            /* launch index (RANK of the first generation); -1 none */
  int world_hint;           /* 0 = none */
  int connect_timeout_ms;   /* an unreachable coordinator; 0 = 30000 */
  int data_timeout_ms;      /* data-plane deadline; 0 = library default */
  const char *tls_ca, *tls_cert, *tls_key; /* PEM files: all or none */
  const char *devices;      /* reported in Join; NULL = probe this host */
} rm_session_config_t;

/* Defaults: everything 0/NULL but rank_hint -1, struct_size and version. */
RM_EXTERN void rm_session_config_init(rm_session_config_t *cfg);
RM_EXTERN size_t rm_session_config_size(void);
/* Fill coordinator, job, token, host, data address, hints, timeouts and TLS
 * files from RINGMASTER_COORDINATOR, RINGMASTER_JOB, RINGMASTER_TOKEN,
 * RINGMASTER_HOST, RINGMASTER_DATA_ADDR, RINGMASTER_LAUNCH_INDEX /
 * RINGMASTER_LAUNCH_WORLD (else SLURM_PROCID / SLURM_NTASKS, else
 * JOB_COMPLETION_INDEX / RINGMASTER_WORLD), RINGMASTER_COORDINATOR_TIMEOUT_MS,
 * RINGMASTER_DATA_TIMEOUT_MS, RINGMASTER_TLS_CA / _CERT / _KEY. Strings
 * point into the environment (borrowed). RM_ERR_INVALID_ARG when the
 * coordinator, job or token is missing. */
RM_EXTERN rm_status_t rm_session_config_from_env(rm_session_config_t *cfg);

/* Join the job and build the first communicator. Blocks until the group
 * forms (the coordinator decides when), or the coordinator stays
 * unreachable for connect_timeout_ms (RM_ERR_UNAVAILABLE), refuses us
 * (RM_ERR_DENIED wrong token, RM_ERR_NOT_FOUND no such job), or the job is
 * already over (RM_ERR_JOB_ENDED). OUT: *out only on success; on failure
 * err (may be NULL) holds the reason in words. */
RM_EXTERN rm_status_t rm_session_join(const rm_session_config_t *cfg,
                                      rm_session_t **out, char *err,
                                      size_t errlen);
/* rm_session_config_from_env + rm_session_join. */
RM_EXTERN rm_status_t rm_session_join_env(rm_session_t **out, char *err,
                                          size_t errlen);

/* This generation's communicator: borrowed, valid until the next
 * rm_session_reform or rm_session_close. Collectives on it are ordinary
 * rm_allreduce ... calls. */
RM_EXTERN rm_comm_t *rm_session_comm(rm_session_t *s);
/* Tie a communicator the program made beside the session's (over this
 * generation's ranks: a framework's sub-group, an rm_comm_dup) to the
 * session: when the coordinator re-forms the job or it ends, comm is
 * aborted like the session's own (RM_ERR_RECONFIGURED / RM_ERR_JOB_ENDED,
 * the same words), so no wait on a member that left outlasts the
 * re-formation; at once when the session is stale already. Detach before
 * rm_comm_destroy. At most 64 at a time (RM_ERR_INVALID_ARG beyond). */
RM_EXTERN rm_status_t rm_session_attach(rm_session_t *s, rm_comm_t *comm);
RM_EXTERN void rm_session_detach(rm_session_t *s, rm_comm_t *comm);
/* The coordinator's verdict on this generation, waited for up to
 * timeout_ms (0: look once; < 0: the session's own bound after a failure,
 * 8 heartbeat intervals): RM_OK while the generation stands,
 * RM_ERR_RECONFIGURED once the coordinator moved on, RM_ERR_JOB_ENDED once
 * the job ended. After a failure on an attached communicator (a member
 * closed its links: RM_ERR_PEER_LOST), this says whether the failure was
 * the re-formation's, which the communicator's status then carries too.
 * Any thread; it sends nothing. */
RM_EXTERN rm_status_t rm_session_verdict(rm_session_t *s, int timeout_ms);
RM_EXTERN int rm_session_rank(const rm_session_t *s);
RM_EXTERN int rm_session_world(const rm_session_t *s);
RM_EXTERN uint64_t rm_session_generation(const rm_session_t *s);
RM_EXTERN uint64_t rm_session_job_id(const rm_session_t *s);
RM_EXTERN uint64_t rm_session_worker_id(const rm_session_t *s);
/* Steps every member of this generation had completed when it formed: a
 * program resumes from here after rm_session_reform. */
RM_EXTERN uint64_t rm_session_start_step(const rm_session_t *s);
/* The last step this process reported (rm_session_step_end). */
RM_EXTERN uint64_t rm_session_step(const rm_session_t *s);
/* The job spec as the coordinator sent it. Strings: "name", "workload",
 * "workload_options", "algorithm", "dtype", "on_failure",
 * "straggler_policy", "launcher", "workdir", "secagg_neighbours" ("all" or
 * "log"; "" when secure aggregation is off); borrowed, valid until the next
 * reform; NULL for an unknown name ("aggregation" too: "mean" when unset).
 * Numbers: "steps", "world_size",
 * "min_workers", "max_workers", "checkpoint_every", "checkpoint_step"
 * (last checkpoint every member completed), "step_quorum", "coded_s",
 * "backup_workers", "heartbeat_interval_ms", "aggregation_f",
 * "aggregation_m", "aggregation_iterations", "deterministic" (1 = the job
 * asked for bitwise reproducibility: the session's communicator then picks
 * algorithms from the fixed cost model, never from timing), "max_staleness"
 * (straggler_policy stale: how many steps late a gradient may be folded
 * in, 1..64; 0 otherwise), "secagg_bits" (secure aggregation:
 * 32 or 64, 0 = off), "secagg_threshold" (the fewest members a sum is
 * revealed over); 0 for an unknown name. */
RM_EXTERN const char *rm_session_spec_string(const rm_session_t *s,
                                             const char *name);
RM_EXTERN uint64_t rm_session_spec_uint(const rm_session_t *s,
                                        const char *name);
/* Floating-point spec fields: "clip_norm", "aggregation_tau",
 * "secagg_clip" (the L2 clip before quantizing), "secagg_scale" (the
 * fixed-point scale; 0 = the worker picks the largest power of two with
 * N*(clip*scale+1) <= 2^(bits-2)); 0 for an unknown name. (String "aggregation" and numbers "aggregation_f",
 * "aggregation_m", "aggregation_iterations" come from the two getters
 * above.) */
RM_EXTERN double rm_session_spec_double(const rm_session_t *s, const char *name);
/* Words about the last failure or membership change ("generation 3: peer
 * rank 2 lost; 3 members"); "" when none. Borrowed. */
RM_EXTERN const char *rm_session_last_error(const rm_session_t *s);

/* Re-join after RM_ERR_RECONFIGURED, RM_ERR_PEER_LOST or RM_ERR_TIMEOUT:
 * tell the coordinator which peer the data plane lost, wait for its
 * decision, join the next generation and build its communicator. On
 * RM_OK the getters give the new rank, world, generation and start_step.
 * RM_ERR_JOB_ENDED: the coordinator failed or ended the job instead (the
 * reason in rm_session_last_error). Blocks up to connect_timeout_ms plus
 * the coordinator's decision time. */
RM_EXTERN rm_status_t rm_session_reform(rm_session_t *s);

/* ---- steps ----
 * rm_session_step_begin starts step rm_session_step(s) + 1 and its clock;
 * rm_session_step_end reports it (compute = wall time - time in this
 * communicator's collectives - gate wait; comm = time in collectives;
 * bytes = payload all-reduced). loss/accuracy: NaN when not meaningful.
 * Both return RM_ERR_RECONFIGURED / RM_ERR_JOB_ENDED when the coordinator
 * moved on, RM_OK otherwise (a report that could not be delivered is
 * logged, not an error). */
RM_EXTERN rm_status_t rm_session_step_begin(rm_session_t *s);
RM_EXTERN rm_status_t rm_session_step_end(rm_session_t *s, double loss,
                                          double accuracy);

/* Named metrics a step reports beside loss and accuracy (perplexity,
 * learning rate, tokens/s...): at most RM_METRICS_MAX per step, each name
 * 1..RM_METRIC_NAME_MAX-1 bytes of [A-Za-z0-9_.:/-] starting with a letter,
 * no name twice and neither "loss" nor "accuracy" (the step's own fields),
 * each value finite. The coordinator keeps them with the step (REST
 * GET /api/v1/jobs/{id}/steps "metrics"; the dashboard plots them). */
#define RM_METRICS_MAX 8
#define RM_METRIC_NAME_MAX 32
typedef struct rm_metric {
  const char *name;
  double value;
} rm_metric_t;

/* rm_session_step_end with metrics[n_metrics] (borrowed for the call; NULL
 * / 0 for none). RM_ERR_INVALID_ARG, the step not reported and
 * rm_session_last_error naming the metric and the rule, when one breaks
 * the rules above. */
RM_EXTERN rm_status_t rm_session_step_end_metrics(rm_session_t *s, double loss,
                                                  double accuracy,
                                                  const rm_metric_t *metrics,
                                                  size_t n_metrics);

/* The program's own number of steps (0 = unknown, the default), carried
 * by every later step report: a command job's progress is then "step S of
 * total", where without it the job shows the step alone (the spec's
 * "steps" is the program's only if it reads it). */
RM_EXTERN void rm_session_set_total_steps(rm_session_t *s, uint64_t total);

/* The program resumes after `done` steps (it rolled back to a commit, or
 * took a peer's state after a re-formation): rm_session_step is `done` and
 * the next rm_session_step_begin starts step done + 1, so the step reports
 * and the job's progress count the program's steps, not its attempts.
 * rm_session_reform sets it to the coordinator's start_step (the fewest
 * steps any member reported); a program that knows better says so after. */
RM_EXTERN void rm_session_set_step(rm_session_t *s, uint64_t done);

/* A finished step with explicit figures (the built-in workloads). */
typedef struct rm_step_report {
  size_t struct_size;        /* sizeof(rm_step_report_t) */
  uint64_t step;             /* 1-based step just finished */
  double compute_ms, comm_ms, wait_ms;
  double loss, accuracy;     /* NaN when not meaningful */
  uint64_t allreduce_bytes;  /* payload bytes all-reduced this step */
  uint64_t param_checksum;   /* parameters after the step; 0 if none */
  uint64_t checkpoint_step;  /* newest checkpoint this worker wrote; 0 none */
  /* Ranks the step's rm_aggregate excluded or down-weighted (from
   * rm_agg_info_t.excluded), for the coordinator's byzantine_suspect
   * events; NULL / 0 when none. Borrowed for the call. */
  const uint32_t *excluded_ranks;
  size_t n_excluded;
  /* Named metrics (rm_session_step_end_metrics' rules), borrowed for the
   * call; read only when struct_size covers them (a caller built against
   * an older header passes a smaller struct_size and reports none). */
  const rm_metric_t *metrics;
  size_t n_metrics;
} rm_step_report_t;

/* Report r (r->struct_size must be set). Returns like rm_session_step_end. */
RM_EXTERN rm_status_t rm_session_step_report(rm_session_t *s,
                                             const rm_step_report_t *r);

/* The step's gradient all-reduce under the job's straggler policy
 * ("none": a plain all-reduce; "backup" / "deadline" / "auto": the
 * coordinator decides which ranks contribute to this step, every rank
 * receives the average over those contributors; "coded" and "stale" are
 * refused at submit for command jobs). Average (RM_AVG) over contributors;
 * in place when send == recv. OUT *contributors (may be NULL). Float
 * dtypes. The same step engine as the built-in workloads
 * (worker/session/step_engine.c). */
RM_EXTERN rm_status_t rm_session_allreduce_step(rm_session_t *s,
                                                const void *send, void *recv,
                                                size_t count, rm_dtype_t dt,
                                                int *contributors);
/* 1 when the gate already decided this step without this rank (a straggler
 * may stop computing early), 0 otherwise. Never blocks. */
RM_EXTERN int rm_session_step_dropped(rm_session_t *s);

/* A named barrier through the coordinator (not the data plane): every
 * member of this generation arrives, or it breaks at the deadline
 * (RM_ERR_TIMEOUT, rm_session_last_error names the missing ranks, their
 * last step and silence). deadline_ms 0 = the job's barrier_timeout_ms. */
RM_EXTERN rm_status_t rm_session_barrier(rm_session_t *s, const char *name,
                                         int deadline_ms);

/* Leave after the last step: ok = 1 finished; ok = 0 with error words.
 * summary_json: this worker's final metrics, one JSON object
 * ("{\"accuracy\":0.97}"), or NULL. RM_ERR_RECONFIGURED: refused because
 * the job is re-forming (reform, then continue or leave again). */
RM_EXTERN rm_status_t rm_session_leave(rm_session_t *s, int ok,
                                       const char *error,
                                       const char *summary_json);
/* Stop threads, close the communicator and the endpoint, free. A session
 * closed without leaving looks to the coordinator like a worker that
 * died (on_failure decides). NULL is a no-op. */
RM_EXTERN void rm_session_close(rm_session_t *s);

#ifdef __cplusplus
}
#endif

/* Secure aggregation of a session's gradients: ringmaster/secure.h. */
#include "ringmaster/secure.h"

#endif /* RINGMASTER_RINGMASTER_H */
