/*
 * dev.c - the per-communicator device state and the device side of the
 * buffer operations (design in dev.h).
 *
 * Lifecycle of c->dev:
 *
 *   NULL --first device collective (rm__dev_begin)--> READY (device fixed,
 *        streams s / s_out made) --rm_comm_destroy (rm__dev_destroy)--> freed
 *
 * Inside READY each device collective brackets itself with rm__dev_begin /
 * rm__dev_end (c->dev_active). Waiting for the streams is event polling
 * with the communicator's deadline, never cudaStreamSynchronize: a GPU
 * that stops answering fails the collective with RM_ERR_TIMEOUT and words,
 * as a silent peer does.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"
#include "device/stage.h"
#include "rm_check.h"
#include "rm_clock.h"
#include "rm_log.h"

rm_status_t rm__dev_fail(rm_comm_t *c, rm_status_t st, const char *what)
{
  const rm__gpu_ops_t *g = rm__gpu();
  st = rm__comm_fail(c, st, -1, "device: %s: %s", what, g ? g->err() : "no GPU runtime");
  rm__stage_detach(c); /* on the progress thread: the owners still hold them */
  return st;
}

static rm_status_t refuse(const char *why, int a, int b)
{
  RM_ERROR(why, a, b);
  return RM_ERR_INVALID_ARG;
}

rm_status_t rm__mem_classify(rm_comm_t *c, const void *const *bufs, int n,
                             int *device, int *ordinal)
{
  const rm__gpu_ops_t *g;
  int ndev = 0, nhost = 0, ord = -1;
  *device = 0;
  if (c->mem_kind == RM_MEM_HOST) return RM_OK;
  g = rm__gpu();
  if (g == NULL) {
    if (c->mem_kind == RM_MEM_DEVICE)
      return refuse("collective: the communicator says device memory (rm_comm_set_memory) "
                    "but no GPU runtime is usable in this process (%d, %d)", 0, 0);
    return RM_OK;
  }
  if (c->mem_kind == RM_MEM_DEVICE && c->dev != NULL) {
    *device = 1;
    *ordinal = c->dev->ordinal;
    return RM_OK;
  }
  for (int i = 0; i < n; i++) {
    int d = 0;
    if (bufs[i] == NULL) continue;
    if (g->ptr_is_device(bufs[i], &d)) {
      if (ord >= 0 && d != ord)
        return refuse("collective: buffers on two devices (%d and %d); one "
                      "collective runs on one device", ord, d);
      ord = d;
      ndev++;
    } else {
      nhost++;
    }
  }
  if (ndev > 0 && nhost > 0)
    return refuse("collective: %d device and %d host buffers in one call; pass "
                  "buffers of one kind", ndev, nhost);
  if (ndev == 0) {
    if (c->mem_kind == RM_MEM_DEVICE && nhost > 0)
      return refuse("collective: the communicator says device memory but %d of %d "
                    "buffers are host memory", nhost, nhost);
    return RM_OK;
  }
  if (c->dev != NULL && c->dev->ordinal != ord)
    return refuse("collective: this communicator works on device %d, the buffers "
                  "are on device %d (one device per communicator)", c->dev->ordinal, ord);
  *device = 1;
  *ordinal = ord;
  return RM_OK;
}

static rm_status_t dev_create(rm_comm_t *c, int ordinal)
{
  const rm__gpu_ops_t *g = rm__gpu();
  rm__dev_t *d = calloc(1, sizeof *d);
  rm_status_t st = RM_ERR_NOMEM;
  if (d == NULL) return RM_ERR_NOMEM;
  d->g = g;
  d->ordinal = ordinal;
  d->send_seq = calloc((size_t)c->world, sizeof *d->send_seq);
  d->send_wired = calloc((size_t)c->world, sizeof *d->send_wired);
  d->recv_seq = calloc((size_t)c->world, sizeof *d->recv_seq);
  d->recv_wired = calloc((size_t)c->world, sizeof *d->recv_wired);
  if (d->send_seq == NULL || d->send_wired == NULL || d->recv_seq == NULL ||
      d->recv_wired == NULL)
    goto fail;
  if (g->set_device(ordinal, &d->prev_device) != RM_OK) {
    st = rm__dev_fail(c, RM_ERR_SYSTEM, "set device");
    goto fail;
  }
  if (g->stream_create(&d->s) != RM_OK || g->stream_create(&d->s_out) != RM_OK) {
    st = rm__dev_fail(c, RM_ERR_SYSTEM, "create streams");
    goto fail_streams;
  }
  c->dev = d;
  RM_DEBUG("rank %d: device collectives on %s device %d", c->rank, g->name, ordinal);
  return RM_OK;

fail_streams:
  if (d->s) g->stream_destroy(d->s);
  if (d->s_out) g->stream_destroy(d->s_out);
  if (d->prev_device != ordinal) {
    int ignored;
    (void)g->set_device(d->prev_device, &ignored);
  }
fail:
  free(d->send_seq);
  free(d->send_wired);
  free(d->recv_seq);
  free(d->recv_wired);
  free(d);
  return st;
}

