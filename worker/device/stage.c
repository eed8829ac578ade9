/*
 * stage.c - device messages over host transports: every algorithm and
 * every transport works on device buffers without knowing it.
 *
 * While a device collective runs (c->dev_active), post() in transport.c
 * hands each request with bytes to rm__stage_post. The request the
 * algorithm holds (the "user" request) is then carried by a second, host
 * request (the "wire" request, inside the stage record) on a page-locked
 * staging buffer, and the two are tied together here:
 *
 *   send:  D2H --event--> WIRE --wire complete--> DONE
 *          D2H: s_out waits for an event of s (the data is final: every
 *          earlier reduction or copy into it was enqueued on s), copies
 *          device -> staging buffer, records the stage's event.
 *          WIRE: the event completed and every earlier staged send to the
 *          same peer is on the wire: post the wire request (FIFO per pair:
 *          send_seq / send_wired count the sends per peer, so a later
 *          send whose copy finished first still goes second).
 *          DONE: the user request completes with the wire's status.
 *
 *   recv:  WIRE --wire complete--> H2D --event--> DONE
 *          WIRE: posted at once (receives need no device work first).
 *          H2D: copy staging buffer -> device on s, record the event; the
 *          user request completes now: anything that reads the received
 *          data on the device (a reduction, a copy, a later send's
 *          device-to-host copy, which waits for an event of s) is ordered
 *          after the copy on s, and nothing reads it on the host.
 *          DONE: the event completed; the staging buffer is free.
 *
 * By reference (a transport with dev_ref: shared memory's CUDA IPC between
 * ranks of one host, transport/shm/shm_int.h), no staging buffer is used:
 *
 *   send:  READY --event--> WIRE --acknowledged--> DONE
 *          READY: an event on s (the data is final) is all it waits for;
 *          then the wire request goes to the transport as a device message
 *          (transport.h rm__dev_msg_t: the allocation's IPC handle and the
 *          offset), which completes when the receiver copied it.
 *          (READY is the D2H state without a copy; a buffer whose memory
 *          cannot be exported, e.g. cudaMallocAsync pools, goes by value.)
 *   recv:  WIRE --complete--> REF --event--> DONE
 *          the wire request carries a device-destination message (and a
 *          staging buffer, used only if the sender sent by value). Came by
 *          reference: copy device to device from the mapped source on s,
 *          record the event, complete the user request; REF: when the
 *          event finished, dev_ref_done acknowledges, so the sender may
 *          reuse its memory.
 *
 * Directly (a transport with dev_direct: RDMA with GPUDirect RDMA, where
 * the NIC reads and writes device memory), no staging buffer and no copy:
 *
 *   send and recv:  READY --event--> WIRE --complete--> DONE
 *          READY waits for an event on s: for a send, the data is final;
 *          for a receive, nothing enqueued on the GPU still reads or writes
 *          the range (the NIC writes it outside any stream, so a reduction
 *          still reading the previous segment of a scratch slot must end
 *          first). Receives keep their FIFO order per peer like sends
 *          (recv_seq / recv_wired). The wire request carries the device
 *          pointer; the transport registers it (transport/mr.h).
 *
 * Pipelining comes from the algorithms: they cut messages into segments
 * (RINGMASTER_RING_SEGMENT_BYTES) and keep several in flight, so segment
 * k's device-to-host copy, segment k-1 on the wire and segment k-2's
 * host-to-device copy and reduction overlap (two streams, the wire, and
 * the transport's own progress).
 *
 * Progress: rm__stage_progress makes one pass over the records in post
 * order; for sends it queries only the next one of each peer (copies on
 * s_out finish in order). The wait loop calls it every iteration and
 * polls instead of sleeping while rm__stage_busy (device copies finish
 * without a file descriptor to wait on).
 *
 * Deadlines: the user request's progress meter (done, ctl_moved) mirrors
 * the wire's and moves when its device copy finishes. When a wait reaches
 * its deadline while a staged send's copy has been unfinished for as long,
 * the collective fails naming the device, not a peer (transport.c, stall
 * verdict): a rank whose GPU stopped must not blame its neighbours.
 *
 * Failure: the owners of user requests free them as soon as a wait
 * returns an error. rm__stage_detach, run where the failure is seen on the
 * progress thread (transport.c failed(), dev.c rm__dev_fail), completes
 * them and forgets them first; the records, the wire requests (forgotten
 * by the transports when they close) and the staging buffers (in use by
 * copies until the streams drain) are freed by rm__stage_reap after
 * dev.c drained the streams.
 */
#include <stdlib.h>
#include <string.h>

#include "device/dev.h"
#include "device/stage.h"
#include "rm_check.h"
#include "rm_clock.h"
#include "rm_log.h"

