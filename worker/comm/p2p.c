/*
 * p2p.c - tagged point-to-point messages (rm_isend / rm_irecv, ringmaster.h)
 * on a communicator of their own (rm_comm_dup, comm_dup.c).
 *
 * WHY A COMMUNICATOR OF ITS OWN. The transports match messages strictly in
 * posting order per pair of ranks, stamped with the collective sequence
 * number (transport.h). Messages sent at arbitrary times, received in
 * another order by tag or from any source, cannot share those lanes with
 * collectives. So point-to-point runs on a communicator that carries no
 * collective (rm_comm_dup makes one over the same ranks: new connections,
 * the same transports, key and deadline); once a point-to-point call was
 * made on a communicator, its collectives return RM_ERR_INVALID_ARG.
 *
 * THE ENGINE. The first call starts one progress thread for the
 * communicator: it alone drives the transports (the one-thread-per-
 * communicator rule), so a send progresses while the caller computes, as
 * gloo's and NCCL's do. Callers (any threads) put requests on an incoming
 * list under the lock and ring the doorbell (the communicator's wake pipe
 * and the transports' wake: the engine sleeps in the transports' poll or
 * futex and wakes at once). Ended requests are marked under the lock and
 * the condition variable is broadcast; rm_p2p_wait sleeps on it.
 *
 * WIRE FORMAT. Each message is a 24-byte header, then (when len > 0) the
 * payload as a second transport message, both in the pair's FIFO order:
 *     0  4  magic "RMP2" (0x32504d52 little-endian)
 *     4  4  zero
 *     8  8  tag
 *    16  8  len (payload bytes)
 * Transport tags: HDR_TAG on headers, the user's tag on payloads (the
 * transport checks the payload against it). A header with another magic is
 * RM_ERR_PROTOCOL naming the peer.
 *
 * MATCHING (MPI's rules). The engine keeps a header receive posted to peer
 * P while some open receive could take a message from P (its source is P
 * or RM_ANY_SOURCE); a peer nobody waits for may leave (BYE) quietly. A
 * header from P is matched against the open receives in posting order: the
 * first whose source admits P and whose tag equals the header's. Matched:
 * the payload receive is posted straight into the user's buffer. Unmatched:
 * into a buffer of its own ("unexpected", kept in arrival order); a later
 * rm_irecv takes the first unexpected message that matches before waiting.
 * So messages of one (source, tag) are never reordered, and every header's
 * payload receive is posted before the next header receive from that peer
 * (the FIFO lane stays in step). A message whose length differs from the
 * receive's is consumed and discarded, and that receive ends with
 * RM_ERR_INVALID_ARG saying both lengths (torch's send and recv need equal
 * sizes). Sends are eager: a receiver's engine takes every message it sees
 * a header for, so two ranks sending to each other first never deadlock.
 * An open RM_ANY_SOURCE receive keeps header receives posted to every peer
 * until a message comes from each: a peer that leaves meanwhile fails the
 * communicator (PEER_LOST), as it would any posted receive.
 *
 * DEADLINES. Every request has one: timeout_ms at post, or the
 * communicator's deadline (rm_comm_set_timeout). A receive that no message
 * matched by then ends with RM_ERR_TIMEOUT naming its source and tag, and
 * the communicator stays usable. A send not taken, or a payload not
 * finished, by then cannot be withdrawn from the pair's lane without
 * breaking its framing: the communicator fails with RM_ERR_TIMEOUT naming
 * the peer, and every open request ends with that.
 *
 * FAILURE. Whatever fails the communicator (a peer lost, garbage on a
 * socket, rm_comm_abort from any thread) ends every open request with the
 * sticky status and words; later posts end at once with them.
 *
 * LIFETIME. A request is held by its caller until rm_p2p_free and by the
 * engine until it ends (two references). Buffers must stay valid until the
 * request ends. rm_comm_destroy stops the engine (open requests end with
 * RM_ERR_ABORTED) and frees every request still held: free them first.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_int.h"
#include "device/dev.h"
#include "rm_check.h"
#include "rm_clock.h"
#include "rm_le.h"
#include "rm_log.h"

#define HDR_BYTES 24
#define HDR_MAGIC 0x32504d52u
#define HDR_TAG 0x5032505f48445200ull /* "P2P_HDR" */
#define HDR_GOODBYE 1u

