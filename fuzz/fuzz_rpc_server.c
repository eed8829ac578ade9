/*
 * fuzz_rpc_server.c - the RPC adapter's server half for fuzz_rpc: the
 * functions coordinator/rpc/server.c provides to the handlers and the core
 * (rpc_int.h "server.c: gRPC", core/waiters.h rm__rpc_out_flush), with no gRPC.
 * fuzz_rpc links every coordinator source except server.c, and this file
 * instead, so the handlers (rpc*.c, waiters.c) and the core run unchanged.
 *
 * What each replacement keeps from server.c (the contract the handlers and
 * the core rely on):
 *   rm__reply        first answer wins (k->answered), unparks the call,
 *                    counts grpc_errors_total, packs resp only when OK;
 *                    queued in c->rpc->out and delivered after COMMIT;
 *   rm__reply_tail   the same with the answer = head's encoding + the
 *                    blob's bytes (copied now: server.c takes a slice
 *                    reference, so a blob freed later must not matter);
 *   rm__reply_tail_gz  rm__reply_tail's answer; when the call accepted gzip,
 *                    the gzip member server.c would send is built with
 *                    gz_answer.c and inflated here, and must give exactly
 *                    the head + tail bytes (else abort: a finding);
 *   rm__stream_send  one Watch message; sets park.watch_sending;
 *   rm__session_push_msg  one Session message (a moved-on notice), as a
 *                    stream message;
 *   rm__rpc_out_flush    (commit step 1) delivers each queued answer to its
 *                    call: a final status is recorded (code, details,
 *                    bytes), a stream message counted; the harness checks
 *                    them (fuzz_rpc.c, "Oracle");
 *   rm__server_start/stop: no listener; c->rpc->srv stays NULL.
 * Not reproduced: byte buffers, metadata, the completion queue thread and
 * the reference counts of a call (the harness owns each call and frees it
 * only once it is answered and unlinked).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fuzz_rpc.h"
#include "rm_alloc.h"
#include "rpc/gz_answer.h"

rm__park_t *rm__call_park(rm__call_t *call) { return &call->park; }

/* server.c makes it at the first wait; here it is always there */
rm__park_t *rm__call_wpark(rm__call_t *call) { return &call->wpark; }
rm__park_t *rm__call_wpark_make(rm__call_t *call) { return &call->wpark; }
int rm__park_on_stream(const rm__park_t *p)
{
  return p == &p->call->wpark;
}

static uint8_t *pack(const ProtobufCMessage *m, size_t *len)
{
  *len = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = rm__xmalloc(*len ? *len : 1);
  protobuf_c_message_pack(m, buf);
  return buf;
}

/* One queued answer. c->rpc->out's bb field carries a struct fz_bytes *. */
struct fz_bytes {
  uint8_t *buf;
  size_t len;
};

static void out_push(rm_coord_t *c, rm__call_t *k, int code, const char *details,
                     uint8_t *buf, size_t len)
{
  struct fz_bytes *b = NULL;
  if (c->rpc->nout == c->rpc->capout) {
    c->rpc->capout = c->rpc->capout ? 2 * c->rpc->capout : 16;
    c->rpc->out = rm__xrealloc(c->rpc->out, c->rpc->capout * sizeof *c->rpc->out);
  }
  if (buf) {
    b = rm__xmalloc(sizeof *b);
    b->buf = buf;
    b->len = len;
  }
  rm__out_t *o = &c->rpc->out[c->rpc->nout++];
  o->call = k;
  o->code = code;
  o->details = details ? rm__xstrdup(details) : NULL;
  o->bb = b;
  k->queued++;
}

void rm__reply(rm_coord_t *c, rm__call_t *k, int code, const char *details,
               const ProtobufCMessage *resp)
{
  uint8_t *buf = NULL;
  size_t len = 0;
  if (k->answered) return;
  k->answered = 1;
  rm__park_unlink(&k->park);
  rm__park_unlink(&k->wpark);
  if (code != RM__GRPC_OK) c->ctr.grpc_errors_total++;
  if (code == RM__GRPC_OK && resp) buf = pack(resp, &len);
  out_push(c, k, code, details ? details : "", buf, len);
}

