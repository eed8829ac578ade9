/*
 * httpc.c - minimal HTTP/1.1 client (see httpc.h).
 *
 * Flow: parse base URL -> getaddrinfo -> non-blocking connect, poll until
 * writable or deadline -> write request -> read until EOF or deadline (the
 * request says Connection: close) -> split status line / headers / body ->
 * de-chunk when Transfer-Encoding: chunked, else trust Content-Length
 * (bounded by what arrived).
 */
#include "httpc.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "rm_alloc.h"
#include "rm_clock.h"
#include "sbuf.h"

#define MAX_REPLY (256u << 20)

static int parse_base(const char *base, char *host, size_t hostlen, char *port, char *prefix,
                      size_t prefixlen)
{
  char hostport[300];
  const char *p = base, *slash;
  int portn = 80;
  size_t n;

  if (strncmp(p, "http://", 7) == 0) p += 7;
  else if (strstr(p, "://")) return -1;
  slash = strchr(p, '/');
  n = slash ? (size_t)(slash - p) : strlen(p);
  if (n == 0 || n >= sizeof hostport) return -1;
  memcpy(hostport, p, n);
  hostport[n] = '\0';
  snprintf(prefix, prefixlen, "%s", slash ? slash : "");
  n = strlen(prefix);
  if (n && prefix[n - 1] == '/') prefix[n - 1] = '\0';
  if (strchr(hostport, ':') == NULL || (hostport[0] == '[' && !strstr(hostport, "]:"))) {
    if (strlen(hostport) >= hostlen) return -1;
    memcpy(host, hostport, strlen(hostport) + 1);
  } else if (rm__addr_split(hostport, host, hostlen, &portn) != 0) {
    return -1;
  }
  if (host[0] == '[') { /* "[::1]" without a port */
    memmove(host, host + 1, strlen(host));
    host[strcspn(host, "]")] = '\0';
  }
  snprintf(port, 8, "%d", portn);
  return 0;
}

static int connect_deadline(const char *host, const char *port, int64_t deadline, char *err,
                            size_t errlen)
{
  struct addrinfo hints = {0}, *ai = NULL, *a;
  int fd = -1, rc;

  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  rc = getaddrinfo(host, port, &hints, &ai);
  if (rc != 0) {
    snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(rc));
    return -1;
  }
  for (a = ai; a; a = a->ai_next) {
    struct pollfd pfd;
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    if (errno == EINPROGRESS) {
      pfd.fd = fd;
      pfd.events = POLLOUT;
      if (poll(&pfd, 1, rm__ms_left(deadline)) == 1 &&
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
        break;
      errno = soerr ? soerr : ETIMEDOUT;
    }
    snprintf(err, errlen, "cannot connect to %s:%s: %s", host, port, strerror(errno));
    close(fd);
    fd = -1;
  }
  freeaddrinfo(ai);
  return fd;
}

static int io_all(int fd, int writing, rm__sbuf_t *in, const char *out, size_t outlen,
                  int64_t deadline, char *err, size_t errlen)
{
  size_t off = 0;
  char buf[16384];
  for (;;) {
    struct pollfd pfd = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
    ssize_t n;
    if (writing && off == outlen) return 0;
    if (poll(&pfd, 1, rm__ms_left(deadline)) != 1) {
      snprintf(err, errlen, "no answer from the server within the deadline");
      return -1;
    }
    n = writing ? send(fd, out + off, outlen - off, MSG_NOSIGNAL) : recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) {
      snprintf(err, errlen, "connection failed: %s", strerror(errno));
      return -1;
    }
    if (writing) {
      off += (size_t)n;
      continue;
    }
    if (n == 0) return 0;
    if (in->len + (size_t)n > MAX_REPLY) {
      snprintf(err, errlen, "answer larger than %u bytes", MAX_REPLY);
      return -1;
    }
    rm__sbuf_append(in, buf, (size_t)n);
  }
}

