/*
 * json.c - JSON views of the coordinator's structs, shared by the REST
 * handlers, the SSE ticker and the CLI's --json output (same field names as
 * the structs in coord.h and the schemas in openapi.json).
 *
 * Times are wall-clock milliseconds since the epoch (*_ms) and durations are
 * milliseconds; NaN/Inf become null. u64 values are JSON integers (Jansson
 * json_int_t is long long; ids and steps stay below 2^63).
 */
#include <math.h>

#include "api_int.h"

json_t *rm__json_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* Jansson refuses strings that are not UTF-8: worker-supplied text (host,
 * devices, messages) could be anything, so fall back to an escaped copy. */
json_t *rm__json_str(const char *s)
{
  json_t *j = json_string(s);
  if (j == NULL) {
    char buf[512];
    size_t i = 0;
    for (; *s && i + 1 < sizeof buf; s++) buf[i++] = (*s & 0x80) ? '?' : *s;
    buf[i] = '\0';
    j = json_string(buf);
  }
  return j;
}

json_t *rm__json_spec(const rm_job_spec_t *s)
{
  return json_pack(
      "{s:o,s:i,s:i,s:i,s:o,s:o,s:o,s:o,s:I,s:o,s:i,s:i,s:o,s:i,s:o,s:i,s:I}", "name",
      rm__json_str(s->name), "world_size", s->world_size, "min_workers", s->min_workers, "max_workers",
      s->max_workers, "algorithm", rm__json_str(s->algorithm), "dtype", rm__json_str(s->dtype), "workload",
      rm__json_str(s->workload), "workload_options", rm__json_str(s->workload_options), "steps",
      (json_int_t)s->steps, "launcher", rm__json_str(s->launcher), "heartbeat_timeout_ms",
      s->heartbeat_timeout_ms, "barrier_timeout_ms", s->barrier_timeout_ms, "on_failure",
      rm__json_str(s->on_failure), "max_restarts", s->max_restarts, "straggler_policy",
      rm__json_str(s->straggler_policy), "backup_workers", s->backup_workers, "checkpoint_every",
      (json_int_t)s->checkpoint_every);
}

json_t *rm__json_job(const rm_job_info_t *j, int with_token)
{
  json_t *o = json_pack(
      "{s:I,s:o,s:s,s:o,s:I,s:i,s:i,s:i,s:I,s:I,s:i,s:I,s:I,s:I,s:I}", "id", (json_int_t)j->id,
      "spec", rm__json_spec(&j->spec), "state", rm_job_state_name(j->state), "reason",
      rm__json_str(j->reason), "generation", (json_int_t)j->generation, "world", j->world,
      "workers_joined", j->workers_joined, "workers_alive", j->workers_alive, "step",
      (json_int_t)j->step, "steps_total", (json_int_t)j->spec.steps, "restarts", j->restarts,
      "created_ms", (json_int_t)j->created_ms, "started_ms", (json_int_t)j->started_ms,
      "finished_ms", (json_int_t)j->finished_ms, "updated_ms", (json_int_t)j->updated_ms);
  if (o && with_token) json_object_set_new(o, "token", rm__json_str(j->token));
  return o;
}

json_t *rm__json_worker(const rm_worker_info_t *w)
{
  return json_pack("{s:I,s:I,s:i,s:o,s:o,s:o,s:s,s:I,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:b}", "id",
                   (json_int_t)w->id, "job_id", (json_int_t)w->job_id, "rank", w->rank, "host",
                   rm__json_str(w->host), "data_addr", rm__json_str(w->data_addr), "devices", rm__json_str(w->devices),
                   "state", rm_worker_state_name(w->state), "generation",
                   (json_int_t)w->generation, "last_heartbeat_ms",
                   (json_int_t)w->last_heartbeat_ms, "ms_since_heartbeat",
                   (json_int_t)w->ms_since_heartbeat, "step", (json_int_t)w->step, "step_ms",
                   rm__json_num(w->step_ms), "compute_ms", rm__json_num(w->compute_ms),
                   "comm_ms", rm__json_num(w->comm_ms), "wait_ms", rm__json_num(w->wait_ms),
                   "straggler", w->straggler != 0);
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
  return json_pack("{s:i,s:I,s:I,s:I,s:o,s:o,s:o,s:o,s:o,s:I}", "rank", s->rank, "step",
                   (json_int_t)s->step, "generation", (json_int_t)s->generation, "time_ms",
                   (json_int_t)s->time_ms, "compute_ms", rm__json_num(s->compute_ms), "comm_ms",
                   rm__json_num(s->comm_ms), "wait_ms", rm__json_num(s->wait_ms), "loss",
                   rm__json_num(s->loss), "accuracy", rm__json_num(s->accuracy),
                   "allreduce_bytes", (json_int_t)s->allreduce_bytes);
}
