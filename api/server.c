/*
 * server.c - rm_api_start/stop: wires the pieces together.
 *
 * Start order (stop is the reverse, so no thread ever sees freed state):
 *   resolve token -> load Chart.js -> SSE hub -> subscribe to coordinator
 *   events (forwarded into the hub) -> progress ticker -> HTTP daemon.
 * Stop: close the hub (resumes and ends every SSE stream, joins its waker:
 * MHD must see no suspended connection) -> stop the HTTP daemon (joins its
 * worker threads) -> stop the ticker -> unsubscribe -> free the hub.
 *
 * Limits (read once at start):
 *   connections  RINGMASTER_HTTP_MAX_CONNECTIONS (12000), at most the file
 *                descriptor limit less a reserve for the coordinator
 *                (rm__http_fd_budget raises RLIMIT_NOFILE to its hard limit
 *                and logs both)
 *   streams      RINGMASTER_SSE_MAX_STREAMS (10000), at most 5/6 of the
 *                connections: at least a sixth of them (2000 of 12000)
 *                stays for the API and /healthz however many clients stream;
 *                beyond it 503 + Retry-After (http.c)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "rm_alloc.h"
#include "rm_log.h"
#include "rm_param.h"

RM_PARAM(sse_keepalive_ms, "RINGMASTER_SSE_KEEPALIVE_MS", 15000)
RM_PARAM(api_tick_ms, "RINGMASTER_API_TICK_MS", 1000)
/* Connections the HTTP server holds at once (an idle event stream is a
 * parked connection, no thread), and the share of them event streams may
 * take: streams beyond it get 503 + Retry-After, so the rest stays free for
 * the API and /healthz. */
RM_PARAM(http_max_connections, "RINGMASTER_HTTP_MAX_CONNECTIONS", 12000)
RM_PARAM(sse_max_streams, "RINGMASTER_SSE_MAX_STREAMS", 10000)

/* Stream limit for a connection limit: below it by at least a sixth of it,
 * so streams can never take every connection. */
static int sse_limit(unsigned max_conn)
{
  int64_t want = rm__param_sse_max_streams(), cap = (int64_t)max_conn - max_conn / 6;
  if (cap >= (int64_t)max_conn) cap = (int64_t)max_conn - 1;
  if (cap < 1) cap = 1;
  if (want < 1 || want > cap) {
    RM_WARN("api: RINGMASTER_SSE_MAX_STREAMS=%lld must be in 1..%lld (5/6 of "
            "the %u HTTP connections); using %lld",
            (long long)want, (long long)cap, max_conn, (long long)cap);
    want = cap;
  }
  return (int)want;
}

void rm_api_options_init(rm_api_options_t *o)
{
  memset(o, 0, sizeof *o);
  o->listen = "127.0.0.1:8080";
  o->max_body = 1 << 20;
}

/* Coordinator thread, right after an event is committed: must not block. */
static void on_event(void *ctx, const rm_event_t *ev)
{
  rm_api_t *api = ctx;
  json_t *j = rm__json_event(ev);
  char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
  char job[24] = "";

  json_decref(j);
  if (text == NULL) return;
  if (ev->job_id) snprintf(job, sizeof job, "%llu", (unsigned long long)ev->job_id);
  rm__sse_publish_seq(api->hub, job, "event", text, ev->seq); /* id = seq x 10^6 (sse.h) */
  __atomic_fetch_add(&api->sse_events_published, 1, __ATOMIC_RELAXED);
  free(text);
}

/* A PEM file's contents (NUL-terminated heap copy, at most 1 MiB); NULL and
 * a sentence in err when it cannot be read. */
static char *read_pem(const char *flag, const char *path, char *err, size_t errlen)
{
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  size_t n = 0;
  if (f) {
    buf = rm__xmalloc((1 << 20) + 1);
    n = fread(buf, 1, 1 << 20, f);
    buf[n] = '\0';
    if (ferror(f) || !feof(f) || n == 0 || !strstr(buf, "-----BEGIN ")) {
      free(buf);
      buf = NULL;
    }
    fclose(f);
  }
  if (!buf)
    snprintf(err, errlen, "%s %s: cannot read a PEM file (at most 1 MiB)%s%s", flag, path,
             f ? "" : ": ", f ? "" : strerror(errno));
  return buf;
}