enum { K_SEND = 1, K_RECV = 2 };

struct rm_p2p_req {
  int kind, peer, refs;
  uint64_t tag;
  void *buf;
  size_t bytes;
  int64_t deadline_ns;
  int timeout_ms;
  /* results, written by the engine under the lock before done */
  int done, source;
  size_t got;
  rm_status_t status;
  char why[200];
  /* engine side */
  unsigned char hdr[HDR_BYTES];
  rm__req_t hreq, dreq;       /* sends: header and payload */
  struct rm_p2p_req *next;    /* incoming / open receives / sends */
  struct rm_p2p_req *all_next; /* every request not yet freed (destroy) */
};

/* A message whose header arrived; its payload in flight or landed. */
typedef struct msg {
  struct msg *next;
  int peer;
  uint64_t tag;
  size_t len;
  void *tmp;          /* owned buffer (unexpected or discarded), or NULL */
  rm__req_t dreq;
  int arrived;
  int mismatch;       /* discard: owner's size differs */
  rm_p2p_req_t *owner; /* the receive it goes to; NULL = unexpected */
} msg_t;

typedef struct peer_st {
  unsigned char hdr[HDR_BYTES];
  rm__req_t hreq;
  int posted;
  int gone; /* it said GOODBYE: its communicator is closed */
} peer_st_t;

struct rm__p2p {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int stop;
  rm_p2p_req_t *incoming, **incoming_tail; /* under lock */
  rm_p2p_req_t *all;                       /* under lock */
  /* engine-only */
  rm_p2p_req_t *recvs; /* open, unmatched, posting order */
  rm_p2p_req_t *sends;
  msg_t *msgs;         /* arrival order */
  peer_st_t *peers;
  int failed;
  void *bye_hdrs, *bye_reqs; /* goodbye()'s, when still posted at close */
};

static pthread_mutex_t g_start_lock = PTHREAD_MUTEX_INITIALIZER;

static void ring(rm_comm_t *c)
{
  char b = 0;
  ssize_t n = write(c->wake_fd[1], &b, 1); /* a full pipe is awake anyway */
  (void)n;
  rm__transport_wake(c);
}

/* Drop one reference; the last frees (lock held). */
static void unref(struct rm__p2p *p, rm_p2p_req_t *r)
{
  if (--r->refs > 0) return;
  for (rm_p2p_req_t **q = &p->all; *q; q = &(*q)->all_next)
    if (*q == r) {
      *q = r->all_next;
      break;
    }
  free(r);
}

/* End r with st (engine side; r leaves the engine's lists before). */
static void finish(rm_comm_t *c, rm_p2p_req_t *r, rm_status_t st, int source, size_t got,
                   const char *why)
{
  struct rm__p2p *p = c->p2p;
  pthread_mutex_lock(&p->lock);
  r->status = st;
  r->source = source;
  r->got = got;
  snprintf(r->why, sizeof r->why, "%s", why ? why : "");
  r->done = 1;
  unref(p, r);
  pthread_cond_broadcast(&p->cond);
  pthread_mutex_unlock(&p->lock);
}

static const char *what(const rm_p2p_req_t *r, char *b, size_t n)
{
  if (r->kind == K_SEND)
    snprintf(b, n, "send of %zu bytes to rank %d (tag %llu)", r->bytes, r->peer,
             (unsigned long long)r->tag);
  else if (r->peer < 0)
    snprintf(b, n, "receive of %zu bytes from any rank (tag %llu)", r->bytes,
             (unsigned long long)r->tag);
  else
    snprintf(b, n, "receive of %zu bytes from rank %d (tag %llu)", r->bytes, r->peer,
             (unsigned long long)r->tag);
  return b;
}

/* ---- engine ---- */

static rm_status_t post_send(rm_comm_t *c, rm_p2p_req_t *r)
{
  rm__put_le32(r->hdr, HDR_MAGIC);
  rm__put_le32(r->hdr + 4, 0);
  rm__put_le64(r->hdr + 8, r->tag);
  rm__put_le64(r->hdr + 16, (uint64_t)r->bytes);
  RM_CHECK(rm__isend(c, r->peer, r->hdr, HDR_BYTES, HDR_TAG, &r->hreq));
  if (r->bytes) RM_CHECK(rm__isend(c, r->peer, r->buf, r->bytes, r->tag, &r->dreq));
  return RM_OK;
}

