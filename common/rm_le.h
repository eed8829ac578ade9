/*
 * rm_le.h - little-endian integers in byte buffers: the on-disk checkpoint
 * format (worker/checkpoint/) and the secure-aggregation wire and keystream
 * lanes (worker/secagg/) are little-endian on every host.
 */
#ifndef RM_COMMON_LE_H
#define RM_COMMON_LE_H

#include <stdint.h>
#include <string.h>

static inline void rm__put_le32(uint8_t *p, uint32_t v)
{
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline void rm__put_le64(uint8_t *p, uint64_t v)
{
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t rm__get_le32(const uint8_t *p)
{
  uint32_t v;
  memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  return v;
}

static inline uint64_t rm__get_le64(const uint8_t *p)
{
  uint64_t v;
  memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

#endif
