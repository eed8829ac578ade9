/*
 * api_int.h - private to api/: the server object, requests, responses, the
 * route table and the helpers handlers share.
 *
 * Request flow (libmicrohttpd, a small pool of epoll worker threads; a
 * connection stays on the worker that accepted it, http.c):
 *
 *   URI log callback    allocate rm__req_t (it becomes *con_cls); keep the
 *                       request target as received and decode it ONCE:
 *                       path and query parameters are percent-decoded by
 *                       us (http.c), MHD's own copy of the query is cut
 *                       off before MHD parses it, so MHD's decoded (and
 *                       NUL-truncated) values are never looked at. A target
 *                       that is too long, badly encoded, has a NUL, a
 *                       control character, invalid UTF-8, too many or
 *                       repeated parameters is marked refused (not routed)
 *   1st access call     refused target -> its 4xx now; bad header (control
 *                       character, two Content-Lengths, Transfer-Encoding
 *                       other than chunked) -> 400/501; Content-Length >
 *                       max_body -> 413 at once (the body is never read)
 *   upload calls        append to req->body; past max_body -> discard, flag
 *   last call           route: no path match -> 404; path but not method ->
 *                       405 + Allow; route needs auth and the bearer token
 *                       is wrong -> 401 (before the handler, so nothing is
 *                       changed); body flagged too large -> 413; event
 *                       stream and the stream limit reached -> 503 +
 *                       Retry-After; else handler
 *   completed callback  free rm__req_t
 *
 * Errors MHD detects itself (malformed Content-Length, headers too large,
 * bad chunking) are answered by http.c's logger hook in the same JSON shape
 * (see "MHD's own error answers" there).
 *
 * A handler fills rm__resp_t: a status and a heap body (JSON or text), or a
 * ready MHD response (SSE, static files). Errors always go through
 * rm__resp_error() so every error body is {"error":{"code","message","field"}}.
 */
#ifndef RM_API_API_INT_H
#define RM_API_API_INT_H

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>

#include "api.h"
#include "auth.h"
#include "sbuf.h"
#include "sse.h"

struct MHD_Daemon;
struct MHD_Connection;
struct MHD_Response;

#define RM__ROUTE_PARAMS 3
#define RM__URI_MAX 8192   /* request target bytes (path + query); longer -> 414 */
#define RM__QUERY_MAX 64   /* query parameters; more -> 400 too_many_parameters */

typedef struct rm__asset {
  const char *path; /* URL path, "/", "/static/app.js", "/api/v1/openapi.json" */
  const char *content_type;
  const unsigned char *data;
  size_t len;
} rm__asset_t;

/* Generated at build time from web/ and api/openapi.json (embed.cmake). */
extern const rm__asset_t rm__assets[];
extern const size_t rm__assets_count;

struct rm_api {
  rm_coord_t *coord;
  struct MHD_Daemon *daemon;
  rm__sse_hub_t *hub;
  char token[RM_API_TOKEN_MAX + 1];
  char read_token[RM_API_TOKEN_MAX + 1]; /* "" = none */
  int public_reads, metrics_auth;
  char address[160];
  size_t max_body;
  unsigned max_connections; /* MHD_OPTION_CONNECTION_LIMIT */
  unsigned http_threads;    /* MHD worker threads */
  char *tls_cert_pem, *tls_key_pem; /* HTTPS when set (file contents) */
  int tls;                  /* the daemon speaks TLS */
  int tick_ms;
  int sub_id;
  char *chartjs; /* file contents read at start, NULL when absent */
  size_t chartjs_len;
  char chartjs_path[256];
  /* options.log_location / log_ctx (NULL: no worker logs), k8s_render */
  rm_api_log_location_fn log_location;
  void *log_ctx;
  rm_api_k8s_render_fn k8s_render;
  char *advertise_addr; /* NULL: rm_coord_grpc_address */
  char *k8s_image, *k8s_namespace; /* NULL: renderer defaults */
  /* progress ticker */
  pthread_t ticker;
  int ticker_started;
  pthread_mutex_t tick_lock;
  pthread_cond_t tick_cond;
  int stopping;
  /* HTTP counters for /metrics (atomics) */
  uint64_t http_requests[6]; /* by status class: 1xx..5xx, [0] other */
  uint64_t sse_events_published;
  /* http.c's answers to MHD-detected errors (atomics) */
  int http_closing;         /* rm__http_stop began: no more */
  int mhd_answers_inflight; /* written, request not completed yet */
};

typedef struct rm__query_param {
  char *name, *value; /* decoded, NUL-free, valid UTF-8, no control characters */
} rm__query_param_t;

typedef struct rm__req {
  rm_api_t *api;
  struct MHD_Connection *conn;
  const char *method;
  const char *url;            /* the decoded path (= path; "" when refused) */
  char *path;                 /* heap */
  rm__query_param_t *query;   /* heap, nquery of them */
  size_t nquery;
  struct {                    /* the target was refused: answered on the 1st call */
    unsigned status;          /* 0 = target fine */
    const char *code;         /* static */
    char field[72];           /* "path", "query" or the parameter's name */
    char message[200];
  } refused;
  int started;                /* the 1st access call has happened */
  int mhd_inflight;           /* http.c answered an MHD-detected error (counted) */
  int stream_slot;            /* holds an SSE slot (rm__sse_reserve) */
  char *body;
  size_t body_len;
  int too_large;
  int is_head;
  char params[RM__ROUTE_PARAMS][128]; /* captured {segments} of the path */
} rm__req_t;

