/*
 * shm_progress.c - the shared-memory transport's progress engine and ops
 * table. Layout, stream format and waiting rules: shm_int.h.
 *
 * One progress call:
 *   1. read our bell's value;
 *   2. a pass over every shared-memory connection: write queued sends into
 *      the peer's ring (record, then inline payload in chunks of at most
 *      CHUNK bytes, publishing head after each so the reader starts early),
 *      complete CMA sends the peer acknowledged, read our ring into the
 *      posted receives (CMA: process_vm_readv from the sender, in CHUNKs),
 *      publishing tail (and ringing the peer) after each chunk;
 *   3. anything moved: return (the caller re-checks its request);
 *   4. nothing moved: look at the peers' words: an ABORT is adopted (after
 *      draining, so data already in our ring is read first), a BYE with a
 *      request still pending to that peer fails, and at most every 50 ms
 *      a peer whose process is gone fails the communicator;
 *   5. spin up to spin_us watching the bell (oversubscribed: no spin, but
 *      sched_yield in a loop up to yield_us), then FUTEX_WAIT on it from
 *      the value of step 1 for at most min(timeout, 50 ms); one more pass.
 * In a mixed communicator the generic loop calls park/unpark instead of
 * letting this transport sleep: steps 2-4 once, with `polling` announced
 * (shm_int.h, "Waiting in a mixed communicator").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "rm_clock.h"
#include "rm_le.h"
#include "rm_log.h"
#include "rm_param.h"
#include "rm_transports.h"
#include "transport/shm/shm_int.h"

/* Messages of at least this many bytes go by CMA (single copy) where the
 * receiver's probe allowed it; 0 = never, the default. Measured on the
 * 2-vCPU VM (2026-12-05, quiet; bench/shm_copy): process_vm_readv moves
 * 10.6-13.4 GB/s for 64 KiB-4 MiB and 4.7-5.2 GB/s at 16 MiB where memcpy
 * moves 45-57 and 16-18 (it pins and maps the sender's pages one by one), so the ring's
 * two copies, pipelined between the two processes, beat its one at every
 * size and world size tried. rm_bench, shm, CMA from 64 KiB -> never:
 *   2 ranks (hd / ring): 256 KiB 57 -> 19 us, 1 MiB 136-146 -> 65-66 us,
 *     4 MiB 547-926 -> 335-395 us, 16 MiB 3.7-4.1 -> 2.3-2.5 ms,
 *     64 MiB (auto) 19.7-24.3 -> 12.7-15.5 ms;
 *   4 ranks (auto): 256 KiB 264-440 -> 71 us, 16 MiB 12.6-16.4 -> 8.6-9.3
 *     ms, 64 MiB 55-59 -> 36-38 ms;
 *   8 ranks on 2 CPUs (auto): 256 KiB 301-535 -> 277-312 us, 16 MiB
 *     37.9-39.2 -> 26.6-31.1 ms.
 * A host whose kernel reads another process's memory faster (no nested
 * paging) may gain from it on large, cache-cold buffers: set it there
 * (65536 was the old default) and measure with bench/compare.sh. */
RM_PARAM(shm_cma_min, "RINGMASTER_SHM_CMA_MIN", 0)
/* Spin before sleeping, microseconds; -1 = auto (50 unless oversubscribed). */
RM_PARAM(shm_spin_us, "RINGMASTER_SHM_SPIN_US", -1)
/* Where spinning is off (oversubscribed: more local ranks than CPUs),
 * yield the CPU in a loop this long before sleeping, microseconds; -1 =
 * auto (100 when oversubscribed, else 0). A waiting rank then hands its
 * CPU to the rank it waits for instead of paying a futex sleep and wake
 * per message: rm_bench, 4 and 8 ranks on 2 CPUs, hd, medians of 3
 * (2026-12-02, load 8-10): 4 KiB 94 -> 49 us (n = 4) and 363 -> 130 us
 * (n = 8), 64 KiB 126 -> 82 us and 577 -> 258 us; 300 us was no better. */
