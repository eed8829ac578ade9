/*
 * slow.c - simulated stragglers for the train and synthetic workloads
 * which ranks are slow at which steps, and by how much.
 * Interface in train_int.h (rm__slow_t).
 *
 * A slowed rank's compute at step s takes factor x its honest time while
 * from <= s < until (until 0: no end), so a transient straggler is a window
 * of steps; a stall adds stall_ms once, at stall_step, to one rank (a worker
 * that stops for seconds).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_int.h"

void rm__slow_init(rm__slow_t *sl)
{
  memset(sl, 0, sizeof *sl);
  sl->factor = 1;
  sl->stall_rank = -1;
}

static int slow_ranks(rm__slow_t *sl, const char *val, char *err, size_t errlen)
{
  const char *p = val;
  sl->nranks = 0;
  for (;;) {
    char *end;
    long r = strtol(p, &end, 10);
    if (end == p || r < 0 || r > (1 << 24) || (*end && *end != ':') ||
        sl->nranks == RM__SLOW_MAX_RANKS) {
      snprintf(err, errlen, "option slow_rank=%s: expected a rank or ranks "
               "joined by ':' (at most %d, each 0..16777216)", val,
               RM__SLOW_MAX_RANKS);
      return -1;
    }
    sl->ranks[sl->nranks++] = (int)r;
    if (!*end) return 1;
    p = end + 1;
  }
}

int rm__slow_option(rm__slow_t *sl, const char *key, const char *val,
                    char *err, size_t errlen)
{
  uint64_t u;
  rm_status_t st;
  if (!strcmp(key, "slow_rank")) return slow_ranks(sl, val, err, errlen);
  if (!strcmp(key, "slow_factor"))
    st = rm__opt_double(key, val, 1, 1000, &sl->factor, err, errlen);
  else if (!strcmp(key, "slow_from"))
    st = rm__opt_u64(key, val, 0, UINT64_MAX, &sl->from, err, errlen);
  else if (!strcmp(key, "slow_until"))
    st = rm__opt_u64(key, val, 0, UINT64_MAX, &sl->until, err, errlen);
  else if (!strcmp(key, "stall_rank")) {
    st = rm__opt_u64(key, val, 0, 1 << 24, &u, err, errlen);
    sl->stall_rank = (int)u;
  } else if (!strcmp(key, "stall_step"))
    st = rm__opt_u64(key, val, 0, UINT64_MAX, &sl->stall_step, err, errlen);
  else if (!strcmp(key, "stall_ms"))
    st = rm__opt_double(key, val, 0, 3600e3, &sl->stall_ms, err, errlen);
  else
    return 0;
  return st == RM_OK ? 1 : -1;
}

int rm__slow_is(const rm__slow_t *sl, int rank, uint64_t step)
{
  if (sl->factor <= 1 || step < sl->from || (sl->until && step >= sl->until))
    return 0;
  for (int i = 0; i < sl->nranks; i++)
    if (sl->ranks[i] == rank) return 1;
  return 0;
}

double rm__slow_extra_ms(const rm__slow_t *sl, int rank, uint64_t step,
                         double base_ms)
{
  double x = rm__slow_is(sl, rank, step) ? base_ms * (sl->factor - 1) : 0;
  if (rank == sl->stall_rank && step == sl->stall_step) x += sl->stall_ms;
  return x;
}

int rm__slow_any(const rm__slow_t *sl)
{
  return (sl->nranks && sl->factor > 1) || (sl->stall_rank >= 0 && sl->stall_ms > 0);
}