static int admits(const rm_p2p_req_t *r, int peer, uint64_t tag)
{
  return (r->peer == RM_ANY_SOURCE || r->peer == peer) && r->tag == tag;
}

/* A message that landed, for owner r: copy, or say why not. */
static void deliver(rm_comm_t *c, msg_t *m)
{
  rm_p2p_req_t *r = m->owner;
  char b[160], w[200];
  if (m->mismatch) {
    snprintf(w, sizeof w, "%s: rank %d sent %zu bytes with that tag; the sizes must be equal "
             "(the message was dropped)", what(r, b, sizeof b), m->peer, m->len);
    finish(c, r, RM_ERR_INVALID_ARG, m->peer, 0, w);
    return;
  }
  if (m->tmp && m->len) memcpy(r->buf, m->tmp, m->len);
  finish(c, r, RM_OK, m->peer, m->len, NULL);
}

/* Give an open receive r the first unexpected message it admits; 1 if so. */
static int take_unexpected(struct rm__p2p *p, rm_p2p_req_t *r)
{
  for (msg_t *m = p->msgs; m; m = m->next)
    if (m->owner == NULL && admits(r, m->peer, m->tag)) {
      m->owner = r;
      m->mismatch = m->len != r->bytes;
      return 1;
    }
  return 0;
}

/* A header from peer landed: match it, post its payload receive. */
static rm_status_t on_header(rm_comm_t *c, int peer)
{
  struct rm__p2p *p = c->p2p;
  peer_st_t *ps = &p->peers[peer];
  if (rm__get_le32(ps->hdr) != HDR_MAGIC)
    return rm__comm_fail(c, RM_ERR_PROTOCOL, peer, "point-to-point: rank %d (%s) sent a "
                         "header without the magic", peer, c->peers[peer]);
  if (rm__get_le32(ps->hdr + 4) & HDR_GOODBYE) {
    ps->gone = 1;
    return RM_OK; /* its open receives end in sweep() */
  }
  msg_t *m = calloc(1, sizeof *m);
  if (m == NULL) return rm__comm_fail(c, RM_ERR_NOMEM, peer, "point-to-point: no memory");
  m->peer = peer;
  m->tag = rm__get_le64(ps->hdr + 8);
  m->len = (size_t)rm__get_le64(ps->hdr + 16);
  for (rm_p2p_req_t **q = &p->recvs; *q; q = &(*q)->next)
    if (admits(*q, peer, m->tag)) {
      m->owner = *q;
      m->mismatch = m->len != (*q)->bytes;
      *q = (*q)->next;
      break;
    }
  msg_t **tail = &p->msgs; /* listed first: a failure below ends its owner */
  while (*tail) tail = &(*tail)->next;
  *tail = m;
  void *dst = m->owner && !m->mismatch ? m->owner->buf : NULL;
  if (dst == NULL && m->len) {
    if ((m->tmp = malloc(m->len)) == NULL)
      return rm__comm_fail(c, RM_ERR_NOMEM, peer, "point-to-point: no memory for a message "
                           "of %zu bytes from rank %d", m->len, peer);
    dst = m->tmp;
  }
  if (m->len == 0) {
    m->arrived = 1;
    return RM_OK;
  }
  return rm__irecv(c, peer, dst, m->len, m->tag, &m->dreq);
}

/* The callers' new requests, taken off the incoming list. */
static rm_p2p_req_t *grab_incoming(struct rm__p2p *p)
{
  pthread_mutex_lock(&p->lock);
  rm_p2p_req_t *in = p->incoming;
  p->incoming = NULL;
  p->incoming_tail = &p->incoming;
  pthread_mutex_unlock(&p->lock);
  return in;
}