struct rm__blob {
  rm__blob_release_fn release; /* first: rm__blob_release (model.h) */
  uint8_t *buf;
  size_t len;
};

rm__blob_t *rm__blob_pack(const ProtobufCMessage *m)
{
  rm__blob_t *b = rm__xmalloc(sizeof *b);
  b->release = rm__blob_unref;
  b->buf = pack(m, &b->len);
  return b;
}

void rm__blob_unref(rm__blob_t *b)
{
  if (!b) return;
  free(b->buf);
  free(b);
}

void rm__reply_tail(rm_coord_t *c, rm__call_t *k, const ProtobufCMessage *head,
                    rm__blob_t *tail)
{
  size_t hl;
  if (k->answered) return;
  k->answered = 1;
  rm__park_unlink(&k->park);
  uint8_t *h = pack(head, &hl);
  uint8_t *buf = rm__xmalloc(hl + tail->len + 1);
  memcpy(buf, h, hl);
  memcpy(buf + hl, tail->buf, tail->len);
  free(h);
  k->tail_used = 1;
  out_push(c, k, RM__GRPC_OK, "", buf, hl + tail->len);
}

void rm__call_accept_gzip(rm__call_t *k, int yes) { k->gzip_ok = yes != 0; }

/* server.c's gzip member for head h + tail, inflated: must be h + tail. */
static void gz_check(const uint8_t *h, size_t hl, const rm__blob_t *tail)
{
  rm__gz_tail_t t;
  uint8_t pre[RM__GZ_HEAD_OVERHEAD], trl[RM__GZ_TRAILER];
  if (hl > RM__GZ_HEAD_MAX || rm__gz_tail_make(tail->buf, tail->len, 1, &t)) abort();
  rm__gz_head(pre, hl);
  rm__gz_trailer(trl, h, hl, &t);
  size_t n = sizeof pre + hl + t.zlen + sizeof trl, want = hl + tail->len;
  uint8_t *m = rm__xmalloc(n), *out = rm__xmalloc(want + 1);
  memcpy(m, pre, sizeof pre);
  memcpy(m + sizeof pre, h, hl);
  memcpy(m + sizeof pre + hl, t.z, t.zlen);
  memcpy(m + sizeof pre + hl + t.zlen, trl, sizeof trl);
  z_stream z;
  memset(&z, 0, sizeof z);
  if (inflateInit2(&z, 15 + 16) != Z_OK) abort();
  z.next_in = m;
  z.avail_in = (uInt)n;
  z.next_out = out;
  z.avail_out = (uInt)want + 1;
  int rc = inflate(&z, Z_FINISH);
  if (rc != Z_STREAM_END || z.total_out != want || z.avail_in != 0 ||
      memcmp(out, h, hl) || memcmp(out + hl, tail->buf, tail->len)) {
    fprintf(stderr, "fuzz_rpc: gzip answer does not inflate to head + tail "
            "(rc %d, %lu of %zu bytes)\n", rc, z.total_out, want);
    abort();
  }
  inflateEnd(&z);
  rm__gz_tail_free(&t);
  free(m);
  free(out);
}

void rm__reply_tail_gz(rm_coord_t *c, rm__call_t *k, const ProtobufCMessage *head,
                       rm__blob_t *tail)
{
  if (k->gzip_ok && !k->answered) {
    size_t hl;
    uint8_t *h = pack(head, &hl);
    gz_check(h, hl, tail);
    free(h);
  }
  rm__reply_tail(c, k, head, tail);
}

void rm__stream_send(rm_coord_t *c, rm__call_t *k, const ProtobufCMessage *msg)
{
  size_t len;
  if (k->answered) return;
  k->park.watch_sending = 1;
  uint8_t *buf = pack(msg, &len);
  out_push(c, k, -1, NULL, buf, len);
}

/* server.c's: a call's own park ends the call; a Session's barrier or
 * gate park gets a stream message, here packed as a SessionResponse by
 * protobuf-c (server.c frames the bytes itself; integration.session reads
 * them). */