enum { S_D2H = 1, S_WIRE, S_H2D, S_REF, S_DONE };

typedef struct rm__stage {
  rm__req_t *user;     /* NULL once the user request completed */
  rm__req_t wire;      /* the host message the transport carries */
  rm__dev_msg_t dm;    /* by reference (wire.dm = &dm), else unused */
  int ref;             /* send: goes by reference (no staging buffer) */
  int direct;          /* the transport moves device memory (GPUDirect) */
  rm__bounce_t *b;
  void *ev;
  int state;
  int wired;           /* wire request was posted to the transport */
  uint64_t pseq;       /* send: rank among this peer's staged sends */
  int64_t since_ns;    /* when the current device wait began */
  struct rm__stage *next;
} rm__stage_t;

static void append(rm__dev_t *d, rm__stage_t *s)
{
  if (d->tail) d->tail->next = s;
  else d->head = s;
  d->tail = s;
}

static void wire_init(rm_comm_t *c, rm__stage_t *s, const rm__req_t *u)
{
  memset(&s->wire, 0, sizeof s->wire);
  s->wire.peer = u->peer;
  s->wire.kind = u->kind;
  s->wire.buf = s->b ? s->b->p : u->buf; /* by reference: the device buffer */
  s->wire.len = u->len;
  s->wire.tag = u->tag;
  s->wire.seq = u->seq;
  s->wire.status = RM_OK;
  (void)c;
}

static rm_status_t wire_post(rm_comm_t *c, rm__stage_t *s)
{
  s->wired = 1;
  return c->conns[s->wire.peer].type->post(c, &s->wire);
}

/* READY -> WIRE when the event finished and it is this request's turn
 * among its peer's requests of its direction. */
static rm_status_t ready(rm_comm_t *c, rm__stage_t *s, uint64_t *wired)
{
  rm__dev_t *d = c->dev;
  int q;
  if (s->pseq != wired[s->wire.peer]) return RM_OK; /* not its turn */
  q = d->g->event_query(s->ev);
  if (q < 0) return rm__dev_fail(c, RM_ERR_SYSTEM, "device work before a transfer");
  if (q == 0) return RM_OK;
  wired[s->wire.peer]++;
  d->d2h_pending--;
  s->state = S_WIRE;
  if (s->user) s->user->ctl_moved++; /* the deadline meter moves */
  return wire_post(c, s);
}

/* Whether a send of req goes by reference: the pair allows it and the
 * runtime can name its memory for the peer (fills s->dm). */
static int by_reference(rm_comm_t *c, rm__stage_t *s, const rm__req_t *req)
{
  const rm__transport_ops_t *t = c->conns[req->peer].type;
  rm__ipc_handle_t h;
  size_t off = 0;
  if (t->dev_ref == NULL || !t->dev_ref(c, req->peer)) return 0;
  if (req->kind == RM__REQ_RECV) return 1;
  if (c->dev->g->ipc_get(req->buf, &h, &off) != RM_OK) {
    if (!c->dev->ipc_refused++)
      RM_INFO("rank %d: device memory at %p cannot be shared by CUDA IPC (%s): such "
              "sends are staged", c->rank, req->buf, c->dev->g->err());
    return 0;
  }
  _Static_assert(sizeof s->dm.handle == sizeof h.bytes, "IPC handle size");
  memcpy(s->dm.handle, h.bytes, sizeof h.bytes);
  s->dm.off = off;
  s->dm.kind = RM__DM_SEND;
  return 1;
}

