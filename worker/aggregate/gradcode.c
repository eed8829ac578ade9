/*
 * gradcode.c - gradient coding with the fractional repetition scheme.
 *
 * Reference: R. Tandon, Q. Lei, A. G. Dimakis, N. Karampatziakis, "Gradient
 * Coding: Avoiding Stragglers in Distributed Learning", ICML 2017, section 3
 * ("fractional repetition scheme").
 *
 * SETTING. N workers, s tolerated stragglers, (s+1) | N. A step's data is cut
 * into N partitions D_0..D_{N-1} (rm__gradcode_partition_range); g_p is the
 * gradient (a SUM over the samples of D_p) of partition p. The goal is the
 * full-batch gradient G = g_0 + ... + g_{N-1} from any N - s workers.
 *
 * ENCODING (the matrix B of the paper, N x N, rows = workers). Workers are
 * cut into G = N/(s+1) groups of s+1 consecutive ranks: group(w) = w/(s+1).
 * Group j owns the block of partitions P_j = { j(s+1), ..., j(s+1)+s }.
 * Worker w computes every partition of P_group(w) and sends
 *
 *     m_w = sum_{p in P_group(w)} g_p          (row w of B is the 0/1
 *                                               indicator of P_group(w))
 *
 * so each partition is computed s+1 times (replication factor s+1, the
 * lower bound of the paper's Theorem 1 for tolerating s stragglers) and each
 * worker does (s+1)/N of the data instead of 1/N.
 *
 * DECODING. Let A be the set of arrived workers, |A| >= N - s. The blocks
 * P_0..P_{G-1} partition {0..N-1}, so if A holds some worker a_j of every
 * group j then
 *
 *     G = sum_j m_{a_j}                          (decoding vector a: 1 at
 *                                                 the a_j, 0 elsewhere)
 *
 * which is exact in any arithmetic where the per-partition sums are exact
 * (tests use small integers, so equality is bitwise). Pigeonhole: a group has
 * s+1 members; a group with no arrived member needs all s+1 of them missing,
 * i.e. more than s missing workers. Hence every pattern with <= s missing is
 * decodable, and a pattern is undecodable exactly when some whole group is
 * missing (reported with RM_ERR_UNAVAILABLE and the group).
 *
 * INVARIANTS.
 *  1. The plan is a pure function of (N, s, arrived): a_j is the LOWEST
 *     arrived rank of group j, so every rank that is told the same arrived
 *     set builds the same coefficients, and the masked all-reduce over the
 *     chosen ranks (aggregate.h) yields the same G everywhere.
 *  2. sum_w coeff[w] == G (number of groups) on success; one worker per
 *     group, never two (two would double-count that block).
 *  3. Nothing here allocates or blocks.
 *
 * Cost: a worker computes s+1 partitions (compute x (s+1)/1 per sample
 * share) and sends one vector of the model's size, like an uncoded worker.
 * The all-reduce then sums exactly G vectors (the others contribute zeros).
 */
#include "aggregate/gradcode.h"

#include <string.h>

#include "reduce/reduce.h"

rm_status_t rm__gradcode_init(rm__gradcode_t *gc, int n, int s)
{
  if (gc == NULL || n < 1 || s < 0 || s >= n || n % (s + 1) != 0)
    return RM_ERR_INVALID_ARG;
  gc->n = n;
  gc->s = s;
  gc->group = s + 1;
  gc->groups = n / (s + 1);
  return RM_OK;
}

int rm__gradcode_group_of(const rm__gradcode_t *gc, int worker)
{
  if (gc == NULL || worker < 0 || worker >= gc->n) return -1;
  return worker / gc->group;
}

rm_status_t rm__gradcode_assignment(const rm__gradcode_t *gc, int worker,
                                    int *parts)
{
  int g = rm__gradcode_group_of(gc, worker);
  if (g < 0 || parts == NULL) return RM_ERR_INVALID_ARG;
  for (int i = 0; i < gc->group; i++) parts[i] = g * gc->group + i;
  return RM_OK;
}

rm_status_t rm__gradcode_partition_range(const rm__gradcode_t *gc, int p,
                                         uint64_t samples, uint64_t *begin,
                                         uint64_t *end)
{
  if (gc == NULL || p < 0 || p >= gc->n || begin == NULL || end == NULL)
    return RM_ERR_INVALID_ARG;
  uint64_t n = (uint64_t)gc->n, q = samples / n, r = samples % n;
  uint64_t up = (uint64_t)p;
  /* partitions 0..r-1 hold q+1 samples, the rest q */
  *begin = up * q + (up < r ? up : r);
  *end = *begin + q + (up < r ? 1 : 0);
  return RM_OK;
}

rm_status_t rm__gradcode_decode_plan(const rm__gradcode_t *gc,
                                     const uint8_t *arrived, uint8_t *coeff,
                                     int *bad_group)
{
  if (gc == NULL || arrived == NULL || coeff == NULL) return RM_ERR_INVALID_ARG;
  /* check first so that coeff is written only on success */
  for (int g = 0; g < gc->groups; g++) {
    int any = 0;
    for (int i = 0; i < gc->group && !any; i++)
      any = arrived[g * gc->group + i] != 0;
    if (!any) {
      if (bad_group != NULL) *bad_group = g;
      return RM_ERR_UNAVAILABLE;
    }
  }
  for (int g = 0; g < gc->groups; g++) {
    int chosen = 0;
    for (int i = 0; i < gc->group; i++) {
      int w = g * gc->group + i;
      coeff[w] = (uint8_t)((!chosen && arrived[w]) ? 1 : 0); /* invariant 1 */
      chosen |= coeff[w];
    }
  }
  return RM_OK;
}

rm_status_t rm__gradcode_decode(const rm__gradcode_t *gc, const uint8_t *coeff,
                                const void *const *msgs, void *out,
                                size_t count, rm_dtype_t dt)
{
  rm__reduce_fn_t add = rm__reduce_fn(dt, RM_SUM);
  size_t esz = rm_dtype_size(dt);
  if (gc == NULL || coeff == NULL || msgs == NULL || add == NULL || esz == 0 ||
      (out == NULL && count > 0))
    return RM_ERR_INVALID_ARG;
  /* validate the whole plan first (invariant 2), so out is written only
   * for a valid one */
  for (int g = 0; g < gc->groups; g++) {
    int ones = 0;
    for (int i = 0; i < gc->group; i++) {
      int w = g * gc->group + i;
      if (coeff[w] != 0 && (coeff[w] != 1 || msgs[w] == NULL))
        return RM_ERR_INVALID_ARG;
      ones += coeff[w];
    }
    if (ones != 1) return RM_ERR_INVALID_ARG;
  }
  int used = 0;
  for (int w = 0; w < gc->n && count > 0; w++) {
    if (coeff[w] == 0) continue;
    if (used++ == 0)
      memcpy(out, msgs[w], count * esz);
    else
      add(out, msgs[w], count);
  }
  return RM_OK;
}