void rm__park_answer(rm_coord_t *c, rm__park_t *p, const ProtobufCMessage *resp,
                     rm__blob_t *shared)
{
  rm__call_t *k = p->call;
  const ProtobufCMessageDescriptor *d = p->kind == RM__PARK_BARRIER
                                            ? &ringmaster__v1__barrier_response__descriptor
                                            : &ringmaster__v1__step_gate_response__descriptor;
  ProtobufCMessage *sb = NULL;
  size_t len;
  if (!rm__park_on_stream(p)) {
    if (!shared) {
      rm__reply(c, k, RM__GRPC_OK, NULL, resp);
      return;
    }
    Ringmaster__V1__BarrierResponse none = RINGMASTER__V1__BARRIER_RESPONSE__INIT;
    rm__reply_tail(c, k, &none.base, shared);
    return;
  }
  rm__park_unlink(p);
  if (k->answered) return;
  if (shared) {
    sb = protobuf_c_message_unpack(d, NULL, shared->len, shared->buf);
    if (!sb) abort(); /* the coordinator's own packed answer */
  }
  Ringmaster__V1__SessionResponse m = RINGMASTER__V1__SESSION_RESPONSE__INIT;
  const ProtobufCMessage *a = sb ? sb : resp;
  if (p->kind == RM__PARK_BARRIER) m.barrier = (Ringmaster__V1__BarrierResponse *)a;
  else m.gate = (Ringmaster__V1__StepGateResponse *)a;
  uint8_t *buf = pack(&m.base, &len);
  if (sb) protobuf_c_message_free_unpacked(sb, NULL);
  out_push(c, k, -1, NULL, buf, len);
}

/* server.c's: an unasked SessionResponse with gate_pushed and the shared
 * gate answer, here packed by protobuf-c. */
void rm__session_push(rm_coord_t *c, rm__call_t *k, uint64_t gen, rm__blob_t *shared)
{
  size_t len;
  if (k->answered) return;
  Ringmaster__V1__StepGateResponse *g =
      ringmaster__v1__step_gate_response__unpack(NULL, shared->len, shared->buf);
  if (!g) abort(); /* the coordinator's own packed answer */
  Ringmaster__V1__SessionResponse m = RINGMASTER__V1__SESSION_RESPONSE__INIT;
  m.gate = g;
  m.gate_pushed = 1;
  m.generation = gen;
  uint8_t *buf = pack(&m.base, &len);
  protobuf_c_message_free_unpacked(&g->base, NULL);
  out_push(c, k, -1, NULL, buf, len);
}

void rm__session_push_msg(rm_coord_t *c, rm__call_t *k, const ProtobufCMessage *m)
{
  size_t len;
  if (k->answered) return;
  uint8_t *buf = pack(m, &len);
  out_push(c, k, -1, NULL, buf, len);
}

/* server.c's: a rolled-back section's answers become the storage failure
 * (the fuzzer's store never fails, so this only keeps the port whole). */
void rm__rpc_out_fail(rm_coord_t *c, int full, const char *why)
{
  for (size_t i = 0; i < c->rpc->nout; i++) {
    rm__out_t *o = &c->rpc->out[i];
    struct fz_bytes *b = o->bb;
    if (b) free(b->buf);
    free(b);
    free(o->details);
    o->bb = NULL;
    o->code = full ? 8 : 14; /* RESOURCE_EXHAUSTED, UNAVAILABLE */
    o->details = strdup(why ? why : "storage");
  }
}

void rm__rpc_out_flush(rm_coord_t *c)
{
  for (size_t i = 0; i < c->rpc->nout; i++) {
    rm__out_t *o = &c->rpc->out[i];
    struct fz_bytes *b = o->bb;
    fz_deliver(o->call, o->code, o->details, b ? b->buf : NULL, b ? b->len : 0);
    o->call->queued--;
    if (b) free(b->buf);
    free(b);
    free(o->details);
  }
  c->rpc->nout = 0;
}

rm_status_t rm__server_start(rm_coord_t *c, char *err, size_t errlen)
{
  (void)err;
  (void)errlen;
  snprintf(c->grpc_addr, sizeof c->grpc_addr, "fuzz:0");
  return RM_OK;
}

void rm__server_stop(rm_coord_t *c) { (void)c; }