rm_status_t rm__stage_post(rm_comm_t *c, rm__req_t *req)
{
  rm__dev_t *d = c->dev;
  const rm__transport_ops_t *t = c->conns[req->peer].type;
  rm__stage_t *s = calloc(1, sizeof *s);
  rm_status_t st = RM_OK;
  int ref = 0;
  if (s == NULL) return RM_ERR_NOMEM;
  /* direct: the transport moves from / into device memory itself */
  s->direct = t->dev_direct != NULL && t->dev_direct(c, req->peer);
  if (!s->direct) ref = by_reference(c, s, req);
  s->ref = ref && req->kind == RM__REQ_SEND;
  /* a staging buffer: sends by value, receives not direct (the by-value case) */
  if (!s->direct && !s->ref) st = rm__dev_bounce(c, req->len, &s->b);
  if (st == RM_OK) st = rm__dev_event(c, &s->ev);
  if (st != RM_OK) {
    rm__dev_bounce_put(c, s->b);
    free(s);
    return st;
  }
  s->user = req;
  req->stg = s;
  wire_init(c, s, req); /* buf: the staging buffer, else the device buffer */
  if (ref) {
    if (req->kind == RM__REQ_RECV) s->dm.kind = RM__DM_RECV;
    s->wire.dm = &s->dm;
  }
  s->since_ns = rm__now_ns();
  if (s->direct) {
    d->direct_msgs++;
    d->direct_bytes += req->len;
  } else if (s->ref) {
    d->ref_msgs++;
    d->ref_bytes += req->len;
  } else if (req->kind == RM__REQ_SEND) {
    d->staged_msgs++;
    d->staged_bytes += req->len;
  }
  append(d, s); /* from here rm__stage_reap frees it on every path */
  if (req->kind == RM__REQ_RECV && !s->direct) {
    s->state = S_WIRE;
    return wire_post(c, s);
  }
  s->state = S_D2H; /* direct: READY (top of file) */
  s->pseq = req->kind == RM__REQ_SEND ? d->send_seq[req->peer]++ : d->recv_seq[req->peer]++;
  d->d2h_pending++;
  /* by value (s->b), s_out copies only after what s did so far (dev.h);
   * by reference the peer copies, and directly the transport moves the
   * range, once the event on s says the GPU work touching it is done */
  if (d->g->event_record(s->ev, d->s) != RM_OK ||
      (s->b != NULL && (d->g->stream_wait(d->s_out, s->ev) != RM_OK ||
                        d->g->copy(s->b->p, req->buf, req->len, d->s_out) != RM_OK ||
                        d->g->event_record(s->ev, d->s_out) != RM_OK)))
    return rm__dev_fail(c, RM_ERR_SYSTEM, s->direct ? "wait for the GPU before a GPUDirect transfer"
                                                    : "stage a send (device-to-host copy)");
  return RM_OK;
}

/* The user request is finished: complete it and forget it. */
static void finish_user(rm__stage_t *s, rm_status_t st)
{
  rm__req_t *u = s->user;
  if (u == NULL) return;
  u->done = st == RM_OK ? u->len : s->wire.done;
  u->status = st;
  u->stg = NULL;
  __atomic_store_n(&u->complete, 1, __ATOMIC_RELEASE);
  s->user = NULL;
}

static rm_status_t step_send(rm_comm_t *c, rm__stage_t *s)
{
  if (s->state == S_D2H) return ready(c, s, c->dev->send_wired);
  if (s->state == S_WIRE && s->wire.complete) {
    finish_user(s, s->wire.status);
    s->state = S_DONE;
  }
  return RM_OK;
}

static rm_status_t step_recv(rm_comm_t *c, rm__stage_t *s)
{
  rm__dev_t *d = c->dev;
  if (s->state == S_D2H) return ready(c, s, d->recv_wired); /* direct */
  if (s->state == S_WIRE && s->wire.complete) {
    if (s->wire.status != RM_OK || s->user == NULL || s->direct) { /* failed, detached, or
                                                                    * already in place */
      finish_user(s, s->wire.status);
      s->state = S_DONE;
      return RM_OK;
    }
    if (s->dm.src != NULL) { /* came by reference: device to device */
      if (d->g->copy(s->user->buf, s->dm.src, s->wire.len, d->s) != RM_OK ||
          d->g->event_record(s->ev, d->s) != RM_OK)
        return rm__dev_fail(c, RM_ERR_SYSTEM, "device-to-device copy of a receive (CUDA IPC)");
      s->state = S_REF;
      d->ref_pending++;
      d->ref_msgs++;
      d->ref_bytes += s->wire.len;
      s->since_ns = rm__now_ns();
      finish_user(s, RM_OK);
      return RM_OK;
    }
    d->staged_msgs++;
    d->staged_bytes += s->wire.len;
    if (d->g->copy(s->user->buf, s->b->p, s->wire.len, d->s) != RM_OK ||
        d->g->event_record(s->ev, d->s) != RM_OK)
      return rm__dev_fail(c, RM_ERR_SYSTEM, "host-to-device copy of a receive");
    s->state = S_H2D;
    s->since_ns = rm__now_ns();
    finish_user(s, RM_OK);
    return RM_OK;
  }
  if (s->state == S_H2D) {
    int q = d->g->event_query(s->ev);
    if (q < 0) return rm__dev_fail(c, RM_ERR_SYSTEM, "host-to-device copy of a receive");
    if (q == 1) s->state = S_DONE;
  }
  if (s->state == S_REF) { /* the copy finished: the sender may go on */
    int q = d->g->event_query(s->ev);
    if (q < 0) return rm__dev_fail(c, RM_ERR_SYSTEM, "device-to-device copy of a receive");
    if (q == 0) return RM_OK;
    d->ref_pending--;
    s->state = S_DONE;
    return c->conns[s->wire.peer].type->dev_ref_done(c, s->wire.peer);
  }
  return RM_OK;
}

