/*
 * load_join.c - the Join wave of a client process (JOIN): every worker
 * calls Join until formed, and every answer is checked (load_client.c
 * Checks), the first in full, the rest against it.
 *
 * Checking N answers of N peers each is O(N^2) bytes (65,536 workers: ~170
 * GB), so the first formed answer is unpacked and verified in full (the
 * reference), and every later one is scanned field by field at the top level
 * only: when its repeated-peers bytes are byte-identical to the reference's,
 * the peer list is the verified one (a memcmp).  An answer whose bytes differ
 * is unpacked and compared entry by entry (slow path; n_fast counts the fast
 * ones).  Each answer is freed as soon as it is checked.
 *
 * GZIP.  Unless --plain, every Join asks for a gzip answer
 * (JoinRequest.accept_gzip) and the channels leave messages compressed
 * (GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION 0: no O(N^2) inflating on
 * these 2 cores), so a formed answer arrives as the coordinator's gzip
 * member (coordinator/rpc/gz_answer.c): header, the head in a stored block,
 * the shared deflate stream of the peer list and spec, CRC-32 and ISIZE.
 * The first is inflated in full and verified as above (the reference; its
 * deflate stream and the CRC and length of what it inflates to are kept).
 * A later one passes the fast check when its deflate stream is
 * byte-identical to the reference's (so it inflates to the same verified
 * peers and spec), its CRC-32 equals crc32_combine(crc(its head), the
 * reference tail's CRC, its length) and ISIZE their lengths' sum (so the
 * member is valid for any gzip decoder), and its head scans as above; any
 * other compressed answer is inflated in full and checked as a plain one.
 * StepGate calls ask for gzip too (StepGateRequest.accept_gzip); a decided
 * answer is then a gzip member of the step's shared answer (its head is
 * empty, so every answer with the same `dropped` is the same member). The
 * first decided one of each kind in a step is inflated, its step-wide facts
 * (decided, step s, N mask bytes with N - 1 ones) are checked once, and it
 * is kept with that verdict; a later one byte-identical to a kept member is
 * that answer and has its verdict (a memcmp of ~100 bytes instead of
 * inflating and counting N); any other is inflated and checked in full, as
 * is every plain answer.  Every answer's own byte (dropped exactly when its
 * rank is 0 in the mask) is checked either way.  n_gzip counts the
 * compressed answers of both.
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "load_client_int.h"
#include "ringmaster/v1/messages.pb-c.h"
#include "rm_clock.h"
#include "rm_le.h"
#include "rm_pbwire.h"

#define JOIN_WAIT_MS 60000 /* the coordinator's cap (JOIN_WAIT_MAX_MS) */

/* ---- Join answers ---- */


/* Top-level walk of a packed JoinResponse (see the file comment). */
int scan_join(const uint8_t *b, size_t len, const uint8_t *ref, size_t ref_len,
                     join_scan_t *o)
{
  const uint8_t *p = b, *end = b + len;
  memset(o, 0, sizeof *o);
  o->contig = 1;
  while (p < end) {
    const uint8_t *tag = p;
    uint64_t key, v;
    if (rm__pb_read_varint(&p, end, &key)) return -1;
    uint32_t f = (uint32_t)(key >> 3), wt = (uint32_t)(key & 7);
    if (wt == 0) {
      if (rm__pb_read_varint(&p, end, &v)) return -1;
      if (f == 1) o->formed = v != 0;
      else if (f == 2) o->worker_id = v;
      else if (f == 3) o->generation = v;
      else if (f == 4) o->rank = (uint32_t)v;
      else if (f == 5) o->world = (uint32_t)v;
    } else if (wt == 2) {
      if (rm__pb_read_varint(&p, end, &v) || v > (uint64_t)(end - p)) return -1;
      if (f == 6) {
        if (!o->seen_peer) {
          o->seen_peer = 1;
          o->first_peer = (size_t)(tag - b);
          if (ref && (size_t)(end - tag) >= ref_len && !memcmp(tag, ref, ref_len)) {
            o->span_match = 1;
            p = tag + ref_len;
            o->peers_end = (size_t)(p - b);
            continue;
          }
        } else if ((size_t)(tag - b) != o->peers_end) {
          o->contig = 0;
        }
        o->n_peer_fields++;
        o->peers_end = (size_t)(p - b) + (size_t)v;
      }
      p += v;
    } else if (wt == 1 || wt == 5) {
      size_t w = wt == 1 ? 8 : 4;
      if ((size_t)(end - p) < w) return -1;
      p += w;
    } else {
      return -1;
    }
  }
  return 0;
}