/* Take the callers' new requests. */
static rm_status_t take_incoming(rm_comm_t *c)
{
  struct rm__p2p *p = c->p2p;
  rm_p2p_req_t *in = grab_incoming(p);
  while (in) {
    rm_p2p_req_t *r = in;
    in = in->next;
    r->next = NULL;
    if (r->kind == K_SEND && p->peers[r->peer].gone) {
      char b[160], w[240];
      snprintf(w, sizeof w, "%s: rank %d closed its point-to-point communicator",
               what(r, b, sizeof b), r->peer);
      finish(c, r, RM_ERR_PEER_LOST, r->peer, 0, w);
    } else if (r->kind == K_SEND) {
      r->next = p->sends;
      p->sends = r;
      RM_CHECK(post_send(c, r));
    } else if (!take_unexpected(p, r)) {
      rm_p2p_req_t **q = &p->recvs;
      while (*q) q = &(*q)->next;
      *q = r;
    }
  }
  return RM_OK;
}

/* Completions, then header receives where an open receive wants them. */
static rm_status_t sweep(rm_comm_t *c)
{
  struct rm__p2p *p = c->p2p;
  for (int j = 0; j < c->world; j++)
    if (p->peers[j].posted && p->peers[j].hreq.complete) {
      p->peers[j].posted = 0;
      RM_CHECK(p->peers[j].hreq.status);
      RM_CHECK(on_header(c, j));
    }
  for (msg_t **q = &p->msgs; *q;) {
    msg_t *m = *q;
    if (!m->arrived && m->dreq.complete) {
      RM_CHECK(m->dreq.status);
      m->arrived = 1;
    }
    if (m->arrived && m->owner) {
      deliver(c, m);
      *q = m->next;
      free(m->tmp);
      free(m);
    } else {
      q = &m->next;
    }
  }
  for (rm_p2p_req_t **q = &p->sends; *q;) {
    rm_p2p_req_t *r = *q;
    if (r->hreq.complete && (r->bytes == 0 || r->dreq.complete)) {
      *q = r->next;
      finish(c, r, RM_OK, c->rank, r->bytes, NULL);
    } else {
      q = &r->next;
    }
  }
  for (rm_p2p_req_t **q = &p->recvs; *q;) { /* waiting for a rank that left */
    rm_p2p_req_t *r = *q;
    char b[160], w[240];
    if (r->peer >= 0 && p->peers[r->peer].gone) {
      *q = r->next;
      snprintf(w, sizeof w, "%s: rank %d closed its point-to-point communicator",
               what(r, b, sizeof b), r->peer);
      finish(c, r, RM_ERR_PEER_LOST, r->peer, 0, w);
    } else {
      q = &r->next;
    }
  }
  for (rm_p2p_req_t *r = p->recvs; r; r = r->next)
    for (int j = 0; j < c->world; j++)
      if (j != c->rank && !p->peers[j].posted && !p->peers[j].gone &&
          (r->peer == j || r->peer == RM_ANY_SOURCE)) {
        RM_CHECK(rm__irecv(c, j, p->peers[j].hdr, HDR_BYTES, HDR_TAG, &p->peers[j].hreq));
        p->peers[j].posted = 1;
      }
  return RM_OK;
}

/* Deadlines; returns ms until the next one (at most 1000). */
static int deadlines(rm_comm_t *c)
{
  struct rm__p2p *p = c->p2p;
  int64_t now = rm__now_ns(), next = now + 1000000000LL;
  char b[160], w[200];
  for (rm_p2p_req_t **q = &p->recvs; *q;) {
    rm_p2p_req_t *r = *q;
    if (now >= r->deadline_ns) {
      *q = r->next;
      snprintf(w, sizeof w, "%s: no message within its %d ms", what(r, b, sizeof b),
               r->timeout_ms);
      finish(c, r, RM_ERR_TIMEOUT, r->peer, 0, w);
      continue;
    }
    if (r->deadline_ns < next) next = r->deadline_ns;
    q = &r->next;
  }
  for (rm_p2p_req_t *r = p->sends; r; r = r->next) {
    if (now >= r->deadline_ns) {
      rm__comm_fail(c, RM_ERR_TIMEOUT, r->peer, "point-to-point: %s: not taken by rank %d "
                    "(%s) by its deadline", what(r, b, sizeof b), r->peer, c->peers[r->peer]);
      return 0;
    }
    if (r->deadline_ns < next) next = r->deadline_ns;
  }
  for (msg_t *m = p->msgs; m; m = m->next) {
    if (!m->owner || m->arrived) continue;
    if (now >= m->owner->deadline_ns) {
      rm__comm_fail(c, RM_ERR_TIMEOUT, m->peer, "point-to-point: %s: rank %d (%s) stopped "
                    "in the middle of its %zu bytes", what(m->owner, b, sizeof b), m->peer,
                    c->peers[m->peer], m->len);
      return 0;
    }
    if (m->owner->deadline_ns < next) next = m->owner->deadline_ns;
  }
  int64_t ms = (next - now + 999999) / 1000000;
  return ms < 1 ? 1 : (int)ms;
}