rm_status_t rm__dev_event(rm_comm_t *c, void **ev)
{
  rm__dev_t *d = c->dev;
  if (d->nev_free > 0) {
    *ev = d->ev_free[--d->nev_free];
    return RM_OK;
  }
  if (d->g->event_create(ev) != RM_OK) return rm__dev_fail(c, RM_ERR_SYSTEM, "create event");
  return RM_OK;
}

void rm__dev_event_put(rm_comm_t *c, void *ev)
{
  rm__dev_t *d = c->dev;
  if (ev == NULL) return;
  if (d->nev_free == d->ev_cap) {
    int cap = d->ev_cap ? 2 * d->ev_cap : 16;
    void **n = realloc(d->ev_free, (size_t)cap * sizeof *n);
    if (n == NULL) {
      d->g->event_destroy(ev);
      return;
    }
    d->ev_free = n;
    d->ev_cap = cap;
  }
  d->ev_free[d->nev_free++] = ev;
}

rm_status_t rm__dev_begin(rm_comm_t *c, int ordinal)
{
  void *ev;
  if (c->dev == NULL) RM_CHECK(dev_create(c, ordinal));
  else if (c->dev->g->set_device(ordinal, &c->dev->prev_device) != RM_OK)
    return rm__dev_fail(c, RM_ERR_SYSTEM, "set device");
  /* the collective reads what the user's stream wrote (top of dev.h) */
  RM_CHECK(rm__dev_event(c, &ev));
  if (c->dev->g->event_record(ev, c->user_stream) != RM_OK ||
      c->dev->g->stream_wait(c->dev->s, ev) != RM_OK) {
    rm__dev_event_put(c, ev);
    return rm__dev_fail(c, RM_ERR_SYSTEM, "wait for the user's stream");
  }
  rm__dev_event_put(c, ev);
  c->dev_active = 1;
  return RM_OK;
}

int rm__dev_drain(rm_comm_t *c, int ms)
{
  rm__dev_t *d = c->dev;
  void *e1 = NULL, *e2 = NULL;
  int r = -1;
  if (d->hung) ms = 0; /* it had its deadline once */
  if (rm__dev_event(c, &e1) != RM_OK || rm__dev_event(c, &e2) != RM_OK) goto out;
  if (d->g->event_record(e1, d->s) != RM_OK || d->g->event_record(e2, d->s_out) != RM_OK) goto out;
  int64_t end = rm__now_ns() + (int64_t)ms * 1000000;
  for (;;) {
    int a = d->g->event_query(e1), b = d->g->event_query(e2);
    if (a < 0 || b < 0) break;
    if (a && b) {
      r = 1;
      break;
    }
    if (rm__now_ns() >= end) {
      r = 0;
      break;
    }
    sched_yield();
  }
out:
  rm__dev_event_put(c, e1);
  rm__dev_event_put(c, e2);
  if (r == 0) d->hung = 1;
  return r;
}

