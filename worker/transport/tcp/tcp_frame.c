/*
 * tcp_frame.c - encode and decode the 48-byte frame header (format table in
 * tcp_int.h). Byte order is explicit so the wire is the same on any host.
 */
#define _GNU_SOURCE /* pipe2, accept4, POLLRDHUP */
#include "transport/tcp/tcp_int.h"

#include <string.h>

static void put16(unsigned char *p, uint16_t v)
{
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t get16(const unsigned char *p)
{
  return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const unsigned char *p)
{
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static uint64_t get64(const unsigned char *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

void rm__frame_encode(const rm__frame_t *f, unsigned char out[RM__TCP_HDR])
{
  put32(out + 0, f->magic);
  put16(out + 4, f->version);
  put16(out + 6, f->type);
  put64(out + 8, f->job);
  put64(out + 16, f->generation);
  put64(out + 24, f->seq);
  put64(out + 32, f->tag);
  put64(out + 40, f->length);
}

void rm__frame_decode(const unsigned char in[RM__TCP_HDR], rm__frame_t *f)
{
  f->magic = get32(in + 0);
  f->version = get16(in + 4);
  f->type = get16(in + 6);
  f->job = get64(in + 8);
  f->generation = get64(in + 16);
  f->seq = get64(in + 24);
  f->tag = get64(in + 32);
  f->length = get64(in + 40);
}

void rm__frame_init(rm__frame_t *f, const rm_comm_t *c, rm__frame_type_t t)
{
  memset(f, 0, sizeof *f);
  f->magic = RM__TCP_MAGIC;
  f->version = RM__TCP_VERSION;
  f->type = (uint16_t)t;
  f->job = c->job_id;
  f->generation = c->generation;
}

rm_status_t rm__frame_check(const rm__frame_t *f, const char **why)
{
  if (f->magic != RM__TCP_MAGIC) {
    *why = "bad magic (not a ringmaster data-plane frame)";
    return RM_ERR_PROTOCOL;
  }
  if (f->version != RM__TCP_VERSION) {
    *why = "unsupported frame version";
    return RM_ERR_PROTOCOL;
  }
  if (f->type < RM__FRAME_DATA || f->type > RM__FRAME_AUTH) {
    *why = "unknown frame type";
    return RM_ERR_PROTOCOL;
  }
  if (f->type == RM__FRAME_HELLO &&
      (f->length == RM__AUTH_NONCE || f->length == RM__AUTH_NONCE + RM__AUTH_MAC)) {
    /* a keyed handshake's HELLO (tcp_int.h) */
  } else if (f->type == RM__FRAME_AUTH) {
    if (f->length != RM__AUTH_MAC) {
      *why = "AUTH frame of the wrong length";
      return RM_ERR_PROTOCOL;
    }
  } else if (f->type != RM__FRAME_DATA && f->length != 0) {
    *why = "control frame with a payload";
    return RM_ERR_PROTOCOL;
  }
  *why = "";
  return RM_OK;
}
