/*
 * transport.c - the request API of transport.h over the transport plug-ins:
 * transport selection, posting, and the wait loop with its deadline.
 *
 * Selection: per peer, the pair rule of common/rm_transports.h over the two
 * ranks' offers (c->offers) names the transport; it must be available() in
 * this process and can_connect() to that peer, else rm_comm_init fails
 * naming the peer and both offers (both ranks decide alike: they read the
 * same two strings). One info line per communicator says which transport
 * carries which ranks. Then connect_all() runs once per transport used, in
 * id order (shared memory, RDMA, then TCP), on every rank alike.
 *
 * Wait loop (rm__wait), one iteration (T = timeout_ms, "idle" = time since
 * the last byte moved on req):
 *   1. req complete -> return its status;
 *   2. sticky failure (peer, deadline, abort from another thread) -> close
 *      the transports with it (peers get ABORT frames) and return it;
 *   3. idle >= T/4 -> tell req->peer, and the peers that said they wait on
 *      us, "blocked on req->peer" (stalled(), a WAIT frame on TCP), again
 *      every T/4 while idle;
 *   4. idle >= T -> the stall verdict (below);
 *   5. progress every transport in use, blocking at most until the next
 *      step above is due (several transports: below).
 *
 * The transports in use (c->tp_used, id order) are listed once at connect;
 * the loop, stall reports and close walk that list.
 *
 * Waiting on several transports (shared memory inside a host, TCP or RDMA
 * across; progress_all). Only the last transport in use, the "blocker"
 * (TCP, else RDMA), sleeps in poll(); the others are passed over without
 * blocking. So that an arrival on any of them wakes the waiter at once:
 *   1. each other transport with park() (shared memory) announces to its
 *      peers that a wake of this rank must also make c->bell_fd readable,
 *      then re-checks everything once (a pass); anything moved: no sleep;
 *   2. the blocker polls c->bell_fd beside its own fds and c->wake_fd, for
 *      the whole time left, bounded by what each park() allows (shared
 *      memory: until its next peer-pid check, at most 50 ms), drains it;
 *   3. unpark() withdraws the announcement.
 * No wake-up is lost: the waiter announces, fences, then re-checks; a
 * sender publishes, fences, then reads the announcement and, when it is
 * set, makes the fd readable (shm_int.h, "Waiting"). Abort still wakes the
 * blocker through c->wake_fd. A transport in use that has no park (RDMA
 * when TCP is the blocker: its completions have no fd) cannot wake the
 * poll: then the blocker sleeps at most MIXED_BLOCK_MS at a time, and
 * those arrivals wait up to that long.
 *
 * Stall verdict. Ranks wait on each other in chains: with rank 2 stopped,
 * rank 3 waits on 2 and rank 0 waits on 3, and both deadlines run out at
 * about the same time. Blaming "whoever I waited on" would make rank 0 name
 * rank 3, which is healthy. So when req->peer P has said within the last T
 * that it is blocked on rank Q, P is alive and waiting too: keep waiting
 * until idle reaches 2T. P's own deadline on Q runs out first and its ABORT
 * (naming Q, or whoever Q named) reaches us as the sticky failure. If 2T
 * comes and P still says so, the ranks wait in a cycle (mismatched
 * collectives): fail RM_ERR_TIMEOUT naming P as a deadlock when Q is this
 * rank, else naming Q. (The verdict waits for 2T even when Q is this rank:
 * that WAIT may be stale, from a wait our progress engine has since served.)
 * A P that said nothing (stopped, stuck outside the library) is blamed at T.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_int.h"
#include "device/stage.h"
#include "rm_check.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "rm_transports.h"
#include "transport/offer.h"
#include "transport/transport.h"

/* Transports in id order; which of them carry a pair of c is in c->conns. */
#define NTP RM__TP_COUNT

static int transport_used(const rm_comm_t *c, const rm__transport_ops_t *t)
{
  if (c->conns == NULL || t == NULL) return 0;
  for (int p = 0; p < c->world; p++)
    if (c->conns[p].type == t) return 1;
  return 0;
}

/* c->tp_used: once, after every pair has its transport. */
static void list_used(rm_comm_t *c)
{
  c->ntp_used = 0;
  for (int i = 0; i < NTP; i++) {
    const rm__transport_ops_t *t = rm__tp_by_id((rm__tp_id_t)i);
    if (transport_used(c, t)) c->tp_used[c->ntp_used++] = t;
  }
}

