/*
 * members.c - participant sets (member masks) of masked aggregation.
 *
 * A member mask is `world` bytes, member[r] != 0 when rank r contributes to
 * the step. The coordinator fixes one mask per step (backup: the first N
 * arrivals; deadline: those in by the deadline; coded: the decode plan) and
 * every rank passes the same one to rm__masked_allreduce. Pure helpers, kept
 * apart from masked.c so they link without the collectives.
 */
#include "aggregate/aggregate.h"

#include <string.h>

rm_status_t rm__members_from_list(const int *ranks, int n, int world,
                                  uint8_t *member)
{
  if (world < 1 || n < 0 || member == NULL || (n > 0 && ranks == NULL))
    return RM_ERR_INVALID_ARG;
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= world) return RM_ERR_INVALID_ARG;
    for (int j = 0; j < i; j++)
      if (ranks[j] == ranks[i]) return RM_ERR_INVALID_ARG;
  }
  memset(member, 0, (size_t)world);
  for (int i = 0; i < n; i++) member[ranks[i]] = 1;
  return RM_OK;
}

int rm__members_count(const uint8_t *member, int world)
{
  int k = 0;
  for (int r = 0; member != NULL && r < world; r++) k += member[r] != 0;
  return k;
}
