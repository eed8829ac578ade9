/*
 * httpc.h - a minimal HTTP/1.1 client over plain sockets for the CLI (no
 * libcurl needed): one request per connection ("Connection: close"), a
 * deadline on connect, write and read, Content-Length or chunked bodies.
 * http:// only (the coordinator serves plain HTTP; put TLS in front of it
 * with a reverse proxy if needed).
 */
#ifndef RM_API_HTTPC_H
#define RM_API_HTTPC_H

#include <stddef.h>

typedef struct rm__http_reply {
  int status;
  char *body; /* heap, NUL-terminated; free() it */
  size_t len;
  char content_type[96];
} rm__http_reply_t;

/* base: "http://host:port[/prefix]" or "host:port". path starts with '/'.
 * token: bearer token or NULL. Returns 0 when an HTTP answer arrived (any
 * status) and -1 (err says why) when the server could not be reached or the
 * answer was not HTTP. */
int rm__http_request(const char *base, const char *method, const char *path, const char *token,
                     const char *body, size_t body_len, int timeout_ms, rm__http_reply_t *out,
                     char *err, size_t errlen);

#endif