RM_PARAM(shm_yield_us, "RINGMASTER_SHM_YIELD_US", -1)

#define CHUNK (256 * 1024)
#define CMA_CHUNK (1024 * 1024)
#define SLICE_MS 50
#define PID_CHECK_NS (50 * 1000000LL)

rm_status_t rm__shm_conn_fail(rm_comm_t *c, rm__shm_conn_t *k, rm_status_t st,
                              const char *fmt, ...)
{
  char via[32];
  va_list ap;
  rm_status_t r;
  snprintf(via, sizeof via, "shm, pid %d", (int)k->pid);
  va_start(ap, fmt);
  r = rm__transport_conn_failv(c, k->peer, st, via, fmt, ap);
  va_end(ap);
  return r;
}

void rm__shm_tune(rm_comm_t *c)
{
  struct rm__shm_state *s = rm__shm(c);
  int64_t spin = rm__param_shm_spin_us();
  s->cma_min = (size_t)rm__param_shm_cma_min();
  if (spin < 0) spin = 1 + s->nslots <= sysconf(_SC_NPROCESSORS_ONLN) ? 50 : 0;
  s->spin_us = (int)spin;
  int64_t yield = rm__param_shm_yield_us();
  if (yield < 0) yield = s->spin_us == 0 && 1 + s->nslots > sysconf(_SC_NPROCESSORS_ONLN) ? 100 : 0;
  s->yield_us = (int)yield;
}

/* ---- ring copies (both may wrap) ---- */

static void ring_put(unsigned char *data, uint64_t size, uint64_t at,
                     const void *src, size_t n)
{
  size_t off = (size_t)(at % size), first = n < size - off ? n : size - off;
  memcpy(data + off, src, first);
  if (n > first) memcpy(data, (const char *)src + first, n - first);
}

static void ring_get(const unsigned char *data, uint64_t size, uint64_t at,
                     void *dst, size_t n)
{
  size_t off = (size_t)(at % size), first = n < size - off ? n : size - off;
  memcpy(dst, data + off, first);
  if (n > first) memcpy((char *)dst + first, data, n - first);
}

/* ---- sending ---- */

static void encode(const rm_comm_t *c, const rm__req_t *r, int type,
                   unsigned char *rec)
{
  rm__put_le32(rec + 0, (uint32_t)type);
  rm__put_le32(rec + 4, RM__SHM_MSG_MAGIC);
  rm__put_le64(rec + 8, r->seq);
  rm__put_le64(rec + 16, r->tag);
  rm__put_le64(rec + 24, r->len);
  rm__put_le64(rec + 32, type == RM__SHM_CMA ? (uint64_t)(uintptr_t)r->buf
                         : type == RM__SHM_IPC ? r->dm->off : 0);
  rm__put_le64(rec + 40, c->job_id);
}

/* Complete the sends of a queue that the reader acknowledged: acks counts
 * them since the start, *done those completed so far (in order). */
static void acked(rm__req_t **head, rm__req_t **tail, uint64_t *done, uint64_t acks,
                  int *moved)
{
  while (*done < acks && *head != NULL) {
    rm__req_t *r = *head;
    *head = r->next;
    if (*head == NULL) *tail = NULL;
    r->next = NULL;
    r->done = r->len;
    r->complete = 1;
    (*done)++;
    *moved = 1;
  }
}

