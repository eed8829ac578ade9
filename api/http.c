/*
 * http.c - the libmicrohttpd server: listening socket, request lifecycle,
 * routing, auth, body limit, and the response/error helpers (request flow in
 * api_int.h).
 *
 * Threading: MHD_USE_THREAD_PER_CONNECTION with an internal poll() listener.
 * One thread per connection lets an SSE stream block in its content callback
 * (waiting on the event hub) without holding up other clients; keep-alive
 * connections (wrk, browsers) reuse their thread. The number of connections
 * is capped (MHD_OPTION_CONNECTION_LIMIT) so threads are bounded.
 *
 * Routing: the path is split on '/', compared segment by segment with each
 * pattern ("{}" matches any one non-empty segment and is captured). A path
 * that matches some pattern but not the method gets 405 with an Allow header
 * listing the methods that do match (HEAD is allowed wherever GET is).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "api_int.h"
#include "rm_alloc.h"
#include "rm_log.h"

/* ---- responses ---- */

void rm__resp_text(rm__resp_t *r, unsigned status, const char *ctype, char *heap_body,
                   size_t len)
{
  free(r->body);
  r->status = status;
  r->content_type = ctype;
  r->body = heap_body;
  r->len = len;
}

void rm__resp_static(rm__resp_t *r, const char *ctype, const void *data, size_t len)
{
  free(r->body);
  r->body = NULL;
  r->status = 200;
  r->content_type = ctype;
  r->persistent = data;
  r->len = len;
}

void rm__resp_json(rm__resp_t *r, unsigned status, json_t *j)
{
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  if (s == NULL) s = rm__xstrdup("{}");
  rm__resp_text(r, status, "application/json", s, strlen(s));
}

void rm__resp_error(rm__resp_t *r, unsigned status, const char *code, const char *field,
                    const char *fmt, ...)
{
  char msg[512];
  va_list ap;
  json_t *f;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  f = (field && *field) ? json_string(field) : json_null();
  if (f == NULL) f = json_null(); /* field was not valid UTF-8 */
  rm__resp_json(r, status,
                json_pack("{s:{s:s,s:s,s:o}}", "error", "code", code, "message", msg, "field", f));
}

