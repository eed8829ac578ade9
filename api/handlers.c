/*
 * handlers.c - the route table and the /api/v1 endpoints. Each handler turns
 * one request into coordinator calls (coord.h) and one JSON answer. Status
 * mapping from rm_status_t:
 *
 *   RM_OK                 200 (201 for submit)
 *   RM_ERR_INVALID_ARG    400 invalid_value, field from rm_coord_error_t
 *   RM_ERR_NOT_FOUND      404 not_found
 *   RM_ERR_DENIED         409 conflict (e.g. cancelling a finished job)
 *   RM_ERR_UNAVAILABLE    of a write: the coordinator could not store it
 *                         (docs/storage.md): 507 storage_full when its disk
 *                         is full, else 503 storage_error, with SQLite's
 *                         words; nothing of the request was kept
 *   anything else         500 internal (message logged and returned)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "jsonw.h"
#include "jobspec.h"
#include "rm_alloc.h"
#include "rm_clock.h"
#include "rm_log.h"

void rm__resp_coord_error(rm__resp_t *resp, rm_status_t st, const char *what, uint64_t id)
{
  switch (st) {
  case RM_ERR_NOT_FOUND:
    rm__resp_error(resp, 404, "not_found", NULL, "no job %llu", (unsigned long long)id);
    break;
  case RM_ERR_DENIED:
    rm__resp_error(resp, 409, "conflict", NULL, "%s: not allowed in the job's current state",
                   what);
    break;
  case RM_ERR_INVALID_ARG:
    rm__resp_error(resp, 400, "invalid_value", NULL, "%s: invalid argument", what);
    break;
  case RM_ERR_UNAVAILABLE:
    rm__resp_error(resp, 503, "storage_error", NULL, "%s: the coordinator could not write "
                   "its database; nothing was stored, retry later", what);
    break;
  default:
    RM_WARN("api: %s failed: %s", what, rm_status_name(st));
    rm__resp_error(resp, 500, "internal", NULL, "%s failed: %s", what, rm_status_string(st));
  }
}

/* A write the coordinator could not store (RM_ERR_UNAVAILABLE of a
 * mutating call): 507 storage_full or 503 storage_error, with the reason. */
static void resp_store_error(rm__req_t *req, rm__resp_t *resp, const char *what)
{
  char why[200];
  int st = rm_coord_store_state_last(req->api->coord, why, sizeof why);
  if (st == RM_COORD_STORE_FULL)
    rm__resp_error(resp, 507, "storage_full", NULL, "%s: the coordinator's disk is full (%s); "
                   "nothing was stored, retry when space is freed", what, why);
  else
    rm__resp_error(resp, 503, "storage_error", NULL, "%s: the coordinator could not write its "
                   "database (%s); nothing was stored, retry later", what,
                   why[0] ? why : "write failed");
}

/* The {id} capture as a job id; 404 for anything that is not a number. */
int rm__req_job_id(rm__req_t *req, rm__resp_t *resp, uint64_t *id)
{
  if (rm__parse_id(req->params[0], id) != 0 || *id == 0) {
    rm__resp_error(resp, 404, "not_found", NULL, "no job '%.64s'", req->params[0]);
    return -1;
  }
  return 0;
}

/* Optional integer query parameter in [lo, hi]; 400 naming it otherwise. */
int rm__req_query_u64(rm__req_t *req, rm__resp_t *resp, const char *name, uint64_t lo, uint64_t hi,
                     uint64_t *out)
{
  const char *s = rm__req_query(req, name);
  uint64_t v;
  if (s == NULL) return 0;
  if (rm__parse_u64(s, &v) != 0 || v < lo || v > hi) {
    rm__resp_error(resp, 400, "invalid_value", name, "query parameter %s must be an integer in "
                   "%llu..%llu", name, (unsigned long long)lo, (unsigned long long)hi);
    return -1;
  }
  *out = v;
  return 0;
}

static void h_health(rm__req_t *req, rm__resp_t *resp)
{
  rm__resp_json(resp, 200, json_pack("{s:s}", "status", "ok"));
}