/* The same walk over the answer's slices in place (no copy of the answer:
 * at 65,536 workers the copy and its fresh pages cost a third of a client's
 * CPU).  Fast path only, with a reference span: 0 = scanned, 1 = the peers
 * differ from the reference (use scan_join on a copy), -1 = malformed. */
typedef struct {
  grpc_byte_buffer_reader rd;
  const uint8_t *p, *end;
  size_t off;
} cursor_t;

static int cur_fill(cursor_t *k)
{
  grpc_slice *sl;
  while (k->p == k->end) {
    if (!grpc_byte_buffer_reader_peek(&k->rd, &sl)) return -1;
    k->p = GRPC_SLICE_START_PTR(*sl);
    k->end = k->p + GRPC_SLICE_LENGTH(*sl);
  }
  return 0;
}

static int cur_varint(cursor_t *k, uint64_t *v)
{
  uint64_t x = 0;
  for (int sh = 0; sh < 64; sh += 7) {
    if (cur_fill(k)) return -1;
    uint8_t b = *k->p++;
    k->off++;
    x |= (uint64_t)(b & 0x7f) << sh;
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return -1;
}

/* Skip n bytes, or compare them with ref (ref != NULL): 0 = skipped/equal. */
static int cur_advance(cursor_t *k, size_t n, const uint8_t *ref)
{
  while (n > 0) {
    if (cur_fill(k)) return -1;
    size_t m = (size_t)(k->end - k->p) < n ? (size_t)(k->end - k->p) : n;
    if (ref && memcmp(k->p, ref, m)) return 1;
    if (ref) ref += m;
    k->p += m;
    k->off += m;
    n -= m;
  }
  return 0;
}

static int scan_join_bb(grpc_byte_buffer *bb, const uint8_t *ref, size_t ref_len,
                        join_scan_t *o)
{
  cursor_t k = {.p = NULL, .end = NULL, .off = 0};
  int rc = -1;
  memset(o, 0, sizeof *o);
  o->contig = 1;
  if (!bb || !grpc_byte_buffer_reader_init(&k.rd, bb)) return -1;
  for (;;) {
    uint64_t key, v;
    if (cur_fill(&k)) {
      rc = 0; /* end of the answer */
      break;
    }
    if (cur_varint(&k, &key)) break;
    uint32_t f = (uint32_t)(key >> 3), wt = (uint32_t)(key & 7);
    if (wt == 0) {
      if (cur_varint(&k, &v)) break;
      if (f == 1) o->formed = v != 0;
      else if (f == 2) o->worker_id = v;
      else if (f == 3) o->generation = v;
      else if (f == 4) o->rank = (uint32_t)v;
      else if (f == 5) o->world = (uint32_t)v;
    } else if (wt == 2 && f == 6 && !o->seen_peer) {
      /* The span starts with this tag (consumed): re-encode it, compare
       * it, then the span's remaining bytes in place. */
      uint8_t tb[10];
      size_t tl = 0;
      for (uint64_t x = key; tl < sizeof tb; x >>= 7) {
        tb[tl++] = (uint8_t)((x & 0x7f) | (x > 0x7f ? 0x80 : 0));
        if (x <= 0x7f) break;
      }
      o->seen_peer = 1;
      if (tl > ref_len || memcmp(tb, ref, tl) || cur_advance(&k, ref_len - tl, ref + tl)) {
        rc = 1; /* differs: the caller takes the slow path */
        break;
      }
      o->span_match = 1;
    } else if (wt == 2) {
      if (cur_varint(&k, &v)) break;
      if (f == 6) o->n_peer_fields++;
      if (cur_advance(&k, (size_t)v, NULL)) break;
    } else if (wt == 1 || wt == 5) {
      if (cur_advance(&k, wt == 1 ? 8 : 4, NULL)) break;
    } else {
      break;
    }
  }
  grpc_byte_buffer_reader_destroy(&k.rd);
  return rc;
}

static uint64_t fnv(uint64_t h, const void *d, size_t n)
{
  const uint8_t *p = d;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

/* Full check of an unpacked answer's peer list: the whole world, each rank
 * once; with a reference, the same entries.  Fills by_rank (N entries). */
static int check_peers(const client_t *c, const Ringmaster__V1__JoinResponse *r,
                       uint64_t *by_rank, char *why, size_t whylen)
{
  int n = c->cfg->world;
  if ((int)r->n_peers != n || (int)r->world != n) {
    snprintf(why, whylen, "%zu peers, world %u, want %d", r->n_peers, r->world, n);
    return -1;
  }
  memset(by_rank, 0, (size_t)n * sizeof *by_rank);
  for (int i = 0; i < n; i++) {
    const Ringmaster__V1__Peer *q = r->peers[i];
    if (q->rank >= (uint32_t)n || by_rank[q->rank] || !q->worker_id) {
      snprintf(why, whylen, "peer %d: rank %u bad, repeated or no worker id", i, q->rank);
      return -1;
    }
    by_rank[q->rank] = q->worker_id;
    if (c->ref) {
      const Ringmaster__V1__Peer *e = NULL;
      for (size_t k = 0; k < c->ref->n_peers && !e; k++) /* "by rank": usually k == i */
        if (c->ref->peers[(i + (int)k) % n]->rank == q->rank) e = c->ref->peers[(i + (int)k) % n];
      if (!e || e->worker_id != q->worker_id || strcmp(e->host, q->host) ||
          strcmp(e->data_addr, q->data_addr)) {
        snprintf(why, whylen, "peer of rank %u differs from the first answer", q->rank);
        return -1;
      }
    }
  }
  return 0;
}

/* The first formed answer: verify in full, keep as the reference. */
static int take_reference(client_t *c, const uint8_t *b, size_t len, const join_scan_t *s,
                          load_res_t *res)
{
  char why[160];
  Ringmaster__V1__JoinResponse *r = (void *)protobuf_c_message_unpack(
      &ringmaster__v1__join_response__descriptor, NULL, len, b);
  int n = c->cfg->world;
  if (!r) {
    note(res, "Join answer does not unpack");
    return -1;
  }
  c->ref_wid = calloc((size_t)n, sizeof *c->ref_wid);
  if (!c->ref_wid) abort();
  if (check_peers(c, r, c->ref_wid, why, sizeof why) || !r->generation) {
    note(res, "first Join answer: %s", r->generation ? why : "generation 0");
    protobuf_c_message_free_unpacked(&r->base, NULL);
    free(c->ref_wid);
    c->ref_wid = NULL;
    return -1;
  }
  c->ref = r;
  c->gen = r->generation;
  uint64_t h = 1469598103934665603ULL;
  for (int k = 0; k < n; k++) { /* digest in rank order, independent of encoding */
    const Ringmaster__V1__Peer *q = NULL;
    for (size_t i = 0; i < r->n_peers && !q; i++)
      if (r->peers[((size_t)k + i) % r->n_peers]->rank == (uint32_t)k)
        q = r->peers[((size_t)k + i) % r->n_peers];
    h = fnv(h, &q->worker_id, sizeof q->worker_id);
    h = fnv(h, q->host, strlen(q->host) + 1);
    h = fnv(h, q->data_addr, strlen(q->data_addr) + 1);
  }
  res->peers_digest = h;
  res->generation = r->generation;
  if (s->contig && s->n_peer_fields == (size_t)n) {
    c->ref_peers_len = s->peers_end - s->first_peer;
    c->ref_peers = malloc(c->ref_peers_len);
    if (!c->ref_peers) abort();
    memcpy(c->ref_peers, b + s->first_peer, c->ref_peers_len);
  }
  return 0;
}

/* Check one formed answer of local worker i; 0 = good. */
int check_join(client_t *c, int i, const uint8_t *b, size_t len, const join_scan_t *s,
                      load_res_t *res)
{
  int g = c->cfg->lo + i, n = c->cfg->world;
  if (!c->ref && take_reference(c, b, len, s, res)) return -1;
  if (s->generation != c->gen || s->world != (uint32_t)n || s->rank >= (uint32_t)n ||
      !s->worker_id) {
    note(res, "worker %d: generation %llu world %u rank %u (want generation %llu world %d)",
         g, (unsigned long long)s->generation, s->world, s->rank,
         (unsigned long long)c->gen, n);
    return -1;
  }
  if (s->span_match && !s->n_peer_fields) {
    res->n_fast++;
  } else { /* slow path: unpack and compare entry by entry */
    char why[160];
    uint64_t *tmp = malloc((size_t)n * sizeof *tmp);
    Ringmaster__V1__JoinResponse *r = (void *)protobuf_c_message_unpack(
        &ringmaster__v1__join_response__descriptor, NULL, len, b);
    int bad = !r || !tmp || check_peers(c, r, tmp, why, sizeof why);
    if (bad) note(res, "worker %d: %s", g, r ? why : "answer does not unpack");
    if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
    free(tmp);
    if (bad) return -1;
  }
  if (c->ref_wid[s->rank] != s->worker_id) {
    note(res, "worker %d: rank %u but peers[%u] is worker %llu, not %llu", g, s->rank,
         s->rank, (unsigned long long)c->ref_wid[s->rank],
         (unsigned long long)s->worker_id);
    return -1;
  }
  return 0;
}

/* ---- GZIP answers (see the file comment) ---- */

/* A compressed answer's bytes as received (reading it through a
 * grpc_byte_buffer_reader would inflate it). malloc'd, never NULL. */
uint8_t *raw_bytes(const grpc_byte_buffer *bb, size_t *len)
{
  const grpc_slice_buffer *sb = &bb->data.raw.slice_buffer;
  uint8_t *b = malloc(sb->length ? sb->length : 1), *p = b;
  if (!b) abort();
  for (size_t i = 0; i < sb->count; i++) {
    memcpy(p, GRPC_SLICE_START_PTR(sb->slices[i]), GRPC_SLICE_LENGTH(sb->slices[i]));
    p += GRPC_SLICE_LENGTH(sb->slices[i]);
  }
  *len = sb->length;
  return b;
}

/* Inflate a gzip member in full; 0 and a malloc'd *out, or -1. */
int gz_inflate(const uint8_t *z, size_t zlen, uint8_t **out, size_t *outlen)
{
  z_stream st;
  size_t cap = zlen * 8 + 64;
  uint8_t *b = malloc(cap);
  int rc = Z_OK;
  memset(&st, 0, sizeof st);
  if (!b || inflateInit2(&st, 15 + 16) != Z_OK) abort();
  st.next_in = (Bytef *)z;
  st.avail_in = (uInt)zlen;
  while (rc == Z_OK) {
    if (st.total_out == cap) {
      cap *= 2;
      if (!(b = realloc(b, cap))) abort();
    }
    st.next_out = b + st.total_out;
    st.avail_out = (uInt)(cap - st.total_out);
    rc = inflate(&st, Z_NO_FLUSH);
  }
  *outlen = st.total_out;
  inflateEnd(&st);
  if (rc != Z_STREAM_END || st.avail_in) {
    free(b);
    return -1;
  }
  *out = b;
  return 0;
}

/* The parts of the coordinator's layout of a member; -1 if it is not it. */
typedef struct {
  const uint8_t *head, *defl;
  size_t hlen, dlen;
  uint32_t crc, isize;
} gz_parts_t;

static int gz_split(const uint8_t *b, size_t len, gz_parts_t *g)
{
  if (len < 15 + 8 || b[0] != 0x1f || b[1] != 0x8b || b[2] != 8 || b[3] != 0 || b[10] != 0)
    return -1;
  g->hlen = (size_t)b[11] | (size_t)b[12] << 8;
  if (((b[13] | b[14] << 8) ^ 0xffff) != (int)g->hlen || 15 + g->hlen + 8 > len) return -1;
  g->head = b + 15;
  g->defl = g->head + g->hlen;
  g->dlen = len - 15 - g->hlen - 8;
  g->crc = rm__get_le32(b + len - 8);
  g->isize = rm__get_le32(b + len - 4);
  return 0;
}

/* The reference's deflate stream and tail, from a member whose inflated
 * bytes (full, len) were just verified. */
static void gz_keep_reference(client_t *c, const uint8_t *z, size_t zlen, const uint8_t *full,
                              size_t len)
{
  gz_parts_t g;
  if (c->ref_z || gz_split(z, zlen, &g) || g.hlen > len || memcmp(full, g.head, g.hlen)) return;
  c->ref_z = malloc(g.dlen ? g.dlen : 1);
  if (!c->ref_z) abort();
  memcpy(c->ref_z, g.defl, g.dlen);
  c->ref_zlen = g.dlen;
  c->ref_tail_len = len - g.hlen;
  c->ref_tail_crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), full + g.hlen, (uInt)c->ref_tail_len);
}

