/*
 * http.c - the libmicrohttpd server: listening socket, request lifecycle,
 * request-target decoding, routing, auth, body limit (request flow in
 * api_int.h; the response and error helpers are in resp.c).
 *
 * Threading: MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL with
 * MHD_OPTION_THREAD_POOL_SIZE = RINGMASTER_HTTP_THREADS (8) workers. Each
 * worker has its own epoll set and accepts from the shared listening
 * socket; a connection stays on the worker that accepted it, and handlers
 * run on that worker (so a handler must not block for long: they are
 * SQLite reads and small writes). Event streams never block a worker: a
 * stream with nothing to send is suspended (MHD_ALLOW_SUSPEND_RESUME;
 * sse.h, rules P1-P5 in sse.c), so 10,000 idle streams are 10,000 parked
 * sockets, not threads, and the API and /healthz are served by the same
 * workers at once. The old mode, MHD_USE_THREAD_PER_CONNECTION, was
 * measured and dropped: 10,000 streams are 10,000 threads, and in 0.9.75 its
 * suspended connections all wait on the daemon's one ITC, which the first
 * thread to wake clears, so resumed streams stall (bench/api/sse_idle.py
 * hung opening 2,000 streams). Without epoll support MHD_USE_POLL is used.
 *
 * Limits: MHD_OPTION_CONNECTION_LIMIT = api->max_connections (server.c;
 * MHD divides it between the workers, and a worker at its share stops
 * accepting while the others go on), and event streams have their own
 * lower cap (sse.h), so streams alone can never take every connection: the
 * API and /healthz keep answering while the stream limit is reached.
 * Accepted sockets get TCP keep-alive and TCP_USER_TIMEOUT (a vanished peer
 * fails within ~30 s).
 *
 * Request target: decoded exactly once, in target.c (rules there), from
 * the URI log callback on_uri, before MHD touches it.
 *
 * Routing: the decoded path is split on '/', compared segment by segment with each
 * pattern ("{}" matches any one non-empty segment and is captured). A path
 * that matches some pattern but not the method gets 405 with an Allow header
 * listing the methods that do match (HEAD is allowed wherever GET is).
 *
 * MHD's own error answers: see the section of that name below.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "addr.h"
#include "api_int.h"
#include "errors.h"
#include "rm_alloc.h"
#include "rm_log.h"
#include "rm_param.h"

RM_PARAM(http_threads, "RINGMASTER_HTTP_THREADS", 8)

#define RM__HTTP_FLAGS_POOL                                                             \
  (MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |          \
   MHD_USE_ERROR_LOG)
#define RM__HTTP_THREADS_MAX 64
/* Per-connection memory (MHD_OPTION_CONNECTION_MEMORY_LIMIT; MHD's default
 * is 32 KiB): holds the request line and headers, so RM__URI_MAX plus
 * ordinary headers fit with room to spare. */
#define RM__HTTP_POOL (64 * 1024)
#define RM__TCP_DEAD_S 30       /* keep-alive idle + probes, and TCP_USER_TIMEOUT */
#define RM__SSE_RETRY_AFTER_S 5 /* Retry-After of the 503 at the stream limit */

static void req_free(rm__req_t *req)
{
  for (size_t i = 0; i < req->nquery; i++) {
    free(req->query[i].name);
    free(req->query[i].value);
  }
  free(req->query);
  free(req->path);
  free(req->body);
  free(req);
}

/* ---- headers (first access call) ---- */

typedef struct {
  int content_lengths, transfer_encodings, te_chunked;
  char bad[72]; /* first header with a control character */
} hdr_scan_t;

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_size, const char *value, size_t value_size)
{
  hdr_scan_t *h = cls;
  int bad = 0;
  for (size_t i = 0; i < value_size && !bad; i++) {
    unsigned char c = (unsigned char)value[i];
    bad = (c < 0x20 && c != '\t') || c == 0x7f;
  }
  if (bad && h->bad[0] == '\0') snprintf(h->bad, sizeof h->bad, "%.*s", (int)key_size, key);
  if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) h->content_lengths++;
  if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
    h->transfer_encodings++;
    h->te_chunked = value && strcasecmp(value, "chunked") == 0;
  }
  return MHD_YES;
}