/* Ready: the store answers a read and its writes succeed (a failing store
 * is probed with a write of its own, so this turns green without a
 * restart when space returns). /healthz stays liveness only. */
static void h_ready(rm__req_t *req, rm__resp_t *resp)
{
  rm_job_filter_t f = {.state = -1, .offset = 0, .limit = 1};
  rm_job_info_t *jobs = NULL;
  size_t n = 0;
  char why[200];
  int store = rm_coord_store_state(req->api->coord, why, sizeof why);
  if (store != RM_COORD_STORE_OK) {
    /* 503 storage_error either way: storage_full is 507 wherever it is
     * answered (api/errors.h), and a readiness probe is unavailable, not a
     * write refused; the message says which. */
    rm__resp_error(resp, 503, "storage_error", NULL, "coordinator cannot write its database (%s): %s",
                   store == RM_COORD_STORE_FULL ? "disk full" : "storage error", why);
    return;
  }
  rm_status_t st = rm_coord_job_list(req->api->coord, &f, &jobs, &n, NULL);
  rm_coord_free(jobs);
  if (st != RM_OK) {
    rm__resp_error(resp, 503, "unavailable", NULL, "coordinator store not ready: %s",
                   rm_status_string(st));
    return;
  }
  rm__resp_json(resp, 200, json_pack("{s:s,s:s}", "status", "ready", "grpc",
                                     rm_coord_grpc_address(req->api->coord)));
}

static void h_submit(rm__req_t *req, rm__resp_t *resp)
{
  rm_job_spec_t spec;
  rm_api_spec_error_t perr;
  rm_coord_error_t cerr;
  rm_job_info_t info;
  rm_status_t st;

  rm_job_spec_init(&spec);
  if (req->body_len == 0) {
    rm__resp_error(resp, 400, "invalid_json", NULL, "the request body must be a JSON job spec");
    return;
  }
  if (rm__jobspec_parse(req->body, req->body_len, &spec, &perr) != 0) {
    rm__resp_error(resp, 400, perr.code, perr.field, "%s", perr.message);
    rm__jobspec_error_free(&perr);
    return;
  }
  rm__jobspec_error_free(&perr);
  memset(&cerr, 0, sizeof cerr);
  st = rm_coord_submit(req->api->coord, &spec, &info, &cerr);
  if (st == RM_ERR_INVALID_ARG) {
    rm__resp_error(resp, 400, "invalid_value", cerr.field, "%s",
                   cerr.message[0] ? cerr.message : "invalid job spec");
    return;
  }
  if (st == RM_ERR_UNAVAILABLE) {
    resp_store_error(req, resp, "submit");
    return;
  }
  if (st != RM_OK) {
    rm__resp_coord_error(resp, st, "submit", 0);
    return;
  }
  snprintf(resp->location, sizeof resp->location, "/api/v1/jobs/%llu",
           (unsigned long long)info.id);
  rm__resp_job(resp, 201, &info, 1);
}

