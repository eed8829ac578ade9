/*
 * metrics.c - GET /metrics in the Prometheus text format (writer in prom.c).
 *
 * Families (base units, counters end in _total):
 *   ringmaster_build_info{version}                 gauge 1
 *   ringmaster_jobs{state}                         gauge, stored jobs by state
 *   ringmaster_workers{state}                      gauge, workers of live jobs
 *   ringmaster_job_step{job_id,name}               gauge, running jobs only
 *   ringmaster_job_workers_alive{job_id,name}       gauge, running jobs only
 *   ringmaster_grpc_calls_total / _errors_total    counters
 *   ringmaster_session_messages_total              counter
 *   ringmaster_relay_messages_total                counter
 *   ringmaster_relay_lanes_total                   counter, lanes opened
 *   ringmaster_step_gate_calls_total{via}          counter (unary | session)
 *   ringmaster_barriers_total{outcome}             counter released|broken
 *   ringmaster_barrier_waiting                     gauge, workers parked
 *   ringmaster_barrier_wait_seconds                summary (sum, count)
 *   ringmaster_step_seconds                        histogram (coordinator buckets)
 *   ringmaster_allreduce_bytes_total               counter
 *   ringmaster_allreduce_seconds_total             counter
 *   ringmaster_workers_lost_total                  counter
 *   ringmaster_stragglers                          gauge, flagged now
 *   ringmaster_byzantine_suspects                  gauge, live workers named
 *                                                  suspect now
 *   ringmaster_events_total, ringmaster_generations_total   counters
 *   ringmaster_store_commits_failed_total          counter, sections rolled
 *                                                  back by a failed write
 *                                                  (docs/storage.md)
 *   ringmaster_store_writable                      gauge, 1 while writes
 *                                                  succeed, 0 while failing
 *   ringmaster_http_requests_total{code}           counter by status class
 *   ringmaster_sse_streams                         gauge, open event streams
 */
#include <stdio.h>

#include "api_int.h"
#include "prom.h"
#include "rm_config.h"

static void per_job(rm_api_t *api, rm__sbuf_t *b)
{
  rm_job_filter_t f = {.state = RM_JOB_RUNNING, .offset = 0, .limit = 1000};
  rm_job_info_t *jobs = NULL;
  size_t n = 0;
  char id[24];

  if (rm_coord_job_list(api->coord, &f, &jobs, &n, NULL) != RM_OK) n = 0;
  rm__prom_family(b, "ringmaster_job_step", RM_PROM_GAUGE,
                  "Steps every member of a running job has completed.");
  for (size_t i = 0; i < n; i++) {
    const char *l[] = {"job_id", id, "name", jobs[i].spec.name, NULL};
    snprintf(id, sizeof id, "%llu", (unsigned long long)jobs[i].id);
    rm__prom_sample(b, "ringmaster_job_step", l, (double)jobs[i].step);
  }
  rm__prom_family(b, "ringmaster_job_workers_alive", RM_PROM_GAUGE,
                  "Workers of a running job that are not lost or gone.");
  for (size_t i = 0; i < n; i++) {
    const char *l[] = {"job_id", id, "name", jobs[i].spec.name, NULL};
    snprintf(id, sizeof id, "%llu", (unsigned long long)jobs[i].id);
    rm__prom_sample(b, "ringmaster_job_workers_alive", l, jobs[i].workers_alive);
  }
  rm_coord_free(jobs);
}

static void counter(rm__sbuf_t *b, const char *name, const char *help, double v)
{
  rm__prom_family(b, name, RM_PROM_COUNTER, help);
  rm__prom_sample(b, name, NULL, v);
}

static void http_families(rm_api_t *api, rm__sbuf_t *b)
{
  static const char *const cls[] = {"other", "1xx", "2xx", "3xx", "4xx", "5xx"};
  rm__prom_family(b, "ringmaster_http_requests_total", RM_PROM_COUNTER,
                  "HTTP requests answered by the REST server, by status class.");
  for (int i = 0; i < 6; i++) {
    const char *l[] = {"code", cls[i], NULL};
    rm__prom_sample(b, "ringmaster_http_requests_total", l,
                    (double)__atomic_load_n(&api->http_requests[i], __ATOMIC_RELAXED));
  }
  rm__prom_family(b, "ringmaster_sse_streams", RM_PROM_GAUGE, "Open server-sent event streams.");
  rm__prom_sample(b, "ringmaster_sse_streams", NULL, rm__sse_streams(api->hub));
}

static void state_families(const rm_coord_counters_t *c, rm__sbuf_t *b)
{
  rm__prom_family(b, "ringmaster_jobs", RM_PROM_GAUGE, "Stored jobs by state.");
  for (int s = 0; s < RM_JOB_STATE_COUNT; s++) {
    const char *l[] = {"state", rm_job_state_name((rm_job_state_t)s), NULL};
    rm__prom_sample(b, "ringmaster_jobs", l, (double)c->jobs_by_state[s]);
  }
  rm__prom_family(b, "ringmaster_workers", RM_PROM_GAUGE,
                  "Workers of jobs that are not finished, by state.");
  for (int s = 0; s < RM_WORKER_STATE_COUNT; s++) {
    const char *l[] = {"state", rm_worker_state_name((rm_worker_state_t)s), NULL};
    rm__prom_sample(b, "ringmaster_workers", l, (double)c->workers_by_state[s]);
  }
}