/* Checks made once the headers are in, before any body is read. 1 when resp
 * holds the answer (the request goes no further). */
static int first_call_checks(rm__req_t *req, rm__resp_t *resp)
{
  hdr_scan_t h = {0};
  const char *cl = rm__req_header(req, MHD_HTTP_HEADER_CONTENT_LENGTH);
  uint64_t len = 0;

  if (req->refused.status) {
    rm__resp_error(resp, req->refused.status, req->refused.code, req->refused.field, "%s",
                   req->refused.message);
    return 1;
  }
  MHD_get_connection_values_n(req->conn, MHD_HEADER_KIND, scan_header, &h);
  if (h.bad[0]) {
    rm__resp_error(resp, 400, "invalid_request", h.bad, "header %s has a control character",
                   h.bad);
  } else if (h.content_lengths > 1 || (h.content_lengths && h.transfer_encodings)) {
    rm__resp_error(resp, 400, "invalid_request", MHD_HTTP_HEADER_CONTENT_LENGTH,
                   "give one Content-Length, or Transfer-Encoding: chunked, not both");
  } else if (h.transfer_encodings > 1 || (h.transfer_encodings && !h.te_chunked)) {
    rm__resp_error(resp, 501, "not_implemented", MHD_HTTP_HEADER_TRANSFER_ENCODING,
                   "the only Transfer-Encoding accepted is chunked");
  } else if (cl && rm__parse_u64(cl, &len) == 0 && len > req->api->max_body) {
    rm__resp_error(resp, 413, "payload_too_large", NULL, "request body of %llu bytes exceeds %zu",
                   (unsigned long long)len, req->api->max_body);
  } else {
    return 0;
  }
  return 1;
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

static int conn_fd(struct MHD_Connection *conn)
{
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  return ci ? (int)ci->connect_fd : -1;
}

/* Event streams (RM__ROUTE_STREAM): the handler runs only with a stream
 * slot (sse.h), so streams stay below their own limit and never take the
 * whole connection limit. */
static void run_stream_handler(const rm__route_t *r, rm__req_t *req, rm__resp_t *resp)
{
  rm__sse_hub_t *hub = req->api->hub;
  if (rm__sse_reserve(hub) != 0) {
    rm__resp_error(resp, 503, "too_many_streams", NULL,
                   "%d event streams are open, the most this server allows; retry later",
                   rm__sse_max_streams(hub));
    resp->extra[0].name = "Retry-After";
    snprintf(resp->extra[0].value, sizeof resp->extra[0].value, "%d", RM__SSE_RETRY_AFTER_S);
    resp->extra[1].name = "Connection"; /* frees the connection at once */
    snprintf(resp->extra[1].value, sizeof resp->extra[1].value, "close");
    return;
  }
  r->fn(req, resp);
  if (resp->raw) /* the stream owns the slot */
    rm__sse_watch(hub, resp->raw, req->conn, conn_fd(req->conn));
  else rm__sse_release(hub);
}

/* READS (docs/security.md): every GET under /api/v1/ but the OpenAPI
 * document (the API's description, no data) needs a token, and /metrics
 * when --metrics-auth is on; --public-reads opens them. The dashboard's
 * page and assets stay open: they hold no data, and the page asks for the
 * token. */
static int read_guarded(const rm_api_t *api, const char *path)
{
  if (api->public_reads) return 0;
  if (!strcmp(path, "/metrics")) return api->metrics_auth;
  return !strncmp(path, "/api/v1/", 8) && strcmp(path, "/api/v1/openapi.json") != 0;
}

/* The API token or the read token, from the Authorization header; on an
 * event stream also from ?access_token= (a browser's EventSource cannot
 * send headers). */
static int read_ok(rm__req_t *req, const rm__route_t *r)
{
  const rm_api_t *api = req->api;
  const char *h = rm__req_header(req, MHD_HTTP_HEADER_AUTHORIZATION);
  const char *q = (r->flags & RM__ROUTE_STREAM) ? rm__req_query(req, "access_token") : NULL;
  if (rm__auth_check(api->token, h) || (api->read_token[0] && rm__auth_check(api->read_token, h)))
    return 1;
  if (q && *q)
    return rm__ct_streq(api->token, q) || (api->read_token[0] && rm__ct_streq(api->read_token, q));
  return 0;
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
  if (!(r->flags & RM__ROUTE_AUTH) && read_guarded(req->api, path) && !read_ok(req, r)) {
    rm__resp_error(resp, 401, "unauthorized", NULL,
                   "reading needs 'Authorization: Bearer <token>' with the server's API token "
                   "or read token (--read-token)%s",
                   (r->flags & RM__ROUTE_STREAM) ? ", or ?access_token=<token> on the event "
                                                   "stream" : "");
    return;
  }
  if (req->too_large) {
    rm__resp_error(resp, 413, "payload_too_large", NULL, "request body exceeds %zu bytes",
                   req->api->max_body);
    return;
  }
  if (r->flags & RM__ROUTE_STREAM) run_stream_handler(r, req, resp);
  else r->fn(req, resp);
}

/* ---- MHD's own error answers ----
 *
 * libmicrohttpd answers some malformed requests itself, with an HTML page:
 * a Content-Length that is not a decimal number (400) or overflows (413),
 * a malformed header line or chunked body (400), headers or a target too
 * large for the connection's memory pool (431, 414). In 0.9.75 the
 * Content-Length answers also go out with the status line and headers
 * TWICE: parse_connection_headers() queues the error and builds its header,
 * then the HEADERS_RECEIVED step overwrites the connection state with
 * HEADERS_PROCESSED and START_REPLY builds the header again into the same
 * write buffer. None of these reach the access handler, and MHD offers no
 * hook to change their body.
 *
 * What it does do, on the thread that processes the connection, just
 * before it queues such an answer, is log "Error processing request (HTTP
 * response code is %u ('%s'))". on_mhd_log catches exactly that format and
 * answers instead: it writes one complete JSON error (the same status,
 * Connection: close) to the socket and shuts the socket down for writing,
 * so whatever MHD then sends fails (EPIPE, MSG_NOSIGNAL) and MHD closes the
 * connection. The client sees exactly one response.
 *
 * Which connection: the log line does not say, and a worker thread serves
 * many. Every connection has a record (conn_rec_t, its socket context) on
 * a registry, with the thread that last ran a callback for it (`owner`:
 * the accepting worker, then the thread that read its request line) and
 * its phase:
 *
 *   IDLE     no request line read yet (new, or between keep-alive requests)
 *   PENDING  request line read (on_uri), no answer queued yet
 *   EARLY    answered at the first access call, body maybe still coming
 *   DONE     answered after the whole request was read: MHD parses nothing
 *            more on it until that answer is sent (event streams stay DONE)
 *
 * Only IDLE, PENDING and EARLY connections can be the one in error, and
 * only those of the logging thread. We answer connection C when:
 *   - a Content-Length error, and C is the only PENDING one of this thread
 *     whose Content-Length is not a decimal number (a positive match); or
 *   - any error, and C is the only IDLE/PENDING/EARLY connection of this
 *     thread, and it is PENDING.
 * Otherwise (two half-received requests on one worker; a request line too
 * long, before on_uri; another MHD version's format) MHD's own answer goes
 * out unchanged: never an answer on another client's socket. Over HTTPS the
 * socket carries TLS records, so MHD's own answer goes out there too (HTML,
 * and for a bad Content-Length doubled). A request line too long for the
 * pool (414, about 64 KiB) is such a case; our own 414 JSON at RM__URI_MAX,
 * far below that, covers the realistic ones.
 *
 * Shutdown: MHD_queue_response returns MHD_YES without queueing once the
 * daemon is shutting down, and transmit_error_response then builds the
 * header of a NULL response (a crash in 0.9.75). Our early answer lets a
 * client act (e.g. stop the server) while MHD is still inside that
 * function, so each answer is counted until the request's on_completed
 * (which comes after MHD's failed send), and rm__http_stop stops answering
 * and waits for the count to drain (bounded) before MHD_stop_daemon.
 */
enum { PH_IDLE, PH_PENDING, PH_EARLY, PH_DONE };

typedef struct conn_rec {
  struct conn_rec *next, *prev; /* registry, under reg_lock */
  struct MHD_Connection *conn;
  int fd;
  pthread_t owner;
  int phase;
  rm__req_t *req; /* the request being read or answered; NULL when IDLE */
} conn_rec_t;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static conn_rec_t *reg_head;

static const char mhd_error_fmt[] =
    "Error processing request (HTTP response code is %u ('%s')). Closing connection.\n";

static conn_rec_t *conn_rec(struct MHD_Connection *conn)
{
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci ? ci->socket_context : NULL;
}

/* Under reg_lock: the request's connection enters phase. */
static void rec_set_locked(rm__req_t *req, int phase)
{
  conn_rec_t *r = conn_rec(req->conn);
  if (r == NULL || (r->req != req && r->req != NULL)) return;
  r->phase = phase;
  r->req = phase == PH_IDLE ? NULL : req;
}

static void rec_set(rm__req_t *req, int phase, int take_owner)
{
  conn_rec_t *r = conn_rec(req->conn);
  pthread_mutex_lock(&reg_lock);
  if (r && take_owner) {
    r->owner = pthread_self();
    r->req = req;
  }
  rec_set_locked(req, phase);
  pthread_mutex_unlock(&reg_lock);
}

static int cl_malformed(const char *v)
{
  uint64_t n;
  return v && rm__parse_u64(v, &n) != 0;
}

/* Under reg_lock, on the logging thread: the request MHD is failing, or
 * NULL when that cannot be told for sure (rules above). */
static rm__req_t *erring_request(const char *html)
{
  pthread_t me = pthread_self();
  conn_rec_t *only = NULL, *cl = NULL;
  int open = 0, ncl = 0;

  for (conn_rec_t *r = reg_head; r; r = r->next) {
    if (!pthread_equal(r->owner, me) || r->phase == PH_DONE) continue;
    open++;
    only = r;
    if (r->phase == PH_PENDING && html && strstr(html, "Content-Length") &&
        cl_malformed(MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH))) {
      ncl++;
      cl = r;
    }
  }
  if (ncl == 1) return cl->req;
  if (open == 1 && only->phase == PH_PENDING) return only->req;
  return NULL;
}