/* The fast check: 0 = the member is head + the reference's tail (its head
 * scanned into s, span_match set), -1 = not (inflate it). */
static int gz_fast(const client_t *c, const uint8_t *z, size_t zlen, join_scan_t *s)
{
  gz_parts_t g;
  if (!c->ref_z || gz_split(z, zlen, &g) || g.dlen != c->ref_zlen ||
      memcmp(g.defl, c->ref_z, g.dlen) ||
      g.isize != (uint32_t)(g.hlen + c->ref_tail_len))
    return -1;
  uLong ch = crc32(crc32(0L, Z_NULL, 0), g.head, (uInt)g.hlen);
  if ((uint32_t)crc32_combine(ch, c->ref_tail_crc, (z_off_t)c->ref_tail_len) != g.crc) return -1;
  if (scan_join(g.head, g.hlen, NULL, 0, s) || s->seen_peer) return -1;
  s->span_match = 1; /* the peers are the reference's, byte for byte */
  return 0;
}

void join_req(client_t *c, int i, uint64_t worker_id, int64_t deadline_ns,
              Ringmaster__V1__JoinRequest *q, char *host, char *data)
{
  int g = c->cfg->lo + i;
  snprintf(host, 32, "node%d", g / 8);
  snprintf(data, 32, "10.%d.%d.%d:5000", g / 65536, (g / 256) % 256, g % 256);
  q->job_id = c->cfg->job_id;
  q->token = (char *)c->cfg->token;
  q->worker_id = worker_id;
  q->host = host;
  q->data_addr = data;
  q->devices = "cpu";
  q->rank_hint = -1;
  q->accept_gzip = c->cfg->gzip;
  int left_ms = rm__ms_left(deadline_ns);
  q->wait_ms = (uint32_t)(left_ms < JOIN_WAIT_MS ? left_ms : JOIN_WAIT_MS);
}

