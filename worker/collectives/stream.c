/*
 * stream.c - segmented send / receive-and-reduce helpers used by the
 * halving-doubling, butterfly and tree algorithms (see coll_int.h).
 *
 * Receive stream state per segment k (nslots = S, lookahead L = S - 1):
 *
 *   posted (receive into slot k % S) -> arrived (next() returned it)
 *   -> consumed (the caller's next call to next() reposts that slot for
 *      segment k + S)
 *
 * Invariant: at most L receives are posted and not yet returned, so the slot
 * of the segment being consumed is never the target of a posted receive.
 */
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_int.h"
#include "rm_check.h"
#include "rm_param.h"

RM_PARAM(seg_bytes, "RINGMASTER_RING_SEGMENT_BYTES", 256 * 1024)

size_t rm__seg_elems(size_t esz)
{
  int64_t b = rm__param_seg_bytes();
  size_t n = b > 0 ? (size_t)b / esz : 0;
  return n ? n : 1;
}

rm__req_t *rm__reqs_new(size_t n)
{
  return calloc(n ? n : 1, sizeof(rm__req_t));
}

static rm_status_t rstream_post(rm_comm_t *c, rm__rstream_t *rs)
{
  size_t k = rs->posted, start = k * rs->seg;
  size_t n = rs->count - start < rs->seg ? rs->count - start : rs->seg;
  int slot = (int)(k % (size_t)rs->nslots);
  rs->posted++;
  return rm__irecv(c, rs->peer, rs->slots + (size_t)slot * rs->seg * rs->esz,
                   n * rs->esz, rs->off + start, &rs->req[slot]);
}

rm_status_t rm__rstream_start(rm_comm_t *c, rm__rstream_t *rs, int peer,
                              size_t count, uint64_t off, size_t esz,
                              size_t seg, void *slots, int nslots)
{
  memset(rs, 0, sizeof *rs);
  rs->peer = peer;
  rs->count = count;
  rs->seg = seg;
  rs->esz = esz;
  rs->off = off;
  rs->nseg = rm__div_up(count, seg);
  rs->nslots = nslots > RM__RSTREAM_SLOTS ? RM__RSTREAM_SLOTS : nslots;
  rs->slots = slots;
  while (rs->posted < rs->nseg && rs->posted < (size_t)rs->nslots - 1)
    RM_CHECK(rstream_post(c, rs));
  return RM_OK;
}

rm_status_t rm__rstream_next(rm_comm_t *c, rm__rstream_t *rs, void **data,
                             size_t *n, size_t *at)
{
  size_t k = rs->next;
  int slot = (int)(k % (size_t)rs->nslots);
  RM_CHECK(rm__wait(c, &rs->req[slot]));
  /* slot of segment k-1 is consumed now: post segment k + L into it */
  if (rs->posted < rs->nseg)
    RM_CHECK(rstream_post(c, rs));
  *at = k * rs->seg;
  *n = rs->count - *at < rs->seg ? rs->count - *at : rs->seg;
  *data = rs->slots + (size_t)slot * rs->seg * rs->esz;
  rs->next++;
  return RM_OK;
}

rm_status_t rm__send_segs(rm_comm_t *c, int peer, const void *buf,
                          size_t count, uint64_t off, size_t esz, size_t seg,
                          rm__req_t *reqs)
{
  const char *p = buf;
  for (size_t k = 0, at = 0; at < count; k++, at += seg) {
    size_t n = count - at < seg ? count - at : seg;
    RM_CHECK(rm__isend(c, peer, p + at * esz, n * esz, off + at, &reqs[k]));
  }
  return RM_OK;
}

rm_status_t rm__recv_reduce(rm_comm_t *c, int peer, void *dst, size_t count,
                            uint64_t off, size_t esz, const rm__reducer_t *red,
                            rm__req_t *wait_sends)
{
  size_t seg = rm__seg_elems(esz);
  int nslots = RM__RSTREAM_SLOTS;
  rm__rstream_t rs;
  void *slots, *data;
  size_t n, at;
  if (count == 0)
    return RM_OK;
  if (seg > count)
    seg = count;
  if (rm__div_up(count, seg) < (size_t)nslots) /* small: fewer slots */
    nslots = (int)rm__div_up(count, seg) + 1;
  RM_CHECK(rm__scratch(c, (size_t)nslots * seg * esz, &slots));
  RM_CHECK(rm__rstream_start(c, &rs, peer, count, off, esz, seg, slots, nslots));
  while (rs.next < rs.nseg) {
    size_t k = rs.next;
    RM_CHECK(rm__rstream_next(c, &rs, &data, &n, &at));
    if (wait_sends)
      RM_CHECK(rm__wait(c, &wait_sends[k]));
    RM_CHECK(rm__mreduce(c, red, (char *)dst + at * esz, data, n));
  }
  return RM_OK;
}

rm_status_t rm__send_all(rm_comm_t *c, int peer, const void *buf, size_t count,
                         uint64_t off, size_t esz)
{
  size_t seg = rm__seg_elems(esz);
  size_t nseg = rm__div_up(count, seg);
  rm_status_t st = RM_OK;
  rm__req_t *reqs;
  if (count == 0)
    return RM_OK;
  reqs = rm__reqs_new(nseg);
  if (!reqs)
    return RM_ERR_NOMEM;
  RM_CHECK_GOTO(rm__send_segs(c, peer, buf, count, off, esz, seg, reqs), st, out);
  for (size_t k = 0; k < nseg; k++)
    RM_CHECK_GOTO(rm__wait(c, &reqs[k]), st, out);
out:
  free(reqs);
  return st;
}
