/*
 * tree.c - binomial-tree reduce and broadcast, pipelined in segments; the
 * tree all-reduce is reduce to rank 0 then broadcast from rank 0.
 *
 * Tree. With virtual rank v = (rank - root) mod N, the parent of v != 0 is
 * v - lowbit(v); the children of v are v + m for every power of two m below
 * lowbit(v) (all m < N for the root) with v + m < N. Example N = 8:
 * 0 <- {1, 2, 4}, 2 <- {3}, 4 <- {5, 6}, 6 <- {7}; depth ceil(log2 N).
 *
 * Segments. The vector goes as segments of S elements
 * (RINGMASTER_RING_SEGMENT_BYTES), tag = element offset.
 *   reduce:    for segment j: for each child (m increasing): take its
 *              segment j from that child's receive stream (scratch slots,
 *              3 receives in flight per child) and reduce it into acc; then
 *              send acc's segment j to the parent. A rank forwards segment j
 *              while its children already send j+1, so the depth costs
 *              latency once, not once per byte.
 *   broadcast: all receives from the parent are posted up front, straight
 *              into the buffer; as segment j arrives it is sent to every
 *              child (largest subtree first).
 *
 * Cost (unpipelined model): 2 ceil(log2 N) (alpha + n beta) +
 * ceil(log2 N) n gamma; the root's link carries log2 N full vectors in the
 * reduce, which is why tree loses to ring for large messages.
 */
#include <stdlib.h>
#include <string.h>

#include "collectives/coll_int.h"
#include "rm_check.h"

typedef struct tree {
  int n, v, root, parent; /* parent: real rank, -1 for the root */
  int nchild;
  int child[32];          /* real ranks, m increasing */
} tree_t;

static void tree_init(tree_t *t, rm_comm_t *c, int root)
{
  t->n = rm_comm_world(c);
  t->root = root;
  t->v = (rm_comm_rank(c) - root + t->n) % t->n;
  t->parent = -1;
  t->nchild = 0;
  for (int m = 1; m < t->n; m <<= 1) {
    if (t->v & m) {
      t->parent = (t->v - m + root) % t->n;
      break;
    }
    if (t->v + m < t->n)
      t->child[t->nchild++] = (t->v + m + root) % t->n;
  }
}

static rm_status_t reduce_segments(rm_comm_t *c, const tree_t *t, char *acc,
                                   size_t count, size_t esz, size_t seg,
                                   const rm__reducer_t *red, rm__req_t *sends)
{
  rm__rstream_t rs[32];
  void *slots, *data;
  size_t nseg = rm__div_up(count, seg), n, at;
  size_t slot_bytes = RM__RSTREAM_SLOTS * seg * esz;
  RM_CHECK(rm__scratch(c, (size_t)t->nchild * slot_bytes, &slots));
  for (int i = 0; i < t->nchild; i++)
    RM_CHECK(rm__rstream_start(c, &rs[i], t->child[i], count, 0, esz, seg,
                               (char *)slots + (size_t)i * slot_bytes,
                               RM__RSTREAM_SLOTS));
  for (size_t j = 0; j < nseg; j++) {
    for (int i = 0; i < t->nchild; i++) {
      RM_CHECK(rm__rstream_next(c, &rs[i], &data, &n, &at));
      RM_CHECK(rm__mreduce(c, red, acc + at * esz, data, n));
    }
    if (t->parent >= 0) {
      size_t len = count - j * seg < seg ? count - j * seg : seg;
      RM_CHECK(rm__isend(c, t->parent, acc + j * seg * esz, len * esz, j * seg,
                         &sends[j]));
    }
  }
  return RM_OK;
}

rm_status_t rm__tree_reduce(rm_comm_t *c, const void *src, void *acc,
                            size_t count, size_t esz, const rm__reducer_t *red,
                            int root)
{
  tree_t t;
  rm_status_t st = RM_OK;
  size_t seg = rm__seg_elems(esz), nseg;
  rm__req_t *sends;
  void *own = NULL;
  if (count == 0)
    return RM_OK;
  if (seg > count)
    seg = count;
  nseg = rm__div_up(count, seg);
  tree_init(&t, c, root);
  if (t.nchild == 0) /* leaf: the input goes up as it is */
    return rm__send_all(c, t.parent, src, count, 0, esz);
  sends = rm__reqs_new(nseg);
  if (!sends) return RM_ERR_NOMEM;
  if (acc == NULL) { /* an interior rank of rm_reduce: private accumulator */
    RM_CHECK_GOTO(rm__mtmp(c, count * esz, &own), st, out);
    acc = own;
  }
  if (acc != src)
    RM_CHECK_GOTO(rm__mcopy(c, acc, src, count * esz), st, out);
  RM_CHECK_GOTO(reduce_segments(c, &t, acc, count, esz, seg, red, sends), st, out);
  for (size_t j = 0; t.parent >= 0 && j < nseg; j++)
    RM_CHECK_GOTO(rm__wait(c, &sends[j]), st, out);
out:
  if (own) rm__mtmp_free(c, own);
  free(sends);
  return st;
}

rm_status_t rm__tree_bcast(rm_comm_t *c, void *buf, size_t count, size_t esz,
                           int root)
{
  tree_t t;
  rm_status_t st = RM_OK;
  size_t seg = rm__seg_elems(esz), nseg;
  char *p = buf;
  rm__req_t *reqs;
  if (count == 0)
    return RM_OK;
  if (seg > count)
    seg = count;
  nseg = rm__div_up(count, seg);
  tree_init(&t, c, root);
  reqs = rm__reqs_new(nseg * (size_t)(t.nchild + 1)); /* recvs, then sends */
  if (!reqs)
    return RM_ERR_NOMEM;
  for (size_t j = 0; t.parent >= 0 && j < nseg; j++) {
    size_t len = count - j * seg < seg ? count - j * seg : seg;
    RM_CHECK_GOTO(rm__irecv(c, t.parent, p + j * seg * esz, len * esz, j * seg,
                            &reqs[j]), st, out);
  }
  for (size_t j = 0; j < nseg; j++) {
    size_t len = count - j * seg < seg ? count - j * seg : seg;
    if (t.parent >= 0)
      RM_CHECK_GOTO(rm__wait(c, &reqs[j]), st, out);
    for (int i = t.nchild - 1; i >= 0; i--)
      RM_CHECK_GOTO(rm__isend(c, t.child[i], p + j * seg * esz, len * esz, j * seg,
                              &reqs[nseg * (size_t)(i + 1) + j]), st, out);
  }
  for (size_t k = nseg; k < nseg * (size_t)(t.nchild + 1); k++)
    RM_CHECK_GOTO(rm__wait(c, &reqs[k]), st, out);
out:
  free(reqs);
  return st;
}

rm_status_t rm__allreduce_tree(rm_comm_t *c, void *buf, size_t count,
                               rm_dtype_t dt, const rm__reducer_t *red)
{
  size_t esz = rm_dtype_size(dt);
  RM_CHECK(rm__tree_reduce(c, buf, buf, count, esz, red, 0));
  return rm__tree_bcast(c, buf, count, esz, 0);
}
