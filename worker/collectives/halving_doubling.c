/*
 * halving_doubling.c - Rabenseifner all-reduce: recursive-halving
 * reduce-scatter, then recursive-doubling all-gather.
 *
 * World. p = largest power of two <= N; the N - p extra ranks are folded in
 * first and out last (fold.c); the rest works on virtual ranks v = 0..p-1.
 *
 * Blocks. The vector is cut into p blocks (coll_int.h layout). A rank's
 * "range" is a run of consecutive blocks [lo, hi), initially [0, p).
 *
 * Reduce-scatter, log2 p steps, mask = p/2, p/4, ..., 1:
 *   partner v ^ mask; mid = (lo + hi) / 2;
 *   (v & mask) == 0: keep [lo, mid), send [mid, hi) to the partner
 *   (v & mask) != 0: keep [mid, hi), send [lo, mid)
 *   The kept half is received from the partner as a segmented stream into
 *   scratch slots and reduced segment by segment while the rest arrives
 *   (the sent half and the kept half are disjoint, so no hazard).
 *   After the last step rank v holds block v fully reduced.
 * All-gather, log2 p steps, mask = 1, 2, ..., p/2:
 *   partner v ^ mask owns the adjacent run of the same size; exchange runs
 *   (one message each way, received straight into the buffer); the range
 *   doubles.
 *
 * Tags: element offset of each segment / run in the vector.
 *
 * Cost (power of two): 2 log2(p) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma;
 * with the fold add 2 alpha + 2 n beta + n gamma.
 */
#include <stdlib.h>

#include "collectives/coll_int.h"
#include "rm_check.h"

typedef struct hd {
  rm_comm_t *c;
  char *buf;
  size_t count, esz;
  int p, v;
  const rm__reducer_t *red;
  rm__req_t *reqs; /* segment sends of one step */
} hd_t;

static size_t run_off(const hd_t *h, int blk) { return rm__blk_off(h->count, h->p, blk); }

static rm_status_t rs_step(hd_t *h, int mask, int *lo, int *hi)
{
  int mid = (*lo + *hi) / 2;
  int peer = rm__fold_real(h->v ^ mask, rm_comm_world(h->c));
  int keep_lo = (h->v & mask) ? mid : *lo, keep_hi = (h->v & mask) ? *hi : mid;
  int send_lo = (h->v & mask) ? *lo : mid, send_hi = (h->v & mask) ? mid : *hi;
  size_t so = run_off(h, send_lo), sn = run_off(h, send_hi) - so;
  size_t ko = run_off(h, keep_lo), kn = run_off(h, keep_hi) - ko;
  size_t seg = rm__seg_elems(h->esz);
  RM_CHECK(rm__send_segs(h->c, peer, h->buf + so * h->esz, sn, so, h->esz, seg, h->reqs));
  RM_CHECK(rm__recv_reduce(h->c, peer, h->buf + ko * h->esz, kn, ko, h->esz, h->red, NULL));
  for (size_t k = 0; k < rm__div_up(sn, seg); k++)
    RM_CHECK(rm__wait(h->c, &h->reqs[k]));
  *lo = keep_lo;
  *hi = keep_hi;
  return RM_OK;
}

static rm_status_t ag_step(hd_t *h, int mask, int *lo, int *hi)
{
  int width = *hi - *lo;
  int peer = rm__fold_real(h->v ^ mask, rm_comm_world(h->c));
  int plo = (h->v & mask) ? *lo - width : *hi, phi = plo + width;
  size_t mo = run_off(h, *lo), mn = run_off(h, *hi) - mo;
  size_t po = run_off(h, plo), pn = run_off(h, phi) - po;
  RM_CHECK(rm__sendrecv(h->c, peer, h->buf + mo * h->esz, mn * h->esz, mo, peer,
                        h->buf + po * h->esz, pn * h->esz, po));
  *lo = plo < *lo ? plo : *lo;
  *hi = *lo + 2 * width;
  return RM_OK;
}

rm_status_t rm__allreduce_hd(rm_comm_t *c, void *buf, size_t count,
                             rm_dtype_t dt, const rm__reducer_t *red)
{
  hd_t h = {.c = c, .buf = buf, .count = count, .esz = rm_dtype_size(dt), .red = red};
  rm_status_t st = RM_OK;
  int lo = 0, hi;
  h.p = rm__pow2_floor(rm_comm_world(c));
  hi = h.p;
  h.reqs = rm__reqs_new(rm__div_up(count, rm__seg_elems(h.esz)));
  if (!h.reqs)
    return RM_ERR_NOMEM;
  RM_CHECK_GOTO(rm__fold_in(c, buf, count, h.esz, red, &h.v), st, out);
  if (h.v >= 0) {
    for (int mask = h.p / 2; mask >= 1; mask /= 2)
      RM_CHECK_GOTO(rs_step(&h, mask, &lo, &hi), st, out);
    for (int mask = 1; mask < h.p; mask *= 2)
      RM_CHECK_GOTO(ag_step(&h, mask, &lo, &hi), st, out);
  }
  RM_CHECK_GOTO(rm__fold_out(c, buf, count, h.esz), st, out);
out:
  free(h.reqs);
  return st;
}
