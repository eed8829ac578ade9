/*
 * control.c - unary gRPC calls from the agent (C core client API).
 *
 * One batch per call: SEND_INITIAL_METADATA, SEND_MESSAGE,
 * SEND_CLOSE_FROM_CLIENT, RECV_INITIAL_METADATA, RECV_MESSAGE,
 * RECV_STATUS_ON_CLIENT, plucked from a queue created for the call, with the
 * call's deadline as the only wait.
 *
 * Session stream (rm__ctl_stream_*): one batch without RECV_MESSAGE and no
 * deadline, so it completes only when the server ends the call or the
 * connection breaks, or when rm__ctl_stream_cancel cancels it.
 */
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"

#define CTL_MAX_RECEIVE (256 << 20) /* bytes; see rm__ctl_open */

struct rm__ctl {
  grpc_channel *ch;
};

static char *slurp(const char *path)
{
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  long n;
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
    buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) buf[n] = 0;
    else {
      free(buf);
      buf = NULL;
    }
  }
  fclose(f);
  return buf;
}

rm__ctl_t *rm__ctl_open(const char *addr, const char *ca, const char *cert,
                        const char *key, char *err, size_t errlen)
{
  rm__ctl_t *c = calloc(1, sizeof *c);
  grpc_channel_credentials *creds = NULL;
  char *pem_ca = NULL, *pem_cert = NULL, *pem_key = NULL;
  if (!c) goto fail;
  grpc_init();
  if (ca || cert || key) {
    pem_ca = ca ? slurp(ca) : NULL;
    pem_cert = cert ? slurp(cert) : NULL;
    pem_key = key ? slurp(key) : NULL;
    if (!pem_ca || !pem_cert || !pem_key) {
      snprintf(err, errlen, "TLS needs readable --tls-ca, --tls-cert and --tls-key files");
      goto fail_init;
    }
    grpc_ssl_pem_key_cert_pair pair = {pem_key, pem_cert};
    creds = grpc_ssl_credentials_create(pem_ca, &pair, NULL, NULL);
  } else {
    creds = grpc_insecure_credentials_create();
  }
  /* Reconnect quickly after a coordinator restart (gRPC's default backoff
   * grows to 120 s, during which fail-fast calls just fail). */
  grpc_arg args[5];
  args[0].type = args[1].type = args[2].type = args[3].type = args[4].type = GRPC_ARG_INTEGER;
  args[0].key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
  args[0].value.integer = 100;
  args[1].key = GRPC_ARG_MIN_RECONNECT_BACKOFF_MS;
  args[1].value.integer = 100;
  args[2].key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
  args[2].value.integer = 500; /* at most 2 attempts a second per worker */
  args[3].key = GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS;
  args[3].value.integer = 100;
  /* A Join answer carries every peer (about 90 bytes each with a
   * shared-memory offer): past ~46,000 workers it outgrows gRPC's default
   * 4 MiB receive limit, which also bounds a gzip answer's inflated size. */
  args[4].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[4].value.integer = CTL_MAX_RECEIVE;
  grpc_channel_args cargs = {5, args};
  c->ch = grpc_channel_create(addr, creds, &cargs);
  grpc_channel_credentials_release(creds);
  free(pem_ca);
  free(pem_cert);
  free(pem_key);
  return c;
fail_init:
  free(pem_ca);
  free(pem_cert);
  free(pem_key);
  grpc_shutdown();
fail:
  free(c);
  return NULL;
}

void rm__ctl_close(rm__ctl_t *c)
{
  if (!c) return;
  grpc_channel_destroy(c->ch);
  free(c);
  grpc_shutdown();
}

static grpc_byte_buffer *pack(const ProtobufCMessage *m)
{
  size_t len = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) return NULL;
  protobuf_c_message_pack(m, buf);
  grpc_slice s = grpc_slice_new(buf, len, free);
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

static ProtobufCMessage *unpack(grpc_byte_buffer *bb,
                                const ProtobufCMessageDescriptor *d)
{
  grpc_byte_buffer_reader rd;
  ProtobufCMessage *m = NULL;
  if (!bb || !grpc_byte_buffer_reader_init(&rd, bb)) return NULL;
  grpc_slice s = grpc_byte_buffer_reader_readall(&rd);
  m = protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
  grpc_slice_unref(s);
  grpc_byte_buffer_reader_destroy(&rd);
  return m;
}