/* "shm to ranks 0-2,5; tcp to ranks 3,4" (ranks as ranges) */
static void describe(const rm_comm_t *c, char *out, size_t n)
{
  size_t k = 0;
  out[0] = '\0';
  for (int i = 0; i < c->ntp_used; i++) {
    const rm__transport_ops_t *t = c->tp_used[i];
    int first = 1;
    k += (size_t)snprintf(out + k, k < n ? n - k : 0, "%s%s to rank%s ",
                          k ? "; " : "", t->name, "s");
    for (int p = 0; p < c->world && k < n; p++) {
      if (c->conns[p].type != t) continue;
      int q = p;
      while (q + 1 < c->world && c->conns[q + 1].type == t) q++;
      k += (size_t)snprintf(out + k, k < n ? n - k : 0, "%s%d", first ? "" : ",", p);
      if (q > p) k += (size_t)snprintf(out + k, k < n ? n - k : 0, "-%d", q);
      first = 0;
      p = q;
    }
  }
}

rm_status_t rm__transport_connect(rm_comm_t *c)
{
  char line[512];
  c->conns = calloc((size_t)c->world, sizeof *c->conns);
  if (c->conns == NULL) return RM_ERR_NOMEM;
  for (int p = 0; p < c->world; p++) {
    int lo = p < c->rank ? p : c->rank, hi = p < c->rank ? c->rank : p;
    const char *name;
    const rm__transport_ops_t *t;
    if (p == c->rank) continue;
    name = rm_tp_pick(c->offers[lo], c->offers[hi]);
    t = rm__tp_by_name(name);
    if (t == NULL || !t->available() || !t->can_connect(c, p)) {
      RM_ERROR("rank %d: no transport can reach peer rank %d (%s): rank %d "
               "offers \"%s\", rank %d offers \"%s\"%s%s%s",
               c->rank, p, c->peers[p], lo, c->offers[lo], hi, c->offers[hi],
               name ? " (" : "", name ? name : "", name ? " is not usable here)" : "");
      return RM_ERR_UNSUPPORTED;
    }
    c->conns[p].type = t;
  }
  list_used(c);
  describe(c, line, sizeof line);
  if (c->world > 1)
    RM_INFO("rank %d: job %llu generation %llu: %s", c->rank,
            (unsigned long long)c->job_id, (unsigned long long)c->generation,
            line);
  for (int i = 0; i < c->ntp_used; i++) RM_CHECK(c->tp_used[i]->connect_all(c));
  return RM_OK;
}

void rm__transport_close(rm_comm_t *c, rm_status_t reason)
{
  if (c->conns == NULL) return;
  for (int i = 0; i < c->ntp_used; i++) c->tp_used[i]->close_all(c, reason);
}

void rm__transport_wake(rm_comm_t *c)
{
  if (c->conns == NULL) return;
  for (int i = 0; i < NTP; i++) {
    const rm__transport_ops_t *t = rm__tp_by_id((rm__tp_id_t)i);
    if (t && t->wake && c->tstate[i] != NULL) t->wake(c);
  }
}

static rm_status_t post(rm_comm_t *c, int peer, rm__req_kind_t kind,
                        void *buf, size_t len, uint64_t tag, rm__req_t *req)
{
  rm_status_t st = rm_comm_status(c);
  if (req == NULL || peer < 0 || peer >= c->world || peer == c->rank ||
      (buf == NULL && len > 0))
    return RM_ERR_INVALID_ARG;
  if (st != RM_OK) return st;
  memset(req, 0, sizeof *req);
  req->peer = peer;
  req->kind = kind;
  req->buf = buf;
  req->len = len;
  req->tag = tag;
  req->seq = c->coll_seq;
  req->status = RM_OK;
  if (kind == RM__REQ_SEND) c->bytes_sent += len;
  /* a device collective's messages go through staging (device/stage.c) */
  if (c->dev_active && len > 0) return rm__stage_post(c, req);
  return c->conns[peer].type->post(c, req);
}

rm_status_t rm__isend(rm_comm_t *c, int peer, const void *buf, size_t len,
                      uint64_t tag, rm__req_t *req)
{
  return post(c, peer, RM__REQ_SEND, (void *)buf, len, tag, req);
}