static void do_send(struct rm__shm_state *s, rm__shm_conn_t *k, int *moved)
{
  uint64_t size = s->ring_bytes;
  uint64_t head = k->out->head; /* ours: no ordering needed */
  uint64_t tail = __atomic_load_n(&k->out->tail, __ATOMIC_ACQUIRE);
  uint64_t start = head;
  size_t budget = CHUNK * 4;

  while (k->sq_head != NULL && budget > 0) {
    rm__req_t *r = k->sq_head;
    rm__shm_req_t *q = rm__shm_req(r);
    uint64_t space = size - (head - tail);
    if (q->rec_done < RM__SHM_REC) {
      size_t ext = q->ipc ? RM__SHM_IPC_EXT : 0;
      if (space < RM__SHM_REC + ext) break; /* records are written whole */
      ring_put(k->out_data, size, head, q->rec, RM__SHM_REC);
      if (ext) ring_put(k->out_data, size, head + RM__SHM_REC, r->dm->handle, ext);
      head += RM__SHM_REC + ext;
      q->rec_done = RM__SHM_REC;
      r->ctl_moved += RM__SHM_REC + ext;
      space -= RM__SHM_REC + ext;
    }
    if (!q->cma && !q->ipc && r->done < r->len) {
      size_t n = r->len - r->done;
      if (n > space) n = (size_t)space;
      if (n > CHUNK) n = CHUNK;
      if (n > budget) n = budget;
      if (n == 0) break;
      ring_put(k->out_data, size, head, (const char *)r->buf + r->done, n);
      head += n;
      r->done += n;
      budget -= n;
      /* publish each chunk: the reader copies out while we copy in */
      __atomic_store_n(&k->out->head, head, __ATOMIC_RELEASE);
      rm__shm_ring_bell(s, k);
      tail = __atomic_load_n(&k->out->tail, __ATOMIC_ACQUIRE);
      if (r->done < r->len) continue;
    }
    k->sq_head = r->next;
    if (k->sq_head == NULL) k->sq_tail = NULL;
    r->next = NULL;
    if (q->cma) {
      rm__req_fifo_push(&k->cq_head, &k->cq_tail, r);
      k->cma_sent++;
    } else if (q->ipc) {
      rm__req_fifo_push(&k->iq_head, &k->iq_tail, r);
      k->ipc_sent++;
    } else {
      r->complete = 1;
    }
  }
  if (head != start) {
    __atomic_store_n(&k->out->head, head, __ATOMIC_RELEASE);
    rm__shm_ring_bell(s, k);
    *moved = 1;
  }
  /* CMA sends the reader has finished, IPC sends it has copied */
  acked(&k->cq_head, &k->cq_tail, &k->cma_done,
        __atomic_load_n(&k->out->acks, __ATOMIC_ACQUIRE), moved);
  acked(&k->iq_head, &k->iq_tail, &k->ipc_done,
        __atomic_load_n(&k->out->ipc_acks, __ATOMIC_ACQUIRE), moved);
}

/* ---- receiving ---- */

static rm_status_t check_record(rm_comm_t *c, rm__shm_conn_t *k, rm__req_t *r)
{
  uint32_t type = rm__get_le32(k->rrec), magic = rm__get_le32(k->rrec + 4);
  uint64_t seq = rm__get_le64(k->rrec + 8), tag = rm__get_le64(k->rrec + 16);
  uint64_t len = rm__get_le64(k->rrec + 24), job = rm__get_le64(k->rrec + 40);
  if (magic != RM__SHM_MSG_MAGIC ||
      (type != RM__SHM_INLINE && type != RM__SHM_CMA && (type != RM__SHM_IPC || !k->ipc)) ||
      job != c->job_id)
    return rm__shm_conn_fail(c, k, RM_ERR_PROTOCOL,
                     "bad message record in the ring (type %u, magic 0x%08x, "
                     "job %llu)", type, magic, (unsigned long long)job);
  if (seq != r->seq || tag != r->tag || len != r->len)
    return rm__shm_conn_fail(c, k, RM_ERR_PROTOCOL,
                     "message (collective %llu, tag %llu, %llu bytes) does not "
                     "match the posted receive (collective %llu, tag %llu, "
                     "%zu bytes)", (unsigned long long)seq,
                     (unsigned long long)tag, (unsigned long long)len,
                     (unsigned long long)r->seq, (unsigned long long)r->tag,
                     r->len);
  rm__shm_req(r)->cma = type == RM__SHM_CMA;
  rm__shm_req(r)->ipc = type == RM__SHM_IPC;
  return RM_OK;
}