/* The communicator failed: end everything with its words. */
static void fail_all(rm_comm_t *c, rm_status_t st, const char *why, int free_msgs)
{
  struct rm__p2p *p = c->p2p;
  pthread_mutex_lock(&p->lock); /* posts after this end at once (post()) */
  p->failed = 1;
  pthread_mutex_unlock(&p->lock);
  while (p->recvs) {
    rm_p2p_req_t *r = p->recvs;
    p->recvs = r->next;
    finish(c, r, st, r->peer, 0, why);
  }
  while (p->sends) {
    rm_p2p_req_t *r = p->sends;
    p->sends = r->next;
    finish(c, r, st, r->peer, 0, why);
  }
  /* the transports may still hold the payload receives until they close:
   * then the messages stay listed, and rm__p2p_free frees them */
  for (msg_t **q = &p->msgs; *q;) {
    msg_t *m = *q;
    if (m->owner) finish(c, m->owner, st, m->peer, 0, why);
    m->owner = NULL;
    if (free_msgs) {
      *q = m->next;
      free(m->tmp);
      free(m);
    } else {
      q = &m->next;
    }
  }
  for (rm_p2p_req_t *in = grab_incoming(p), *r; (r = in) != NULL;) {
    in = in->next;
    finish(c, r, st, r->peer, 0, why);
  }
}

static void *engine(void *arg)
{
  rm_comm_t *c = arg;
  struct rm__p2p *p = c->p2p;
  for (;;) {
    pthread_mutex_lock(&p->lock);
    int stop = p->stop;
    pthread_mutex_unlock(&p->lock);
    if (stop) break;
    if (p->failed) { /* nothing moves any more: sleep until stopped */
      pthread_mutex_lock(&p->lock);
      while (!p->stop) pthread_cond_wait(&p->cond, &p->lock);
      pthread_mutex_unlock(&p->lock);
      break;
    }
    rm_status_t st = take_incoming(c);
    if (st == RM_OK) st = sweep(c);
    int ms = st == RM_OK ? deadlines(c) : 0;
    if (st == RM_OK) st = rm__progress(c, ms);
    if (st == RM_OK) st = sweep(c);
    if (st != RM_OK || rm_comm_status(c) != RM_OK) {
      if (rm_comm_status(c) == RM_OK)
        rm__comm_fail(c, st, -1, "point-to-point engine: %s", rm_status_name(st));
      rm__progress(c, 0); /* closes the transports with the failure */
      fail_all(c, rm_comm_status(c), rm_comm_last_error(c), 1);
    }
  }
  return NULL;
}