rm_status_t rm__irecv(rm_comm_t *c, int peer, void *buf, size_t len,
                      uint64_t tag, rm__req_t *req)
{
  return post(c, peer, RM__REQ_RECV, buf, len, tag, req);
}

/* Longest sleep of the blocker while a transport in use cannot wake it
 * (no park(); top of file, "Waiting on several transports"). */
#define MIXED_BLOCK_MS 1

static rm_status_t progress_all(rm_comm_t *c, int timeout_ms)
{
  const rm__transport_ops_t *const *used = c->tp_used;
  int n = c->ntp_used, ms = timeout_ms, parked = 0;
  rm_status_t st = RM_OK;
  if (n == 1) return used[0]->progress(c, timeout_ms);
  for (int i = 0; i < n - 1 && st == RM_OK; i++) {
    if (ms > 0 && used[i]->park != NULL) {
      int ok = 0;
      st = used[i]->park(c, ms, &ok);
      parked |= 1 << i;
      if (ok < ms) ms = ok;
    } else {
      st = used[i]->progress(c, 0);
      if (ms > MIXED_BLOCK_MS) ms = MIXED_BLOCK_MS;
    }
  }
  c->bell_rang = 0;
  if (st == RM_OK && n > 0) st = used[n - 1]->progress(c, ms);
  for (int i = 0; i < n - 1; i++)
    if (parked & (1 << i)) used[i]->unpark(c);
  return st;
}

static rm_status_t failed(rm_comm_t *c)
{
  rm_status_t st = rm_comm_status(c);
  rm__stage_detach(c); /* staged requests end with it, before owners free them */
  rm__transport_close(c, st);
  return st;
}

static void tell_stalled(rm_comm_t *c, int on, uint64_t seq, int64_t since_ns)
{
  for (int i = 0; i < c->ntp_used; i++)
    c->tp_used[i]->stalled(c, on, seq, since_ns);
}

/* Idle reached T on req (top of file). 1 = keep waiting until 2T. */
static int stall_verdict(rm_comm_t *c, rm__req_t *req, int64_t idle_ns,
                         int64_t span)
{
  const char *what = req->kind == RM__REQ_SEND ? "sending" : "receiving";
  const char *addr = c->peers[req->peer];
  uint64_t qseq = 0;
  int64_t dev_since;
  size_t dev_bytes;
  int dev_peer, idle_ms = (int)(idle_ns / 1000000);
  if (c->dev_active && rm__stage_stuck(c, &dev_since, &dev_bytes, &dev_peer) &&
      rm__now_ns() - dev_since >= span) { /* this rank's GPU, not a peer */
    rm__comm_fail(c, RM_ERR_TIMEOUT, -1,
                  "device: the GPU work that must end before %zu bytes go to peer rank "
                  "%d (%s) has not finished after %d ms (collective %llu): the GPU makes "
                  "no progress", dev_bytes, dev_peer, c->peers[dev_peer],
                  (int)((rm__now_ns() - dev_since) / 1000000), (unsigned long long)req->seq);
    return 0;
  }
  int q = c->conns[req->peer].type->waits_on(
      c, req->peer, rm__now_ns() - span, &qseq);

  if (q >= 0 && idle_ns < 2 * span) return 1;
  if (q == c->rank) {
    rm__comm_fail(c, RM_ERR_TIMEOUT, req->peer,
                  "deadlock: peer rank %d (%s) waits for this rank in "
                  "collective %llu while this rank waits %d ms for it, %s "
                  "%zu bytes (%zu done, collective %llu)",
                  req->peer, addr, (unsigned long long)qseq, idle_ms, what,
                  req->len, req->done, (unsigned long long)req->seq);
    return 0;
  }
  if (q >= 0) {
    rm__comm_fail(c, RM_ERR_TIMEOUT, q,
                  "no progress from peer rank %d (%s) for %d ms while %s "
                  "%zu bytes (%zu done, collective %llu); it is blocked on "
                  "rank %d (%s) in collective %llu",
                  req->peer, addr, idle_ms, what, req->len, req->done,
                  (unsigned long long)req->seq, q, c->peers[q],
                  (unsigned long long)qseq);
    return 0;
  }
  rm__comm_fail(c, RM_ERR_TIMEOUT, req->peer,
                "no progress from peer rank %d (%s) for %d ms while "
                "%s %zu bytes (%zu done, collective %llu)",
                req->peer, addr, idle_ms, what, req->len, req->done,
                (unsigned long long)req->seq);
  return 0;
}