static void barrier_families(const rm_coord_counters_t *c, rm__sbuf_t *b)
{
  const char *rel[] = {"outcome", "released", NULL};
  const char *brk[] = {"outcome", "broken", NULL};
  rm__prom_family(b, "ringmaster_barriers_total", RM_PROM_COUNTER,
                  "Barriers closed, by outcome (released when all arrived, broken at the "
                  "deadline or when a member was lost).");
  rm__prom_sample(b, "ringmaster_barriers_total", rel, (double)c->barriers_released_total);
  rm__prom_sample(b, "ringmaster_barriers_total", brk, (double)c->barriers_broken_total);
  rm__prom_family(b, "ringmaster_barrier_waiting", RM_PROM_GAUGE,
                  "Workers currently waiting in a barrier.");
  rm__prom_sample(b, "ringmaster_barrier_waiting", NULL, (double)c->barrier_waits_open);
  rm__prom_family(b, "ringmaster_barrier_wait_seconds", RM_PROM_SUMMARY,
                  "Time workers spent waiting in barriers that closed.");
  rm__prom_sample(b, "ringmaster_barrier_wait_seconds_sum", NULL, c->barrier_wait_seconds_sum);
  rm__prom_sample(b, "ringmaster_barrier_wait_seconds_count", NULL, (double)c->barrier_wait_count);
}

void rm__metrics_render(rm_api_t *api, rm__resp_t *resp)
{
  rm_coord_counters_t c;
  rm__sbuf_t b;
  rm__prom_hist_t h = {rm_coord_step_bucket_le, RM_COORD_STEP_BUCKETS, NULL, 0};
  const char *ver[] = {"version", RM_VERSION_STRING, NULL};
  size_t len;
  char *text;

  rm_coord_counters(api->coord, &c);
  rm__sbuf_init(&b);
  rm__prom_family(&b, "ringmaster_build_info", RM_PROM_GAUGE, "Version of this coordinator.");
  rm__prom_sample(&b, "ringmaster_build_info", ver, 1);
  state_families(&c, &b);
  per_job(api, &b);
  counter(&b, "ringmaster_grpc_calls_total", "gRPC calls received.", (double)c.grpc_calls_total);
  counter(&b, "ringmaster_grpc_errors_total", "gRPC calls answered with a non-OK status.",
          (double)c.grpc_errors_total);
  counter(&b, "ringmaster_session_messages_total",
          "Messages received on the workers' Session streams (heartbeats).",
          (double)c.session_messages_total);
  counter(&b, "ringmaster_relay_messages_total",
          "Messages received on relays' Relay streams (each carries many lanes' messages).",
          (double)c.relay_messages_total);
  counter(&b, "ringmaster_relay_lanes_total",
          "Worker Sessions opened as lanes of Relay streams.", (double)c.relay_lanes_total);
  rm__prom_family(&b, "ringmaster_step_gate_calls_total", RM_PROM_COUNTER,
                  "Step-gate calls received, by how they came (a StepGate call, or a "
                  "message of a Session stream).");
  const char *unary[] = {"via", "unary", NULL}, *sess[] = {"via", "session", NULL};
  rm__prom_sample(&b, "ringmaster_step_gate_calls_total", unary,
                  (double)c.step_gate_calls_unary);
  rm__prom_sample(&b, "ringmaster_step_gate_calls_total", sess,
                  (double)c.step_gate_calls_session);
  barrier_families(&c, &b);
  h.counts = c.step_seconds_bucket;
  h.sum = c.step_seconds_sum;
  rm__prom_family(&b, "ringmaster_step_seconds", RM_PROM_HISTOGRAM,
                  "Duration of training steps reported by workers (compute + comm + wait).");
  rm__prom_histogram(&b, "ringmaster_step_seconds", NULL, &h);
  counter(&b, "ringmaster_allreduce_bytes_total", "Payload bytes all-reduced, as reported by "
          "workers.", (double)c.allreduce_bytes_total);
  counter(&b, "ringmaster_allreduce_seconds_total", "Seconds workers spent in all-reduce.",
          c.allreduce_seconds_total);
  counter(&b, "ringmaster_workers_lost_total", "Workers marked lost (missed heartbeats).",
          (double)c.workers_lost_total);
  rm__prom_family(&b, "ringmaster_stragglers", RM_PROM_GAUGE,
                  "Workers currently flagged as stragglers.");
  rm__prom_sample(&b, "ringmaster_stragglers", NULL, (double)c.stragglers_flagged);
  rm__prom_family(&b, "ringmaster_byzantine_suspects", RM_PROM_GAUGE,
                  "Live workers currently named Byzantine suspects (excluded by the "
                  "job's robust aggregation in M of their last W steps).");
  rm__prom_sample(&b, "ringmaster_byzantine_suspects", NULL, (double)c.byzantine_suspects);
  counter(&b, "ringmaster_events_total", "Events recorded.", (double)c.events_total);
  counter(&b, "ringmaster_generations_total", "Group generations formed.",
          (double)c.generations_total);
  counter(&b, "ringmaster_store_commits_failed_total", "Sections rolled back because a write "
          "to the database failed (disk full, I/O error); none was acknowledged.",
          (double)c.store_commits_failed);
  rm__prom_family(&b, "ringmaster_store_writable", RM_PROM_GAUGE,
                  "1 while the database takes writes, 0 while they fail.");
  rm__prom_sample(&b, "ringmaster_store_writable", NULL, c.store_state == RM_COORD_STORE_OK);
  http_families(api, &b);
  text = rm__sbuf_take(&b, &len);
  rm__resp_text(resp, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}