/* The engine of c, started on first use. */
static rm_status_t engine_of(rm_comm_t *c, struct rm__p2p **out)
{
  rm_status_t st = RM_OK;
  pthread_mutex_lock(&g_start_lock);
  if (c->p2p == NULL) {
    struct rm__p2p *p = calloc(1, sizeof *p);
    if (p) p->peers = calloc((size_t)c->world, sizeof *p->peers);
    if (p == NULL || p->peers == NULL) {
      if (p) free(p);
      st = RM_ERR_NOMEM;
      goto out;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->incoming_tail = &p->incoming;
    c->bg_progress = 1;
    c->p2p = p;
    if (pthread_create(&p->thread, NULL, engine, c) != 0) {
      RM_ERROR("point-to-point: cannot start the progress thread: %s", strerror(errno));
      c->p2p = NULL;
      free(p->peers);
      free(p);
      st = RM_ERR_SYSTEM;
    }
  }
out:
  *out = c->p2p;
  pthread_mutex_unlock(&g_start_lock);
  return st;
}

static rm_status_t post(rm_comm_t *c, int kind, void *buf, size_t bytes, int peer,
                        uint64_t tag, int timeout_ms, rm_p2p_req_t **out)
{
  struct rm__p2p *p;
  const void *bufs[1] = {buf};
  int device = 0, ordinal = 0;
  if (out) *out = NULL;
  if (c == NULL || out == NULL || timeout_ms < 0 || (buf == NULL && bytes > 0) ||
      peer == c->rank || peer < (kind == K_RECV ? RM_ANY_SOURCE : 0) || peer >= c->world)
    return RM_ERR_INVALID_ARG;
  if (bytes && rm__mem_classify(c, bufs, 1, &device, &ordinal) == RM_OK && device)
    return RM_ERR_INVALID_ARG; /* host memory only: no staging on this path */
  RM_CHECK(engine_of(c, &p));
  rm_p2p_req_t *r = calloc(1, sizeof *r);
  if (r == NULL) return RM_ERR_NOMEM;
  r->kind = kind;
  r->peer = peer;
  r->tag = tag;
  r->buf = buf;
  r->bytes = bytes;
  r->refs = 2;
  r->source = -1;
  r->timeout_ms = timeout_ms ? timeout_ms : c->timeout_ms;
  r->deadline_ns = rm__now_ns() + (int64_t)r->timeout_ms * 1000000;
  pthread_mutex_lock(&p->lock);
  r->all_next = p->all;
  p->all = r;
  rm_status_t st = rm_comm_status(c);
  if (st != RM_OK || p->failed) { /* ends at once with the sticky words */
    r->status = st != RM_OK ? st : RM_ERR_ABORTED;
    snprintf(r->why, sizeof r->why, "%s", rm_comm_last_error(c));
    r->done = 1;
    r->refs = 1;
  } else {
    *p->incoming_tail = r;
    p->incoming_tail = &r->next;
  }
  pthread_mutex_unlock(&p->lock);
  ring(c);
  *out = r;
  return RM_OK;
}

rm_status_t rm_isend(rm_comm_t *comm, const void *buf, size_t bytes, int peer, uint64_t tag,
                     int timeout_ms, rm_p2p_req_t **req)
{
  return post(comm, K_SEND, (void *)(uintptr_t)buf, bytes, peer, tag, timeout_ms, req);
}

rm_status_t rm_irecv(rm_comm_t *comm, void *buf, size_t bytes, int peer, uint64_t tag,
                     int timeout_ms, rm_p2p_req_t **req)
{
  return post(comm, K_RECV, buf, bytes, peer, tag, timeout_ms, req);
}

rm_status_t rm_p2p_wait(rm_comm_t *comm, rm_p2p_req_t *req, int timeout_ms, int *done)
{
  struct rm__p2p *p;
  if (comm == NULL || req == NULL || (p = comm->p2p) == NULL)
    return RM_ERR_INVALID_ARG;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (timeout_ms > 0) {
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
  }
  pthread_mutex_lock(&p->lock);
  while (!req->done && timeout_ms != 0) {
    if (timeout_ms < 0) pthread_cond_wait(&p->cond, &p->lock);
    else if (pthread_cond_timedwait(&p->cond, &p->lock, &ts) == ETIMEDOUT) break;
  }
  int d = req->done;
  rm_status_t st = d ? req->status : RM_OK;
  pthread_mutex_unlock(&p->lock);
  if (done) *done = d;
  return st;
}

int rm_p2p_source(const rm_p2p_req_t *req) { return req && req->done ? req->source : -1; }
size_t rm_p2p_bytes(const rm_p2p_req_t *req) { return req && req->done ? req->got : 0; }

const char *rm_p2p_error(const rm_p2p_req_t *req)
{
  return req && req->done ? req->why : "";
}

void rm_p2p_free(rm_comm_t *comm, rm_p2p_req_t *req)
{
  struct rm__p2p *p;
  if (comm == NULL || req == NULL || (p = comm->p2p) == NULL) return;
  pthread_mutex_lock(&p->lock);
  unref(p, req);
  pthread_mutex_unlock(&p->lock);
}

/* The blocking forms: post, wait, free; the request's words are logged
 * (the caller has no request to read them from). */
static rm_status_t blocking(rm_comm_t *comm, rm_p2p_req_t *r, int *source)
{
  int done = 0;
  rm_status_t st = rm_p2p_wait(comm, r, -1, &done);
  if (st != RM_OK && r->why[0])
    RM_WARN("rank %d: %s", comm->rank, r->why);
  if (source) *source = r->source;
  rm_p2p_free(comm, r);
  return st;
}

rm_status_t rm_send(rm_comm_t *comm, const void *buf, size_t bytes, int peer, uint64_t tag)
{
  rm_p2p_req_t *r = NULL;
  RM_CHECK(rm_isend(comm, buf, bytes, peer, tag, 0, &r));
  return blocking(comm, r, NULL);
}

rm_status_t rm_recv(rm_comm_t *comm, void *buf, size_t bytes, int peer, uint64_t tag,
                    int *source)
{
  rm_p2p_req_t *r = NULL;
  RM_CHECK(rm_irecv(comm, buf, bytes, peer, tag, 0, &r));
  return blocking(comm, r, source);
}

/* Tell every peer this communicator closes (GOODBYE headers), so that a
 * header receive a peer keeps posted to us (an RM_ANY_SOURCE receive's)
 * ends quietly instead of failing its communicator at our BYE. Bounded:
 * a peer whose lane is full does not get it (at most 200 ms). */
static void goodbye(rm_comm_t *c)
{
  int n = c->world, left = 0;
  unsigned char (*h)[HDR_BYTES] = calloc((size_t)n, HDR_BYTES);
  rm__req_t *q = calloc((size_t)n, sizeof *q);
  for (int j = 0; h && q && j < n; j++) {
    if (j == c->rank || c->p2p->peers[j].gone || rm__peer_left(c, j)) continue;
    rm__put_le32(h[j], HDR_MAGIC);
    rm__put_le32(h[j] + 4, HDR_GOODBYE);
    if (rm__isend(c, j, h[j], HDR_BYTES, HDR_TAG, &q[j]) == RM_OK) left++;
  }
  for (int64_t end = rm__now_ns() + 200000000LL; left > 0 && rm__now_ns() < end;) {
    if (rm__progress(c, 10) != RM_OK) break;
    left = 0;
    for (int j = 0; j < n; j++)
      if (q[j].kind && !q[j].complete) left++;
  }
  if (left == 0) { /* none still posted: the requests may go */
    free(h);
    free(q);
  } else { /* the transports hold them until they close: freed then */
    c->p2p->bye_hdrs = h;
    c->p2p->bye_reqs = q;
  }
}

void rm__p2p_stop(rm_comm_t *c)
{
  struct rm__p2p *p = c->p2p;
  if (p == NULL) return;
  pthread_mutex_lock(&p->lock);
  p->stop = 1;
  pthread_cond_broadcast(&p->cond);
  pthread_mutex_unlock(&p->lock);
  ring(c);
  pthread_join(p->thread, NULL);
  if (!p->failed) { /* open requests end here; the peers get BYE, not ABORT */
    /* the transports still hold their requests: nothing is freed before
     * rm__p2p_free, which frees every request */
    pthread_mutex_lock(&p->lock);
    for (rm_p2p_req_t *r = p->all; r; r = r->all_next) r->refs++;
    pthread_mutex_unlock(&p->lock);
    fail_all(c, RM_ERR_ABORTED, "point-to-point: the communicator was destroyed", 0);
    if (rm_comm_status(c) == RM_OK) goodbye(c);
  }
}

void rm__p2p_free(rm_comm_t *c)
{
  struct rm__p2p *p = c->p2p;
  if (p == NULL) return;
  while (p->all) { /* what callers still hold goes with the communicator */
    rm_p2p_req_t *r = p->all;
    p->all = r->all_next;
    free(r);
  }
  while (p->msgs) {
    msg_t *m = p->msgs;
    p->msgs = m->next;
    free(m->tmp);
    free(m);
  }
  pthread_cond_destroy(&p->cond);
  pthread_mutex_destroy(&p->lock);
  free(p->bye_hdrs);
  free(p->bye_reqs);
  free(p->peers);
  free(p);
  c->p2p = NULL;
}
