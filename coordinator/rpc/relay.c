/*
 * relay.c - RELAYS: many workers' Sessions on one stream.
 *
 * Why. Each worker's Session is a gRPC stream at the coordinator: about
 * 12 KiB of gRPC's state, one outstanding tag on the completion queue
 * (walked by the debug tag check on every completion), one message read
 * and one written per barrier arrival and answer, each about 15 us of the
 * coordinator's CPU. A relay on each host (or any process that speaks for
 * a group of workers) carries its workers' Sessions as LANES of one Relay
 * stream (service.proto): one stream, one tag and one message each way
 * for a whole group of lanes.
 *
 * Contract. A lane is exactly a Session: its messages (RelayIn.message)
 * are handed to the same handler (rpc.c on_session) with a record of their
 * own (an rm__call_t with no grpc_call: `up` is the relay, `lane` its
 * number), so every check, answer, park, push and end of a Session holds
 * for a lane unchanged; what would be sent on the Session goes into the
 * relay's outbox as a RelayOut for that lane instead. Lane numbers are the
 * relay's: 1..RELAY_LANES_MAX, never reused on one stream (an ended lane's
 * slot says ENDED, and later messages for it are dropped, as messages
 * after a Session's end are), so a late message can never open a second
 * session for a worker whose lane the coordinator ended.
 *
 * Wire (RelayResponse, hand-framed in relay_batch): every entry queued
 * since the last batch, in queue order, one RelayOut each, except that an
 * entry identical to one of the last MERGE_SCAN entries (same message
 * bytes and end) is merged into it as one more lane, when that keeps each
 * lane's order (its own last entry is not after the target). A released
 * barrier's answer to K lanes of one relay is then one RelayOut naming K
 * lanes, its bytes (the barrier's shared packed answer) referenced, not
 * copied. One batch in flight per relay (gRPC allows one message); what
 * is queued meanwhile goes in the next, so a busy relay's batches grow.
 *
 * Ends. A lane ends when the coordinator answers it (a failed check, the
 * job ended, shutdown: RelayOut.end with the Session's status; its park
 * was unlinked by the answer), when the relay says `end` (the worker
 * half-closed: end OK is sent back) or `broken` (its park is dropped as
 * cancelled: the worker is declared lost, recovery.c detection source 2,
 * as a broken Session's: the relay saw the worker's own Session break),
 * or when the relay's stream ends, breaks or is malformed (every open lane
 * ends and nobody is declared lost: the relay went away, which says
 * nothing of its workers, whose heartbeats then come by another Session
 * or the unary call, or time out; then the stream's own status).
 * Shutdown: every lane is parked, so rm__server_stop's UNAVAILABLE reaches
 * each lane, and rm__relay_stop_all then ends each relay's stream.
 *
 * DURABILITY is unchanged: nothing a section queues for a lane leaves
 * before that section's COMMIT. What is queued for a lane goes into its
 * relay's PENDING entries as it is pushed, and they join the outbox only
 * in rm__relay_kick_all, after the COMMIT (rm__relay_push). A section
 * whose COMMIT failed has its pending entries rewritten first: each lane
 * they name ends with the storage failure (ROLLED BACK, rm__relay_fail).
 *
 * Memory: a relay's lane table is one pointer per lane number from its
 * oldest open lane on (LANE TABLE); a lane is an rm__call_t alone (a gRPC
 * call's record is an rm__gcall_t that starts with one; a Session's
 * barrier or gate wait is made at its first); the relay's outbox holds
 * references to the answers' slices until its batch is sent (an answer
 * shared by many lanes is one entry with their numbers), and gives its
 * room back once that batch is out: a relay at rest holds no outbox. A
 * batch is written as one flat run of bytes, its large parts referenced
 * (relay_batch).
 */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/server_int.h"
#include "rm_alloc.h"
#include "rm_log.h"
#include "rm_pbwire.h"

