/*
 * test_gz_answer.c - the gzip member of a Join answer
 * (coordinator/rpc/gz_answer.c), against zlib's own inflate in gzip mode:
 *
 *   - for heads of 0, 1, 2, 37, 255, 256, 300 and 65,535 bytes and tails
 *     of 0 and 1 bytes, 100 KiB of random bytes (stored blocks inside the
 *     tail's stream) and 1 MiB of a repeating peer-list-like text, at zlib
 *     levels 1 and 9: the member (header, head in a stored block, the
 *     tail's stream, trailer) inflates to exactly head + tail, with
 *     Z_STREAM_END and no byte left over;
 *   - one tail deflated once serves several heads (the shared stream is
 *     not altered by building members);
 *   - negative controls: a member whose CRC, ISIZE or stored-block NLEN is
 *     off by one bit, or whose shared stream lost its last byte, does not
 *     inflate cleanly (so the check above can fail).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "rm_testcheck.h"
#include "rpc/gz_answer.h"

/* The member for head + t, as server.c sends it (one buffer here). */
static uint8_t *member(const uint8_t *h, size_t hl, const rm__gz_tail_t *t, size_t *n)
{
  uint8_t pre[RM__GZ_HEAD_OVERHEAD], trl[RM__GZ_TRAILER];
  rm__gz_head(pre, hl);
  rm__gz_trailer(trl, h, hl, t);
  *n = sizeof pre + hl + t->zlen + sizeof trl;
  uint8_t *m = malloc(*n);
  memcpy(m, pre, sizeof pre);
  if (hl) memcpy(m + sizeof pre, h, hl);
  memcpy(m + sizeof pre + hl, t->z, t->zlen);
  memcpy(m + sizeof pre + hl + t->zlen, trl, sizeof trl);
  return m;
}

/* 1 if m inflates (gzip) to exactly want. */
static int inflates_to(const uint8_t *m, size_t n, const uint8_t *want, size_t wl)
{
  z_stream z;
  uint8_t *out = malloc(wl + 16);
  memset(&z, 0, sizeof z);
  if (inflateInit2(&z, 15 + 16) != Z_OK) return 0;
  z.next_in = (Bytef *)m;
  z.avail_in = (uInt)n;
  z.next_out = out;
  z.avail_out = (uInt)(wl + 16);
  int rc = inflate(&z, Z_FINISH);
  int ok = rc == Z_STREAM_END && z.avail_in == 0 && z.total_out == wl && !memcmp(out, want, wl);
  inflateEnd(&z);
  free(out);
  return ok;
}

int main(void)
{
  static const size_t heads[] = {0, 1, 2, 37, 255, 256, 300, 65535};
  static const char pattern[] = "2\x1d\x08\x01\x12\x05node7\x1a\x0f" "10.0.0.7:5000 ";
  const size_t tails[] = {0, 1, 100 << 10, 1 << 20};
  uint8_t *head = malloc(65535), *tail = malloc(1 << 20), *want = malloc(65535 + (1 << 20));
  srand(16);
  for (size_t i = 0; i < 65535; i++) head[i] = (uint8_t)rand();
  int cases = 0;
  for (int ti = 0; ti < 4; ti++) {
    size_t tl = tails[ti];
    for (size_t i = 0; i < tl; i++) /* random, or a peer-list-like text */
      tail[i] = ti == 2 ? (uint8_t)rand()
                        : (uint8_t)(pattern[i % (sizeof pattern - 1)] + (i / 31) % 3);
    for (int level = 1; level <= 9; level += 8) {
      rm__gz_tail_t t;
      CHECK(rm__gz_tail_make(tail, tl, level, &t) == 0);
      for (size_t hi = 0; hi < sizeof heads / sizeof *heads; hi++) {
        size_t hl = heads[hi], n;
        uint8_t *m = member(head, hl, &t, &n);
        memcpy(want, head, hl);
        memcpy(want + hl, tail, tl);
        CHECKF(inflates_to(m, n, want, hl + tl), "head %zu tail %zu level %d", hl, tl, level);
        cases++;
        if (hl == 37 && tl > 1) { /* negative controls */
          size_t at[4] = {n - 8, n - 4, 13, 0};
          for (int k = 0; k < 3; k++) {
            m[at[k]] ^= 1;
            CHECKF(!inflates_to(m, n, want, hl + tl), "bit flip at %zu still inflates", at[k]);
            m[at[k]] ^= 1;
          }
          uint8_t *cut = member(head, hl, &t, &n);
          uint8_t *end = cut + RM__GZ_HEAD_OVERHEAD + hl + t.zlen;
          memmove(end - 1, end, RM__GZ_TRAILER); /* the stream's last byte gone */
          CHECK(!inflates_to(cut, n - 1, want, hl + tl));
          free(cut);
        }
        free(m);
      }
      if (tl == (1u << 20) && level == 1)
        printf("test_gz_answer: 1 MiB peer-list-like tail -> %zu bytes at level 1\n", t.zlen);
      rm__gz_tail_free(&t);
    }
  }
  CHECK(cases == 4 * 2 * 8);
  free(head);
  free(tail);
  free(want);
  return rm_check_exit("test_gz_answer");
}
