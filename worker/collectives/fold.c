/*
 * fold.c - the standard fold of extra ranks for algorithms that need a
 * power-of-two world (halving-doubling, butterfly).
 *
 *   p = largest power of two <= N,  rem = N - p
 *
 *   fold in:  for r < 2 rem:  even r  --whole vector-->  r + 1 (reduces it)
 *             virtual ranks:  odd r < 2 rem -> r / 2;  r >= 2 rem -> r - rem;
 *             even r < 2 rem  -> -1 (idle during the power-of-two part)
 *   fold out: odd r < 2 rem  --whole result-->  r - 1
 *
 *   N = 6: p = 4, rem = 2;  0->1, 2->3 fold;  virtual 0..3 = real 1, 3, 4, 5
 *
 * Cost added to the power-of-two algorithm: 2 alpha + 2 n beta + n gamma
 * (one whole-vector message in, one out, one reduction), on the critical
 * path of every rank.
 */
#include <stdlib.h>

#include "collectives/coll_int.h"
#include "rm_check.h"

int rm__fold_vrank(int rank, int world)
{
  int rem = world - rm__pow2_floor(world);
  if (rank < 2 * rem)
    return (rank % 2) ? rank / 2 : -1;
  return rank - rem;
}

int rm__fold_real(int vrank, int world)
{
  int rem = world - rm__pow2_floor(world);
  return vrank < rem ? 2 * vrank + 1 : vrank + rem;
}

rm_status_t rm__fold_in(rm_comm_t *c, void *buf, size_t count, size_t esz,
                        const rm__reducer_t *red, int *vrank)
{
  int r = rm_comm_rank(c), n = rm_comm_world(c);
  int rem = n - rm__pow2_floor(n);
  *vrank = rm__fold_vrank(r, n);
  if (r >= 2 * rem)
    return RM_OK;
  if (r % 2 == 1)
    return rm__recv_reduce(c, r - 1, buf, count, 0, esz, red, NULL);
  /* even: the same segments the odd rank's receive stream expects */
  return rm__send_all(c, r + 1, buf, count, 0, esz);
}

rm_status_t rm__fold_out(rm_comm_t *c, void *buf, size_t count, size_t esz)
{
  int r = rm_comm_rank(c), n = rm_comm_world(c);
  int rem = n - rm__pow2_floor(n);
  if (r >= 2 * rem)
    return RM_OK;
  if (r % 2 == 1)
    return rm__sendrecv(c, r - 1, buf, count * esz, 0, -1, NULL, 0, 0);
  return rm__sendrecv(c, -1, NULL, 0, 0, r + 1, buf, count * esz, 0);
}