static void h_list(rm__req_t *req, rm__resp_t *resp)
{
  rm_job_filter_t f = {.state = -1, .offset = 0, .limit = 100};
  const char *state = rm__req_query(req, "state");
  uint64_t limit = 100, offset = 0;
  rm_job_info_t *jobs = NULL;
  size_t n = 0, total = 0, len;
  rm__sbuf_t b;
  rm_status_t st;

  if (state && *state) {
    rm_job_state_t s;
    if (rm_job_state_parse(state, &s) != RM_OK) {
      rm__resp_error(resp, 400, "invalid_value", "state", "state must be one of pending, "
                     "forming, running, succeeded, failed, cancelled");
      return;
    }
    f.state = (int)s;
  }
  if (rm__req_query_u64(req, resp, "limit", 1, 1000, &limit) || rm__req_query_u64(req, resp, "offset", 0,
                                                                  UINT64_MAX / 2, &offset))
    return;
  f.limit = (uint32_t)limit;
  f.offset = offset;
  st = rm_coord_job_list(req->api->coord, &f, &jobs, &n, &total);
  if (st != RM_OK) {
    rm__resp_coord_error(resp, st, "list jobs", 0);
    return;
  }
  /* Streamed: one buffer for the whole page (jsonw.h). */
  rm__sbuf_init(&b);
  rm__sbuf_puts(&b, "{\"jobs\":[");
  for (size_t i = 0; i < n; i++) {
    if (i) rm__sbuf_append(&b, ",", 1);
    rm__jw_job(&b, &jobs[i], 0);
  }
  rm_coord_free(jobs);
  rm__sbuf_puts(&b, "],\"total\":");
  rm__jw_u64(&b, total);
  rm__sbuf_puts(&b, ",\"offset\":");
  rm__jw_u64(&b, offset);
  rm__sbuf_puts(&b, ",\"limit\":");
  rm__jw_u64(&b, limit);
  rm__sbuf_puts(&b, ",\"next_offset\":");
  if (offset + n < total) rm__jw_u64(&b, offset + n);
  else rm__sbuf_puts(&b, "null");
  rm__sbuf_append(&b, "}", 1);
  char *body = rm__sbuf_take(&b, &len);
  rm__resp_text(resp, 200, "application/json", body, len);
}

static void h_get(rm__req_t *req, rm__resp_t *resp)
{
  uint64_t id;
  rm_job_info_t info;
  rm_status_t st;
  if (rm__req_job_id(req, resp, &id)) return;
  st = rm_coord_job_get(req->api->coord, id, &info);
  if (st != RM_OK) {
    rm__resp_coord_error(resp, st, "get job", id);
    return;
  }
  /* A second short lock: the result is not part of rm_job_info_t (the job
   * list would copy it for every job). RM_COORD_RESULT_MAX always fits. */
  char *result = rm__xmalloc(RM_COORD_RESULT_MAX);
  if (rm_coord_job_result(req->api->coord, id, result, RM_COORD_RESULT_MAX, NULL) != RM_OK)
    result[0] = '\0';
  rm__resp_job_result(resp, &info, result);
  free(result);
}

/* Optional body {"reason": "..."}; strict like the job spec. */
static int cancel_reason(rm__req_t *req, rm__resp_t *resp, char *reason, size_t len)
{
  json_error_t jerr;
  json_t *root, *v;
  const char *k;
  int rc = -1;

  snprintf(reason, len, "cancelled over the REST API");
  if (req->body_len == 0) return 0;
  root = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL || !json_is_object(root)) {
    rm__resp_error(resp, 400, "invalid_json", NULL, "body must be a JSON object: %s",
                   root ? "not an object" : jerr.text);
    goto exit;
  }
  json_object_foreach(root, k, v) {
    if (strcmp(k, "reason") != 0) {
      rm__resp_error(resp, 400, "unknown_field", "reason", "unknown field '%.48s'", k);
      goto exit;
    }
    if (!json_is_string(v) || json_string_length(v) >= len) {
      rm__resp_error(resp, 400, "invalid_type", "reason",
                     "reason must be a string of at most %zu characters", len - 1);
      goto exit;
    }
    snprintf(reason, len, "%s", json_string_value(v));
  }
  rc = 0;
exit:
  json_decref(root);
  return rc;
}

static void h_cancel(rm__req_t *req, rm__resp_t *resp)
{
  uint64_t id;
  char reason[200];
  rm_job_info_t info;
  rm_status_t st;

  if (rm__req_job_id(req, resp, &id) || cancel_reason(req, resp, reason, sizeof reason)) return;
  st = rm_coord_job_cancel(req->api->coord, id, reason);
  if (st == RM_ERR_DENIED && rm_coord_job_get(req->api->coord, id, &info) == RM_OK) {
    rm__resp_error(resp, 409, "conflict", NULL, "job %llu is already %s",
                   (unsigned long long)id, rm_job_state_name(info.state));
    return;
  }
  if (st == RM_OK) st = rm_coord_job_get(req->api->coord, id, &info);
  if (st == RM_ERR_UNAVAILABLE) resp_store_error(req, resp, "cancel job");
  else if (st != RM_OK) rm__resp_coord_error(resp, st, "cancel job", id);
  else rm__resp_job(resp, 200, &info, 0);
}