#define RELAY_LANES_MAX 65535u
#define MERGE_SCAN 8     /* entries an identical one may merge into */
#define PARTS_MAX 2      /* slices of one message (server_out.c head_then: 1 or 2) */
#define ROOM_PER_LANE 4  /* pushes stop when the outbox holds this many a lane */
#define SHARED_MIN 256   /* a Join answer's tail this long goes once a batch */
#define OUT_FIRST 4      /* an outbox's first room: a barrier's or a step's
                          * answer is one entry a relay; no room outlives its
                          * batch (a batch's room is one malloc) */

static rm__call_t relay_ended; /* a lane number's slot once its lane ended */
#define ENDED (&relay_ended)

/* An outbox entry: 104 bytes, one a lane at a Join wave (each answer
 * its own), one a relay at a barrier's release. */
typedef struct {
  uint32_t *more;             /* lanes after the first ([cap]), NULL */
  uint32_t lane0;             /* the first lane */
  int n, cap;                 /* lanes in all; room in `more` */
  uint8_t has_msg;
  uint8_t join;               /* a Join lane's answer (RelayOut.join) */
  uint8_t nparts;
  uint8_t end;
  int code;
  uint32_t len;               /* of the message (< 4 GiB: the receive cap) */
  char *details;
  grpc_slice part[PARTS_MAX];
} rl_out_t;

_Static_assert(sizeof(rl_out_t) <= 104, "rl_out_t grew");

static uint32_t out_lane(const rl_out_t *e, int k) { return k ? e->more[k - 1] : e->lane0; }

struct rm__relay {
  rm__call_t **lane;          /* LANE TABLE: [cap]; lane number base + i */
  uint32_t base, used, lead;  /* ... its first number, slots in use, and
                                 the ENDED ones they start with */
  uint32_t cap, open;
  rl_out_t *out;              /* the next batch: committed entries */
  int nout, capout;
  rl_out_t *pend;             /* PENDING: entries of the section under way */
  int npend, cappend;
  uint32_t pgen;              /* pend's generation (lanes' rl_batch; both wrap) */
  int sending;                /* a batch in flight */
  rm__out_t final;            /* the stream's own end, after every entry */
  int has_final, final_started;
  int kick_listed;
  rm__call_t *prev, *next;    /* in c->rpc->relays until it ends */
};

/* ---- the lane table ----
 * LANE TABLE. A relay numbers its lanes upwards and never reuses a number
 * (a Join wave's lanes, then its Sessions', then a re-join's), so a table
 * indexed by the number itself would hold a slot for every lane the
 * stream ever had: 2 KiB a relay of 64 after one Join wave and its
 * Sessions, up to 512 KiB on a long-lived stream. The table is a window
 * instead: slots for numbers base..base + used - 1; every number below
 * base has ended (the window only moves past a run of ENDED slots at its
 * start, so a number below it that was never opened cannot be mistaken
 * for one that ended: it cannot be below it). Once that run is half the
 * slots in use, the window moves (amortized O(1) a lane) and gives back
 * room it no longer needs. Lookups are by number, so a caller walking
 * numbers stays right across a move. */
#define LANE_TABLE_MIN 8

static rm__call_t *lane_get(const struct rm__relay *r, uint32_t n)
{
  if (n < r->base) return ENDED;
  return n - r->base < r->used ? r->lane[n - r->base] : NULL;
}

/* n >= r->base (a number below it has ended and is never set again). */
static void lane_put(struct rm__relay *r, uint32_t n, rm__call_t *v)
{
  uint32_t i = n - r->base;
  if (i >= r->cap) {
    uint32_t cap = r->cap ? r->cap : LANE_TABLE_MIN;
    while (cap <= i) cap *= 2;
    if (cap > RELAY_LANES_MAX + 1) cap = RELAY_LANES_MAX + 1;
    r->lane = rm__xrealloc(r->lane, cap * sizeof *r->lane);
    r->cap = cap;
  }
  if (i >= r->used) {
    memset(r->lane + r->used, 0, (i + 1 - r->used) * sizeof *r->lane);
    r->used = i + 1;
  }
  r->lane[i] = v;
}

/* After a slot became ENDED: move the window past the ENDED run at its
 * start once that run is half of it. */
static void lane_trim(struct rm__relay *r)
{
  while (r->lead < r->used && r->lane[r->lead] == ENDED) r->lead++;
  if (!r->lead || r->lead * 2 < r->used) return;
  memmove(r->lane, r->lane + r->lead, (r->used - r->lead) * sizeof *r->lane);
  r->base += r->lead;
  r->used -= r->lead;
  r->lead = 0;
  uint32_t cap = r->cap;
  while (cap > LANE_TABLE_MIN && r->used * 4 <= cap) cap /= 2;
  if (cap < r->cap) {
    r->lane = rm__xrealloc(r->lane, cap * sizeof *r->lane);
    r->cap = cap;
  }
}

/* ---- the outbox ---- */
static int out_same(const rl_out_t *a, int code, const char *details, int has_msg, int join,
                    grpc_slice *part, int nparts, size_t len)
{
  if (a->end != (code >= 0) || a->has_msg != has_msg || a->join != join ||
      a->nparts != nparts || a->len != len)
    return 0;
  if (a->end && (a->code != code || strcmp(a->details ? a->details : "",
                                           details ? details : "")))
    return 0;
  for (int i = 0; i < nparts; i++) {
    size_t l = GRPC_SLICE_LENGTH(part[i]);
    const uint8_t *p = GRPC_SLICE_START_PTR(part[i]), *q = GRPC_SLICE_START_PTR(a->part[i]);
    if (GRPC_SLICE_LENGTH(a->part[i]) != l || (p != q && memcmp(p, q, l))) return 0;
  }
  return 1;
}

static void out_add_lane(rl_out_t *e, uint32_t lane)
{
  if (!e->n) {
    e->lane0 = lane;
    e->n = 1;
    return;
  }
  if (e->n - 1 == e->cap) {
    e->cap = e->cap ? 2 * e->cap : 4;
    e->more = rm__xrealloc(e->more, (size_t)e->cap * sizeof *e->more);
  }
  e->more[e->n++ - 1] = lane;
}

static void out_free(rl_out_t *e)
{
  for (int i = 0; i < e->nparts; i++) grpc_slice_unref(e->part[i]);
  free(e->more);
  free(e->details);
}

/* bb's slices into part (referenced; flattened into one when there are
 * more than PARTS_MAX, never: server_out.c makes 1 or 2); bb is destroyed. */
static int take_parts(grpc_byte_buffer *bb, grpc_slice part[PARTS_MAX])
{
  grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
  int n = sb->count <= PARTS_MAX ? (int)sb->count : 1;
  if (sb->count > PARTS_MAX) {
    grpc_byte_buffer_reader rd;
    grpc_byte_buffer_reader_init(&rd, bb);
    part[0] = grpc_byte_buffer_reader_readall(&rd);
    grpc_byte_buffer_reader_destroy(&rd);
  } else {
    for (int i = 0; i < n; i++) part[i] = grpc_slice_ref(sb->slices[i]);
  }
  grpc_byte_buffer_destroy(bb);
  return n;
}

/* Queue a lane's message (nparts slices, moved in; 0: none) and/or its
 * end (code >= 0) in its relay's pending entries. */
static void out_append(struct rm__relay *r, rm__call_t *l, int code, const char *details,
                       grpc_slice *part, int nparts)
{
  size_t len = 0;
  int has_msg = nparts > 0, join = l->method == RM__M_JOIN;
  for (int i = 0; i < nparts; i++) len += GRPC_SLICE_LENGTH(part[i]);
  int floor = l->rl_batch == r->pgen ? l->rl_idx : 0;
  for (int i = r->npend - 1; i >= floor && i >= r->npend - MERGE_SCAN; i--) {
    if (out_same(&r->pend[i], code, details, has_msg, join, part, nparts, len)) {
      out_add_lane(&r->pend[i], l->lane);
      for (int p = 0; p < nparts; p++) grpc_slice_unref(part[p]);
      l->rl_batch = r->pgen;
      l->rl_idx = i;
      return;
    }
  }
  if (r->npend == r->cappend) {
    r->cappend = r->cappend ? 2 * r->cappend : OUT_FIRST;
    r->pend = rm__xrealloc(r->pend, (size_t)r->cappend * sizeof *r->pend);
  }
  rl_out_t *e = &r->pend[r->npend];
  memset(e, 0, sizeof *e);
  e->has_msg = (uint8_t)has_msg;
  e->join = (uint8_t)join;
  memcpy(e->part, part, sizeof part[0] * (size_t)nparts);
  e->nparts = (uint8_t)nparts;
  e->len = (uint32_t)len;
  e->end = code >= 0;
  e->code = code;
  e->details = e->end && details ? rm__xstrdup(details) : NULL;
  out_add_lane(e, l->lane);
  l->rl_batch = r->pgen;
  l->rl_idx = r->npend++;
}

/* PENDING -> committed: after the flush (rm__relay_kick_all), the
 * section's entries join the next batch, after those already there. An
 * outbox with no entries has no room (relay_batch frees it), so in the
 * usual case, nothing waiting, the pending room simply becomes it. */
static void out_commit(struct rm__relay *r)
{
  if (!r->npend) return;
  if (!r->nout) {
    free(r->out); /* NULL: nothing waited */
    r->out = r->pend, r->capout = r->cappend, r->nout = r->npend;
  } else {
    if (r->nout + r->npend > r->capout) {
      while (r->nout + r->npend > r->capout) r->capout *= 2;
      r->out = rm__xrealloc(r->out, (size_t)r->capout * sizeof *r->out);
    }
    memcpy(r->out + r->nout, r->pend, (size_t)r->npend * sizeof *r->pend);
    r->nout += r->npend;
    free(r->pend);
  }
  r->pend = NULL;
  r->cappend = r->npend = 0;
  r->pgen++;
}

/* The batch being written (relay_batch): small pieces are copied into
 * one flat run, and a part of REF_MIN bytes or more (a Join answer's peer
 * list, a large barrier payload) is referenced where it lies, so a batch
 * is one slice, or a few around its large parts. A slice a
 * piece made gRPC grow each batch's slice array (about 6 KiB a batch of 64
 * lanes at a fan-out) and cost a malloc and a refcount a piece. */
#define REF_MIN 1024
typedef struct {
  grpc_slice *sl;
  size_t ns, cap;
  uint8_t *run;            /* the open flat run */
  size_t rlen, rcap;
} rl_wr_t;

static void wr_push(rl_wr_t *w, grpc_slice s)
{
  if (w->ns == w->cap) {
    w->cap = w->cap ? 2 * w->cap : 4;
    w->sl = rm__xrealloc(w->sl, w->cap * sizeof *w->sl);
  }
  w->sl[w->ns++] = s;
}

/* The open run becomes a slice of the batch. */
static void wr_close(rl_wr_t *w)
{
  if (!w->rlen) return;
  wr_push(w, grpc_slice_new(w->run, w->rlen, free));
  w->run = NULL;
  w->rlen = w->rcap = 0;
}

static uint8_t *wr_room(rl_wr_t *w, size_t n)
{
  if (w->rlen + n > w->rcap) {
    size_t cap = w->rcap ? 2 * w->rcap : 512;
    while (cap < w->rlen + n) cap *= 2;
    w->run = rm__xrealloc(w->run, cap);
    w->rcap = cap;
  }
  return w->run + w->rlen;
}

static void wr_bytes(rl_wr_t *w, const void *p, size_t n)
{
  if (!n) return; /* an empty part: the run may be NULL */
  memcpy(wr_room(w, n), p, n);
  w->rlen += n;
}

static void wr_varint(rl_wr_t *w, uint64_t v)
{
  w->rlen += rm__pb_varint(wr_room(w, 10), 0, v);
}

/* s moves in: copied (and unreferenced) when small, else referenced. */
static void wr_slice(rl_wr_t *w, grpc_slice s)
{
  size_t n = GRPC_SLICE_LENGTH(s);
  if (n < REF_MIN) {
    wr_bytes(w, GRPC_SLICE_START_PTR(s), n);
    grpc_slice_unref(s);
    return;
  }
  wr_close(w);
  wr_push(w, s);
}

/* One RelayResponse of every queued entry (field 1, RelayOut, repeated;
 * RelayOut: 1 lanes packed, 2 message or 6 join, 7 join_tail, 3 end, 4
 * code, 5 details; then field 2, the shared tails). A Join answer whose
 * last part is at least SHARED_MIN bytes (the generation's shared peer
 * list: rm__reply_tail) sends that part once per batch as a shared entry,
 * named by its index + 1. The entries' slices move into the buffer. */
static grpc_byte_buffer *relay_batch(struct rm__relay *r)
{
  rl_wr_t w = {0};
  grpc_slice *shared = rm__xmalloc(((size_t)r->nout + 1) * sizeof *shared);
  size_t nshared = 0;
  for (int i = 0; i < r->nout; i++) {
    rl_out_t *e = &r->out[i];
    size_t lanes_len = 0, dlen = e->details ? strlen(e->details) : 0, tail_idx = 0;
    int nbody = e->nparts;
    size_t blen = e->len;
    if (e->join && e->nparts >= 2 && GRPC_SLICE_LENGTH(e->part[e->nparts - 1]) >= SHARED_MIN) {
      grpc_slice t = e->part[e->nparts - 1];
      while (tail_idx < nshared &&
             (GRPC_SLICE_START_PTR(shared[tail_idx]) != GRPC_SLICE_START_PTR(t) ||
              GRPC_SLICE_LENGTH(shared[tail_idx]) != GRPC_SLICE_LENGTH(t)))
        tail_idx++;
      if (tail_idx == nshared) shared[nshared++] = grpc_slice_ref(t);
      tail_idx++; /* 1-based */
      nbody--;
      blen -= GRPC_SLICE_LENGTH(t);
    }
    for (int k = 0; k < e->n; k++) lanes_len += rm__pb_varint_len(out_lane(e, k));
    size_t inner = 1 + rm__pb_varint_len(lanes_len) + lanes_len;
    if (e->has_msg) inner += 1 + rm__pb_varint_len(blen) + blen;
    if (tail_idx) inner += 1 + rm__pb_varint_len(tail_idx);
    if (e->end) {
      inner += 2 + (e->code ? 1 + rm__pb_varint_len((uint64_t)e->code) : 0);
      if (dlen) inner += 1 + rm__pb_varint_len(dlen) + dlen;
    }
    wr_varint(&w, 1 << 3 | 2); /* RelayResponse.out */
    wr_varint(&w, inner);
    wr_varint(&w, 1 << 3 | 2); /* RelayOut.lanes, packed */
    wr_varint(&w, lanes_len);
    for (int k = 0; k < e->n; k++) wr_varint(&w, out_lane(e, k));
    if (e->has_msg) {
      wr_varint(&w, (uint64_t)(e->join ? 6 : 2) << 3 | 2); /* .join / .message */
      wr_varint(&w, blen);
    }
    for (int p = 0; p < nbody; p++) wr_slice(&w, e->part[p]); /* moved */
    for (int p = nbody; p < e->nparts; p++) grpc_slice_unref(e->part[p]); /* in shared */
    e->nparts = 0;
    if (tail_idx) {
      wr_varint(&w, 7 << 3); /* RelayOut.join_tail */
      wr_varint(&w, tail_idx);
    }
    if (e->end) {
      wr_varint(&w, 3 << 3); /* RelayOut.end */
      wr_varint(&w, 1);
    }
    if (e->end && e->code) {
      wr_varint(&w, 4 << 3); /* RelayOut.code */
      wr_varint(&w, (uint64_t)e->code);
    }
    if (e->end && dlen) {
      wr_varint(&w, 5 << 3 | 2); /* RelayOut.details */
      wr_varint(&w, dlen);
      wr_bytes(&w, e->details, dlen);
    }
    out_free(e);
  }
  for (size_t i = 0; i < nshared; i++) { /* RelayResponse.shared */
    wr_varint(&w, 2 << 3 | 2);
    wr_varint(&w, GRPC_SLICE_LENGTH(shared[i]));
    wr_slice(&w, shared[i]); /* moved */
  }
  wr_close(&w);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(w.sl, w.ns);
  for (size_t i = 0; i < w.ns; i++) grpc_slice_unref(w.sl[i]);
  free(w.sl);
  free(shared);
  r->nout = 0;
  free(r->out); /* its room goes with it (RSS) */
  r->out = NULL;
  r->capout = 0;
  return bb;
}

/* Start the relay's next batch, or its final status once nothing is
 * queued, unless one is in flight. */
static void relay_kick(rm__call_t *k)
{
  struct rm__relay *r = k->mux;
  if (r->sending || r->final_started) return;
  if (r->nout) {
    rm__out_t o = {.call = k, .code = -1, .details = NULL, .bb = relay_batch(r)};
    r->sending = 1;
    __atomic_add_fetch(&k->refs, 1, __ATOMIC_ACQ_REL); /* the batch's */
    rm__start_out(k, &o);
  } else if (r->has_final) {
    r->sending = 1;
    r->final_started = 1;
    rm__start_out(k, &r->final); /* with the outbox's reference */
  }
}

static void kick_later(rm_coord_t *c, rm__call_t *k)
{
  if (k->mux->kick_listed) return;
  k->mux->kick_listed = 1;
  if (c->rpc->nrelay_kick == c->rpc->caprelay_kick) {
    c->rpc->caprelay_kick = c->rpc->caprelay_kick ? 2 * c->rpc->caprelay_kick : 8;
    c->rpc->relay_kick = rm__xrealloc(c->rpc->relay_kick, c->rpc->caprelay_kick * sizeof *c->rpc->relay_kick);
  }
  c->rpc->relay_kick[c->rpc->nrelay_kick++] = k;
  __atomic_add_fetch(&k->refs, 1, __ATOMIC_ACQ_REL); /* the list's */
}

void rm__relay_kick_all(rm_coord_t *c)
{
  for (size_t i = 0; i < c->rpc->nrelay_kick; i++) {
    rm__call_t *k = c->rpc->relay_kick[i];
    k->mux->kick_listed = 0;
    out_commit(k->mux);
    relay_kick(k);
    rm__call_unref(k);
  }
  c->rpc->nrelay_kick = 0;
}

/* The lane's slot is ENDED; the table's reference goes. */
static void lane_retire(struct rm__relay *r, rm__call_t *l)
{
  if (lane_get(r, l->lane) != l) return;
  r->lane[l->lane - r->base] = ENDED;
  r->open--;
  lane_trim(r);
  rm__call_unref(l);
}

/* PENDING: what is queued for a lane (a message, its end, or both) goes
 * into its relay's pending entries as it is pushed (under c->mu), merged
 * there with identical ones, not through c->rpc->out: a fan-out's message to
 * each lane costs a lane number in a merged entry, not an outbox entry and
 * a held copy of its slices (RSS). They join a batch only in
 * rm__relay_kick_all, after the COMMIT of the section that made them;
 * relay_kick between (a batch's send finished) sends only committed
 * entries. A lane's end also leaves an entry in c->rpc->out (rm__out_push),
 * which retires the lane at the flush (rm__relay_out): the lane's
 * reference must outlive the section that answered it. */
void rm__relay_push(rm_coord_t *c, rm__call_t *l, int code, const char *details,
                    grpc_byte_buffer *bb)
{
  struct rm__relay *r = l->up->mux;
  grpc_slice part[PARTS_MAX];
  int n = 0;
  if (r->has_final) { /* the relay ended first: its lanes with it */
    if (bb) grpc_byte_buffer_destroy(bb);
    return;
  }
  if (bb) n = take_parts(bb, part);
  out_append(r, l, code, details, part, n);
  kick_later(c, l->up);
}

static int cmp_u64(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* ROLLED BACK. The section's COMMIT failed (core/commit.c): what it queued
 * for lanes is still in their relays' PENDING entries, in no batch, and
 * none of it may go out as it is (a Join answer naming a generation that
 * is not stored, a released barrier, a push). Every lane those entries
 * name gets one entry instead: its end with the storage failure, as a
 * Session whose message was rolled back ends (server_out.c rm__rpc_out_fail), so
 * its worker retries or re-joins as across a coordinator restart. A lane
 * whose end the section had queued keeps that end's entry in c->rpc->out (it
 * retires the lane at the flush); a lane given only a message is ended
 * now, through rm__out_push like any answer. The relays with pending
 * entries are exactly those on c->rpc->relay_kick (rm__relay_push). */
void rm__relay_fail(rm_coord_t *c, int code, const char *details)
{
  for (size_t i = 0; i < c->rpc->nrelay_kick; i++) {
    struct rm__relay *r = c->rpc->relay_kick[i]->mux;
    rl_out_t *pend = r->pend;
    int npend = r->npend;
    size_t n = 0, cap = 0;
    uint64_t *keys = NULL; /* lane << 1 | its end was queued */
    if (!npend) continue;
    for (int e = 0; e < npend; e++) cap += (size_t)pend[e].n;
    keys = rm__xmalloc(cap * sizeof *keys);
    for (int e = 0; e < npend; e++) {
      for (int k = 0; k < pend[e].n; k++)
        keys[n++] = (uint64_t)out_lane(&pend[e], k) << 1 | pend[e].end;
      out_free(&pend[e]);
    }
    free(pend);
    r->pend = NULL;
    r->npend = r->cappend = 0;
    r->pgen++; /* the lanes' rl_batch/rl_idx name entries that are gone */
    qsort(keys, n, sizeof *keys, cmp_u64);
    for (size_t k = 0; k < n; k++) {
      uint32_t lane = (uint32_t)(keys[k] >> 1);
      if (k + 1 < n && (uint32_t)(keys[k + 1] >> 1) == lane) continue; /* the last has the end bit */
      rm__call_t *l = lane_get(r, lane);
      if (!l || l == ENDED) continue;
      if (keys[k] & 1) {
        grpc_slice none[1]; /* no message: out_append copies 0 of them */
        out_append(r, l, code, details, none, 0);
        c->ctr.grpc_errors_total++;
      } else if (rm__call_claim(l)) {
        rm__out_push(c, l, code, details, NULL);
        c->ctr.grpc_errors_total++;
      }
    }
    free(keys);
  }
}

void rm__relay_out(rm_coord_t *c, rm__out_t *o)
{
  rm__call_t *k = o->call;
  if (k->method == RM__M_RELAY) { /* the stream's own end */
    struct rm__relay *r = k->mux;
    if (r->has_final) { /* never: it is answered once */
      free(o->details);
      if (o->bb) grpc_byte_buffer_destroy(o->bb); /* the relay's own: a buffer */
      rm__call_unref(k);
      return;
    }
    r->final = *o; /* with the outbox's reference */
    r->has_final = 1;
    kick_later(c, k);
    return;
  }
  /* a lane's end (its entry went to the pending ones when pushed): its
   * park was unlinked by the answer */
  rm__park_drop(c, &k->park, 0);
  lane_retire(k->up->mux, k);
  rm__call_unref(k); /* the outbox's */
}

int rm__relay_room(const rm__call_t *l)
{
  const struct rm__relay *r = l->up->mux;
  return (uint64_t)r->nout + (uint64_t)r->npend < (uint64_t)ROOM_PER_LANE * (r->open + 1);
}

/* ---- lanes ---- */
static rm__call_t *lane_open(rm_coord_t *c, rm__call_t *k, uint32_t n, int method)
{
  struct rm__relay *r = k->mux;
  rm__call_t *l = rm__xcalloc(1, sizeof *l);
  l->c = c;
  l->refs = 1; /* the table's */
  l->method = method; /* RM__M_SESSION or RM__M_JOIN */
  l->streaming = method == RM__M_SESSION;
  l->cq = k->cq;
  l->up = k;
  l->lane = n;
  l->park.relayed = 1;
  __atomic_add_fetch(&k->refs, 1, __ATOMIC_ACQ_REL); /* the lane's on its relay */
  lane_put(r, n, l);
  r->open++;
  c->ctr.relay_lanes_total++;
  return l;
}

/* A lane ends from the relay's side: LANE_END (the worker half-closed:
 * the final OK goes back to it), LANE_BROKEN (its Session broke: declared
 * lost, which writes rows; nothing to send) or LANE_GONE (the relay's
 * stream ended: nothing to send, nobody lost). */
enum { LANE_END, LANE_BROKEN, LANE_GONE };
static void lane_end(rm_coord_t *c, rm__call_t *l, int how)
{
  if (l->answered) return;
  l->answered = 1;
  if (l->wpark) rm__park_unlink(l->wpark);
  rm__park_drop(c, &l->park, how == LANE_BROKEN);
  if (how != LANE_END) lane_retire(l->up->mux, l);
  else rm__out_push(c, l, GRPC_STATUS_OK, "", NULL); /* retired when flushed */
}

static void relay_unlist(rm_coord_t *c, rm__call_t *k)
{
  struct rm__relay *r = k->mux;
  if (r->prev) r->prev->mux->next = r->next;
  else if (c->rpc->relays == k) c->rpc->relays = r->next;
  if (r->next) r->next->mux->prev = r->prev;
  r->prev = r->next = NULL;
}

/* End the stream: every open lane as LANE_GONE (its worker is not lost:
 * the relay, not the worker, went away; its heartbeats now come another
 * way or time out), then the stream's own status after every queued
 * entry. */
static void relay_close(rm_coord_t *c, rm__call_t *k, int code, const char *details)
{
  struct rm__relay *r = k->mux;
  if (k->answered) return;
  for (uint32_t n = r->base; n < r->base + r->used && r->open; n++) { /* LANE TABLE */
    rm__call_t *l = lane_get(r, n);
    if (l && l != ENDED) lane_end(c, l, LANE_GONE);
  }
  relay_unlist(c, k);
  if (code != GRPC_STATUS_OK) {
    RM_WARN("relay stream ended: %s", details);
    rm__reply(c, k, code, details, NULL);
  } else {
    k->answered = 1;
    rm__out_push(c, k, GRPC_STATUS_OK, "", NULL);
  }
}

int rm__relay_writes(const Ringmaster__V1__RelayRequest *q)
{
  /* a malformed one or a lane out of range ends the stream and its lanes
   * (LANE_GONE): no rows */
  for (size_t i = 0; q && i < q->n_in; i++) {
    const Ringmaster__V1__RelayIn *in = q->in[i];
    const Ringmaster__V1__SessionRequest *m = in->message;
    if (in->broken || in->join || (m && (m->barrier || m->gate))) return 1;
  }
  return 0;
}

/* The relay's record, made at its first message or end; listed in
 * c->rpc->relays until it ends. */
static struct rm__relay *relay_of(rm_coord_t *c, rm__call_t *k)
{
  if (!k->mux) {
    c->ctr.grpc_calls_total++;
    k->mux = rm__xcalloc(1, sizeof *k->mux);
    k->mux->base = 1; /* lane numbers start at 1 (LANE TABLE) */
    k->mux->next = c->rpc->relays;
    if (c->rpc->relays) c->rpc->relays->mux->prev = k;
    c->rpc->relays = k;
  }
  return k->mux;
}

void rm__relay_msg(rm_coord_t *c, rm__call_t *k, const Ringmaster__V1__RelayRequest *q)
{
  char why[160];
  c->ctr.relay_messages_total++;
  struct rm__relay *r = relay_of(c, k);
  if (!q) {
    relay_close(c, k, GRPC_STATUS_INVALID_ARGUMENT,
                "malformed ringmaster.v1.RelayRequest message on a Relay");
    return;
  }
  if (c->closing) {
    relay_close(c, k, GRPC_STATUS_UNAVAILABLE, "coordinator shutting down");
    return;
  }
  for (size_t i = 0; i < q->n_in && !k->answered; i++) {
    const Ringmaster__V1__RelayIn *in = q->in[i];
    uint32_t n = in->lane;
    if (!n || n > RELAY_LANES_MAX) {
      snprintf(why, sizeof why, "relay lane %u out of range 1..%u", n, RELAY_LANES_MAX);
      relay_close(c, k, GRPC_STATUS_INVALID_ARGUMENT, why);
      return;
    }
    rm__call_t *l = lane_get(r, n);
    if (l == ENDED) continue; /* as a message after a Session's end */
    if ((in->join && (l || in->message)) ||
        (l && in->message && l->method != RM__M_SESSION)) {
      snprintf(why, sizeof why, "relay lane %u: a Join opens a lane of its own, and a "
               "Join lane carries no Session message", n);
      relay_close(c, k, GRPC_STATUS_INVALID_ARGUMENT, why);
      return;
    }
    if (!l && !in->message && !in->join) { /* ended before it opened */
      if (in->end || in->broken) {
        lane_put(r, n, ENDED);
        lane_trim(r);
      }
      continue;
    }
    if (!l) l = lane_open(c, k, n, in->join ? RM__M_JOIN : RM__M_SESSION);
    if (in->join) { /* a Join call: its answer ends the lane */
      c->ctr.grpc_calls_total++;
      rm__rpc_dispatch(c, l, RM__M_JOIN, &in->join->base, 1);
    } else if (in->message && !l->answered) {
      if (l->park.kind == RM__PARK_SESSION) c->ctr.session_messages_total++;
      else c->ctr.grpc_calls_total++; /* its opening message */
      rm__rpc_dispatch(c, l, RM__M_SESSION, &in->message->base, 1);
    }
    if (in->end || in->broken) {
      RM_DEBUG("relay lane %u %s (worker %llu)", n, in->broken ? "broken" : "ended",
               (unsigned long long)l->park.worker_id);
      /* a Join has no half-close: its lane's `end` is its call gone */
      lane_end(c, l, in->broken || l->method == RM__M_JOIN ? LANE_BROKEN : LANE_END);
    }
  }
}

void rm__relay_end(rm_coord_t *c, rm__call_t *k)
{
  if (k->answered) return;
  relay_of(c, k);
  relay_close(c, k, GRPC_STATUS_OK, "");
}

void rm__relay_on_send(rm_coord_t *c, rm__call_t *k)
{
  (void)c;
  struct rm__relay *r = k->mux;
  r->sending = 0;
  relay_kick(k);
}

void rm__relay_stop_all(rm_coord_t *c)
{
  while (c->rpc->relays) relay_close(c, c->rpc->relays, GRPC_STATUS_UNAVAILABLE,
                                "coordinator shutting down");
}

void rm__relay_free(rm__call_t *k)
{
  struct rm__relay *r = k->mux;
  for (int i = 0; i < r->nout; i++) out_free(&r->out[i]);
  for (int i = 0; i < r->npend; i++) out_free(&r->pend[i]);
  free(r->out);
  free(r->pend);
  free(r->lane);
  free(r);
}
