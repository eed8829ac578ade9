/*
 * barrier.c - named barriers with deadlines.
 *
 * A barrier is (job, generation, name). The first member to arrive opens it
 * with deadline = now + timeout (the caller's, else the job's
 * barrier_timeout_ms); every arrival parks its call.
 *
 *   OPEN --(all members of the generation arrived)--> RELEASED
 *   OPEN --(deadline | member lost/failed | job stopped)--> BROKEN
 *
 * On either transition every parked waiter is answered; a BROKEN answer
 * lists the ranks that had not arrived with what each last reported (step,
 * state, ms since its last call) - the "who is hanging" a stuck job needs.
 * Closed barriers are stored (table barriers) and kept in memory (the newest
 * 64). A member arriving at a name whose barrier already BROKE in this
 * generation is answered at once with that outcome; a name that was RELEASED
 * opens a new instance (names may be reused round after round).
 *
 * PAYLOADS (the relay of secure aggregation's public keys and
 * self-mask seed material; the coordinator only passes them on). An arrival
 * may carry up to RM__BARRIER_PAYLOAD_MAX (1024) bytes. The contract:
 *   P1 one length per instance: the first arrival fixes it (0 = none);
 *      every other arrival at that instance carries the same length, else
 *      it is refused (INVALID_ARGUMENT naming both lengths).
 *   P2 RELEASED answers carry every member's payload in rank order
 *      (BarrierResponse.payloads, `expected` entries) when the length is
 *      > 0, the same bytes to every waiter; BROKEN answers carry none.
 *   P3 a worker arriving again at an OPEN instance (a retry after a
 *      reconnect) with the same payload is one arrival, parked again; with
 *      a different payload it is refused ("replayed arrival with a
 *      different payload") and the stored payload stays: a member cannot
 *      swap its key after others may have seen the first one announced.
 *   P4 an old or wrong generation never gets here (rpc.c check_worker:
 *      FAILED_PRECONDITION, as for every barrier); a barrier belongs to one
 *      generation, so keys of one generation are never handed to another.
 *   P5 memory only: never in SQLite (the barriers row keeps the outcome,
 *      rm__store_barrier), never in an event or a log line; wiped and freed
 *      in close_barrier right after the answers are queued (each queued
 *      answer holds its own reference to the packed bytes, which the RPC
 *      layer frees once sent), so nothing of it outlives the instance.
 * The answers are queued under the lock and sent after COMMIT like every
 * answer (commit.c), so a release is durable before any member learns it.
 */
#define _DEFAULT_SOURCE /* explicit_bzero: a wipe the compiler keeps */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_int.h"
#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"

#define KEEP_CLOSED 64

/* Answer one parked Barrier call (rpc/waiters.c formats it), counting its
 * wait. */
static void answer(rm_coord_t *c, rm__job_t *j, rm__barrier_t *b,
                   rm__park_t *p)
{
  if (p->arrived_ns) {
    c->ctr.barrier_wait_seconds_sum += (double)(rm__now_ns() - p->arrived_ns) / 1e9;
    c->ctr.barrier_wait_count++;
  }
  rm__answer_barrier(c, j, b, p);
}

/* P5: nothing of the payloads stays once the answers are queued; the
 * packed answer (which holds them too) was only shared by those answers. */
static void drop_payloads(rm__barrier_t *b)
{
  if (b->payloads) {
    explicit_bzero(b->payloads, (size_t)b->expected * (size_t)b->payload_len);
    free(b->payloads);
    b->payloads = NULL;
  }
  rm__blob_release(b->answer);
  b->answer = NULL;
}

void rm__barrier_free(rm__barrier_t *b)
{
  drop_payloads(b);
  free(b->missing);
  free(b->here);
  free(b);
}

