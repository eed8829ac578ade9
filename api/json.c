/*
 * json.c - JSON views of the coordinator's structs, shared by the REST
 * handlers, the SSE ticker and the CLI's --json output (same field names as
 * the structs in coord.h and the schemas in openapi.json).
 *
 * Times are wall-clock milliseconds since the epoch (*_ms) and durations are
 * milliseconds; NaN/Inf become null. u64 values are JSON integers (Jansson
 * json_int_t is long long; ids and steps stay below 2^63).
 *
 * Jobs are streamed into a buffer (rm__jw_job, jsonw.h) instead of built as
 * Jansson trees: a job list page is 100 jobs of 30 fields, and the trees'
 * malloc/free and dumping dominated its profile. Same fields, same order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_int.h"
#include "jsonw.h"

json_t *rm__json_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* Jansson refuses strings that are not UTF-8: worker-supplied text (host,
 * devices, messages) could be anything, so fall back to an escaped copy. */
json_t *rm__json_str(const char *s)
{
  json_t *j = json_string(s);
  if (j == NULL) {
    char buf[2 * RM_COORD_TEXT_MAX];
    size_t i = 0;
    for (; *s && i + 1 < sizeof buf; s++) buf[i++] = (*s & 0x80) ? '?' : *s;
    buf[i] = '\0';
    j = json_string(buf);
  }
  return j;
}

/* Streamed (jsonw.h), not built with Jansson: jobs are the bulk of the job
 * list, the busiest endpoint. Same fields and order as the Job schema. */
static void kv_str(rm__sbuf_t *b, const char *k, const char *v)
{
  rm__sbuf_append(b, ",", 1);
  rm__jw_key(b, k);
  rm__jw_str(b, v);
}

static void kv_i64(rm__sbuf_t *b, const char *k, int64_t v)
{
  rm__sbuf_append(b, ",", 1);
  rm__jw_key(b, k);
  rm__jw_i64(b, v);
}

/* A finite double as the shortest of %.15g / %.17g that reads back the
 * same; null when not finite (the spec's numbers are checked finite). */
static void kv_num(rm__sbuf_t *b, const char *k, double v)
{
  char num[40];
  rm__sbuf_append(b, ",", 1);
  rm__jw_key(b, k);
  if (!isfinite(v)) {
    rm__sbuf_puts(b, "null");
    return;
  }
  snprintf(num, sizeof num, "%.15g", v);
  if (strtod(num, NULL) != v) snprintf(num, sizeof num, "%.17g", v);
  rm__sbuf_puts(b, num);
}

/* "aggregation": {"method": "krum", "f": 1, "m": 0, "clip_norm": 0,
 * "tau": 0, "iterations": 0} (the spec's names as the API takes
 * them). */
static void write_aggregation(rm__sbuf_t *b, const rm_job_spec_t *s)
{
  rm__sbuf_puts(b, ",\"aggregation\":{");
  rm__jw_key(b, "method");
  rm__jw_str(b, s->aggregation[0] ? s->aggregation : "mean");
  kv_i64(b, "f", s->aggregation_f);
  kv_i64(b, "m", s->aggregation_m);
  kv_num(b, "clip_norm", s->clip_norm);
  kv_num(b, "tau", s->aggregation_tau);
  kv_i64(b, "iterations", s->aggregation_iterations);
  rm__sbuf_append(b, "}", 1);
}

/* "secure_aggregation": {"bits": 32, "clip": 1, "scale": 0, "threshold":
 * 3, "neighbours": "all"}, only when it is on (the object's
 * presence is what turns it on in a spec). */
static void write_secagg(rm__sbuf_t *b, const rm_job_spec_t *s)
{
  if (!s->secagg_bits) return;
  rm__sbuf_puts(b, ",\"secure_aggregation\":{");
  rm__jw_key(b, "bits");
  rm__jw_i64(b, s->secagg_bits);
  kv_num(b, "clip", s->secagg_clip);
  kv_num(b, "scale", s->secagg_scale);
  kv_i64(b, "threshold", s->secagg_threshold);
  kv_str(b, "neighbours", s->secagg_neighbours[0] ? s->secagg_neighbours : "all");
  rm__sbuf_append(b, "}", 1);
}

/* "command": [...], "env": {...}, "workdir": "...": [] / {} / ""
 * for the built-in workloads. env shows its keys, each value "***": the
 * values are the user's secrets (docs/security.md). env entries are "KEY=VALUE" (the coordinator
 * checked the '=' and the key's characters, so the key needs no escaping
 * beyond rm__jw_str's). */
