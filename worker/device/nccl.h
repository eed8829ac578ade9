/*
 * nccl.h - NCCL as a backend of device collectives, under ringmaster's
 * membership (design in nccl.c).
 *
 * NCCL is reached through a table of its entry points (below), filled by
 * dlopen of libnccl.so.2 or of the library RINGMASTER_NCCL_LIB names
 * (nccl_lib.c: the library builds and runs without NCCL). The tests point
 * RINGMASTER_NCCL_LIB at a test double that exports NCCL's entry points
 * (tests/doubles/nccl_standin.c: NCCL's semantics over the tests' stand-in
 * GPU and a shared-memory segment), so that the bootstrap, the dispatch,
 * abort and re-formation are exercised on a machine without a GPU; the
 * library does not know it from libnccl.
 *
 * The declarations are NCCL's ABI (nccl.h of NCCL 2.x): ncclUniqueId is 128
 * bytes passed by value, the enums are ints, ncclComm_t an opaque pointer.
 */
#ifndef RM_WORKER_DEVICE_NCCL_H
#define RM_WORKER_DEVICE_NCCL_H

#include <stddef.h>

#include "comm/comm_int.h"

#define RM__NCCL_ID_BYTES 128
typedef struct rm__nccl_id {
  char internal[RM__NCCL_ID_BYTES];
} rm__nccl_id_t;

/* ncclResult_t */
enum {
  RM__NCCL_OK = 0,
  RM__NCCL_CUDA_ERROR = 1,
  RM__NCCL_SYSTEM_ERROR = 2,
  RM__NCCL_INTERNAL_ERROR = 3,
  RM__NCCL_INVALID_ARGUMENT = 4,
  RM__NCCL_INVALID_USAGE = 5,
  RM__NCCL_REMOTE_ERROR = 6,
  RM__NCCL_IN_PROGRESS = 7
};
/* ncclDataType_t */
enum {
  RM__NCCL_UINT8 = 1,
  RM__NCCL_INT32 = 2,
  RM__NCCL_INT64 = 4,
  RM__NCCL_FLOAT16 = 6,
  RM__NCCL_FLOAT32 = 7,
  RM__NCCL_FLOAT64 = 8,
  RM__NCCL_BFLOAT16 = 9
};
/* ncclRedOp_t */
enum { RM__NCCL_SUM = 0, RM__NCCL_PROD = 1, RM__NCCL_MAX = 2, RM__NCCL_MIN = 3, RM__NCCL_AVG = 4 };

/* ncclConfig_t as NCCL 2.14 defined it (size + version let newer NCCL read
 * an older layout); blocking = 0 makes init return at once (in progress). */
typedef struct rm__nccl_config {
  size_t size;
  unsigned int magic;   /* 0xcafebeef */
  unsigned int version; /* NCCL_VERSION(2, 14, 3) = 21403 */
  int blocking;
  int cgaClusterSize, minCTAs, maxCTAs;
  const char *netName;
} rm__nccl_config_t;

typedef struct rm__nccl_lib {
  const char *name; /* the library's path */
  int (*GetVersion)(int *version);
  int (*GetUniqueId)(rm__nccl_id_t *id);
  int (*CommInitRankConfig)(void **comm, int nranks, rm__nccl_id_t id, int rank,
                            rm__nccl_config_t *config);
  int (*CommGetAsyncError)(void *comm, int *state);
  int (*CommAbort)(void *comm);
  int (*CommDestroy)(void *comm);
  const char *(*GetErrorString)(int result);
  int (*AllReduce)(const void *s, void *r, size_t count, int dt, int op, void *comm, void *stream);
  int (*Broadcast)(const void *s, void *r, size_t count, int dt, int root, void *comm,
                   void *stream);
  int (*Reduce)(const void *s, void *r, size_t count, int dt, int op, int root, void *comm,
                void *stream);
  int (*AllGather)(const void *s, void *r, size_t sendcount, int dt, void *comm, void *stream);
  int (*ReduceScatter)(const void *s, void *r, size_t recvcount, int dt, int op, void *comm,
                       void *stream);
  int (*Send)(const void *s, size_t count, int dt, int peer, void *comm, void *stream);
  int (*Recv)(void *r, size_t count, int dt, int peer, void *comm, void *stream);
  int (*GroupStart)(void);
  int (*GroupEnd)(void);
} rm__nccl_lib_t;

/* The table of this process (decided once), or NULL with the reason. */
const rm__nccl_lib_t *rm__nccl_lib(char *why, size_t n);

/* The unique id of a new NCCL communicator, made by rank 0 of a
 * generation (the session relays it through the coordinator). */
rm_status_t rm__nccl_unique_id(rm__nccl_id_t *id, char *why, size_t n);
/* The session hands over this generation's id (nccl.c: then the first
 * NCCL collective does not bootstrap one over the data plane). */
void rm__nccl_set_id(rm_comm_t *c, const rm__nccl_id_t *id);

/* 1 when a collective on device buffers of c should run on NCCL: the
 * call's (or the communicator's) algorithm is RM_ALGO_NCCL and NCCL did
 * not fail to start on this communicator. */
int rm__nccl_wanted(const rm_comm_t *c, rm_algo_t algo);
/* Start NCCL on c for device `ordinal` if not yet (a collective over the
 * data plane: every rank calls it at the same point; call it outside
 * rm__dev_begin). RM_OK with NCCL running, or RM_OK with NCCL off for good
 * on c (every rank agreed; the log says which rank could not), or the
 * data plane's failure. */
rm_status_t rm__nccl_attach(rm_comm_t *c, int ordinal);
int rm__nccl_active(const rm_comm_t *c);

/* The collectives on NCCL, inside rm__dev_begin / rm__dev_end (enqueued on
 * stream s; each waits for completion with the deadline and abort rules of
 * nccl.c). dt and op are valid (checked by the caller); every one maps to
 * an NCCL type and op. */
rm_status_t rm__nccl_allreduce(rm_comm_t *c, const void *s, void *r, size_t count,
                               rm_dtype_t dt, rm_op_t op);
rm_status_t rm__nccl_broadcast(rm_comm_t *c, void *buf, size_t count, rm_dtype_t dt, int root);
rm_status_t rm__nccl_reduce(rm_comm_t *c, const void *s, void *r, size_t count, rm_dtype_t dt,
                            rm_op_t op, int root);
rm_status_t rm__nccl_allgather(rm_comm_t *c, const void *s, void *r, size_t sendcount,
                               rm_dtype_t dt);
rm_status_t rm__nccl_reduce_scatter(rm_comm_t *c, const void *s, void *r, size_t recvcount,
                                    rm_dtype_t dt, rm_op_t op);
rm_status_t rm__nccl_alltoall(rm_comm_t *c, const void *s, void *r, size_t count,
                              rm_dtype_t dt);
/* From rm_comm_destroy: abort if the communicator failed, else destroy. */
void rm__nccl_destroy(rm_comm_t *c);

#endif
