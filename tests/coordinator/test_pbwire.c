/*
 * test_pbwire.c - the protobuf wire reader of common/rm_pbwire.h against
 * protobuf-c, which packs every message here and is the oracle for what is
 * well-formed:
 *
 *   - SessionRequests as a worker sends them (a heartbeat, a barrier
 *     arrival with a payload, a gate call, the opening message with
 *     gate_push), a JoinResponse with peers, a ReportStepRequest with
 *     doubles (64-bit fields): rm__pb_fields names exactly the fields the
 *     test set (proto3 leaves out the ones at their default), never bit 0;
 *   - every proper prefix of each: bit 0 (malformed) exactly when
 *     protobuf-c refuses to unpack the prefix;
 *   - hand-made bytes: a 32-bit field (none in our messages) is read, one
 *     cut short is not; field number 0, a group (wire type 3), wire type
 *     7: bit 0;
 *   - rm__pb_read_varint reads back what rm__pb_varint wrote, for values
 *     around every 7-bit boundary, and refuses one cut short or 11 bytes
 *     long.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ringmaster/v1/messages.pb-c.h"
#include "rm_pbwire.h"

static int bad;

#define BIT(f) ((uint64_t)1 << (f))

static void check(const char *what, const ProtobufCMessage *m, uint64_t want)
{
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *b = malloc(n ? n : 1);
  protobuf_c_message_pack(m, b);
  uint64_t got = rm__pb_fields(b, n);
  if (got != want) {
    fprintf(stderr, "%s: fields 0x%llx, want 0x%llx\n", what, (unsigned long long)got,
            (unsigned long long)want);
    bad++;
  }
  for (size_t l = 0; l < n; l++) {
    ProtobufCMessage *u = protobuf_c_message_unpack(m->descriptor, NULL, l, b);
    int malformed = (int)(rm__pb_fields(b, l) & 1);
    if (malformed != (u == NULL)) {
      fprintf(stderr, "%s: prefix of %zu of %zu bytes: rm__pb_fields says %s, protobuf-c %s\n",
              what, l, n, malformed ? "malformed" : "well-formed",
              u ? "unpacks it" : "refuses it");
      bad++;
    }
    if (u) protobuf_c_message_free_unpacked(u, NULL);
  }
  free(b);
}

static void raw(const char *what, const uint8_t *b, size_t n)
{
  if (!(rm__pb_fields(b, n) & 1)) {
    fprintf(stderr, "%s: not flagged malformed\n", what);
    bad++;
  }
}

int main(void)
{
  Ringmaster__V1__SessionRequest q = RINGMASTER__V1__SESSION_REQUEST__INIT;
  q.job_id = 7;
  q.token = "a-job-token";
  q.generation = 3;
  q.worker_id = 300;
  q.step = 1u << 20;
  check("heartbeat", &q.base, BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(5));

  Ringmaster__V1__SessionBarrier sb = RINGMASTER__V1__SESSION_BARRIER__INIT;
  uint8_t payload[200];
  memset(payload, 0xa5, sizeof payload);
  sb.name = "round-3";
  sb.timeout_ms = 30000;
  sb.payload.data = payload;
  sb.payload.len = sizeof payload;
  q.barrier = &sb;
  check("barrier arrival", &q.base, BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(5) | BIT(6));
  q.barrier = NULL;

  Ringmaster__V1__SessionGate sg = RINGMASTER__V1__SESSION_GATE__INIT;
  sg.ready = 1;
  sg.wait_ms = 5000;
  q.gate = &sg;
  q.step = 0; /* proto3: left out */
  check("gate call", &q.base, BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(7));
  q.gate = NULL;

  q.gate_push = 1;
  const ProtobufCFieldDescriptor *gp = protobuf_c_message_descriptor_get_field_by_name(
      &ringmaster__v1__session_request__descriptor, "gate_push");
  check("opening with gate_push", &q.base, BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(gp->id));

  Ringmaster__V1__JoinResponse j = RINGMASTER__V1__JOIN_RESPONSE__INIT;
  Ringmaster__V1__Peer p[3], *pp[3];
  for (int i = 0; i < 3; i++) {
    ringmaster__v1__peer__init(&p[i]);
    p[i].rank = (uint32_t)i;
    p[i].data_addr = "10.0.0.1:4000";
    pp[i] = &p[i];
  }
  j.formed = 1;
  j.worker_id = 1ull << 40;
  j.n_peers = 3;
  j.peers = pp;
  uint64_t want = 0;
  const ProtobufCMessageDescriptor *jd = &ringmaster__v1__join_response__descriptor;
  want |= BIT(protobuf_c_message_descriptor_get_field_by_name(jd, "formed")->id);
  want |= BIT(protobuf_c_message_descriptor_get_field_by_name(jd, "worker_id")->id);
  want |= BIT(protobuf_c_message_descriptor_get_field_by_name(jd, "peers")->id);
  check("join answer", &j.base, want);

  Ringmaster__V1__ReportStepRequest rs = RINGMASTER__V1__REPORT_STEP_REQUEST__INIT;
  rs.job_id = 7;
  rs.compute_ms = 1.5;
  rs.loss = 0.25;
  const ProtobufCMessageDescriptor *rd = &ringmaster__v1__report_step_request__descriptor;
  check("step report", &rs.base,
        BIT(protobuf_c_message_descriptor_get_field_by_name(rd, "job_id")->id) |
            BIT(protobuf_c_message_descriptor_get_field_by_name(rd, "compute_ms")->id) |
            BIT(protobuf_c_message_descriptor_get_field_by_name(rd, "loss")->id));

  const uint8_t f32[] = {0x0d, 1, 2, 3, 4, 0x10, 0x05};
  if (rm__pb_fields(f32, sizeof f32) != (BIT(1) | BIT(2))) {
    fprintf(stderr, "a 32-bit field then a varint: fields 0x%llx\n",
            (unsigned long long)rm__pb_fields(f32, sizeof f32));
    bad++;
  }
  raw("a 32-bit field cut short", f32, 4);
  const uint8_t field0[] = {0x00, 0x01}, group[] = {0x0b, 0x0c}, wt7[] = {0x0f, 0x00},
                cut[] = {0x12, 0x05, 'a', 'b'};
  raw("field number 0", field0, sizeof field0);
  raw("a group", group, sizeof group);
  raw("wire type 7", wt7, sizeof wt7);
  raw("a string cut short", cut, sizeof cut);

  for (int k = 0; k < 64; k++)
    for (int d = -1; d <= 1; d++) {
      uint64_t v = ((uint64_t)1 << k) + (uint64_t)(int64_t)d, got = 0;
      uint8_t b[10];
      size_t n = rm__pb_varint(b, 0, v);
      const uint8_t *r = b;
      if (n != rm__pb_varint_len(v) || rm__pb_read_varint(&r, b + n, &got) || got != v ||
          r != b + n) {
        fprintf(stderr, "varint %llu: written in %zu bytes, read back %llu\n",
                (unsigned long long)v, n, (unsigned long long)got);
        bad++;
      }
      r = b;
      if (n > 1 && !rm__pb_read_varint(&r, b + n - 1, &got)) {
        fprintf(stderr, "varint %llu cut short: read\n", (unsigned long long)v);
        bad++;
      }
    }
  uint8_t eleven[11];
  memset(eleven, 0x80, sizeof eleven);
  const uint8_t *r = eleven;
  uint64_t v;
  if (!rm__pb_read_varint(&r, eleven + sizeof eleven, &v)) {
    fprintf(stderr, "an 11-byte varint was read\n");
    bad++;
  }
  printf("pbwire: %s\n", bad ? "FAILED" : "ok");
  return bad != 0;
}
