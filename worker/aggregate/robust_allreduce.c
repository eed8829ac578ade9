/*
 * robust_allreduce.c - the robust all-reduce collective: rm_allgather of
 * every rank's vector into world*count elements, then rm__robust_combine
 * (robust.c, the math) on every rank. The combine is deterministic, so every
 * rank gets the same bytes.
 */
#include "aggregate/aggregate.h"

#include <stdlib.h>

rm_status_t rm__robust_allreduce(rm_comm_t *comm, const void *send,
                                 void *recv, size_t count, rm_dtype_t dt,
                                 const rm__robust_opts_t *o)
{
  size_t esz = rm_dtype_size(dt);
  if (comm == NULL || o == NULL || esz == 0 ||
      (count > 0 && (send == NULL || recv == NULL)))
    return RM_ERR_INVALID_ARG;
  int world = rm_comm_world(comm);
  rm_status_t st = RM_OK;
  double *work = malloc((size_t)world * sizeof *work);
  void *all = malloc((size_t)world * count * esz + 1);
  if (work == NULL || all == NULL) {
    st = RM_ERR_NOMEM;
    goto out;
  }
  /* validate method and dtype before any byte moves (count 0 = check only) */
  st = rm__robust_combine(NULL, world, 0, dt, o, NULL, work);
  if (st != RM_OK) goto out;
  st = rm_allgather(comm, send, all, count, dt);
  if (st != RM_OK) goto out;
  st = rm__robust_combine(all, world, count, dt, o, recv, work);
out:
  free(all);
  free(work);
  return st;
}