static void pop_recv(rm__shm_conn_t *k)
{
  rm__req_t *r = k->rq_head;
  k->rq_head = r->next;
  if (k->rq_head == NULL) k->rq_tail = NULL;
  r->next = NULL;
  r->complete = 1;
  k->rrec_got = 0;
}

/* The sender of a CMA message stopped being a reliable source: it closed
 * (after an abort its buffers may be freed and reused) or its process is
 * gone. Its own words first: an ABORT is adopted (it names the root
 * cause), else the peer is lost. RM_OK when it is still open. */
static rm_status_t sender_gone(rm_comm_t *c, rm__shm_conn_t *k, const char *when)
{
  uint32_t closed = __atomic_load_n(&k->phdr->closed, __ATOMIC_ACQUIRE);
  if (closed == RM__SHM_ABORT)
    return rm__transport_adopt_abort(
        c, k->peer, (rm_status_t)__atomic_load_n(&k->phdr->abort_status, __ATOMIC_RELAXED),
        __atomic_load_n(&k->phdr->abort_blame, __ATOMIC_RELAXED));
  if (closed != RM__SHM_OPEN)
    return rm__shm_conn_fail(c, k, RM_ERR_PEER_LOST, "peer closed its communicator %s", when);
  if (rm__shm_pid_gone(k->pid))
    return rm__shm_conn_fail(c, k, RM_ERR_PEER_LOST, "its process exited %s", when);
  return RM_OK;
}

rm_status_t rm__shm_ack(rm_comm_t *c, struct rm__shm_state *s, rm__shm_conn_t *k,
                        uint64_t *acks, const char *when)
{
  rm_status_t st = sender_gone(c, k, when);
  if (st != RM_OK) return st;
  __atomic_add_fetch(acks, 1, __ATOMIC_RELEASE);
  rm__shm_ring_bell(s, k);
  return RM_OK;
}

static rm_status_t cma_read(rm_comm_t *c, rm__shm_conn_t *k, rm__req_t *r,
                            int *moved)
{
  uint64_t addr = rm__get_le64(k->rrec + 32);
  size_t n = r->len - r->done < CMA_CHUNK ? r->len - r->done : CMA_CHUNK;
  struct iovec l = {(char *)r->buf + r->done, n};
  struct iovec rv = {(void *)(uintptr_t)(addr + r->done), n};
  ssize_t got = process_vm_readv(k->pid, &l, 1, &rv, 1, 0);
  if (got < 0) {
    int err = errno;
    rm_status_t st;
    if (err == EINTR) return RM_OK;
    /* a sender that failed may free the buffer under the read (EFAULT) */
    if ((st = sender_gone(c, k, "in the middle of a transfer")) != RM_OK) return st;
    if (err == ESRCH)
      return rm__shm_conn_fail(c, k, RM_ERR_PEER_LOST,
                       "its process exited in the middle of a transfer");
    errno = err;
    return rm__shm_conn_fail(c, k, RM_ERR_PROTOCOL, "single-copy read of %zu bytes "
                     "at 0x%llx failed: %s", n, (unsigned long long)(addr + r->done),
                     strerror(errno));
  }
  r->done += (size_t)got;
  *moved = got > 0 || *moved;
  return RM_OK;
}