int rm__ctl_call(rm__ctl_t *c, const char *method, const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *resp_desc,
                 ProtobufCMessage **resp, int timeout_ms, char *msg,
                 size_t msglen)
{
  grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
  gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                 gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
  grpc_slice path = grpc_slice_from_static_string(method);
  grpc_call *call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS,
                                             cq, path, NULL, dl, NULL);
  grpc_metadata_array md_in, md_trail;
  grpc_byte_buffer *send = pack(req), *recv = NULL;
  grpc_status_code status = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  grpc_op ops[6];
  int rc;
  grpc_metadata_array_init(&md_in);
  grpc_metadata_array_init(&md_trail);
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_in;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &md_trail;
  ops[5].data.recv_status_on_client.status = &status;
  ops[5].data.recv_status_on_client.status_details = &details;
  *resp = NULL;
  if (grpc_call_start_batch(call, ops, 6, (void *)1, NULL) == GRPC_CALL_OK)
    grpc_completion_queue_pluck(cq, (void *)1, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  rc = (int)status;
  snprintf(msg, msglen, "%.*s", (int)GRPC_SLICE_LENGTH(details),
           (const char *)GRPC_SLICE_START_PTR(details));
  if (rc == GRPC_STATUS_OK) {
    *resp = unpack(recv, resp_desc);
    if (!*resp) {
      rc = GRPC_STATUS_INTERNAL;
      snprintf(msg, msglen, "malformed answer from the coordinator");
    }
  }
  grpc_slice_unref(details);
  grpc_metadata_array_destroy(&md_in);
  grpc_metadata_array_destroy(&md_trail);
  if (recv) grpc_byte_buffer_destroy(recv);
  if (send) grpc_byte_buffer_destroy(send);
  grpc_call_unref(call);
  grpc_completion_queue_shutdown(cq);
  grpc_completion_queue_destroy(cq);
  return rc;
}

/* ---- session stream ---- */
struct rm__ctl_stream {
  grpc_completion_queue *cq;
  grpc_call *call;
  grpc_byte_buffer *send;
  grpc_metadata_array md_in, md_trail;
  grpc_status_code status;
  grpc_slice details;
};

rm__ctl_stream_t *rm__ctl_stream_open(rm__ctl_t *c, const char *method,
                                      const ProtobufCMessage *req)
{
  rm__ctl_stream_t *s = calloc(1, sizeof *s);
  grpc_op ops[5];
  if (!s) return NULL;
  s->cq = grpc_completion_queue_create_for_pluck(NULL);
  s->call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq,
                                     grpc_slice_from_static_string(method), NULL,
                                     gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  s->send = pack(req);
  s->status = GRPC_STATUS_UNKNOWN;
  s->details = grpc_empty_slice();
  grpc_metadata_array_init(&s->md_in);
  grpc_metadata_array_init(&s->md_trail);
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = s->send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &s->md_in;
  ops[4].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[4].data.recv_status_on_client.trailing_metadata = &s->md_trail;
  ops[4].data.recv_status_on_client.status = &s->status;
  ops[4].data.recv_status_on_client.status_details = &s->details;
  if (!s->call || !s->send ||
      grpc_call_start_batch(s->call, ops, 5, (void *)1, NULL) != GRPC_CALL_OK) {
    if (s->call) grpc_call_cancel(s->call, NULL);
    rm__ctl_stream_free(s); /* no batch started: nothing to wait for */
    return NULL;
  }
  return s;
}

int rm__ctl_stream_wait(rm__ctl_stream_t *s, char *msg, size_t msglen)
{
  grpc_completion_queue_pluck(s->cq, (void *)1, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
  snprintf(msg, msglen, "%.*s", (int)GRPC_SLICE_LENGTH(s->details),
           (const char *)GRPC_SLICE_START_PTR(s->details));
  return (int)s->status;
}

void rm__ctl_stream_cancel(rm__ctl_stream_t *s)
{
  if (s && s->call) grpc_call_cancel(s->call, NULL);
}

void rm__ctl_stream_free(rm__ctl_stream_t *s)
{
  if (!s) return;
  grpc_slice_unref(s->details);
  grpc_metadata_array_destroy(&s->md_in);
  grpc_metadata_array_destroy(&s->md_trail);
  if (s->send) grpc_byte_buffer_destroy(s->send);
  if (s->call) grpc_call_unref(s->call);
  grpc_completion_queue_shutdown(s->cq);
  grpc_completion_queue_destroy(s->cq);
  free(s);
}
