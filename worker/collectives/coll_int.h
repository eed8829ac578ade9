/*
 * coll_int.h - helpers shared by the algorithm files of worker/collectives/.
 *
 * Block layout: a vector of `count` elements split over n blocks gives block
 * i the range [rm__blk_off(count, n, i), + rm__blk_len(count, n, i)); the
 * first count % n blocks are one element longer. Every rank computes the same
 * layout, so sender and receiver agree on every length and tag (the tag of a
 * message is the element offset of the data it carries).
 *
 * Segmented receive stream (rm__rstream_t): receives `count` elements from one
 * peer as consecutive segments of `seg` elements into a ring of `nslots`
 * scratch slots, keeping nslots-1 receives posted, so the caller reduces one
 * segment while the next ones arrive:
 *
 *   rm__rstream_start(c, &rs, peer, count, off, esz, seg, slots, nslots);
 *   while (rs.next < nseg) {
 *     RM_CHECK(rm__rstream_next(c, &rs, &data, &n, &at));  // wait segment k
 *     rm__mreduce(c, red, buf + at * esz, data, n);          // consume it
 *   }                                                       // before next()
 *
 * The segment is consumed before the next call: next() reposts the slot the
 * previous segment used.
 */
#ifndef RM_WORKER_COLLECTIVES_COLL_INT_H
#define RM_WORKER_COLLECTIVES_COLL_INT_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/collectives.h"

#define RM__RSTREAM_SLOTS 4 /* 3 receives in flight while one is reduced */

static inline size_t rm__blk_off(size_t count, int n, int i)
{
  size_t base = count / (size_t)n, rem = count % (size_t)n, ui = (size_t)i;
  return ui * base + (ui < rem ? ui : rem);
}

static inline size_t rm__blk_len(size_t count, int n, int i)
{
  return count / (size_t)n + ((size_t)i < count % (size_t)n ? 1 : 0);
}

static inline size_t rm__div_up(size_t a, size_t b) { return (a + b - 1) / b; }

/* Segment size in elements of esz bytes (RINGMASTER_RING_SEGMENT_BYTES). */
size_t rm__seg_elems(size_t esz);

typedef struct rm__rstream {
  int peer;
  size_t count, seg, esz;
  uint64_t off;      /* element offset of element 0 (tags) */
  size_t nseg;       /* segments in all */
  size_t next;       /* next segment next() returns */
  size_t posted;     /* segments posted so far */
  int nslots;
  char *slots;       /* nslots * seg * esz bytes, borrowed */
  rm__req_t req[RM__RSTREAM_SLOTS];
} rm__rstream_t;

rm_status_t rm__rstream_start(rm_comm_t *c, rm__rstream_t *rs, int peer,
                              size_t count, uint64_t off, size_t esz,
                              size_t seg, void *slots, int nslots);
/* Wait for the next segment; OUT: its data, length and element offset
 * (relative to element 0 of the stream, i.e. add to the base pointer). */
rm_status_t rm__rstream_next(rm_comm_t *c, rm__rstream_t *rs, void **data,
                             size_t *n, size_t *at);

/* Post `count` elements at buf to peer as segments of seg elements (tags
 * off + segment start). reqs holds rm__div_up(count, seg) requests. */
rm_status_t rm__send_segs(rm_comm_t *c, int peer, const void *buf,
                          size_t count, uint64_t off, size_t esz, size_t seg,
                          rm__req_t *reqs);

/* rm__send_segs with the segment size rm__recv_reduce uses, then wait. */
rm_status_t rm__send_all(rm_comm_t *c, int peer, const void *buf, size_t count,
                         uint64_t off, size_t esz);

/* Receive count elements from peer and reduce them into dst with red, as a
 * segmented stream; when wait_sends is not NULL, segment k's send
 * wait_sends[k] is completed before reducing into segment k (the vector
 * being reduced into is also being sent, as in the butterfly). */
rm_status_t rm__recv_reduce(rm_comm_t *c, int peer, void *dst, size_t count,
                            uint64_t off, size_t esz, const rm__reducer_t *red,
                            rm__req_t *wait_sends);

/* Requests for n sends, zeroed; free with free(). NULL on ENOMEM. */
rm__req_t *rm__reqs_new(size_t n);

/* Largest power of two <= n (n >= 1). */
static inline int rm__pow2_floor(int n)
{
  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  return p;
}

/* ---- fold.c: non-power-of-two worlds for halving-doubling / butterfly ----
 * p = largest power of two <= N, rem = N - p. Ranks r < 2 rem pair up
 * (even r, odd r+1): the even one sends its vector to the odd one, which
 * reduces it and represents both as virtual rank r/2; ranks r >= 2 rem are
 * virtual rank r - rem. rm__fold_in returns the virtual rank, or -1 for an
 * even rank that sits out; rm__fold_out sends the result back to it. */
int rm__fold_vrank(int rank, int world);
int rm__fold_real(int vrank, int world);
rm_status_t rm__fold_in(rm_comm_t *c, void *buf, size_t count, size_t esz,
                        const rm__reducer_t *red, int *vrank);
rm_status_t rm__fold_out(rm_comm_t *c, void *buf, size_t count, size_t esz);

/* ---- tree.c: binomial trees rooted anywhere (rm_reduce, rm_broadcast) ----
 * rm__tree_reduce: src is this rank's input; acc receives the partial
 * result (may equal src; ignored on leaves; on root it is the result).
 * rm__tree_bcast: root's buf goes to every rank's buf. Both pipelined in
 * segments. */
rm_status_t rm__tree_reduce(rm_comm_t *c, const void *src, void *acc,
                            size_t count, size_t esz, const rm__reducer_t *red,
                            int root);
rm_status_t rm__tree_bcast(rm_comm_t *c, void *buf, size_t count, size_t esz,
                           int root);

/* ---- select.c ---- */
rm_status_t rm__allreduce_resolve(rm_comm_t *c, rm_algo_t algo, size_t bytes,
                                  rm_algo_t *out, double *predicted_us);

/* ---- ring.c: the two halves of the ring on their own ---- */
rm_status_t rm__ring_reduce_scatter(rm_comm_t *c, void *buf, size_t count,
                                    rm_dtype_t dt, const rm__reducer_t *red);
rm_status_t rm__ring_allgather(rm_comm_t *c, void *buf, size_t count,
                               rm_dtype_t dt);

#endif
