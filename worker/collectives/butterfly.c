/*
 * butterfly.c - recursive doubling all-reduce: whole-vector exchange on a
 * hypercube; the latency-optimal choice for small messages.
 *
 * World. p = largest power of two <= N; the extra ranks are folded in first
 * and out last (fold.c); the rest works on virtual ranks v = 0..p-1.
 *
 * Steps. log2 p steps, mask = 1, 2, ..., p/2: partner v ^ mask; both send
 * their whole current vector and reduce the partner's into their own. After
 * step k every rank holds the reduction over its 2^(k+1)-rank subcube, after
 * the last one the full result. Both partners compute a op b and b op a,
 * equal for sum and prod (IEEE addition and multiplication commute) and for
 * min/max without NaNs.
 *
 * Segments. The vector goes as segments (tags = element offsets); the
 * partner's segments arrive into scratch slots; before reducing into
 * segment k of our own vector, our send of segment k is waited for (the
 * vector being sent is the one being reduced into).
 *
 * Cost: log2(p) (alpha + n beta + n gamma); with the fold add
 * 2 alpha + 2 n beta + n gamma.
 */
#include <stdlib.h>

#include "collectives/coll_int.h"
#include "rm_check.h"

rm_status_t rm__allreduce_butterfly(rm_comm_t *c, void *buf, size_t count,
                                    rm_dtype_t dt, const rm__reducer_t *red)
{
  size_t esz = rm_dtype_size(dt), seg = rm__seg_elems(esz);
  int n = rm_comm_world(c), p = rm__pow2_floor(n), v;
  rm_status_t st = RM_OK;
  rm__req_t *reqs = rm__reqs_new(rm__div_up(count, seg));
  if (!reqs)
    return RM_ERR_NOMEM;
  if (seg > count)
    seg = count ? count : 1;
  RM_CHECK_GOTO(rm__fold_in(c, buf, count, esz, red, &v), st, out);
  for (int mask = 1; v >= 0 && mask < p; mask *= 2) {
    int peer = rm__fold_real(v ^ mask, n);
    RM_CHECK_GOTO(rm__send_segs(c, peer, buf, count, 0, esz, seg, reqs), st, out);
    RM_CHECK_GOTO(rm__recv_reduce(c, peer, buf, count, 0, esz, red, reqs), st, out);
  }
  RM_CHECK_GOTO(rm__fold_out(c, buf, count, esz), st, out);
out:
  free(reqs);
  return st;
}
