/*
 * rm_testrng.h - the seeded generator of the test programs (splitmix64):
 * the same sequence for a seed on every machine, so a failing case can be
 * replayed. Header-only; each program keeps its own state.
 */
#ifndef RM_TESTS_RNG_H
#define RM_TESTS_RNG_H

#include <stdint.h>

static inline uint64_t rm_test_splitmix(uint64_t *state)
{
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

#endif
