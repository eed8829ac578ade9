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

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define RM_EXTERN
#elif defined(RM_BUILDING_LIBRARY)
#define RM_EXTERN __attribute__((visibility("default")))
#else
#define RM_EXTERN
#endif

#define RM_VERSION_MAJOR 0
#define RM_VERSION_MINOR 1
#define RM_VERSION_PATCH 0

/* ---- status codes: one list, three generated views (enum, name, text) ---- */
#define RM_STATUS_MAP(XX)                                                     \
  XX(OK, 0, "success")                                                        \
  XX(ERR_INVALID_ARG, 1, "invalid argument")                                  \
  XX(ERR_NOMEM, 2, "out of memory")                                           \
  XX(ERR_SYSTEM, 3, "system call failed")                                     \
  XX(ERR_PEER_LOST, 4, "peer lost")                                           \
  XX(ERR_TIMEOUT, 5, "deadline exceeded")                                     \
  XX(ERR_PROTOCOL, 6, "protocol error on data-plane connection")              \
  XX(ERR_ABORTED, 7, "communicator aborted")                                  \
  XX(ERR_STALE_GENERATION, 8, "stale generation")                             \
  XX(ERR_UNSUPPORTED, 9, "not supported by this build or device")             \
  XX(ERR_UNAVAILABLE, 10, "service unavailable")                              \
  XX(ERR_NOT_FOUND, 11, "not found")                                          \
  XX(ERR_DENIED, 12, "permission denied")                                     \
  XX(ERR_INTERNAL, 13, "internal error")

typedef enum {
#define RM__STATUS_ENUM(name, code, text) RM_##name = code,
  RM_STATUS_MAP(RM__STATUS_ENUM)
#undef RM__STATUS_ENUM
} rm_status_t;

/* "RM_ERR_PEER_LOST" and "peer lost"; never NULL, "RM_UNKNOWN" for junk. */
RM_EXTERN const char *rm_status_name(rm_status_t st);
RM_EXTERN const char *rm_status_string(rm_status_t st);

/* ---- element types and reduction operators ---- */
typedef enum {
  RM_F32 = 0,
  RM_F64 = 1,
  RM_F16 = 2,  /* IEEE binary16; reduced in f32, rounded once per step */
  RM_BF16 = 3, /* bfloat16; reduced in f32, rounded once per step */
  RM_I32 = 4,
  RM_I64 = 5,
  RM_U8 = 6,
  RM_DTYPE_COUNT
} rm_dtype_t;

typedef enum {
  RM_SUM = 0,
  RM_PROD = 1,
  RM_MIN = 2,
  RM_MAX = 3,
  RM_AVG = 4, /* sum, then divide by world size (integers: truncating) */
  RM_OP_COUNT
} rm_op_t;

RM_EXTERN size_t rm_dtype_size(rm_dtype_t dt); /* 0 for an invalid dtype */
RM_EXTERN const char *rm_dtype_name(rm_dtype_t dt);
RM_EXTERN const char *rm_op_name(rm_op_t op);
/* Parse "f32", "bf16", "sum", ...; return RM_ERR_INVALID_ARG for others. */
RM_EXTERN rm_status_t rm_dtype_parse(const char *s, rm_dtype_t *out);
RM_EXTERN rm_status_t rm_op_parse(const char *s, rm_op_t *out);

/* ---- all-reduce algorithms ---- */
typedef enum {
  RM_ALGO_AUTO = 0,             /* alpha-beta cost model picks one */
  RM_ALGO_RING = 1,             /* reduce-scatter + all-gather, pipelined */
  RM_ALGO_HALVING_DOUBLING = 2, /* Rabenseifner */
  RM_ALGO_BUTTERFLY = 3,        /* recursive doubling, whole vector */
  RM_ALGO_TREE = 4,             /* binomial reduce + broadcast */
  RM_ALGO_COUNT
} rm_algo_t;

RM_EXTERN const char *rm_algo_name(rm_algo_t a); /* "ring", "hd", ... */
/* Accepts "auto", "ring", "hd"/"halving_doubling", "butterfly", "tree". */
RM_EXTERN rm_status_t rm_algo_parse(const char *s, rm_algo_t *out);

/* ---- endpoints ---- */
typedef struct rm_endpoint rm_endpoint_t;

/* Listen on "host:port" (port 0 = any free port). OUT: *out on success. */
RM_EXTERN rm_status_t rm_endpoint_open(const char *bind_addr,
                                       rm_endpoint_t **out);
/* "host:port" actually bound; borrowed, valid until rm_endpoint_close. */
RM_EXTERN const char *rm_endpoint_address(const rm_endpoint_t *ep);
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
} rm_comm_config_t;

/* Fill *cfg with defaults (reads RINGMASTER_* once). */
RM_EXTERN void rm_comm_config_init(rm_comm_config_t *cfg);

/* Connect to every peer and check they agree on (job, generation, world).
 * Blocks up to connect_timeout_ms. OUT: *out only on success. */
RM_EXTERN rm_status_t rm_comm_init(const rm_comm_config_t *cfg,
                                   rm_comm_t **out);
/* Safe from any thread, any number of times; never blocks on peers. */
RM_EXTERN void rm_comm_abort(rm_comm_t *comm);
/* Frees everything; the communicator must not be in use by another thread. */
RM_EXTERN void rm_comm_destroy(rm_comm_t *comm);

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

/* ---- collectives ----
 * send == recv means in place. count is in elements. Buffers are host memory.
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
RM_EXTERN rm_status_t rm_barrier(rm_comm_t *comm);

/* Algorithm auto would choose for this call, and its predicted time. */
RM_EXTERN rm_algo_t rm_allreduce_choose(const rm_comm_t *comm, size_t bytes,
                                        double *predicted_us);

#ifdef __cplusplus
}
#endif
#endif /* RINGMASTER_RINGMASTER_H */