const char *rm__req_query(rm__req_t *req, const char *name)
{
  return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *rm__req_header(rm__req_t *req, const char *name)
{
  return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

int rm__parse_u64(const char *s, uint64_t *out)
{
  uint64_t v = 0;
  if (s == NULL || *s == '\0' || strlen(s) > 19) return -1;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  *out = v;
  return 0;
}

/* ---- routing ---- */

/* 1 when path matches pattern; captures go to req->params. */
static int match(const char *pattern, const char *path, rm__req_t *req)
{
  int np = 0;
  while (*pattern && *path) {
    if (pattern[0] == '{' && pattern[1] == '}') {
      size_t n = strcspn(path, "/");
      if (n == 0 || n >= sizeof req->params[0] || np >= RM__ROUTE_PARAMS) return 0;
      memcpy(req->params[np], path, n);
      req->params[np++][n] = '\0';
      path += n;
      pattern += 2;
    } else if (*pattern++ != *path++) {
      return 0;
    }
  }
  return *pattern == '\0' && *path == '\0';
}

static int method_is(const char *route_method, const char *method)
{
  if (strcmp(route_method, method) == 0) return 1;
  return strcmp(method, "HEAD") == 0 && strcmp(route_method, "GET") == 0;
}

static const rm__route_t *route(rm__req_t *req, const char *path, rm__resp_t *resp)
{
  char allow[64] = "";
  int path_seen = 0;

  for (const rm__route_t *r = rm__routes; r->method; r++) {
    if (!match(r->pattern, path, req)) continue;
    if (method_is(r->method, req->method)) return r;
    if (!strstr(allow, r->method)) {
      size_t n = strlen(allow);
      snprintf(allow + n, sizeof allow - n, "%s%s", n ? ", " : "", r->method);
      if (strcmp(r->method, "GET") == 0) {
        n = strlen(allow);
        snprintf(allow + n, sizeof allow - n, ", HEAD");
      }
    }
    path_seen = 1;
  }
  if (path_seen) {
    snprintf(resp->allow, sizeof resp->allow, "%s", allow);
    rm__resp_error(resp, 405, "method_not_allowed", NULL, "%s is not allowed on %s (allowed: %s)",
                   req->method, path, allow);
  } else {
    rm__resp_error(resp, 404, "not_found", NULL, "no such resource: %s", path);
  }
  return NULL;
}

static void dispatch(rm__req_t *req, rm__resp_t *resp)
{
  char path[512];
  size_t n = strlen(req->url);
  const rm__route_t *r;

  if (n >= sizeof path) {
    rm__resp_error(resp, 404, "not_found", NULL, "no such resource (path too long)");
    return;
  }
  memcpy(path, req->url, n + 1);
  if (n > 1 && path[n - 1] == '/') path[n - 1] = '\0'; /* "/api/v1/jobs/" == "/api/v1/jobs" */
  r = route(req, path, resp);
  if (r == NULL) return;
  if ((r->flags & RM__ROUTE_AUTH) &&
      !rm__auth_check(req->api->token, rm__req_header(req, MHD_HTTP_HEADER_AUTHORIZATION))) {
    rm__resp_error(resp, 401, "unauthorized", NULL,
                   "this endpoint needs 'Authorization: Bearer <token>' with the server's API "
                   "token");
    return;
  }
  if (req->too_large) {
    rm__resp_error(resp, 413, "payload_too_large", NULL, "request body exceeds %zu bytes",
                   req->api->max_body);
    return;
  }
  r->fn(req, resp);
}

/* ---- MHD callbacks ---- */

static enum MHD_Result send_resp(rm__req_t *req, rm__resp_t *resp)
{
  struct MHD_Response *m = resp->raw;
  enum MHD_Result ret;
  unsigned cls = resp->status / 100;

  if (m == NULL && resp->persistent) {
    m = MHD_create_response_from_buffer(resp->len, (void *)resp->persistent,
                                        MHD_RESPMEM_PERSISTENT);
    if (m == NULL) return MHD_NO;
    MHD_add_response_header(m, "Content-Type", resp->content_type);
    MHD_add_response_header(m, "Cache-Control", "no-cache");
  } else if (m == NULL) {
    m = MHD_create_response_from_buffer(resp->len, resp->body, MHD_RESPMEM_MUST_FREE);
    if (m == NULL) {
      free(resp->body);
      return MHD_NO;
    }
    resp->body = NULL;
    MHD_add_response_header(m, "Content-Type",
                            resp->content_type ? resp->content_type : "application/json");
    if (strncmp(req->url, "/api/", 5) == 0 || strcmp(req->url, "/metrics") == 0)
      MHD_add_response_header(m, "Cache-Control", "no-store");
  }
  MHD_add_response_header(m, "X-Content-Type-Options", "nosniff");
  if (resp->allow[0]) MHD_add_response_header(m, "Allow", resp->allow);
  if (resp->location[0]) MHD_add_response_header(m, "Location", resp->location);
  for (size_t i = 0; i < sizeof resp->extra / sizeof resp->extra[0]; i++)
    if (resp->extra[i].name) MHD_add_response_header(m, resp->extra[i].name, resp->extra[i].value);
  if (resp->status == 401) MHD_add_response_header(m, "WWW-Authenticate", "Bearer realm=\"ringmaster\"");
  __atomic_fetch_add(&req->api->http_requests[cls < 6 ? cls : 0], 1, __ATOMIC_RELAXED);
  ret = MHD_queue_response(req->conn, resp->status, m);
  MHD_destroy_response(m);
  return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
  rm_api_t *api = cls;
  rm__req_t *req = *con_cls;
  rm__resp_t resp;

  if (req == NULL) { /* first call: headers only */
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    uint64_t len = 0;
    req = rm__xcalloc(1, sizeof *req);
    req->api = api;
    req->conn = conn;
    req->url = url;
    req->method = method;
    *con_cls = req;
    if (cl && rm__parse_u64(cl, &len) == 0 && len > api->max_body) {
      memset(&resp, 0, sizeof resp);
      rm__resp_error(&resp, 413, "payload_too_large", NULL, "request body of %llu bytes exceeds %zu",
                     (unsigned long long)len, api->max_body);
      return send_resp(req, &resp);
    }
    return MHD_YES;
  }
  if (*upload_size > 0) {
    if (!req->too_large && req->body_len + *upload_size <= api->max_body) {
      req->body = rm__xrealloc(req->body, req->body_len + *upload_size + 1);
      memcpy(req->body + req->body_len, upload_data, *upload_size);
      req->body_len += *upload_size;
      req->body[req->body_len] = '\0';
    } else {
      req->too_large = 1;
    }
    *upload_size = 0;
    return MHD_YES;
  }
  memset(&resp, 0, sizeof resp);
  dispatch(req, &resp);
  return send_resp(req, &resp);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
  rm__req_t *req = *con_cls;
  if (req == NULL) return;
  free(req->body);
  free(req);
  *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
  char msg[512];
  vsnprintf(msg, sizeof msg, fmt, ap);
  msg[strcspn(msg, "\n")] = '\0';
  RM_DEBUG("http: %s", msg);
}

/* ---- listening socket ---- */

/* Bind host:port (port 0 = free). Returns the fd and fills api->address. */
static int open_listener(rm_api_t *api, const char *listen_addr, char *err, size_t errlen)
{
  char host[128], port_s[8];
  int port, fd = -1, one = 1, rc;
  struct addrinfo hints = {0}, *ai = NULL;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;

  if (rm__addr_split(listen_addr, host, sizeof host, &port) != 0) {
    snprintf(err, errlen, "bad --http address '%s' (want host:port)", listen_addr);
    return -1;
  }
  snprintf(port_s, sizeof port_s, "%d", port);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  rc = getaddrinfo(host[0] ? host : NULL, port_s, &hints, &ai);
  if (rc != 0) {
    snprintf(err, errlen, "cannot resolve --http host '%s': %s", host, gai_strerror(rc));
    return -1;
  }
  fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 512) != 0 ||
      getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
    snprintf(err, errlen, "cannot listen on %s: %s", listen_addr, strerror(errno));
    if (fd >= 0) close(fd);
    fd = -1;
    goto exit;
  }
  if (ss.ss_family == AF_INET6) {
    char a[INET6_ADDRSTRLEN];
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof a);
    snprintf(api->address, sizeof api->address, "[%s]:%d", a, ntohs(s6->sin6_port));
  } else {
    char a[INET_ADDRSTRLEN];
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    inet_ntop(AF_INET, &s4->sin_addr, a, sizeof a);
    snprintf(api->address, sizeof api->address, "%s:%d", a, ntohs(s4->sin_port));
  }
exit:
  freeaddrinfo(ai);
  return fd;
}

int rm__http_start(rm_api_t *api, const char *listen_addr, char *err, size_t errlen)
{
  int fd = open_listener(api, listen_addr, err, errlen);
  if (fd < 0) return -1;
  api->daemon = MHD_start_daemon(
      MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
          MHD_USE_ERROR_LOG,
      0, NULL, NULL, on_request, api, MHD_OPTION_LISTEN_SOCKET, fd,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, api, MHD_OPTION_CONNECTION_TIMEOUT,
      (unsigned)120, MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000, MHD_OPTION_EXTERNAL_LOGGER,
      on_mhd_log, api, MHD_OPTION_END);
  if (api->daemon == NULL) {
    snprintf(err, errlen, "cannot start the HTTP server on %s", api->address);
    close(fd);
    return -1;
  }
  return 0;
}

void rm__http_stop(rm_api_t *api)
{
  if (api->daemon) MHD_stop_daemon(api->daemon);
  api->daemon = NULL;
}