static rm_status_t do_recv(rm_comm_t *c, struct rm__shm_state *s,
                           rm__shm_conn_t *k, int *moved)
{
  uint64_t size = s->ring_bytes;
  uint64_t tail = k->in->tail, start = tail;
  uint64_t head = __atomic_load_n(&k->in->head, __ATOMIC_ACQUIRE);
  size_t budget = CHUNK * 4;
  rm_status_t st = RM_OK;

  while (k->rq_head != NULL && budget > 0) {
    rm__req_t *r = k->rq_head;
    if (k->rrec_got < RM__SHM_REC) {
      if (head - tail < RM__SHM_REC) break;
      ring_get(k->in_data, size, tail, k->rrec, RM__SHM_REC);
      tail += RM__SHM_REC;
      k->rrec_got = RM__SHM_REC;
      r->ctl_moved += RM__SHM_REC;
      if ((st = check_record(c, k, r)) != RM_OK) break;
      if (rm__shm_req(r)->ipc) { /* its handle was published with it (do_send) */
        if (head - tail < RM__SHM_IPC_EXT) {
          st = rm__shm_conn_fail(c, k, RM_ERR_PROTOCOL, "an IPC record came without its handle");
          break;
        }
        ring_get(k->in_data, size, tail, k->rext, RM__SHM_IPC_EXT);
        tail += RM__SHM_IPC_EXT;
        r->ctl_moved += RM__SHM_IPC_EXT;
      }
    }
    if (rm__shm_req(r)->ipc) { /* the copy (shm_ipc.c) */
      if ((st = rm__shm_ipc_arrive(c, s, k, r)) != RM_OK) break;
      pop_recv(k);
      *moved = 1;
      continue;
    }
    if (rm__shm_req(r)->cma) {
      if (r->done < r->len && (st = cma_read(c, k, r, moved)) != RM_OK) break;
      budget = budget > CMA_CHUNK ? budget - CMA_CHUNK : 0;
      if (r->done < r->len) continue;
      /* the bytes are the sender's only if it was still open after the
       * read ended: after an abort its buffer may already be reused */
      if ((st = rm__shm_ack(c, s, k, &k->in->acks, "during a transfer to this rank")) != RM_OK)
        break;
      pop_recv(k);
      *moved = 1;
      continue;
    }
    if (r->done < r->len) {
      size_t n = r->len - r->done;
      if (n > head - tail) n = (size_t)(head - tail);
      if (n > CHUNK) n = CHUNK;
      if (n > budget) n = budget;
      if (n == 0) break;
      ring_get(k->in_data, size, tail, (char *)r->buf + r->done, n);
      tail += n;
      r->done += n;
      budget -= n;
      __atomic_store_n(&k->in->tail, tail, __ATOMIC_RELEASE);
      rm__shm_ring_bell(s, k);
      head = __atomic_load_n(&k->in->head, __ATOMIC_ACQUIRE);
      if (r->done < r->len) continue;
    }
    pop_recv(k);
  }
  if (tail != start) {
    __atomic_store_n(&k->in->tail, tail, __ATOMIC_RELEASE);
    rm__shm_ring_bell(s, k);
    *moved = 1;
  }
  return st;
}

/* ---- peers' state ---- */

static int ring_empty(const rm__shm_conn_t *k)
{
  return k->rrec_got == 0 &&
         __atomic_load_n(&k->in->head, __ATOMIC_ACQUIRE) == k->in->tail;
}

static rm_status_t check_peers(rm_comm_t *c, struct rm__shm_state *s)
{
  int64_t now = rm__now_ns();
  int pid_check = now - s->last_pid_check >= PID_CHECK_NS;
  if (pid_check) s->last_pid_check = now;
  for (int p = 0; p < c->world; p++) {
    rm__shm_conn_t *k = &s->conns[p];
    uint32_t closed, gone;
    if (!k->active || k->phdr == NULL) continue;
    /* gone before closed: a peer that closed wrote it before it exited */
    gone = __atomic_load_n(&k->gone, __ATOMIC_ACQUIRE);
    closed = __atomic_load_n(&k->phdr->closed, __ATOMIC_ACQUIRE);
    if (closed == RM__SHM_ABORT)
      return rm__transport_adopt_abort(
          c, p, (rm_status_t)__atomic_load_n(&k->phdr->abort_status, __ATOMIC_RELAXED),
          __atomic_load_n(&k->phdr->abort_blame, __ATOMIC_RELAXED));
    if (closed == RM__SHM_BYE) {
      k->bye = 1;
      if (k->sq_head || k->cq_head || k->iq_head)
        return rm__shm_conn_fail(c, k, RM_ERR_PEER_LOST,
                         "peer closed its communicator with a send pending");
      if (k->rq_head && ring_empty(k))
        return rm__shm_conn_fail(c, k, RM_ERR_PEER_LOST,
                         "peer closed its communicator with a receive pending");
      continue;
    }
    if (gone || (pid_check && !__atomic_load_n(&s->watch_on, __ATOMIC_ACQUIRE) &&
                 rm__shm_pid_gone(k->pid)))
      return rm__shm_conn_fail(c, k, RM_ERR_PEER_LOST,
                       "its process is gone without closing its communicator "
                       "(killed?)");
  }
  return RM_OK;
}

