/*
 * http_client.h - the CLI's HTTP client, over libcurl: http:// and https://
 * (TLS with the system's CA store, or the CAs of a PEM file: --cacert /
 * RINGMASTER_CACERT), proxies from the usual variables (http_proxy,
 * https_proxy, no_proxy: libcurl reads them itself), a connect deadline
 * and a deadline for the whole request. One easy handle per process, so
 * the repeated requests of `ringmaster run` / `logs --follow` reuse their
 * connection (HTTP keep-alive).
 *
 * Call rm__http_init() once before the first request (it runs
 * curl_global_init) and rm__http_cleanup() at the end. Single-threaded.
 */
#ifndef RM_API_HTTP_CLIENT_H
#define RM_API_HTTP_CLIENT_H

#include <signal.h>
#include <stddef.h>

typedef struct rm__http_reply {
  int status;
  char *body; /* heap, NUL-terminated; free() it */
  size_t len;
  char content_type[96];
  long long next_offset; /* X-Log-Next-Offset of a worker log answer, or -1 */
} rm__http_reply_t;

typedef struct rm__http_opts {
  const char *token;      /* bearer token, or NULL / "" for none */
  const char *cacert;     /* PEM file of the CAs to trust for https://, or NULL:
                             the system's store */
  int timeout_ms;         /* the whole request (connect, send, answer) */
  int connect_timeout_ms; /* TCP connect + TLS handshake; <= 0: timeout_ms */
  /* A counter a signal handler bumps (Ctrl-C), or NULL: a request is
   * abandoned ("interrupted") when it changes while the request runs. */
  volatile sig_atomic_t *signals;
} rm__http_opts_t;

/* 0, or -1 when libcurl cannot be initialised. */
int rm__http_init(void);
void rm__http_cleanup(void);

/* base: "http[s]://host[:port][/prefix]" or "host:port" (http). path
 * starts with '/'. body: NULL for none (a POST without a body sends an
 * empty one). Returns 0 when an HTTP answer arrived (any status; *out
 * filled, free out->body) and -1 (err says why; out->body NULL) when the
 * server could not be reached, TLS failed, the deadline passed or the
 * answer was not HTTP. */
int rm__http_request(const char *base, const char *method, const char *path,
                     const rm__http_opts_t *o, const char *body, size_t body_len,
                     rm__http_reply_t *out, char *err, size_t errlen);

#endif