static void answer_mhd_error(rm_api_t *api, unsigned status, const char *html)
{
  rm__resp_t r;
  const char *field = NULL, *code = "invalid_request", *what = "malformed HTTP request";
  char head[512], date[64];
  struct iovec iov[2];
  struct msghdr msg = {0};
  struct tm tm;
  time_t now = time(NULL);
  ssize_t sent;
  int n;

  rm__req_t *req;
  int fd;

  if (api->tls || __atomic_load_n(&api->http_closing, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&reg_lock);
  req = erring_request(html);
  if (req) rec_set_locked(req, PH_EARLY);
  pthread_mutex_unlock(&reg_lock);
  if (req == NULL || (fd = conn_fd(req->conn)) < 0) return;
  if (html && strstr(html, "Content-Length")) {
    field = MHD_HTTP_HEADER_CONTENT_LENGTH;
    what = status == 413 ? "Content-Length is too large"
                         : "Content-Length must be a decimal number of bytes";
  } else if (html && strstr(html, "chunk")) {
    field = MHD_HTTP_HEADER_TRANSFER_ENCODING;
    what = "malformed chunked request body";
  }
  if (status == 413) code = "payload_too_large";
  if (status == 414) code = "uri_too_long", what = "request target too long";
  if (status == 431)
    code = "headers_too_large", what = "request headers too large for the connection's memory";
  memset(&r, 0, sizeof r);
  rm__resp_error(&r, status, code, field, "%s", what);
  gmtime_r(&now, &tm);
  strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  n = snprintf(head, sizeof head,
               "HTTP/1.1 %u %s\r\nDate: %s\r\nConnection: close\r\nContent-Type: application/json"
               "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
               "Content-Length: %zu\r\n\r\n",
               status, MHD_get_reason_phrase_for(status), date, r.len);
  if (n > 0 && (size_t)n < sizeof head) {
    iov[0] = (struct iovec){head, (size_t)n};
    iov[1] = (struct iovec){r.body, r.len};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    do sent = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (sent < 0 && errno == EINTR);
    if (sent > 0) { /* (a send buffer too small for 300 bytes: truncated, still one answer) */
      __atomic_fetch_add(&api->mhd_answers_inflight, 1, __ATOMIC_ACQ_REL);
      req->mhd_inflight = 1;
      shutdown(fd, SHUT_WR);
      __atomic_fetch_add(&api->http_requests[status / 100 < 6 ? status / 100 : 0], 1,
                         __ATOMIC_RELAXED);
    }
  }
  free(r.body);
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
    if (strncmp(req->url, "/api/", 5) == 0 || strcmp(req->url, "/metrics") == 0 ||
        req->refused.status)
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

/* Called with the raw request target, before MHD decodes it or parses its
 * query; the return value becomes *con_cls (MHD then also always calls
 * on_completed). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
  rm__req_t *req = rm__xcalloc(1, sizeof *req);
  char *q = strchr(uri, '?');

  req->api = cls;
  req->conn = conn;
  rm__req_parse_target(req, uri);
  /* MHD has found the '?' already and parses what follows it once we
   * return: leave it nothing (the buffer is MHD's read buffer, writable;
   * the option documents processing the URI here). */
  if (q && q[1]) q[1] = '\0';
  rec_set(req, PH_PENDING, 1);
  return req;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
  rm_api_t *api = cls;
  rm__req_t *req = *con_cls;
  rm__resp_t resp;

  if (req == NULL) return MHD_NO; /* on_uri runs for every request: cannot happen */
  if (!req->started) { /* first call: headers only */
    req->started = 1;
    req->method = method;
    memset(&resp, 0, sizeof resp);
    if (first_call_checks(req, &resp)) {
      rec_set(req, PH_EARLY, 0);
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
  rec_set(req, PH_DONE, 0);
  return send_resp(req, &resp);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
  rm__req_t *req = *con_cls;
  rm_api_t *api = cls;
  if (req == NULL) return;
  rec_set(req, PH_IDLE, 0); /* the next request on this connection starts afresh */
  if (req->mhd_inflight) __atomic_fetch_sub(&api->mhd_answers_inflight, 1, __ATOMIC_ACQ_REL);
  req_free(req);
  *con_cls = NULL;
}

/* Accepted sockets: TCP keep-alive and a user timeout, so a peer that
 * vanished (no FIN, no RST) fails a write within ~RM__TCP_DEAD_S seconds
 * instead of holding its thread for the kernel's 15-minute retransmission. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
  int fd, on = 1, idle = RM__TCP_DEAD_S / 2, intvl = RM__TCP_DEAD_S / 6, cnt = 3;
  unsigned user_ms = RM__TCP_DEAD_S * 1000u;
  conn_rec_t *r = *socket_context;

  (void)cls;
  if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    if (r == NULL) return;
    pthread_mutex_lock(&reg_lock);
    if (r->prev) r->prev->next = r->next;
    else reg_head = r->next;
    if (r->next) r->next->prev = r->prev;
    pthread_mutex_unlock(&reg_lock);
    free(r);
    *socket_context = NULL;
    return;
  }
  if (code != MHD_CONNECTION_NOTIFY_STARTED) return;
  r = rm__xcalloc(1, sizeof *r);
  r->conn = conn;
  r->fd = conn_fd(conn);
  r->owner = pthread_self();
  r->phase = PH_IDLE;
  pthread_mutex_lock(&reg_lock);
  r->next = reg_head;
  if (reg_head) reg_head->prev = r;
  reg_head = r;
  pthread_mutex_unlock(&reg_lock);
  *socket_context = r;
  if ((fd = r->fd) < 0) return;
  if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt) != 0 ||
      setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof user_ms) != 0)
    RM_DEBUG("http: cannot set TCP keep-alive on fd %d: %s", fd, strerror(errno));
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
  char msg[512];
  if (strcmp(fmt, mhd_error_fmt) == 0) {
    va_list aq;
    unsigned status;
    const char *html;
    va_copy(aq, ap);
    status = va_arg(aq, unsigned);
    html = va_arg(aq, const char *);
    va_end(aq);
    answer_mhd_error(cls, status, html);
  }
  vsnprintf(msg, sizeof msg, fmt, ap);
  msg[strcspn(msg, "\n")] = '\0';
  RM_DEBUG("http: %s", msg);
}

/* Worker threads (RINGMASTER_HTTP_THREADS, read once). */
static unsigned http_threads(void)
{
  int64_t n = rm__param_http_threads();
  if (n < 1 || n > RM__HTTP_THREADS_MAX) {
    RM_WARN("api: RINGMASTER_HTTP_THREADS=%lld must be in 1..%d; using 8", (long long)n,
            RM__HTTP_THREADS_MAX);
    n = 8;
  }
  return (unsigned)n;
}

int rm__http_start(rm_api_t *api, const char *listen_addr, char *err, size_t errlen)
{
  int fd = rm__http_listen(api, listen_addr, err, errlen);
  int tls = api->tls_cert_pem && api->tls_key_pem;
  struct MHD_OptionItem tls_opts[] = {
      {MHD_OPTION_HTTPS_MEM_KEY, 0, api->tls_key_pem},
      {MHD_OPTION_HTTPS_MEM_CERT, 0, api->tls_cert_pem},
      {MHD_OPTION_END, 0, NULL}};
  struct MHD_OptionItem no_opts[] = {{MHD_OPTION_END, 0, NULL}};
  unsigned threads = http_threads(), flags;
  struct MHD_OptionItem pool_opts[] = {{MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)threads, NULL},
                                       {MHD_OPTION_END, 0, NULL}};
  if (fd < 0) return -1;
  if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
    snprintf(err, errlen, "--http-tls-cert: this libmicrohttpd has no TLS support");
    close(fd);
    return -1;
  }
  api->tls = tls;
  flags = RM__HTTP_FLAGS_POOL | (tls ? MHD_USE_TLS : 0);
  if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) != MHD_YES) {
    RM_WARN("api: this libmicrohttpd has no epoll; using poll()");
    flags = (flags & ~(unsigned)MHD_USE_EPOLL) | MHD_USE_POLL;
  }
  api->http_threads = threads;
  api->daemon = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, api,
      MHD_OPTION_ARRAY, threads > 1 ? pool_opts : no_opts,
      MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_ARRAY, tls ? tls_opts : no_opts,
      MHD_OPTION_URI_LOG_CALLBACK, on_uri, api, MHD_OPTION_NOTIFY_COMPLETED, on_completed, api,
      MHD_OPTION_NOTIFY_CONNECTION, on_connection, api, MHD_OPTION_CONNECTION_TIMEOUT,
      (unsigned)120, MHD_OPTION_CONNECTION_LIMIT,
      api->max_connections ? api->max_connections : 1000u, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      (size_t)RM__HTTP_POOL, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, api, MHD_OPTION_END);
  if (api->daemon == NULL) {
    snprintf(err, errlen, "cannot start the HTTP%s server on %s%s", tls ? "S" : "", api->address,
             tls ? " (is the certificate/key pair valid PEM?)" : "");
    close(fd);
    return -1;
  }
  RM_INFO("api: HTTP on %u worker threads (idle event streams suspended)", threads);
  return 0;
}

void rm__http_stop(rm_api_t *api)
{
  /* No more early answers; let those in flight leave MHD's error path
   * (see "MHD's own error answers"): a few ms at most, 2 s bound. */
  __atomic_store_n(&api->http_closing, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < 2000 && __atomic_load_n(&api->mhd_answers_inflight, __ATOMIC_ACQUIRE); i++)
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  if (api->daemon) MHD_stop_daemon(api->daemon);
  api->daemon = NULL;
}