/* ---- ops ---- */

static int shm_available(void)
{
  return access("/dev/shm", W_OK) == 0;
}

static int shm_can_connect(const rm_comm_t *c, int peer)
{
  int lo = peer < c->rank ? peer : c->rank, hi = peer < c->rank ? c->rank : peer;
  const char *t = rm_tp_pick(c->offers[lo], c->offers[hi]);
  return t != NULL && strcmp(t, "shm") == 0;
}

static rm_status_t shm_post(rm_comm_t *c, rm__req_t *req)
{
  struct rm__shm_state *s = rm__shm(c);
  rm__shm_conn_t *k = &s->conns[req->peer];
  if (s->closed || (k->bye && (req->kind == RM__REQ_SEND || ring_empty(k))))
    return rm__shm_conn_fail(c, k, RM_ERR_PEER_LOST,
                     "peer closed its communicator; cannot %s",
                     req->kind == RM__REQ_SEND ? "send" : "receive");
  if (req->kind == RM__REQ_SEND) {
    rm__shm_req_t *q = rm__shm_req(req);
    q->ipc = req->dm != NULL && req->dm->kind == RM__DM_SEND && k->ipc;
    q->cma = !q->ipc && s->cma_min > 0 && req->len >= s->cma_min &&
             __atomic_load_n(&k->out->cma_ok, __ATOMIC_ACQUIRE);
    encode(c, req, q->ipc ? RM__SHM_IPC : q->cma ? RM__SHM_CMA : RM__SHM_INLINE, q->rec);
    rm__req_fifo_push(&k->sq_head, &k->sq_tail, req);
  } else {
    rm__req_fifo_push(&k->rq_head, &k->rq_tail, req);
  }
  return RM_OK;
}

static rm_status_t pass(rm_comm_t *c, struct rm__shm_state *s, int *moved)
{
  for (int p = 0; p < c->world; p++) {
    rm__shm_conn_t *k = &s->conns[p];
    rm_status_t st;
    if (!k->active) continue;
    if (k->sq_head || k->cq_head || k->iq_head) do_send(s, k, moved);
    if (k->rq_head && (st = do_recv(c, s, k, moved)) != RM_OK) return st;
  }
  return rm_comm_status(c);
}

static rm_status_t shm_progress(rm_comm_t *c, int timeout_ms)
{
  struct rm__shm_state *s = rm__shm(c);
  int slept = 0;
  if (s == NULL || s->closed) return rm_comm_status(c);
  for (;;) {
    uint32_t seq = __atomic_load_n(&s->hdr->bell, __ATOMIC_ACQUIRE);
    int moved = 0;
    rm_status_t st = pass(c, s, &moved);
    if (st != RM_OK || moved) return st;
    if ((st = check_peers(c, s)) != RM_OK) return st;
    if (timeout_ms <= 0 || slept) return RM_OK;
    if (s->spin_us > 0 && !c->bg_progress) {
      int64_t end = rm__now_ns() + (int64_t)s->spin_us * 1000;
      while (__atomic_load_n(&s->hdr->bell, __ATOMIC_ACQUIRE) == seq &&
             rm__now_ns() < end && rm_comm_status(c) == RM_OK) {
      }
      if (__atomic_load_n(&s->hdr->bell, __ATOMIC_ACQUIRE) != seq) continue;
    } else if (s->yield_us > 0 && !c->bg_progress) {
      int64_t end = rm__now_ns() + (int64_t)s->yield_us * 1000;
      while (__atomic_load_n(&s->hdr->bell, __ATOMIC_ACQUIRE) == seq &&
             rm__now_ns() < end && rm_comm_status(c) == RM_OK)
        sched_yield();
      if (__atomic_load_n(&s->hdr->bell, __ATOMIC_ACQUIRE) != seq) continue;
    }
    int ms = timeout_ms < SLICE_MS ? timeout_ms : SLICE_MS;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    __atomic_store_n(&s->hdr->sleeping, 1, __ATOMIC_SEQ_CST);
    if (rm_comm_status(c) == RM_OK)
      syscall(SYS_futex, &s->hdr->bell, FUTEX_WAIT, seq, &ts, NULL, 0);
    __atomic_store_n(&s->hdr->sleeping, 0, __ATOMIC_SEQ_CST);
    slept = 1;
  }
}

