/*
 * mr.h - memory registration of the transport interface: one cache per
 * communicator, shared by every transport that registers memory.
 *
 * A transport that needs buffers registered before it moves them (RDMA:
 * ibv_reg_mr; later GPU transports) supplies reg_mr / dereg_mr
 * (transport.h). The others (TCP, shared memory) leave them NULL and never
 * call this file. A registration is an entry: a page-aligned range and,
 * per transport id, that transport's handle (NCCL net_v*.h's mhandle).
 *
 * Requests: a transport that needs the handle of a request's buffer calls
 * rm__mr_acquire(c, id, buf, len, need_write) when it starts on the
 * request. Any entry covering [buf, buf + len) with a handle of `id`
 * (writable when need_write: receives land by remote write) is a hit;
 * else a covering entry without that transport's handle gets one; else a
 * new entry is made. The request holds the entry (refs) until it completes
 * or is forgotten, and gives it back with rm__mr_release. An entry in use
 * is never evicted.
 *
 * Eviction: at most RINGMASTER_REG_CACHE (default 64; 0 = register per
 * message) entries that are neither in use nor the user's are kept; the
 * least recently used goes first (deregistered from every transport).
 *
 * User registrations (rm_comm_register, include/ringmaster/ringmaster.h):
 * an entry registered at once with every transport in use that registers
 * memory, marked `user`: never evicted, found by requests like any other,
 * until rm_comm_deregister. On TCP or shared memory only, it is an entry
 * without handles (registering is then free and changes nothing).
 *
 * Caveat (as any registration cache without memory hooks): memory freed
 * to the system and mapped again at the same address while its implicit
 * entry lives would be moved through the old registration on real RDMA
 * hardware; RINGMASTER_REG_CACHE=0 avoids it, and buffers reused in place
 * (scratch, caching allocators, user registrations) are safe.
 *
 * Threads: like the progress engine, the cache belongs to the thread that
 * runs the communicator's collectives; rm_comm_register/deregister must
 * not run concurrently with a collective on the same communicator.
 * All entries are deregistered by rm__mr_free_all, which rm_comm_destroy
 * calls before the transports free their state (RDMA: before the
 * protection domain goes).
 */
#ifndef RM_WORKER_TRANSPORT_MR_H
#define RM_WORKER_TRANSPORT_MR_H

#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

/* One registration (rm_mr_t of the public header). */
struct rm_mr {
  uintptr_t addr;  /* page-aligned range [addr, addr + len) */
  size_t len;
  int refs;        /* requests using it: > 0 is never evicted */
  int user;        /* held by rm_comm_register: never evicted */
  uint64_t used;   /* LRU clock */
  struct {
    void *h;       /* the transport's handle; NULL = not registered with it */
    int rw;        /* the handle allows remote writes into the range */
  } tp[RM__TP_COUNT];
};
typedef struct rm_mr rm__mr_t;

/* The entry covering [buf, buf + len) registered with transport id (see
 * the top of the file), held once more. NULL on failure: errno and the
 * status in *st (RM_ERR_SYSTEM: the transport could not register;
 * RM_ERR_NOMEM). len must be > 0. */
rm__mr_t *rm__mr_acquire(rm_comm_t *c, rm__tp_id_t id, const void *buf, size_t len,
                         int need_write, rm_status_t *st);
/* Give back what rm__mr_acquire held; NULL is ignored. */
void rm__mr_release(rm_comm_t *c, rm__mr_t *m);
/* The handle of transport id in entry m (NULL when none). */
static inline void *rm__mr_handle(const rm__mr_t *m, rm__tp_id_t id)
{
  return m ? m->tp[id].h : NULL;
}
/* Deregister and free every entry (rm_comm_destroy). */
void rm__mr_free_all(rm_comm_t *c);

/* Counters of c's cache (tests, debugging): entries now, registrations
 * made (transport reg_mr calls), lookups served by an existing handle. */
typedef struct rm__mr_stats {
  int entries;
  uint64_t regs, hits;
} rm__mr_stats_t;
void rm__mr_stats(const rm_comm_t *c, rm__mr_stats_t *out);

#endif