/* De-chunk in place; returns the new length or -1 on malformed input. */
static long dechunk(char *p, size_t len)
{
  size_t r = 0, w = 0;
  for (;;) {
    char *end;
    unsigned long n;
    if (r >= len) return -1;
    n = strtoul(p + r, &end, 16);
    if (end == p + r) return -1;
    end = strstr(end, "\r\n");
    if (end == NULL) return -1;
    r = (size_t)(end - p) + 2;
    if (n == 0) return (long)w;
    if (n > len - r) return -1;
    memmove(p + w, p + r, n);
    w += n;
    r += n + 2;
  }
}

static int parse_reply(rm__sbuf_t *in, rm__http_reply_t *out, char *err, size_t errlen)
{
  char *hdr_end, *line;
  long clen = -1, blen;
  int chunked = 0;
  char *body;

  if (in->len == 0 || sscanf(in->data, "HTTP/1.%*d %d", &out->status) != 1 ||
      (hdr_end = strstr(in->data, "\r\n\r\n")) == NULL) {
    snprintf(err, errlen, "the answer is not HTTP");
    return -1;
  }
  *hdr_end = '\0';
  for (line = strstr(in->data, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
    const char *h = line + 2;
    if (strncasecmp(h, "Content-Length:", 15) == 0) clen = strtol(h + 15, NULL, 10);
    else if (strncasecmp(h, "Transfer-Encoding:", 18) == 0 && strstr(h, "chunked")) chunked = 1;
    else if (strncasecmp(h, "Content-Type:", 13) == 0)
      sscanf(h + 13, " %95[^\r\n]", out->content_type);
  }
  body = hdr_end + 4;
  blen = (long)(in->len - (size_t)(body - in->data));
  if (chunked) blen = dechunk(body, (size_t)blen);
  else if (clen >= 0 && clen < blen) blen = clen;
  if (blen < 0) {
    snprintf(err, errlen, "malformed chunked answer");
    return -1;
  }
  out->body = rm__xmalloc((size_t)blen + 1);
  memcpy(out->body, body, (size_t)blen);
  out->body[blen] = '\0';
  out->len = (size_t)blen;
  return 0;
}

int rm__http_request(const char *base, const char *method, const char *path, const char *token,
                     const char *body, size_t body_len, int timeout_ms, rm__http_reply_t *out,
                     char *err, size_t errlen)
{
  char host[256], port[8], prefix[256];
  int64_t deadline = rm__now_ns() + (int64_t)timeout_ms * 1000000;
  rm__sbuf_t req, in;
  int fd = -1, rc = -1;

  memset(out, 0, sizeof *out);
  rm__sbuf_init(&req);
  rm__sbuf_init(&in);
  if (parse_base(base, host, sizeof host, port, prefix, sizeof prefix) != 0) {
    snprintf(err, errlen, "bad server URL '%s' (want http://host:port)", base);
    goto exit;
  }
  fd = connect_deadline(host, port, deadline, err, errlen);
  if (fd < 0) goto exit;
  rm__sbuf_printf(&req, "%s %s%s HTTP/1.1\r\nHost: %s%s%s:%s\r\n", method, prefix, path,
                  strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", port);
  rm__sbuf_puts(&req, "User-Agent: ringmaster-cli\r\nAccept: application/json\r\n"
                      "Connection: close\r\n");
  if (token && *token) rm__sbuf_printf(&req, "Authorization: Bearer %s\r\n", token);
  if (body) rm__sbuf_printf(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                            body_len);
  rm__sbuf_puts(&req, "\r\n");
  if (body) rm__sbuf_append(&req, body, body_len);
  if (io_all(fd, 1, NULL, req.data, req.len, deadline, err, errlen) != 0 ||
      io_all(fd, 0, &in, NULL, 0, deadline, err, errlen) != 0)
    goto exit;
  rc = parse_reply(&in, out, err, errlen);
exit:
  if (fd >= 0) close(fd);
  rm__sbuf_free(&req);
  rm__sbuf_free(&in);
  return rc;
}