rm_status_t rm__wait(rm_comm_t *c, rm__req_t *req)
{
  size_t mark = req->done + req->ctl_moved;
  int64_t last = rm__now_ns(), told = 0;
  int64_t span = (int64_t)c->timeout_ms * 1000000LL;
  int64_t quarter = span / 4 > 1000000 ? span / 4 : 1000000;

  for (;;) {
    if (c->dev_active && rm__stage_progress(c) != RM_OK) return failed(c);
    if (req->complete) return req->status;
    if (rm_comm_status(c) != RM_OK) return failed(c);
    int64_t now = rm__now_ns(), due = last + span;
    if (now - last >= quarter && now - told >= quarter) {
      tell_stalled(c, req->peer, req->seq, now - span);
      told = now;
    }
    if (now >= due) {
      if (!stall_verdict(c, req, now - last, span)) return failed(c);
      due = last + 2 * span;
    }
    if (now - last < quarter) {
      if (last + quarter < due) due = last + quarter;
    } else if (told + quarter < due) {
      due = told + quarter;
    }
    /* from `now`: one clock read per iteration, as before the stall logic */
    int64_t left_ms = (due - now + 999999) / 1000000;
    int left = left_ms < 1 ? 1 : left_ms > 0x7fffffff ? 0x7fffffff : (int)left_ms;
    /* device copies finish without an fd to sleep on: poll meanwhile */
    int busy = c->dev_active && rm__stage_busy(c);
    if (progress_all(c, busy ? 0 : left) != RM_OK) return failed(c);
    if (busy) sched_yield();
    if (req->done + req->ctl_moved != mark) {
      mark = req->done + req->ctl_moved;
      last = rm__now_ns();
    }
  }
}

rm_status_t rm__progress(rm_comm_t *c, int timeout_ms)
{
  if (rm_comm_status(c) != RM_OK || progress_all(c, timeout_ms) != RM_OK)
    return failed(c);
  return RM_OK;
}

int rm__peer_left(const rm_comm_t *c, int peer)
{
  const rm__transport_ops_t *t = rm__conn_type(c, peer);
  return t != NULL && t->left != NULL && t->left(c, peer);
}

rm_status_t rm__waitall(rm_comm_t *c, rm__req_t *const *reqs, int n)
{
  for (int i = 0; i < n; i++)
    if (reqs[i] != NULL) RM_CHECK(rm__wait(c, reqs[i]));
  return RM_OK;
}

rm_status_t rm__test(rm_comm_t *c, rm__req_t *req, int *done)
{
  *done = 0;
  if (!req->complete) {
    if (rm_comm_status(c) != RM_OK || progress_all(c, 0) != RM_OK ||
        (c->dev_active && rm__stage_progress(c) != RM_OK))
      return failed(c);
  }
  *done = req->complete;
  return req->complete ? req->status : RM_OK;
}

rm_status_t rm__sendrecv(rm_comm_t *c, int send_peer, const void *sbuf,
                         size_t slen, uint64_t stag, int recv_peer, void *rbuf,
                         size_t rlen, uint64_t rtag)
{
  rm__req_t sreq, rreq;
  rm__req_t *reqs[2] = {NULL, NULL};

  /* validate both sides first: a failed second post must not leave the
   * first request queued on this stack frame */
  if (send_peer >= c->world || recv_peer >= c->world ||
      (send_peer >= 0 && send_peer == c->rank) ||
      (recv_peer >= 0 && recv_peer == c->rank) ||
      (send_peer >= 0 && sbuf == NULL && slen > 0) ||
      (recv_peer >= 0 && rbuf == NULL && rlen > 0))
    return RM_ERR_INVALID_ARG;
  if (recv_peer >= 0) {
    RM_CHECK(rm__irecv(c, recv_peer, rbuf, rlen, rtag, &rreq));
    reqs[0] = &rreq;
  }
  if (send_peer >= 0) {
    RM_CHECK(rm__isend(c, send_peer, sbuf, slen, stag, &sreq));
    reqs[1] = &sreq;
  }
  return rm__waitall(c, reqs, 2);
}