/* Before another transport blocks in poll() with our poll bell in its set
 * (transport.h park). */
static rm_status_t shm_park(rm_comm_t *c, int ms, int *ok_ms)
{
  struct rm__shm_state *s = rm__shm(c);
  int moved = 0;
  rm_status_t st;
  *ok_ms = ms;
  if (s == NULL || s->closed) return rm_comm_status(c);
  if (s->parks) {
    __atomic_store_n(&s->hdr->polling, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST); /* the store before the pass */
  }
  st = pass(c, s, &moved);
  if (st == RM_OK && !moved) st = check_peers(c, s);
  if (st != RM_OK || moved) {
    if (s->parks) __atomic_store_n(&s->hdr->polling, 0, __ATOMIC_RELAXED);
    *ok_ms = 0;
    return st;
  }
  if (!s->parks) {
    *ok_ms = ms < 1 ? ms : 1; /* no bell: slices, as before */
  } else if (!__atomic_load_n(&s->watch_on, __ATOMIC_ACQUIRE)) {
    /* back by the next pid check (check_peers ran it or it is not due) */
    int64_t left = s->last_pid_check + PID_CHECK_NS - rm__now_ns();
    int64_t left_ms = (left + 999999) / 1000000;
    if (left_ms < 1) left_ms = 1;
    if (left_ms < ms) *ok_ms = (int)left_ms;
  }
  return RM_OK;
}

static void shm_unpark(rm_comm_t *c)
{
  struct rm__shm_state *s = rm__shm(c);
  if (s != NULL && s->parks && s->hdr != NULL)
    __atomic_store_n(&s->hdr->polling, 0, __ATOMIC_RELAXED);
}

static void shm_stalled(rm_comm_t *c, int on, uint64_t seq, int64_t since_ns)
{
  struct rm__shm_state *s = rm__shm(c);
  rm__shm_hdr_t *h;
  (void)since_ns; /* every peer reads our words: no one needs telling */
  if (s == NULL || s->closed) return;
  h = s->hdr;
  __atomic_add_fetch(&h->waits_lock, 1, __ATOMIC_ACQ_REL); /* odd: writing */
  __atomic_store_n(&h->waits_on, on, __ATOMIC_RELAXED);
  __atomic_store_n(&h->waits_seq, seq, __ATOMIC_RELAXED);
  __atomic_store_n(&h->waits_ns, rm__now_ns(), __ATOMIC_RELAXED);
  __atomic_add_fetch(&h->waits_lock, 1, __ATOMIC_RELEASE);
}

static int shm_left(const rm_comm_t *c, int peer)
{
  struct rm__shm_state *s = rm__shm(c);
  if (s == NULL || peer < 0 || peer >= c->world) return 0;
  const rm__shm_conn_t *k = &s->conns[peer];
  return k->bye || (k->phdr != NULL && __atomic_load_n(&k->phdr->closed, __ATOMIC_ACQUIRE));
}