static void h_workers(rm__req_t *req, rm__resp_t *resp)
{
  uint64_t id;
  rm_worker_info_t *w = NULL;
  size_t n = 0;
  rm_status_t st;
  json_t *arr;

  if (rm__req_job_id(req, resp, &id)) return;
  st = rm_coord_job_workers(req->api->coord, id, &w, &n);
  if (st != RM_OK) {
    rm__resp_coord_error(resp, st, "list workers", id);
    return;
  }
  arr = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(arr, rm__json_worker(&w[i]));
  rm_coord_free(w);
  rm__resp_json(resp, 200, json_pack("{s:I,s:o}", "job_id", (json_int_t)id, "workers", arr));
}

static void h_events(rm__req_t *req, rm__resp_t *resp)
{
  uint64_t id, after = 0, limit = 1000;
  rm_event_t *ev = NULL;
  size_t n = 0;
  rm_status_t st;
  rm_job_info_t info;
  json_t *arr;

  if (rm__req_job_id(req, resp, &id)) return;
  if (rm__req_query_u64(req, resp, "after", 0, UINT64_MAX / 2, &after) ||
      rm__req_query_u64(req, resp, "limit", 1, 1000, &limit))
    return;
  st = rm_coord_job_get(req->api->coord, id, &info); /* 404 for unknown jobs */
  if (st == RM_OK) st = rm_coord_events(req->api->coord, id, after, (uint32_t)limit, &ev, &n);
  if (st != RM_OK) {
    rm__resp_coord_error(resp, st, "list events", id);
    return;
  }
  arr = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(arr, rm__json_event(&ev[i]));
  if (n) after = ev[n - 1].seq;
  rm_coord_free(ev);
  rm__resp_json(resp, 200, json_pack("{s:I,s:o,s:I}", "job_id", (json_int_t)id, "events", arr,
                                     "next_after", (json_int_t)after));
}

static void h_barriers(rm__req_t *req, rm__resp_t *resp)
{
  uint64_t id;
  rm_barrier_info_t *b = NULL;
  size_t n = 0;
  rm_status_t st;
  json_t *arr;

  if (rm__req_job_id(req, resp, &id)) return;
  st = rm_coord_job_barriers(req->api->coord, id, &b, &n);
  if (st != RM_OK) {
    rm__resp_coord_error(resp, st, "list barriers", id);
    return;
  }
  arr = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(arr, rm__json_barrier(&b[i]));
  rm_coord_free(b);
  rm__resp_json(resp, 200, json_pack("{s:I,s:I,s:o}", "job_id", (json_int_t)id, "now_ms",
                                     (json_int_t)rm__wall_ms(), "barriers", arr));
}

static void h_steps(rm__req_t *req, rm__resp_t *resp)
{
  uint64_t id, rank = UINT64_MAX, limit = 0;
  rm_step_sample_t *s = NULL;
  size_t n = 0;
  rm_status_t st;
  json_t *arr;

  if (rm__req_job_id(req, resp, &id)) return;
  if (rm__req_query_u64(req, resp, "rank", 0, 65535, &rank) ||
      rm__req_query_u64(req, resp, "limit", 1, 100000, &limit))
    return;
  st = rm_coord_job_steps(req->api->coord, id, rank == UINT64_MAX ? -1 : (int)rank,
                          (uint32_t)limit, &s, &n);
  if (st != RM_OK) {
    rm__resp_coord_error(resp, st, "list steps", id);
    return;
  }
  arr = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(arr, rm__json_step(&s[i]));
  rm_coord_free(s);
  rm__resp_json(resp, 200, json_pack("{s:I,s:o}", "job_id", (json_int_t)id, "steps", arr));
}