static void close_barrier(rm_coord_t *c, rm__job_t *j, rm__barrier_t *b,
                          rm_barrier_state_t st, const char *reason)
{
  int64_t now_ns = rm__now_ns();
  b->state = st;
  b->closed_ms = rm__wall_ms();
  snprintf(b->reason, sizeof b->reason, "%s", reason);
  b->missing = rm__xcalloc((size_t)(b->expected - b->arrived) + 1,
                           sizeof *b->missing);
  for (int r = 0; r < b->expected; r++) {
    if (b->here[r]) continue;
    rm__worker_t *w = r < j->nmembers ? &j->w[j->members[r]] : NULL;
    rm_barrier_member_t *m = &b->missing[b->n_missing++];
    m->rank = r;
    m->step = w ? w->step : 0;
    m->state = w ? w->state : RM_WORKER_LOST;
    m->ms_since_heartbeat = w ? (now_ns - w->last_ns) / 1000000 : -1;
  }
  if (st == RM_BARRIER_RELEASED) c->ctr.barriers_released_total++;
  else c->ctr.barriers_broken_total++;
  rm__store_barrier(c->store, j, b);
  if (st == RM_BARRIER_BROKEN) {
    char ranks[96] = "";
    size_t len = 0;
    for (int i = 0; i < b->n_missing && len + 12 < sizeof ranks; i++)
      len += (size_t)snprintf(ranks + len, sizeof ranks - len, "%s%d",
                              i ? "," : "", b->missing[i].rank);
    rm__event(c, j, "barrier_broken", -1, "barrier '%s' broken (%s): %d of "
              "%d arrived, missing ranks %s", b->name, reason, b->arrived,
              b->expected, ranks);
  }
  for (rm__park_t *p = j->parked.next, *n; p != &j->parked; p = n) {
    n = p->next;
    if (p->kind == RM__PARK_BARRIER && p->barrier == b) answer(c, j, b, p);
  }
  free(b->here);
  b->here = NULL;
  drop_payloads(b); /* P5: the answers are queued */
}

static void prune(rm__job_t *j)
{
  int closed = 0;
  for (rm__barrier_t **pp = &j->barriers; *pp;) {
    rm__barrier_t *b = *pp;
    if (b->state != RM_BARRIER_OPEN && ++closed > KEEP_CLOSED) {
      *pp = b->next;
      rm__barrier_free(b);
      continue;
    }
    pp = &b->next;
  }
}

/* P1 and P3 for w's arrival at the open instance b: 0 = take it, -1 =
 * refused (why). */
static int payload_refused(const rm__barrier_t *b, const rm__worker_t *w,
                           const uint8_t *payload, size_t len, char *why, size_t whylen)
{
  if (b->payload_len >= 0 && len != (size_t)b->payload_len) {
    snprintf(why, whylen, "barrier '%s': payload of %zu bytes, but this barrier's "
             "arrivals carry %d bytes each", b->name, len, b->payload_len);
    return -1;
  }
  if (b->here[w->rank] && len &&
      memcmp(b->payloads + (size_t)w->rank * len, payload, len) != 0) {
    snprintf(why, whylen, "barrier '%s': rank %d: replayed arrival with a different "
             "payload (the first one stands)", b->name, w->rank);
    return -1;
  }
  return 0;
}

static rm__barrier_t *barrier_open(rm_coord_t *c, rm__job_t *j, const char *name,
                                   int timeout_ms, int64_t now_ns)
{
  rm__barrier_t *b = rm__xcalloc(1, sizeof *b);
  if (timeout_ms <= 0) timeout_ms = rm__job_barrier_ms(c, j);
  snprintf(b->name, sizeof b->name, "%s", name);
  b->generation = j->info.generation;
  b->expected = j->nmembers;
  b->here = rm__xcalloc((size_t)j->nmembers, 1);
  b->payload_len = -1;
  b->opened_ms = rm__wall_ms();
  b->deadline_ms = b->opened_ms + timeout_ms;
  b->deadline_ns = now_ns + (int64_t)timeout_ms * 1000000;
  b->next = j->barriers;
  j->barriers = b;
  prune(j);
  return b;
}

rm_status_t rm__barrier_arrive(rm_coord_t *c, rm__job_t *j, rm__worker_t *w,
                               const char *name, int timeout_ms, const uint8_t *payload,
                               size_t len, rm__park_t *p, char *why, size_t whylen)
{
  rm__barrier_t *b = NULL;
  int64_t now_ns = rm__now_ns();
  if (len > RM__BARRIER_PAYLOAD_MAX) {
    snprintf(why, whylen, "barrier '%s': payload of %zu bytes, at most %d", name, len,
             RM__BARRIER_PAYLOAD_MAX);
    return RM_ERR_INVALID_ARG;
  }
  for (rm__barrier_t *x = j->barriers; x && !b; x = x->next)
    if (x->generation == j->info.generation && !strcmp(x->name, name) &&
        x->state != RM_BARRIER_RELEASED)
      b = x;
  if (b && b->state == RM_BARRIER_OPEN && payload_refused(b, w, payload, len, why, whylen))
    return RM_ERR_INVALID_ARG;
  p->kind = RM__PARK_BARRIER;
  p->arrived_ns = now_ns;
  if (b && b->state == RM_BARRIER_BROKEN) {
    p->arrived_ns = 0;
    answer(c, j, b, p);
    return RM_OK;
  }
  if (!b) b = barrier_open(c, j, name, timeout_ms, now_ns);
  if (b->payload_len < 0) { /* P1: the first arrival fixes the length */
    b->payload_len = (int)len;
    if (len) b->payloads = rm__xcalloc((size_t)b->expected, len);
  }
  p->barrier = b;
  rm__park_link(j, p);
  if (!b->here[w->rank]) {
    b->here[w->rank] = 1;
    b->arrived++;
    if (len) memcpy(b->payloads + (size_t)w->rank * len, payload, len);
  }
  if (b->arrived == b->expected)
    close_barrier(c, j, b, RM_BARRIER_RELEASED, "all members arrived");
  return RM_OK;
}