typedef struct rm__resp {
  unsigned status;
  char *body; /* heap, owned; NUL-terminated */
  size_t len;
  const char *content_type;
  struct MHD_Response *raw; /* when set, used as is (status still applies) */
  const void *persistent;   /* when set: body that outlives the server (not freed) */
  char allow[64];           /* 405 */
  char location[96];        /* 201 */
  struct {
    const char *name;       /* static string; NULL = unused */
    char value[40];
  } extra[3];               /* more headers (X-Log-Size, ...) */
} rm__resp_t;

typedef void (*rm__handler_t)(rm__req_t *req, rm__resp_t *resp);

#define RM__ROUTE_AUTH 1
#define RM__ROUTE_STREAM 2 /* an event stream: runs only with a stream slot (sse.h) */

typedef struct rm__route {
  const char *method;
  const char *pattern; /* "/api/v1/jobs/{}/cancel"; "{}" captures one segment */
  rm__handler_t fn;
  int flags;
} rm__route_t;

extern const rm__route_t rm__routes[];

/* ---- helpers (resp.c) ---- */
/* Takes ownership of j (decref'd). */
void rm__resp_json(rm__resp_t *r, unsigned status, json_t *j);
void rm__resp_text(rm__resp_t *r, unsigned status, const char *ctype, char *heap_body,
                   size_t len);
/* Static bytes (embedded asset, cached file): sent without a copy. */
void rm__resp_static(rm__resp_t *r, const char *ctype, const void *data, size_t len);
void rm__resp_error(rm__resp_t *r, unsigned status, const char *code, const char *field,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Query parameter (decoded once, validated; "" for "?name") or NULL
 * (borrowed, lives as long as req). */
const char *rm__req_query(rm__req_t *req, const char *name);
/* Split and percent-decode the raw request target into req->path /
 * req->query (target.c); a refusal goes to req->refused and req->url = "". */
void rm__req_parse_target(rm__req_t *req, const char *raw);
const char *rm__req_header(rm__req_t *req, const char *name);

/* Parse a decimal u64 (no sign, no junk, no overflow). 0 ok, -1 bad. */
int rm__parse_u64(const char *s, uint64_t *out);
/* An id in a path: rm__parse_u64 in its one canonical spelling (no leading
 * zero), so /jobs/03 is not job 3 but no resource at all. */
int rm__parse_id(const char *s, uint64_t *out);

/* ---- JSON views of coordinator structs (json.c) ---- */
/* Jobs are streamed into a buffer (jsonw.h), not built as Jansson trees. */
void rm__jw_job(rm__sbuf_t *b, const rm_job_info_t *j, int with_token);
void rm__resp_job(rm__resp_t *r, unsigned status, const rm_job_info_t *j, int with_token);
/* 200 with the job and "result": its result object (rm_coord_job_result
 * text, re-parsed with Jansson) or null. */
void rm__resp_job_result(rm__resp_t *r, const rm_job_info_t *j, const char *result);
json_t *rm__json_worker(const rm_worker_info_t *w);
json_t *rm__json_event(const rm_event_t *e);
json_t *rm__json_barrier(const rm_barrier_info_t *b);
json_t *rm__json_step(const rm_step_sample_t *s);
json_t *rm__json_num(double v); /* null for NaN/Inf */
json_t *rm__json_str(const char *s); /* never NULL: non-UTF-8 bytes become '?' */

/* ---- pieces ---- */
int rm__http_start(rm_api_t *api, const char *listen_addr, char *err, size_t errlen);
/* Raises RLIMIT_NOFILE to its hard limit and returns want, lowered to what
 * the descriptor limit allows (less a reserve for the rest of the
 * process); logs the limit. */
unsigned rm__http_fd_budget(unsigned want);
/* listen.c: bind host:port (port 0 = free); the fd, api->address filled;
 * -1 with err. */
int rm__http_listen(rm_api_t *api, const char *listen_addr, char *err, size_t errlen);
void rm__http_stop(rm_api_t *api);
void rm__metrics_render(rm_api_t *api, rm__resp_t *resp);   /* metrics.c */
int rm__ticker_start(rm_api_t *api);                          /* ticker.c */
void rm__ticker_stop(rm_api_t *api);
void rm__static_serve(rm__req_t *req, rm__resp_t *resp);       /* static.c */
void rm__chartjs_load(rm_api_t *api, const char *path);
void rm__h_worker_log(rm__req_t *req, rm__resp_t *resp);     /* logs.c */
void rm__h_k8s_manifest(rm__req_t *req, rm__resp_t *resp);   /* k8s.c */

/* Shared by the handlers (handlers.c). */
int rm__req_job_id(rm__req_t *req, rm__resp_t *resp, uint64_t *id);
int rm__req_query_u64(rm__req_t *req, rm__resp_t *resp, const char *name, uint64_t lo,
                      uint64_t hi, uint64_t *out);
void rm__resp_coord_error(rm__resp_t *resp, rm_status_t st, const char *what, uint64_t id);

#endif
