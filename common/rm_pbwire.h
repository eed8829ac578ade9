/*
 * rm_pbwire.h - the two protobuf wire helpers the hand-framed messages need
 * (the coordinator's Session and Relay answers, coordinator/rpc/server.c and
 * relay.c, whose shared bytes are referenced rather than re-packed; the
 * relay's RelayRequests, relay/relay.c): a varint written into a buffer,
 * and its length.
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

#endif
