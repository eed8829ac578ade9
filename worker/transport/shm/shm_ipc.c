/*
 * shm_ipc.c - the receiving side of CUDA IPC over the shared-memory
 * transport (protocol in shm_int.h): mapping a peer's device allocation
 * once, handing a device-destination receive the mapped source, copying
 * into a host-destination receive, and the acknowledgement.
 *
 * Mappings: per peer, up to RM__SHM_IPC_CACHE allocations, keyed by the
 * whole handle (a new allocation gets new handle bytes, even at an old
 * address); the least recently used is closed when a new one needs its
 * place. An entry never closes while a copy from it may run: a copy is
 * enqueued on the receiver's stream and finished (event, device/stage.c)
 * before the arrival is acknowledged, and the sender reuses or frees its
 * memory only after the acknowledgement, so the cache stays correct; but a
 * closed mapping with a copy still queued would fault, so eviction picks
 * only entries not used since the last acknowledgement of this peer
 * (every earlier copy finished).
 */
#include <sched.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/gpu.h"
#include "rm_check.h"
#include "rm_clock.h"
#include "rm_le.h"
#include "rm_log.h"
#include "transport/shm/shm_int.h"

struct rm__shm_ipc_map {
  unsigned char h[RM__SHM_IPC_EXT];
  void *base;        /* NULL = free */
  uint64_t used;     /* k->ipc_clock at the last arrival through it; 0 = free */
};

_Static_assert(RM__SHM_IPC_EXT == sizeof ((rm__dev_msg_t *)0)->handle,
               "an IPC record carries the whole device-message handle");

static rm_status_t fail(rm_comm_t *c, rm__shm_conn_t *k, rm_status_t st, const char *what)
{
  const rm__gpu_ops_t *g = rm__gpu();
  return rm__shm_conn_fail(c, k, st, "CUDA IPC: %s: %s", what,
                           g ? g->err() : "this process has no usable GPU runtime "
                                          "(RINGMASTER_CUDA_IPC=0 turns CUDA IPC off)");
}

/* The base of the allocation named by h in this process (mapped once). */
static rm_status_t map(rm_comm_t *c, rm__shm_conn_t *k, const unsigned char *h, void **base)
{
  const rm__gpu_ops_t *g = rm__gpu();
  struct rm__shm_ipc_map *m, *victim = NULL;
  rm__ipc_handle_t ih;
  if (g == NULL) return fail(c, k, RM_ERR_UNSUPPORTED, "peer sent device memory");
  if (k->ipc_maps == NULL) {
    k->ipc_maps = calloc(RM__SHM_IPC_CACHE, sizeof *k->ipc_maps);
    if (k->ipc_maps == NULL) return RM_ERR_NOMEM;
  }
  k->ipc_clock++;
  for (int i = 0; i < RM__SHM_IPC_CACHE; i++) {
    m = &k->ipc_maps[i];
    if (m->base && memcmp(m->h, h, RM__SHM_IPC_EXT) == 0) {
      m->used = k->ipc_clock;
      *base = m->base;
      return RM_OK;
    }
    if (victim == NULL || m->used < victim->used) victim = m; /* a free one: used 0 */
  }
  /* a mapping a queued copy may still read is not closed (top of file) */
  if (victim->base != NULL && k->ipc_owed > 0 &&
      victim->used > k->ipc_clock - 1 - (uint64_t)k->ipc_owed)
    return fail(c, k, RM_ERR_NOMEM, "more device allocations in flight than the mapping "
                                    "cache holds");
  if (victim->base != NULL) g->ipc_close(victim->base);
  victim->base = NULL;
  memcpy(ih.bytes, h, RM__SHM_IPC_EXT);
  if (g->ipc_open(&ih, &victim->base) != RM_OK) {
    victim->base = NULL;
    victim->used = 0; /* free again */
    return fail(c, k, RM_ERR_SYSTEM, "open the peer's device memory");
  }
  memcpy(victim->h, h, RM__SHM_IPC_EXT);
  victim->used = k->ipc_clock;
  *base = victim->base;
  return RM_OK;
}

void rm__shm_ipc_unmap_all(rm__shm_conn_t *k)
{
  const rm__gpu_ops_t *g = rm__gpu();
  if (k->ipc_maps == NULL) return;
  for (int i = 0; g != NULL && i < RM__SHM_IPC_CACHE; i++)
    if (k->ipc_maps[i].base) g->ipc_close(k->ipc_maps[i].base);
  free(k->ipc_maps);
  k->ipc_maps = NULL;
}

/* Host destination: copy at once, wait (bounded), acknowledge. */
static rm_status_t copy_to_host(rm_comm_t *c, struct rm__shm_state *s, rm__shm_conn_t *k,
                                rm__req_t *r, const void *src)
{
  const rm__gpu_ops_t *g = rm__gpu();
  void *ev = NULL;
  int q = -1;
  int64_t end = rm__now_ns() + (int64_t)c->timeout_ms * 1000000;
  if (g->copy(r->buf, src, r->len, NULL) == RM_OK && g->event_create(&ev) == RM_OK &&
      g->event_record(ev, NULL) == RM_OK) {
    while ((q = g->event_query(ev)) == 0 && rm__now_ns() < end) sched_yield();
  }
  if (ev) g->event_destroy(ev);
  if (q == 0)
    return rm__shm_conn_fail(c, k, RM_ERR_TIMEOUT, "CUDA IPC: copying %zu bytes of the peer's "
                             "device memory to host memory did not finish in %d ms", r->len,
                             c->timeout_ms);
  if (q < 0) return fail(c, k, RM_ERR_SYSTEM, "copy the peer's device memory to host memory");
  r->done = r->len;
  return rm__shm_ack(c, s, k, &k->in->ipc_acks, "while this rank copied its device memory");
}

rm_status_t rm__shm_ipc_arrive(rm_comm_t *c, struct rm__shm_state *s, rm__shm_conn_t *k,
                               rm__req_t *r)
{
  uint64_t off = rm__get_le64(k->rrec + 32);
  void *base = NULL;
  RM_CHECK(map(c, k, k->rext, &base));
  const char *src = (const char *)base + off;
  if (r->dm != NULL && r->dm->kind == RM__DM_RECV) {
    r->dm->src = (void *)src;
    r->done = r->len;
    k->ipc_owed++;
    return RM_OK;
  }
  return copy_to_host(c, s, k, r, src);
}