rm_status_t rm__dev_end(rm_comm_t *c, rm_status_t st)
{
  rm__dev_t *d = c->dev;
  int r;
  if (d == NULL) return st;
  if (st != RM_OK || rm__stage_active(c)) st = rm__stage_quiesce(c, st);
  r = rm__dev_drain(c, c->timeout_ms);
  /* every copy finished: acknowledge what came by reference before the
   * call returns (shm_int.h: acks of one collective stay in order) */
  if (r == 1 && st == RM_OK) st = rm__stage_progress(c);
  if (r == 0 && st == RM_OK)
    st = rm__comm_fail(c, RM_ERR_TIMEOUT, -1,
                       "device: the GPU did not finish the collective's copies and "
                       "reductions within %d ms", c->timeout_ms);
  else if (r < 0 && st == RM_OK)
    st = rm__dev_fail(c, RM_ERR_SYSTEM, "finishing the collective");
  /* after an error nothing more runs on the streams (a GPU error is sticky):
   * only a GPU that stopped answering may still write staging memory */
  if (r != 0) rm__stage_reap(c);
  c->dev_active = 0;
  if (d->prev_device != d->ordinal) {
    int ignored;
    (void)d->g->set_device(d->prev_device, &ignored);
  }
  return st;
}

void rm__dev_destroy(rm_comm_t *c)
{
  rm__dev_t *d = c->dev;
  int prev = 0;
  if (d == NULL) return;
  if (d->s != NULL) {
    (void)d->g->set_device(d->ordinal, &prev);
    (void)rm__stage_quiesce(c, RM_ERR_ABORTED);
    /* a GPU that never finishes keeps its staging memory: freeing memory a
     * copy still uses would be worse than the leak */
    if (rm__dev_drain(c, c->timeout_ms) == 0) {
      RM_WARN("rank %d: device work did not finish at destroy; its staging memory is "
              "kept for the life of the process", c->rank);
      rm__stage_leak(c);
      d->bfree_kept = d->bfree;
      d->bfree = NULL;
    } else {
      rm__stage_reap(c);
    }
  }
  for (rm__bounce_t *b = d->bfree, *n; b; b = n) {
    n = b->next;
    d->g->host_free(b->p);
    free(b);
  }
  rm__dev_keep(d->bfree_kept); /* a hung GPU's: held, not freed */
  d->g->dev_free(d->scratch);
  d->g->dev_free(d->tmp);
  for (int i = 0; i < d->nev_free; i++) d->g->event_destroy(d->ev_free[i]);
  free(d->ev_free);
  if (d->s) d->g->stream_destroy(d->s);
  if (d->s_out) d->g->stream_destroy(d->s_out);
  if (d->s != NULL && prev != d->ordinal) {
    int ignored;
    (void)d->g->set_device(prev, &ignored);
  }
  free(d->send_seq);
  free(d->send_wired);
  free(d->recv_seq);
  free(d->recv_wired);
  free(d);
  c->dev = NULL;
}

/* ---- buffer operations ---- */

rm_status_t rm__mcopy(rm_comm_t *c, void *dst, const void *src, size_t n)
{
  if (n == 0 || dst == src) return RM_OK;
  if (!c->dev_active) {
    memmove(dst, src, n);
    return RM_OK;
  }
  /* device ranges that overlap go through the temporary (cudaMemcpyAsync
   * does not promise memmove semantics) */
  const char *s = src, *e = dst;
  if ((e < s && e + n > s) || (s < e && s + n > e)) {
    void *t;
    RM_CHECK(rm__mtmp(c, n, &t));
    if (c->dev->g->copy(t, src, n, c->dev->s) != RM_OK ||
        c->dev->g->copy(dst, t, n, c->dev->s) != RM_OK)
      return rm__dev_fail(c, RM_ERR_SYSTEM, "device copy");
    return RM_OK;
  }
  if (c->dev->g->copy(dst, src, n, c->dev->s) != RM_OK)
    return rm__dev_fail(c, RM_ERR_SYSTEM, "device copy");
  return RM_OK;
}

rm_status_t rm__mzero(rm_comm_t *c, void *dst, size_t n)
{
  if (n == 0) return RM_OK;
  if (!c->dev_active) {
    memset(dst, 0, n);
    return RM_OK;
  }
  if (c->dev->g->zero(dst, n, c->dev->s) != RM_OK)
    return rm__dev_fail(c, RM_ERR_SYSTEM, "device memset");
  return RM_OK;
}

rm_status_t rm__mscale(rm_comm_t *c, void *buf, size_t count, rm_dtype_t dt, int world)
{
  if (!c->dev_active) {
    rm__scale_avg(buf, count, dt, world);
    return RM_OK;
  }
  if (c->dev->g->scale_avg(buf, count, dt, world, c->dev->s) != RM_OK)
    return rm__dev_fail(c, RM_ERR_SYSTEM, "average kernel");
  return RM_OK;
}

