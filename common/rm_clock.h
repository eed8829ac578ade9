/* rm_clock.h - monotonic and wall clocks, and deadline arithmetic. */
#ifndef RM_COMMON_CLOCK_H
#define RM_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic nanoseconds; only differences mean anything. */
static inline int64_t rm__now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline int64_t rm__now_ms(void) { return rm__now_ns() / 1000000LL; }

/* Wall-clock milliseconds since the epoch (for stored timestamps). */
static inline int64_t rm__wall_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000LL;
}

/* Milliseconds left until deadline_ns (monotonic), clamped to [0, INT32_MAX]. */
static inline int rm__ms_left(int64_t deadline_ns)
{
  int64_t left = (deadline_ns - rm__now_ns() + 999999) / 1000000;
  if (left < 0) return 0;
  if (left > 0x7fffffff) return 0x7fffffff;
  return (int)left;
}

#endif