rm_status_t rm_api_start(const rm_api_options_t *o, rm_coord_t *coord, rm_api_t **out, char *err,
                         size_t errlen)
{
  rm_api_t *api = rm__xcalloc(1, sizeof *api);
  int generated = 0, keepalive;
  int64_t max_conn = rm__param_http_max_connections();

  api->coord = coord;
  api->max_body = o->max_body ? o->max_body : (1 << 20);
  api->tick_ms = o->tick_ms > 0 ? o->tick_ms : (int)rm__param_api_tick_ms();
  if (api->tick_ms < 10) api->tick_ms = 10;
  if (max_conn < 4 || max_conn > 1000000) {
    RM_WARN("api: RINGMASTER_HTTP_MAX_CONNECTIONS=%lld must be in 4..1000000; using 12000",
            (long long)max_conn);
    max_conn = 12000;
  }
  api->max_connections = rm__http_fd_budget((unsigned)max_conn);
  keepalive = o->sse_keepalive_ms > 0 ? o->sse_keepalive_ms : (int)rm__param_sse_keepalive_ms();
  if (rm__auth_resolve(o->token, o->token_file, api->token, sizeof api->token, &generated, err,
                       errlen) != 0)
    goto fail;
  if (o->read_token && strlen(o->read_token) >= sizeof api->read_token) {
    snprintf(err, errlen, "the read token is longer than %d bytes", RM_API_TOKEN_MAX);
    goto fail;
  }
  snprintf(api->read_token, sizeof api->read_token, "%s", o->read_token ? o->read_token : "");
  api->public_reads = o->public_reads;
  api->metrics_auth = o->metrics_auth;
  if (!o->tls_cert != !o->tls_key) {
    snprintf(err, errlen, "HTTPS needs both --http-tls-cert and --http-tls-key");
    goto fail;
  }
  if (o->tls_cert && (!(api->tls_cert_pem = read_pem("--http-tls-cert", o->tls_cert, err, errlen)) ||
                      !(api->tls_key_pem = read_pem("--http-tls-key", o->tls_key, err, errlen))))
    goto fail;
  rm__chartjs_load(api, o->chartjs_path);
  api->log_location = o->log_location;
  api->log_ctx = o->log_ctx;
  api->k8s_render = o->k8s_render;
  api->advertise_addr = o->advertise_addr ? rm__xstrdup(o->advertise_addr) : NULL;
  api->k8s_image = o->k8s_image ? rm__xstrdup(o->k8s_image) : NULL;
  api->k8s_namespace = o->k8s_namespace ? rm__xstrdup(o->k8s_namespace) : NULL;
  api->hub = rm__sse_hub_new(4096, keepalive, sse_limit(api->max_connections));
  if (api->hub == NULL) {
    snprintf(err, errlen, "cannot start the event-stream thread");
    goto fail;
  }
  RM_INFO("api: at most %u HTTP connections, %d of them event streams", api->max_connections,
          rm__sse_max_streams(api->hub));
  api->sub_id = rm_coord_subscribe(coord, on_event, api);
  if (api->sub_id <= 0) {
    snprintf(err, errlen, "cannot subscribe to coordinator events (table full)");
    goto fail;
  }
  if (rm__ticker_start(api) != 0) {
    snprintf(err, errlen, "cannot start the progress thread");
    goto fail;
  }
  if (rm__http_start(api, o->listen ? o->listen : "127.0.0.1:8080", err, errlen) != 0) goto fail;
  if (generated)
    RM_WARN("api: no API token configured (--api-token, --api-token-file, RINGMASTER_API_TOKEN);"
            " generated one for this run: %s",
            api->token);
  RM_INFO("api: REST API and dashboard on %s://%s/ (metrics /metrics, API /api/v1)",
          api->tls ? "https" : "http", api->address);
  *out = api;
  return RM_OK;
fail:
  rm_api_stop(api);
  return RM_ERR_SYSTEM;
}

const char *rm_api_address(const rm_api_t *api) { return api->address; }

void rm_api_stop(rm_api_t *api)
{
  if (api == NULL) return;
  if (api->hub) rm__sse_hub_close(api->hub);
  rm__http_stop(api);
  rm__ticker_stop(api);
  if (api->sub_id > 0) rm_coord_unsubscribe(api->coord, api->sub_id);
  rm__sse_hub_free(api->hub);
  free(api->chartjs);
  free(api->advertise_addr);
  free(api->k8s_image);
  free(api->k8s_namespace);
  memset(api->token, 0, sizeof api->token);
  memset(api->read_token, 0, sizeof api->read_token);
  if (api->tls_key_pem) memset(api->tls_key_pem, 0, strlen(api->tls_key_pem));
  free(api->tls_key_pem);
  free(api->tls_cert_pem);
  free(api);
}
