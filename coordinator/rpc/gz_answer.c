/*
 * gz_answer.c - one gzip member (RFC 1952) per answer, built from a
 * per-call head and a tail deflated ONCE and shared: the Join
 * answers of a generation, the decided StepGate answers of a step (their
 * head is empty).
 *
 * Why: a formed JoinResponse is a small per-worker head (worker id, rank,
 * ...) followed by the generation's peer list and spec (rpc.c join_tail),
 * N peers per answer, N answers: O(N^2) bytes leave the coordinator
 * (16,384 workers: 9.4 GB, most of a join wave). gRPC's own message
 * compression would deflate each answer again: O(N^2) CPU. Here the tail
 * is deflated once and every answer shares those bytes by reference; only
 * the head and an 8-byte trailer are made per call.
 *
 * Wire format of one answer (the gRPC message, flagged compressed, with
 * grpc-encoding: gzip; server.c sends it only to a client that asked,
 * JoinRequest / StepGateRequest.accept_gzip):
 *
 *   offset     size      what
 *   0          10        gzip header: 1f 8b 08 00 00000000 00 ff
 *                        (deflate, no flags, no mtime, OS unknown)
 *   10         5         deflate STORED block header, not final:
 *                        00 (BFINAL 0, BTYPE 00, 5 bits of padding),
 *                        LEN (2, little-endian), NLEN = ~LEN (2)
 *   15         hlen      the head: the per-call JoinResponse fields, packed
 *   15+hlen    zlen      the tail's raw deflate stream (shared by every
 *                        answer of the generation), ending in its final block
 *   ...        4         CRC-32 of head + tail (little-endian)
 *   ...        4         ISIZE: hlen + len(tail) mod 2^32 (little-endian)
 *
 * Why the concatenation is one valid deflate stream: a stored block ends
 * on a byte boundary, and the tail's stream was started fresh on a byte
 * boundary, so its bits follow the stored block exactly; its back
 * references never reach before its own first byte (it was compressed
 * alone), so what precedes it in the window does not matter. The CRC of the
 * whole is crc32_combine(crc(head), crc(tail), len(tail)), O(log len).
 * What it inflates to is head + tail, byte for byte the uncompressed
 * answer (rm__reply_tail), which protobuf reads as one message (fields of
 * concatenated encodings merge). tests/coordinator/test_gz_answer.c checks
 * this with zlib's inflate for heads of 0..65,535 bytes and tails up to 1 MiB.
 *
 * Limits: hlen <= 65535 (one stored block; a head is tens of bytes).
 */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "rpc/gz_answer.h"

int rm__gz_tail_make(const uint8_t *tail, size_t len, int level, rm__gz_tail_t *out)
{
  z_stream z;
  memset(&z, 0, sizeof z);
  memset(out, 0, sizeof *out);
  if (deflateInit2(&z, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
  uLong cap = deflateBound(&z, (uLong)len);
  out->z = malloc(cap ? cap : 1);
  if (!out->z) {
    deflateEnd(&z);
    return -1;
  }
  z.next_in = (Bytef *)tail;
  z.avail_in = (uInt)len;
  z.next_out = out->z;
  z.avail_out = (uInt)cap;
  int rc = deflate(&z, Z_FINISH);
  out->zlen = (size_t)z.total_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) {
    free(out->z);
    out->z = NULL;
    return -1;
  }
  out->len = len;
  out->crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), tail, (uInt)len);
  return 0;
}

void rm__gz_tail_free(rm__gz_tail_t *t)
{
  free(t->z);
  memset(t, 0, sizeof *t);
}

void rm__gz_head(uint8_t out[RM__GZ_HEAD_OVERHEAD], size_t hlen)
{
  static const uint8_t hdr[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
  memcpy(out, hdr, sizeof hdr);
  out[10] = 0; /* BFINAL 0, BTYPE 00 (stored) */
  out[11] = (uint8_t)(hlen & 0xff);
  out[12] = (uint8_t)((hlen >> 8) & 0xff);
  out[13] = (uint8_t)(~hlen & 0xff);
  out[14] = (uint8_t)((~hlen >> 8) & 0xff);
}

static void le32(uint8_t *p, uint32_t v)
{
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

void rm__gz_trailer(uint8_t out[RM__GZ_TRAILER], const uint8_t *head, size_t hlen,
                    const rm__gz_tail_t *t)
{
  uLong ch = crc32(crc32(0L, Z_NULL, 0), head, (uInt)hlen);
  le32(out, (uint32_t)crc32_combine(ch, t->crc, (z_off_t)t->len));
  le32(out + 4, (uint32_t)(hlen + t->len));
}
