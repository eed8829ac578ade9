/*
 * hier.c - hierarchical all-reduce for communicators that span hosts:
 * reduce-scatter inside each host (shared memory), all-reduce of one shard
 * per local rank across hosts (TCP), all-gather inside each host (Horovod's
 * hierarchical all-reduce; NCCL's rings across nodes, one per local rank).
 *
 * Hosts. A rank's host key is the <host> of its offer when the offer's
 * first token is shm:<host>/... (common/rm_transports.h), else the rank
 * itself; ranks of one key are one host (the pair rule then gives every
 * pair inside a host shared memory, and every pair across hosts whatever
 * else both offer). Every rank computes the same layout from the same
 * offers: hosts ordered by their lowest rank, ranks inside a host by rank
 * (local index li). The layout is usable when there are H >= 2 hosts with
 * the same L >= 2 ranks each; otherwise the call runs the flat ring
 * (rm__hier_shape says which, cached on the communicator; select.c asks it
 * before `auto` considers the algorithm).
 *
 * Phases on a vector of n elements, as one collective (one seq; each pair
 * of ranks talks in one order on both ends, so FIFO matching holds; tags
 * are element offsets into the whole vector):
 *   1. local ring reduce-scatter over the L ranks of the host: L-1 steps;
 *      at step s local rank li sends block (li-s) mod L to li+1 and
 *      receives block (li-s-1) mod L from li-1, reducing it in. Afterwards
 *      local rank li holds block b = (li+1) mod L summed over its host;
 *   2. across hosts, the H ranks with the same li (all holding block b)
 *      run a ring all-reduce of block b: H-1 reduce-scatter steps on its
 *      sub-blocks as in phase 1, then H-1 all-gather steps (send sub-block
 *      (h+1-s) mod H, receive (h-s) mod H straight into the buffer);
 *   3. local ring all-gather of the L blocks, as the second half of 2.
 * Every message is cut into segments (rm__seg_elems) so receiving and
 * reducing overlap the transfer (stream.c).
 *
 * Cost: 2 (L-1)/L n bytes per rank over shared memory and 2 (H-1)/H n/L
 * over the network: the flat ring sends 2 (N-1)/N n, most of it across
 * hosts when ranks of a host are neighbours on only one side of the ring.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_int.h"
#include "rm_check.h"
#include "rm_transports.h"

typedef struct layout {
  int hosts, local;     /* H and L; 0 when not usable */
  int host, li;         /* this rank's host index and local index */
  int *grp_local;       /* L ranks of this host, by li */
  int *grp_cross;       /* H ranks with this li, by host */
} layout_t;

static void key_of(const rm_comm_t *c, int r, char *key, size_t n)
{
  char host[64], nonce[64];
  const char *o = c->offers[r];
  while (*o == ' ') o++;
  if (strncmp(o, "shm:", 4) == 0 && rm_tp_offer_shm(o, host, sizeof host, nonce, sizeof nonce))
    snprintf(key, n, "h:%s", host);
  else
    snprintf(key, n, "r:%d", r);
}

/* Fills l (arrays malloc'd) or sets l->hosts = 0 when not usable. */
static rm_status_t make_layout(const rm_comm_t *c, layout_t *l)
{
  int n = c->world;
  int *host_of = calloc((size_t)n, sizeof *host_of);
  char (*keys)[80] = calloc((size_t)n, sizeof *keys);
  rm_status_t st = RM_OK;
  memset(l, 0, sizeof *l);
  if (!host_of || !keys) {
    st = RM_ERR_NOMEM;
    goto out;
  }
  for (int r = 0; r < n; r++) key_of(c, r, keys[r], sizeof keys[r]);
  int hosts = 0;
  for (int r = 0; r < n; r++) {
    host_of[r] = -1;
    for (int q = 0; q < r && host_of[r] < 0; q++)
      if (strcmp(keys[q], keys[r]) == 0) host_of[r] = host_of[q];
    if (host_of[r] < 0) host_of[r] = hosts++;
  }
  int local = 0;
  for (int r = 0; r < n; r++) local += host_of[r] == 0;
  if (hosts < 2 || local < 2 || hosts * local != n) goto out;
  for (int h = 1; h < hosts; h++) {
    int k = 0;
    for (int r = 0; r < n; r++) k += host_of[r] == h;
    if (k != local) goto out;
  }
  l->grp_local = calloc((size_t)local, sizeof *l->grp_local);
  l->grp_cross = calloc((size_t)hosts, sizeof *l->grp_cross);
  if (!l->grp_local || !l->grp_cross) {
    st = RM_ERR_NOMEM;
    goto out;
  }
  l->host = host_of[c->rank];
  for (int r = 0, k = 0; r < n; r++)
    if (host_of[r] == l->host) {
      if (r == c->rank) l->li = k;
      l->grp_local[k++] = r;
    }
  for (int h = 0; h < hosts; h++)
    for (int r = 0, k = 0; r < n; r++)
      if (host_of[r] == h && k++ == l->li) l->grp_cross[h] = r;
  l->hosts = hosts;
  l->local = local;
out:
  if (l->hosts == 0) {
    free(l->grp_local);
    free(l->grp_cross);
    l->grp_local = l->grp_cross = NULL;
  }
  free(host_of);
  free(keys);
  return st;
}