void rm__barrier_break_all(rm_coord_t *c, rm__job_t *j, const char *reason)
{
  for (rm__barrier_t *b = j->barriers; b; b = b->next)
    if (b->state == RM_BARRIER_OPEN) close_barrier(c, j, b, RM_BARRIER_BROKEN, reason);
}

void rm__barrier_tick(rm_coord_t *c, rm__job_t *j, int64_t now_ns)
{
  for (rm__barrier_t *b = j->barriers; b; b = b->next)
    if (b->state == RM_BARRIER_OPEN && now_ns >= b->deadline_ns) {
      char why[64];
      snprintf(why, sizeof why, "deadline after %lld ms",
               (long long)(b->deadline_ms - b->opened_ms));
      close_barrier(c, j, b, RM_BARRIER_BROKEN, why);
    }
}

static size_t barriers_size(rm__job_t *j, size_t *nb)
{
  size_t bytes = 0;
  *nb = 0;
  for (rm__barrier_t *b = j->barriers; b; b = b->next) {
    int miss = b->state == RM_BARRIER_OPEN ? b->expected - b->arrived : b->n_missing;
    bytes += sizeof(rm_barrier_info_t) + (size_t)miss * sizeof(rm_barrier_member_t);
    (*nb)++;
  }
  return bytes;
}

static void fill_one(rm__job_t *j, rm__barrier_t *b, rm_barrier_info_t *o,
                     rm_barrier_member_t *m, int64_t now_ns)
{
  memset(o, 0, sizeof *o);
  memcpy(o->name, b->name, sizeof o->name);
  o->generation = b->generation;
  o->state = b->state;
  o->opened_ms = b->opened_ms;
  o->deadline_ms = b->deadline_ms;
  o->closed_ms = b->closed_ms;
  o->arrived = b->arrived;
  o->expected = b->expected;
  memcpy(o->reason, b->reason, sizeof o->reason);
  o->missing = m;
  if (b->state != RM_BARRIER_OPEN) {
    memcpy(m, b->missing, (size_t)b->n_missing * sizeof *m);
    o->n_missing = (size_t)b->n_missing;
    return;
  }
  for (int r = 0; r < b->expected; r++) {
    if (b->here[r]) continue;
    rm__worker_t *w = r < j->nmembers ? &j->w[j->members[r]] : NULL;
    m[o->n_missing].rank = r;
    m[o->n_missing].step = w ? w->step : 0;
    m[o->n_missing].state = w ? w->state : RM_WORKER_LOST;
    m[o->n_missing].ms_since_heartbeat = w ? (now_ns - w->last_ns) / 1000000 : -1;
    o->n_missing++;
  }
}

rm_status_t rm_coord_job_barriers(rm_coord_t *c, uint64_t job_id,
                                  rm_barrier_info_t **out, size_t *n)
{
  rm_status_t st = RM_OK;
  rm_job_info_t info;
  rm__lock(c);
  rm__job_t *j = rm__job_find(c, job_id);
  *out = NULL;
  *n = 0;
  if (!j) {
    st = rm__store_job_get(c->store, job_id, &info);
    if (st == RM_OK) *out = rm__xcalloc(1, sizeof **out);
    goto out;
  }
  size_t nb, bytes = barriers_size(j, &nb);
  char *blk = rm__xcalloc(1, bytes + 1);
  rm_barrier_info_t *arr = (rm_barrier_info_t *)blk;
  rm_barrier_member_t *m = (rm_barrier_member_t *)(blk + nb * sizeof *arr);
  int64_t now = rm__now_ns();
  size_t k = 0;
  for (int pass = 0; pass < 2; pass++) /* open ones first */
    for (rm__barrier_t *b = j->barriers; b; b = b->next) {
      if ((b->state == RM_BARRIER_OPEN) != (pass == 0)) continue;
      fill_one(j, b, &arr[k], m, now);
      m += arr[k].n_missing;
      k++;
    }
  *out = arr;
  *n = k;
out:
  rm__commit(c);
  return st;
}