static void join_send(client_t *c, int i, uint64_t worker_id, int64_t deadline_ns)
{
  char host[32], data[32];
  Ringmaster__V1__JoinRequest q = RINGMASTER__V1__JOIN_REQUEST__INIT;
  join_req(c, i, worker_id, deadline_ns, &q, host, data);
  int left_ms = rm__ms_left(deadline_ns);
  /* The call's deadline is the wave's, not wait_ms: the group may form at
   * once and still take minutes to deliver N answers of N peers. */
  call_start(c, i, i % c->cfg->channels, "/ringmaster.v1.Worker/Join", &q.base,
             left_ms / 1000 + 30, 0);
}

void phase_join(client_t *c, load_res_t *res)
{
  int64_t dl = rm__now_ns() + (int64_t)c->cfg->timeout_s * 1000000000LL;
  int64_t *first = calloc((size_t)c->n, sizeof *first);
  if (!first) abort();
  res->t_first = rm__now_ns();
  for (int i = 0; i < c->n; i++) {
    join_send(c, i, 0, dl);
    first[i] = c->ops[i].t0;
  }
  int left = c->n;
  while (left > 0) {
    int i = next_answer(c, dl + 60 * 1000000000LL, left, "Join", res);
    if (i < 0) break;
    op_t *o = &c->ops[i];
    if (o->st != GRPC_STATUS_OK) {
      rpc_error(res, o, "Join", c->cfg->lo + i);
      call_finish(o);
      left--;
      continue;
    }
    join_scan_t s;
    grpc_slice sl = grpc_empty_slice();
    const uint8_t *b = NULL;
    uint8_t *zb = NULL, *full = NULL;
    size_t len = 0, zlen = 0;
    int bad;
    if (o->recv && o->recv->data.raw.compression == GRPC_COMPRESS_GZIP) { /* GZIP */
      res->n_gzip++;
      zb = raw_bytes(o->recv, &zlen);
      bad = gz_fast(c, zb, zlen, &s) ? 1 : 0;
      if (bad == 1) { /* no reference yet, or another tail: inflate it */
        bad = gz_inflate(zb, zlen, &full, &len) ? -1 : 0;
        b = full;
        if (!bad) bad = scan_join(b, len, c->ref_peers, c->ref_peers_len, &s);
      }
    } else {
      bad = c->ref_peers ? scan_join_bb(o->recv, c->ref_peers, c->ref_peers_len, &s) : 1;
      if (bad == 0 && s.formed && (!s.span_match || s.n_peer_fields)) bad = 1;
      if (bad == 1) { /* no reference yet, or not the fast case: a copy */
        sl = answer_bytes(o->recv);
        b = GRPC_SLICE_START_PTR(sl);
        len = GRPC_SLICE_LENGTH(sl);
        bad = scan_join(b, len, c->ref_peers, c->ref_peers_len, &s);
      }
    }
    int64_t t1 = o->t1;
    call_finish(o);
    if (bad) {
      note(res, "worker %d: malformed Join answer", c->cfg->lo + i);
      res->n_bad++;
      left--;
    } else if (!s.formed && rm__now_ns() < dl) {
      res->n_rejoin++;
      join_send(c, i, s.worker_id, dl);
    } else if (!s.formed) {
      note(res, "worker %d: not formed by the deadline", c->cfg->lo + i);
      res->n_bad++;
      left--;
    } else {
      if (check_join(c, i, b, len, &s, res)) {
        res->n_bad++;
      } else {
        if (full) gz_keep_reference(c, zb, zlen, full, len);
        res->n_ok++;
        c->wid[i] = s.worker_id;
        c->rank_of[i] = s.rank;
      }
      c->lat[res->n_lat++] = t1 - first[i];
      if (t1 > res->t_last) res->t_last = t1;
      left--;
    }
    grpc_slice_unref(sl);
    free(zb);
    free(full);
  }
  free(first);
  res->n_ranks = c->n; /* rank_of: the parent checks all N are a permutation */
}