static void write_command(rm__sbuf_t *b, const rm_job_spec_t *s)
{
  const char *p = s->command;
  char key[RM_COORD_ENV_BYTES];
  rm__sbuf_puts(b, ",\"command\":[");
  for (int i = 0; i < s->command_argc; i++, p = rm_job_spec_next(p)) {
    if (i) rm__sbuf_append(b, ",", 1);
    rm__jw_str(b, p);
  }
  rm__sbuf_puts(b, "],\"env\":{");
  p = s->env;
  for (int i = 0; i < s->env_count; i++, p = rm_job_spec_next(p)) {
    const char *eq = strchr(p, '=');
    size_t kl = eq ? (size_t)(eq - p) : strlen(p);
    if (i) rm__sbuf_append(b, ",", 1);
    memcpy(key, p, kl);
    key[kl] = '\0';
    rm__jw_str(b, key);
    rm__sbuf_append(b, ":", 1);
    rm__jw_str(b, RM_JOB_ENV_MASK); /* values are secret: never returned */
  }
  rm__sbuf_append(b, "}", 1);
  kv_str(b, "workdir", s->workdir);
}

static void write_spec(rm__sbuf_t *b, const rm_job_spec_t *s)
{
  rm__sbuf_append(b, "{", 1);
  rm__jw_key(b, "name");
  rm__jw_str(b, s->name);
  kv_i64(b, "world_size", s->world_size);
  kv_i64(b, "min_workers", s->min_workers);
  kv_i64(b, "max_workers", s->max_workers);
  kv_str(b, "algorithm", s->algorithm);
  kv_str(b, "dtype", s->dtype);
  kv_str(b, "workload", s->workload);
  kv_str(b, "workload_options", s->workload_options);
  kv_i64(b, "steps", (int64_t)s->steps);
  kv_str(b, "launcher", s->launcher);
  kv_i64(b, "heartbeat_timeout_ms", s->heartbeat_timeout_ms);
  kv_i64(b, "barrier_timeout_ms", s->barrier_timeout_ms);
  kv_str(b, "on_failure", s->on_failure);
  kv_i64(b, "max_restarts", s->max_restarts);
  kv_str(b, "straggler_policy", s->straggler_policy);
  kv_i64(b, "backup_workers", s->backup_workers);
  kv_i64(b, "checkpoint_every", (int64_t)s->checkpoint_every);
  write_command(b, s);
  write_aggregation(b, s);
  rm__sbuf_puts(b, s->deterministic ? ",\"deterministic\":true" : ",\"deterministic\":false");
  kv_i64(b, "max_staleness", s->max_staleness);
  write_secagg(b, s);
  rm__sbuf_append(b, "}", 1);
}

static void jw_job_fields(rm__sbuf_t *b, const rm_job_info_t *j, int with_token)
{
  rm__sbuf_append(b, "{", 1);
  rm__jw_key(b, "id");
  rm__jw_u64(b, j->id);
  rm__sbuf_append(b, ",", 1);
  rm__jw_key(b, "spec");
  write_spec(b, &j->spec);
  kv_str(b, "state", rm_job_state_name(j->state));
  kv_str(b, "reason", j->reason);
  kv_i64(b, "generation", (int64_t)j->generation);
  kv_i64(b, "world", j->world);
  kv_i64(b, "workers_joined", j->workers_joined);
  kv_i64(b, "workers_alive", j->workers_alive);
  kv_i64(b, "step", (int64_t)j->step);
  kv_i64(b, "steps_total", (int64_t)rm_job_steps_total(j));
  kv_i64(b, "restarts", j->restarts);
  kv_i64(b, "created_ms", j->created_ms);
  kv_i64(b, "started_ms", j->started_ms);
  kv_i64(b, "finished_ms", j->finished_ms);
  kv_i64(b, "updated_ms", j->updated_ms);
  kv_str(b, "straggler_mitigation", rm_mitigation_name(j->mitigation));
  kv_i64(b, "straggler_mitigation_step", (int64_t)j->mitigation_step);
  kv_i64(b, "secure_recovered_steps", j->secure_recovered_steps);
  kv_i64(b, "secure_dropouts", j->secure_dropouts);
  if (with_token) kv_str(b, "token", j->token);
}

void rm__jw_job(rm__sbuf_t *b, const rm_job_info_t *j, int with_token)
{
  jw_job_fields(b, j, with_token);
  rm__sbuf_append(b, "}", 1);
}

/* The coordinator checked the text structurally (coordinator/json_check.c);
 * Jansson parses it again here, so what is answered is compact JSON that a
 * JSON library produced. A text that does not parse (it cannot, short of a
 * hand-edited database) is answered as null. */