static void free_record(rm_comm_t *c, rm__stage_t *s)
{
  rm__dev_bounce_put(c, s->b);
  rm__dev_event_put(c, s->ev);
  free(s);
}

rm_status_t rm__stage_progress(rm_comm_t *c)
{
  rm__dev_t *d = c->dev;
  rm__stage_t **pp;
  if (d == NULL) return RM_OK;
  pp = &d->head;
  d->tail = NULL;
  while (*pp) {
    rm__stage_t *s = *pp;
    rm_status_t st = s->wire.kind == RM__REQ_SEND ? step_send(c, s) : step_recv(c, s);
    if (st != RM_OK) {
      /* keep the list whole: reap frees it after the streams drained */
      while (*pp) {
        d->tail = *pp;
        pp = &(*pp)->next;
      }
      return st;
    }
    if (s->user && s->state == S_WIRE) { /* mirror the wire's meter */
      s->user->done = s->wire.done;
      s->user->ctl_moved = s->wire.ctl_moved + 1;
    }
    if (s->state == S_DONE) {
      *pp = s->next;
      free_record(c, s);
      continue;
    }
    d->tail = s;
    pp = &s->next;
  }
  return RM_OK;
}

int rm__stage_busy(const rm_comm_t *c)
{
  return c->dev != NULL && (c->dev->d2h_pending > 0 || c->dev->ref_pending > 0);
}

int rm__stage_active(const rm_comm_t *c) { return c->dev != NULL && c->dev->head != NULL; }

int rm__stage_stuck(const rm_comm_t *c, int64_t *since_ns, size_t *bytes, int *peer)
{
  if (c->dev == NULL || c->dev->d2h_pending == 0) return 0;
  for (const rm__stage_t *s = c->dev->head; s; s = s->next)
    if (s->state == S_D2H) {
      *since_ns = s->since_ns;
      *bytes = s->wire.len;
      *peer = s->wire.peer;
      return 1;
    }
  return 0;
}

void rm__stage_detach(rm_comm_t *c)
{
  rm_status_t st = rm_comm_status(c);
  if (c->dev == NULL) return;
  for (rm__stage_t *s = c->dev->head; s; s = s->next) finish_user(s, st != RM_OK ? st : RM_ERR_ABORTED);
}

rm_status_t rm__stage_quiesce(rm_comm_t *c, rm_status_t st)
{
  rm__dev_t *d = c->dev;
  int n = 0;
  if (d == NULL) return st;
  for (rm__stage_t *s = d->head; s; s = s->next)
    n += s->state != S_DONE && s->state != S_H2D && s->state != S_REF;
  if (rm_comm_status(c) == RM_OK && n > 0)
    rm__comm_fail(c, st != RM_OK ? st : RM_ERR_INTERNAL, -1,
                  "a collective on device buffers ended (%s) with %d staged transfers in "
                  "flight", rm_status_name(st), n);
  if (rm_comm_status(c) != RM_OK) {
    /* the device first: its queued copies may read or write memory that
     * the transports own and closing them unmaps (a peer's buffer opened
     * by CUDA IPC, a shared-memory slot); a GPU error stops every stream,
     * a hung GPU gets its deadline once (rm__dev_drain) */
    if (d->s != NULL) (void)rm__dev_drain(c, c->timeout_ms);
    /* the transports forget the wire requests; detach drops the owners'
     * pointers without writing through them (they may be gone) */
    for (rm__stage_t *s = d->head; s; s = s->next) s->user = NULL;
    rm__transport_close(c, rm_comm_status(c));
    for (rm__stage_t *s = d->head; s; s = s->next) s->state = S_DONE;
    d->d2h_pending = d->ref_pending = 0;
    return rm_comm_status(c);
  }
  return st;
}

void rm__stage_reap(rm_comm_t *c)
{
  rm__dev_t *d = c->dev;
  if (d == NULL) return;
  for (rm__stage_t *s = d->head, *n; s; s = n) {
    n = s->next;
    free_record(c, s);
  }
  d->head = d->tail = NULL;
  d->d2h_pending = d->ref_pending = 0;
}

void rm__stage_leak(rm_comm_t *c)
{
  rm__dev_t *d = c->dev;
  if (d == NULL) return;
  for (rm__stage_t *s = d->head, *n; s; s = n) {
    n = s->next;
    /* its staging buffer is held for good (a copy may still use it); its
     * event goes (destroying a pending event is allowed) */
    rm__dev_keep(s->b);
    rm__dev_event_put(c, s->ev);
    free(s);
  }
  d->head = d->tail = NULL;
  d->d2h_pending = d->ref_pending = 0;
}
