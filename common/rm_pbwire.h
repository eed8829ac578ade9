/*
 * rm_pbwire.h - the two protobuf wire helpers the hand-framed messages need
 * (the coordinator's Session and Relay answers, coordinator/rpc/server.c and
 * relay.c, whose shared bytes are referenced rather than re-packed; the
 * relay's RelayRequests, relay/relay.c): a varint written into a buffer,
 * and its length; and the reading side: a varint read, and which fields a
 * message's top level holds (the relay tells a heartbeat from a barrier
 * arrival without unpacking it; bench/coordinator reads Join answers).
 */
#ifndef RM_COMMON_PBWIRE_H
#define RM_COMMON_PBWIRE_H

#include <stddef.h>
#include <stdint.h>

/* Append v as a protobuf varint at buf[n] (room for 10 bytes); returns the
 * new n. */
static inline size_t rm__pb_varint(uint8_t *buf, size_t n, uint64_t v)
{
  do {
    buf[n] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) buf[n] |= 0x80;
    n++;
  } while (v);
  return n;
}

/* Bytes rm__pb_varint writes for v. */
static inline size_t rm__pb_varint_len(uint64_t v)
{
  size_t n = 1;
  while (v >= 0x80) v >>= 7, n++;
  return n;
}

/* Read a varint at *p (before end), advancing *p: 0, or -1 when it runs
 * past end or past 10 bytes. */
static inline int rm__pb_read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
  uint64_t x = 0;
  for (int sh = 0; sh < 64 && *p < end; sh += 7) {
    uint8_t b = *(*p)++;
    x |= (uint64_t)(b & 0x7f) << sh;
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return -1;
}

/* The fields at the top level of a message's n bytes: bit f set when a
 * field numbered f (1..63) occurs; bit 0 when the bytes are not a
 * well-formed message (a key or value cut short, field number 0, a
 * group or unknown wire type). Nested messages are not looked into. */
static inline uint64_t rm__pb_fields(const uint8_t *b, size_t n)
{
  const uint8_t *p = b, *end = b + n;
  uint64_t mask = 0, key, v;
  while (p < end) {
    if (rm__pb_read_varint(&p, end, &key) || key >> 3 == 0) return mask | 1;
    switch (key & 7) {
    case 0: /* varint */
      if (rm__pb_read_varint(&p, end, &v)) return mask | 1;
      break;
    case 1: /* 64-bit */
    case 5: /* 32-bit */
      if ((size_t)(end - p) < ((key & 7) == 1 ? 8u : 4u)) return mask | 1;
      p += (key & 7) == 1 ? 8 : 4;
      break;
    case 2: /* length-delimited */
      if (rm__pb_read_varint(&p, end, &v) || v > (uint64_t)(end - p)) return mask | 1;
      p += v;
      break;
    default:
      return mask | 1;
    }
    if (key >> 3 < 64) mask |= (uint64_t)1 << (key >> 3);
  }
  return mask;
}

#endif