void rm__resp_job_result(rm__resp_t *r, const rm_job_info_t *j, const char *result)
{
  rm__sbuf_t b;
  size_t len;
  json_t *obj = result && *result ? json_loads(result, 0, NULL) : NULL;
  char *text = json_is_object(obj) ? json_dumps(obj, JSON_COMPACT) : NULL;
  rm__sbuf_init(&b);
  jw_job_fields(&b, j, 0);
  rm__sbuf_puts(&b, ",\"result\":");
  rm__sbuf_puts(&b, text ? text : "null");
  rm__sbuf_append(&b, "}", 1);
  free(text);
  json_decref(obj);
  char *s = rm__sbuf_take(&b, &len);
  rm__resp_text(r, 200, "application/json", s, len);
}

void rm__resp_job(rm__resp_t *r, unsigned status, const rm_job_info_t *j, int with_token)
{
  rm__sbuf_t b;
  size_t len;
  rm__sbuf_init(&b);
  rm__jw_job(&b, j, with_token);
  char *s = rm__sbuf_take(&b, &len);
  rm__resp_text(r, status, "application/json", s, len);
}

json_t *rm__json_worker(const rm_worker_info_t *w)
{
  return json_pack("{s:I,s:I,s:i,s:i,s:o,s:o,s:o,s:o,s:o,s:s,s:I,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:b,s:b}", "id",
                   (json_int_t)w->id, "job_id", (json_int_t)w->job_id, "rank", w->rank,
                   "launch_index", w->launch_index, "host",
                   rm__json_str(w->host), "data_addr", rm__json_str(w->data_addr),
                   "transports", rm__json_str(w->transports[0] ? w->transports : "tcp"),
                   "links", rm__json_str(w->links), "devices", rm__json_str(w->devices),
                   "state", rm_worker_state_name(w->state), "generation",
                   (json_int_t)w->generation, "last_heartbeat_ms",
                   (json_int_t)w->last_heartbeat_ms, "ms_since_heartbeat",
                   (json_int_t)w->ms_since_heartbeat, "step", (json_int_t)w->step, "step_ms",
                   rm__json_num(w->step_ms), "compute_ms", rm__json_num(w->compute_ms),
                   "comm_ms", rm__json_num(w->comm_ms), "wait_ms", rm__json_num(w->wait_ms),
                   "straggler", w->straggler != 0, "suspect", w->suspect != 0);
}

json_t *rm__json_event(const rm_event_t *e)
{
  return json_pack("{s:I,s:I,s:I,s:o,s:i,s:I,s:o}", "seq", (json_int_t)e->seq, "job_id",
                   (json_int_t)e->job_id, "time_ms", (json_int_t)e->time_ms, "kind",
                   rm__json_str(e->kind), "rank", e->rank, "generation", (json_int_t)e->generation,
                   "message", rm__json_str(e->message));
}

static const char *barrier_state(rm_barrier_state_t s)
{
  return s == RM_BARRIER_OPEN ? "open" : s == RM_BARRIER_RELEASED ? "released" : "broken";
}

json_t *rm__json_barrier(const rm_barrier_info_t *b)
{
  json_t *missing = json_array();
  for (size_t i = 0; i < b->n_missing; i++) {
    const rm_barrier_member_t *m = &b->missing[i];
    json_array_append_new(missing,
                          json_pack("{s:i,s:I,s:s,s:I}", "rank", m->rank, "step",
                                    (json_int_t)m->step, "state", rm_worker_state_name(m->state),
                                    "ms_since_heartbeat", (json_int_t)m->ms_since_heartbeat));
  }
  return json_pack("{s:o,s:I,s:s,s:I,s:I,s:I,s:i,s:i,s:o,s:o}", "name", rm__json_str(b->name),
                   "generation", (json_int_t)b->generation, "state", barrier_state(b->state),
                   "opened_ms", (json_int_t)b->opened_ms, "deadline_ms",
                   (json_int_t)b->deadline_ms, "closed_ms", (json_int_t)b->closed_ms, "arrived",
                   b->arrived, "expected", b->expected, "reason", rm__json_str(b->reason), "missing",
                   missing);
}

json_t *rm__json_step(const rm_step_sample_t *s)
{
  json_t *metrics = json_object();
  for (uint32_t i = 0; i < s->n_metrics && i < RM_METRICS_MAX; i++)
    json_object_set_new(metrics, s->metrics[i].name, rm__json_num(s->metrics[i].value));
  return json_pack("{s:i,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:I,s:o}", "rank", s->rank, "step",
                   (json_int_t)s->step, "generation", (json_int_t)s->generation, "time_ms",
                   (json_int_t)s->time_ms, "compute_ms", rm__json_num(s->compute_ms), "comm_ms",
                   rm__json_num(s->comm_ms), "wait_ms", rm__json_num(s->wait_ms), "loss",
                   rm__json_num(s->loss), "accuracy", rm__json_num(s->accuracy),
                   "allreduce_bytes", (json_int_t)s->allreduce_bytes, "metrics", metrics);
}
