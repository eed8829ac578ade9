/*
 * gz_answer.h - a gzip member made of a per-call head and a tail deflated
 * once (format and why it is one valid stream: gz_answer.c). Used by
 * server.c for Join and StepGate answers; no gRPC, no protobuf, only zlib.
 */
#ifndef RM_COORDINATOR_RPC_GZ_ANSWER_H
#define RM_COORDINATOR_RPC_GZ_ANSWER_H

#include <stddef.h>
#include <stdint.h>

#define RM__GZ_HEAD_OVERHEAD 15 /* gzip header 10 + stored block header 5 */
#define RM__GZ_HEAD_MAX 65535   /* one stored block */
#define RM__GZ_TRAILER 8        /* CRC-32 + ISIZE */

typedef struct rm__gz_tail {
  uint8_t *z;    /* raw deflate stream of the tail, final block last */
  size_t zlen;
  size_t len;    /* the tail's uncompressed length */
  uint32_t crc;  /* CRC-32 of the uncompressed tail */
} rm__gz_tail_t;

/* Deflate tail once (zlib level 1..9). 0, or -1 (out of memory, zlib). */
int rm__gz_tail_make(const uint8_t *tail, size_t len, int level, rm__gz_tail_t *out);
void rm__gz_tail_free(rm__gz_tail_t *t);
/* The gzip header and the header of the stored block that holds a head of
 * hlen bytes (<= RM__GZ_HEAD_MAX), which follows it. */
void rm__gz_head(uint8_t out[RM__GZ_HEAD_OVERHEAD], size_t hlen);
/* The member's trailer for head + t. */
void rm__gz_trailer(uint8_t out[RM__GZ_TRAILER], const uint8_t *head, size_t hlen,
                    const rm__gz_tail_t *t);

#endif
