/*
 * ring.c - ring all-reduce: reduce-scatter then all-gather, pipelined.
 *
 * Chunks. The vector of `count` elements is cut into N chunks (coll_int.h
 * block layout; chunk sizes differ by at most one element, some may be empty
 * when count < N). Each chunk is cut into segments of S elements
 * (RINGMASTER_RING_SEGMENT_BYTES / element size, default 256 KiB); every chunk
 * has nseg = ceil(ceil(count / N) / S) segment slots, the tail ones possibly
 * short or empty (empty ones are skipped by sender and receiver alike).
 *
 * Steps. 2(N-1) steps t = 0 .. 2N-3; at step t rank r
 *   sends    chunk (r - t - 1) mod N   to   right = r + 1
 *   receives chunk (r - t - 2) mod N   from left  = r - 1
 * Steps t < N-1 are the reduce-scatter: the received segment lands in a
 * scratch slot and is reduced into the chunk. After step N-2 rank r holds
 * chunk r fully reduced. Steps t >= N-1 are the all-gather: the received
 * segment lands directly in the buffer. The chunk received at step t is the
 * one sent at step t+1 (same formula), so the whole collective is one stream
 * of units u = t * nseg + j (segment j of step t), and unit u's send becomes
 * possible as soon as unit u - nseg has been received (and reduced).
 *
 * Pipeline. The sends of step 0 are posted at once (they read the input);
 * then for every unit u in order:
 *   wait receive u;  post receive u + L (lookahead L = 3, slot ring of 4:
 *   the slot of u - 1, already reduced);  reduce u (reduce-scatter steps);
 *   post the send of unit u + nseg.
 * So the next segments arrive (kernel socket buffers, the progress engine)
 * while one is reduced. Each connection carries messages in the same order
 * on both ends (units in increasing order), so FIFO matching holds; the tag
 * of each message is the element offset of its segment.
 *
 * Hazard. An all-gather receive of step t writes chunk (r-t-2) segment j,
 * which the reduce-scatter send of step t+1-N read: that send is waited for
 * before the receive is posted (it finished long before in practice).
 *
 * Reduce-scatter and all-gather alone (rm_reduce_scatter, rm_allgather) run
 * steps [0, N-1) and [N-1, 2N-2) of the same stream.
 *
 * Cost: 2(N-1) alpha + 2 (N-1)/N n beta + (N-1)/N n gamma; each rank sends
 * 2(N-1)/N of the data, the bandwidth-optimal amount.
 */
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_int.h"
#include "rm_check.h"

#define RING_SLOTS 4 /* lookahead 3 */

typedef struct ring {
  rm_comm_t *c;
  char *buf;
  size_t count, esz, seg, nseg;
  int n, r, left, right;
  int t0, t1; /* steps [t0, t1) */
  const rm__reducer_t *red;
  char *slots;
  rm__req_t *sends;           /* one per unit */
  rm__req_t recvs[RING_SLOTS];
} ring_t;

/* Range of segment j of the chunk handled at step t (send: d = 1, receive:
 * d = 2). Returns its length; *off = element offset. */
static size_t unit_range(const ring_t *g, int t, size_t j, int d, size_t *off)
{
  int chunk = (int)(((long)g->r - t - d) % g->n);
  if (chunk < 0)
    chunk += g->n;
  size_t c0 = rm__blk_off(g->count, g->n, chunk);
  size_t clen = rm__blk_len(g->count, g->n, chunk);
  size_t s0 = j * g->seg;
  *off = c0 + s0;
  if (s0 >= clen)
    return 0;
  return clen - s0 < g->seg ? clen - s0 : g->seg;
}

static rm_status_t post_send(ring_t *g, size_t u)
{
  int t = g->t0 + (int)(u / g->nseg);
  size_t off, len = unit_range(g, t, u % g->nseg, 1, &off);
  if (len == 0)
    return RM_OK;
  return rm__isend(g->c, g->right, g->buf + off * g->esz, len * g->esz, off,
                   &g->sends[u]);
}

static rm_status_t post_recv(ring_t *g, size_t u)
{
  int t = g->t0 + (int)(u / g->nseg);
  size_t off, len = unit_range(g, t, u % g->nseg, 2, &off);
  void *dst;
  if (len == 0)
    return RM_OK;
  if (t < g->n - 1) {
    dst = g->slots + (u % RING_SLOTS) * g->seg * g->esz;
  } else {
    /* all-gather: wait the reduce-scatter send that read this range */
    long hazard = (long)u - (long)(g->n - 1) * (long)g->nseg;
    if (hazard >= 0 && g->sends[hazard].buf)
      RM_CHECK(rm__wait(g->c, &g->sends[hazard]));
    dst = g->buf + off * g->esz;
  }
  return rm__irecv(g->c, g->left, dst, len * g->esz, off, &g->recvs[u % RING_SLOTS]);
}