/* rm__sse_history_fn over the coordinator's event log: the same JSON as the
 * live events (server.c on_event), so a replayed event is byte for byte the
 * one a live stream got. */
static int sse_history(void *ctx, uint64_t after, rm__sse_stored_t *out, int max)
{
  rm_event_t *ev = NULL;
  size_t n = 0;
  int k = 0;

  if (rm_coord_events(ctx, 0, after, (uint32_t)max, &ev, &n) != RM_OK) return -1;
  for (size_t i = 0; i < n && k < max; i++) {
    json_t *j = rm__json_event(&ev[i]);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (text == NULL) goto fail;
    out[k].seq = ev[i].seq;
    out[k].job[0] = '\0';
    if (ev[i].job_id)
      snprintf(out[k].job, sizeof out[k].job, "%llu", (unsigned long long)ev[i].job_id);
    out[k++].data = text;
  }
  rm_coord_free(ev);
  return k;
fail:
  while (k > 0) free(out[--k].data);
  rm_coord_free(ev);
  return -1;
}

/* GET /api/v1/events: ids and the resume rules are in sse.h. */
static void h_sse(rm__req_t *req, rm__resp_t *resp)
{
  const char *job = rm__req_query(req, "job");
  const char *last = rm__req_header(req, "Last-Event-ID");
  uint64_t id = 0;
  rm__sse_resume_t resume = {.history = sse_history, .history_ctx = req->api->coord};

  if (last == NULL) last = rm__req_query(req, "last_event_id");
  if (job && *job && (rm__parse_id(job, &id) != 0 || id == 0)) {
    rm__resp_error(resp, 400, "invalid_value", "job", "job must be a job id");
    return;
  }
  if (last && *last && rm__parse_u64(last, &resume.last_id) != 0) {
    rm__resp_error(resp, 400, "invalid_value", "Last-Event-ID", "Last-Event-ID must be an "
                   "event id");
    return;
  }
  resume.newest_seq = rm_coord_event_seq(req->api->coord);
  resp->raw = rm__sse_response(req->api->hub, job, &resume);
  if (resp->raw == NULL) {
    rm__resp_error(resp, 500, "internal", NULL, "cannot create the event stream");
    return;
  }
  resp->status = 200;
}

static void h_metrics(rm__req_t *req, rm__resp_t *resp) { rm__metrics_render(req->api, resp); }

const rm__route_t rm__routes[] = {
    {"GET", "/", rm__static_serve, 0},
    {"GET", "/index.html", rm__static_serve, 0},
    {"GET", "/jobs/{}", rm__static_serve, 0},
    {"GET", "/static/{}", rm__static_serve, 0},
    {"GET", "/healthz", h_health, 0},
    {"GET", "/readyz", h_ready, 0},
    {"GET", "/metrics", h_metrics, 0},
    {"GET", "/api/v1/openapi.json", rm__static_serve, 0},
    {"GET", "/api/v1/events", h_sse, RM__ROUTE_STREAM},
    {"GET", "/api/v1/jobs", h_list, 0},
    {"POST", "/api/v1/jobs", h_submit, RM__ROUTE_AUTH},
    {"GET", "/api/v1/jobs/{}", h_get, 0},
    {"DELETE", "/api/v1/jobs/{}", h_cancel, RM__ROUTE_AUTH},
    {"POST", "/api/v1/jobs/{}/cancel", h_cancel, RM__ROUTE_AUTH},
    {"GET", "/api/v1/jobs/{}/workers", h_workers, 0},
    {"GET", "/api/v1/jobs/{}/workers/{}/log", rm__h_worker_log, 0},
    {"GET", "/api/v1/jobs/{}/k8s-manifest", rm__h_k8s_manifest, RM__ROUTE_AUTH},
    {"GET", "/api/v1/jobs/{}/events", h_events, 0},
    {"GET", "/api/v1/jobs/{}/barriers", h_barriers, 0},
    {"GET", "/api/v1/jobs/{}/steps", h_steps, 0},
    {NULL, NULL, NULL, 0}};