static int shm_waits_on(const rm_comm_t *c, int peer, int64_t since_ns,
                        uint64_t *seq)
{
  struct rm__shm_state *s = rm__shm(c);
  const rm__shm_hdr_t *h;
  if (s == NULL || peer < 0 || peer >= c->world || !s->conns[peer].active ||
      (h = s->conns[peer].phdr) == NULL)
    return -1;
  for (int tries = 0; tries < 100; tries++) {
    uint32_t v = __atomic_load_n(&h->waits_lock, __ATOMIC_ACQUIRE);
    if (v & 1) continue;
    int on = __atomic_load_n(&h->waits_on, __ATOMIC_RELAXED);
    uint64_t sq = __atomic_load_n(&h->waits_seq, __ATOMIC_RELAXED);
    int64_t ns = __atomic_load_n(&h->waits_ns, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&h->waits_lock, __ATOMIC_RELAXED) != v) continue;
    if (on < 0 || on >= c->world || on == peer || ns < since_ns) return -1;
    *seq = sq;
    return on;
  }
  return -1;
}

static void shm_close_all(rm_comm_t *c, rm_status_t reason)
{
  struct rm__shm_state *s = rm__shm(c);
  if (s == NULL) return;
  for (int p = 0; s->conns != NULL && p < c->world; p++) {
    rm__shm_conn_t *k = &s->conns[p];
    /* requests may be freed by their owners once we return: forget them */
    k->sq_head = k->sq_tail = k->cq_head = k->cq_tail = NULL;
    k->iq_head = k->iq_tail = NULL;
    k->rq_head = k->rq_tail = NULL;
  }
  if (!s->closed && s->hdr != NULL) {
    if (reason != RM_OK) {
      __atomic_store_n(&s->hdr->abort_status, (int32_t)reason, __ATOMIC_RELAXED);
      __atomic_store_n(&s->hdr->abort_blame, c->failed_peer, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&s->hdr->closed, reason == RM_OK ? RM__SHM_BYE : RM__SHM_ABORT,
                     __ATOMIC_RELEASE);
    for (int p = 0; s->conns != NULL && p < c->world; p++)
      if (s->conns[p].phdr) rm__shm_ring_bell(s, &s->conns[p]);
  }
  s->closed = 1;
  if (c->destroying) rm__shm_state_free(c);
}

static int shm_dev_ref(const rm_comm_t *c, int peer)
{
  const struct rm__shm_state *s = rm__shm(c);
  return s != NULL && peer >= 0 && peer < c->world && s->conns[peer].active &&
         s->conns[peer].ipc;
}

static rm_status_t shm_dev_ref_done(rm_comm_t *c, int peer)
{
  struct rm__shm_state *s = rm__shm(c);
  rm__shm_conn_t *k = &s->conns[peer];
  if (k->ipc_owed > 0) k->ipc_owed--;
  if (s->closed) return rm_comm_status(c);
  return rm__shm_ack(c, s, k, &k->in->ipc_acks, "while this rank copied its device memory");
}

static void shm_wake(rm_comm_t *c)
{
  struct rm__shm_state *s = rm__shm(c);
  if (s == NULL || s->hdr == NULL) return;
  __atomic_add_fetch(&s->hdr->bell, 1, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, &s->hdr->bell, FUTEX_WAKE, 1, NULL, NULL, 0);
}

const rm__transport_ops_t rm__shm_transport = {
    .name = "shm",
    .id = RM__TP_SHM,
    .available = shm_available,
    .can_connect = shm_can_connect,
    .connect_all = rm__shm_connect_all,
    .post = shm_post,
    .progress = shm_progress,
    .close_all = shm_close_all,
    .stalled = shm_stalled,
    .waits_on = shm_waits_on,
    .left = shm_left,
    .wake = shm_wake,
    .park = shm_park,
    .unpark = shm_unpark,
    .dev_ref = shm_dev_ref,
    .dev_ref_done = shm_dev_ref_done,
};