/* Process unit u: wait, repost lookahead, reduce, forward. */
static rm_status_t step_unit(ring_t *g, size_t u, size_t units)
{
  int t = g->t0 + (int)(u / g->nseg);
  size_t off, len = unit_range(g, t, u % g->nseg, 2, &off);
  if (len > 0)
    RM_CHECK(rm__wait(g->c, &g->recvs[u % RING_SLOTS]));
  if (u + RING_SLOTS - 1 < units)
    RM_CHECK(post_recv(g, u + RING_SLOTS - 1));
  if (len > 0 && t < g->n - 1)
    RM_CHECK(rm__mreduce(g->c, g->red, g->buf + off * g->esz,
                         g->slots + (u % RING_SLOTS) * g->seg * g->esz, len));
  if (u + g->nseg < units)
    RM_CHECK(post_send(g, u + g->nseg));
  return RM_OK;
}

static rm_status_t ring_run(ring_t *g)
{
  rm_status_t st = RM_OK;
  size_t units = (size_t)(g->t1 - g->t0) * g->nseg;
  void *scratch = NULL;
  if (units == 0)
    return RM_OK;
  g->left = (g->r + g->n - 1) % g->n;
  g->right = (g->r + 1) % g->n;
  if (g->t0 < g->n - 1)
    RM_CHECK(rm__scratch(g->c, RING_SLOTS * g->seg * g->esz, &scratch));
  g->slots = scratch;
  g->sends = rm__reqs_new(units);
  if (!g->sends)
    return RM_ERR_NOMEM;
  memset(g->recvs, 0, sizeof g->recvs);
  for (size_t u = 0; u < RING_SLOTS - 1 && u < units; u++)
    RM_CHECK_GOTO(post_recv(g, u), st, out);
  for (size_t u = 0; u < g->nseg; u++)
    RM_CHECK_GOTO(post_send(g, u), st, out);
  for (size_t u = 0; u < units; u++)
    RM_CHECK_GOTO(step_unit(g, u, units), st, out);
  for (size_t u = 0; u < units; u++)
    if (g->sends[u].buf)
      RM_CHECK_GOTO(rm__wait(g->c, &g->sends[u]), st, out);
out:
  free(g->sends);
  return st;
}

/* Run ring steps [t0, t1) over buf (count elements in N chunks). */
static rm_status_t ring_steps(rm_comm_t *c, void *buf, size_t count,
                              rm_dtype_t dt, const rm__reducer_t *red, int t0, int t1)
{
  ring_t g;
  memset(&g, 0, sizeof g);
  g.c = c;
  g.buf = buf;
  g.count = count;
  g.esz = rm_dtype_size(dt);
  g.n = rm_comm_world(c);
  g.r = rm_comm_rank(c);
  g.red = red;
  g.t0 = t0;
  g.t1 = t1;
  g.seg = rm__seg_elems(g.esz);
  size_t maxchunk = rm__div_up(count, (size_t)g.n);
  if (maxchunk == 0)
    return RM_OK;
  if (g.seg > maxchunk)
    g.seg = maxchunk;
  g.nseg = rm__div_up(maxchunk, g.seg);
  return ring_run(&g);
}

rm_status_t rm__allreduce_ring(rm_comm_t *c, void *buf, size_t count,
                               rm_dtype_t dt, const rm__reducer_t *red)
{
  int n = rm_comm_world(c);
  return ring_steps(c, buf, count, dt, red, 0, 2 * (n - 1));
}

rm_status_t rm__ring_reduce_scatter(rm_comm_t *c, void *buf, size_t count,
                                    rm_dtype_t dt, const rm__reducer_t *red)
{
  int n = rm_comm_world(c);
  return ring_steps(c, buf, count, dt, red, 0, n - 1);
}

rm_status_t rm__ring_allgather(rm_comm_t *c, void *buf, size_t count,
                               rm_dtype_t dt)
{
  int n = rm_comm_world(c);
  return ring_steps(c, buf, count, dt, NULL, n - 1, 2 * (n - 1));
}