rm_status_t rm__mreduce(rm_comm_t *c, const rm__reducer_t *r, void *dst, const void *src,
                        size_t count)
{
  if (!c->dev_active) {
    r->fn(dst, src, count);
    return RM_OK;
  }
  if (c->dev->g->reduce(dst, src, count, r->dt, r->op, c->dev->s) != RM_OK)
    return rm__dev_fail(c, RM_ERR_SYSTEM, "reduction kernel");
  return RM_OK;
}

/* Grow a kept device buffer. The old one may still be read by work on s:
 * drain first (growth is rare: sizes settle after the first calls). */
static rm_status_t grow(rm_comm_t *c, void **buf, size_t *size, size_t n)
{
  rm__dev_t *d = c->dev;
  void *p = NULL;
  if (n <= *size) return RM_OK;
  if (*buf != NULL) {
    int r = rm__dev_drain(c, c->timeout_ms);
    if (r != 1)
      return rm__comm_fail(c, r == 0 ? RM_ERR_TIMEOUT : RM_ERR_SYSTEM, -1,
                           "device: could not drain the streams to grow device scratch");
    d->g->dev_free(*buf);
    *buf = NULL;
    *size = 0;
  }
  if (d->g->dev_alloc(n, &p) != RM_OK) return rm__dev_fail(c, RM_ERR_NOMEM, "device scratch");
  *buf = p;
  *size = n;
  return RM_OK;
}

rm_status_t rm__dev_scratch(rm_comm_t *c, size_t n, void **out)
{
  RM_CHECK(grow(c, &c->dev->scratch, &c->dev->scratch_size, n));
  *out = c->dev->scratch;
  return RM_OK;
}

rm_status_t rm__mtmp(rm_comm_t *c, size_t n, void **out)
{
  if (!c->dev_active) {
    *out = malloc(n ? n : 1);
    return *out ? RM_OK : RM_ERR_NOMEM;
  }
  RM_CHECK(grow(c, &c->dev->tmp, &c->dev->tmp_size, n ? n : 1));
  *out = c->dev->tmp;
  return RM_OK;
}

void rm__mtmp_free(rm_comm_t *c, void *p)
{
  if (!c->dev_active) free(p);
}

/* Staging memory a hung GPU may still write: held for the life of the
 * process on one list (reachable, never reused). */
static pthread_mutex_t g_kept_lock = PTHREAD_MUTEX_INITIALIZER;
static rm__bounce_t *g_kept;

void rm__dev_keep(rm__bounce_t *list)
{
  if (list == NULL) return;
  pthread_mutex_lock(&g_kept_lock);
  rm__bounce_t *t = list;
  while (t->next) t = t->next;
  t->next = g_kept;
  g_kept = list;
  pthread_mutex_unlock(&g_kept_lock);
}

/* ---- staging buffers: page-locked, kept for reuse (any size) ---- */

rm_status_t rm__dev_bounce(rm_comm_t *c, size_t n, rm__bounce_t **out)
{
  rm__dev_t *d = c->dev;
  rm__bounce_t **best = NULL;
  /* the smallest idle buffer that fits */
  for (rm__bounce_t **pp = &d->bfree; *pp; pp = &(*pp)->next)
    if ((*pp)->cap >= n && (best == NULL || (*pp)->cap < (*best)->cap)) best = pp;
  if (best != NULL) {
    *out = *best;
    *best = (*best)->next;
    (*out)->next = NULL;
    return RM_OK;
  }
  rm__bounce_t *b = calloc(1, sizeof *b);
  size_t cap = 4096;
  while (cap < n) cap *= 2;
  if (b == NULL) return RM_ERR_NOMEM;
  if (d->g->host_alloc(cap, &b->p) != RM_OK) {
    free(b);
    return rm__dev_fail(c, RM_ERR_NOMEM, "page-locked staging memory");
  }
  b->cap = cap;
  *out = b;
  return RM_OK;
}

void rm__dev_bounce_put(rm_comm_t *c, rm__bounce_t *b)
{
  if (b == NULL) return;
  b->next = c->dev->bfree;
  c->dev->bfree = b;
}
