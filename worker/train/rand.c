/*
 * rand.c - deterministic permutations (splitmix64, train_int.h) and FNV-1a
 * checksums of the training workloads.
 */
#include "train_int.h"

void rm__permute(uint32_t *perm, uint32_t n, uint64_t seed)
{
  uint64_t s = seed;
  for (uint32_t i = 0; i < n; i++) perm[i] = i;
  for (uint32_t i = n; i > 1; i--) {
    uint32_t j = rm__rng_below(&s, i);
    uint32_t tmp = perm[i - 1];
    perm[i - 1] = perm[j];
    perm[j] = tmp;
  }
}

uint64_t rm__fnv1a(const void *data, size_t len)
{
  const unsigned char *p = data;
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}