int rm__hier_shape(rm_comm_t *c, int *hosts, int *local)
{
  if (!c->hier_known) {
    layout_t l;
    if (make_layout(c, &l) != RM_OK) return 0; /* ENOMEM: try again later */
    c->hier_hosts = l.hosts;
    c->hier_local = l.local;
    c->hier_known = 1;
    free(l.grp_local);
    free(l.grp_cross);
  }
  *hosts = c->hier_hosts;
  *local = c->hier_local;
  return c->hier_hosts > 0;
}

/* Post receives of count elements at buf from peer as the segments the
 * sender's rm__send_segs cuts. */
static rm_status_t recv_segs(rm_comm_t *c, int peer, void *buf, size_t count,
                             uint64_t off, size_t esz, size_t seg, rm__req_t *reqs)
{
  char *p = buf;
  for (size_t k = 0, at = 0; at < count; k++, at += seg) {
    size_t n = count - at < seg ? count - at : seg;
    RM_CHECK(rm__irecv(c, peer, p + at * esz, n * esz, off + at, &reqs[k]));
  }
  return RM_OK;
}

static rm_status_t wait_n(rm_comm_t *c, rm__req_t *reqs, size_t n)
{
  for (size_t k = 0; k < n; k++) RM_CHECK(rm__wait(c, &reqs[k]));
  return RM_OK;
}

/* Ring over grp[0..g) (this rank = grp[me]) on the `count` elements at
 * base (element offset `off` in the whole vector): reduce-scatter steps
 * when red != NULL, then all-gather steps when gather. */
static rm_status_t group_ring(rm_comm_t *c, const int *grp, int g, int me,
                              char *base, size_t count, uint64_t off, size_t esz,
                              const rm__reducer_t *red, int gather)
{
  int right = grp[(me + 1) % g], left = grp[(me + g - 1) % g];
  size_t seg = rm__seg_elems(esz);
  size_t maxblk = rm__blk_len(count, g, 0);
  size_t cap = rm__div_up(maxblk ? maxblk : 1, seg);
  rm__req_t *sends = rm__reqs_new(cap), *recvs = rm__reqs_new(cap);
  rm_status_t st = RM_OK;
  if (!sends || !recvs) {
    st = RM_ERR_NOMEM;
    goto out;
  }
  for (int s = 0; red && s < g - 1; s++) {
    int sb = ((me - s) % g + g) % g, rb = ((me - s - 1) % g + g) % g;
    size_t so = rm__blk_off(count, g, sb), sl = rm__blk_len(count, g, sb);
    size_t ro = rm__blk_off(count, g, rb), rl = rm__blk_len(count, g, rb);
    memset(sends, 0, cap * sizeof *sends);
    RM_CHECK_GOTO(rm__send_segs(c, right, base + so * esz, sl, off + so, esz, seg, sends), st, out);
    RM_CHECK_GOTO(rm__recv_reduce(c, left, base + ro * esz, rl, off + ro, esz, red, NULL), st, out);
    RM_CHECK_GOTO(wait_n(c, sends, rm__div_up(sl, seg)), st, out);
  }
  /* after the reduce-scatter this rank holds block (me + 1) mod g */
  for (int s = 0; gather && s < g - 1; s++) {
    int sb = ((me + 1 - s) % g + g) % g, rb = ((me - s) % g + g) % g;
    size_t so = rm__blk_off(count, g, sb), sl = rm__blk_len(count, g, sb);
    size_t ro = rm__blk_off(count, g, rb), rl = rm__blk_len(count, g, rb);
    memset(sends, 0, cap * sizeof *sends);
    memset(recvs, 0, cap * sizeof *recvs);
    RM_CHECK_GOTO(recv_segs(c, left, base + ro * esz, rl, off + ro, esz, seg, recvs), st, out);
    RM_CHECK_GOTO(rm__send_segs(c, right, base + so * esz, sl, off + so, esz, seg, sends), st, out);
    RM_CHECK_GOTO(wait_n(c, recvs, rm__div_up(rl, seg)), st, out);
    RM_CHECK_GOTO(wait_n(c, sends, rm__div_up(sl, seg)), st, out);
  }
out:
  free(sends);
  free(recvs);
  return st;
}

rm_status_t rm__allreduce_hier(rm_comm_t *c, void *buf, size_t count,
                               rm_dtype_t dt, const rm__reducer_t *red)
{
  size_t esz = rm_dtype_size(dt);
  layout_t l;
  rm_status_t st;
  RM_CHECK(make_layout(c, &l));
  if (l.hosts == 0) return rm__allreduce_ring(c, buf, count, dt, red);
  /* 1. reduce-scatter inside the host: block (li + 1) mod L is ours */
  st = group_ring(c, l.grp_local, l.local, l.li, buf, count, 0, esz, red, 0);
  /* 2. all-reduce of that block across hosts */
  if (st == RM_OK) {
    int b = (l.li + 1) % l.local;
    size_t bo = rm__blk_off(count, l.local, b), bl = rm__blk_len(count, l.local, b);
    st = group_ring(c, l.grp_cross, l.hosts, l.host, (char *)buf + bo * esz, bl, bo,
                    esz, red, 1);
  }
  /* 3. all-gather inside the host */
  if (st == RM_OK) st = group_ring(c, l.grp_local, l.local, l.li, buf, count, 0, esz, NULL, 1);
  free(l.grp_local);
  free(l.grp_cross);
  return st;
}
