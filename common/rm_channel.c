/*
 * rm_channel.c - the gRPC channel to a coordinator (rm_channel.h).
 */
#include <grpc/grpc_security.h>
#include <stdio.h>
#include <stdlib.h>

#include "rm_channel.h"

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

grpc_server_credentials *rm__server_creds_open(const char *ca, const char *cert,
                                               const char *key, char *err, size_t errlen)
{
  if (!ca && !cert && !key) return grpc_insecure_server_credentials_create();
  if (!ca || !cert || !key) {
    snprintf(err, errlen, "TLS needs all of --tls-cert, --tls-key and --tls-ca");
    return NULL;
  }
  const char *path[3] = {cert, key, ca};
  char *pem[3] = {NULL, NULL, NULL};
  grpc_server_credentials *creds = NULL;
  int i = 0;
  for (; i < 3 && (pem[i] = slurp(path[i])); i++) {
  }
  if (i < 3) {
    snprintf(err, errlen, "cannot read %s", path[i]);
  } else {
    grpc_ssl_pem_key_cert_pair pair = {pem[1], pem[0]};
    creds = grpc_ssl_server_credentials_create_ex(
        pem[2], &pair, 1, GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY, NULL);
    if (!creds) snprintf(err, errlen, "TLS credentials rejected by gRPC");
  }
  for (int k = 0; k < 3; k++) free(pem[k]);
  return creds;
}

grpc_channel *rm__channel_open(const char *addr, const char *ca, const char *cert,
                               const char *key, char *err, size_t errlen)
{
  grpc_channel_credentials *creds;
  if (ca || cert || key) {
    char *pem_ca = ca ? slurp(ca) : NULL, *pem_cert = cert ? slurp(cert) : NULL,
         *pem_key = key ? slurp(key) : NULL;
    if (pem_ca && pem_cert && pem_key) {
      grpc_ssl_pem_key_cert_pair pair = {pem_key, pem_cert};
      creds = grpc_ssl_credentials_create(pem_ca, &pair, NULL, NULL);
    } else {
      snprintf(err, errlen, "TLS needs readable --tls-ca, --tls-cert and --tls-key files");
      creds = NULL;
    }
    free(pem_ca);
    free(pem_cert);
    free(pem_key);
    if (!creds) return NULL;
  } else {
    creds = grpc_insecure_credentials_create();
  }
  grpc_arg args[5] = {
      {GRPC_ARG_INTEGER, GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, {.integer = 100}},
      /* gRPC's name for the shortest time a connection attempt is given
       * (TCP, TLS and HTTP/2 handshakes), not a backoff: at 100 ms a busy
       * coordinator's or relay's slow handshake failed the attempt, and
       * every call waiting on it, UNAVAILABLE (a relay's whole stream at
       * 16,384 workers). A refused connection still fails at once. */
      {GRPC_ARG_INTEGER, GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, {.integer = 5000}},
      /* at most 2 attempts a second per worker */
      {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, {.integer = 500}},
      {GRPC_ARG_INTEGER, GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, {.integer = 100}},
      {GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = RM_CHANNEL_MAX_RECEIVE}},
  };
  grpc_channel_args cargs = {5, args};
  grpc_channel *ch = grpc_channel_create(addr, creds, &cargs);
  grpc_channel_credentials_release(creds);
  return ch;
}
