/*
 * wl_allreduce.c - the `allreduce` workload: repeated, verified all-reduce
 * benchmark steps.
 *
 * Options: count=N (elements, default 1048576), dtype=f32|f64|i32|i64
 * (default f32), algo=auto|ring|hd|butterfly|tree|hierarchical, verify=0|1 (default 1),
 * in the workload option grammar of common/rm_opts.h.
 *
 * Verification (nccl-tests style, exact): rank r at step s fills element i
 * with (r + 1) * v(i, s), v = 1 + (i + s) % 7, small integers that every
 * dtype represents exactly; the SUM over the contributing ranks C is
 * sum_{r in C} (r + 1) * v(i, s), also exact, so any wrong byte shows.
 *
 * Straggler policies (session/step_engine.h): none sums every
 * rank (C = all, with the chosen algo); backup, deadline and auto take the
 * member mask of the step from the coordinator and sum exactly those ranks
 * (C = the mask; the others add zeros and still receive the sum). coded and
 * stale are refused at submit: this workload has no batch to partition and
 * no compute to finish late.
 *
 * Secure aggregation (the spec's secure_aggregation, f32 only,
 * straggler policy none): each step is one secure sum of inputs every rank
 * can predict, checked as wl_secure.c says; verify=exact adds the bit-exact
 * integer check (which reveals the quantized inputs: tests only).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_clock.h"
#include "rm_log.h"
#include "rm_opts.h"
#include "aggregate/aggregate.h"
#include "session/step_engine.h"
#include "wl_secure.h"
#include "workload.h"

typedef struct {
  size_t count;
  rm_dtype_t dtype;
  rm_algo_t algo;
  int verify;                /* 0, 1, 2 = "exact" (secure jobs) */
  void *buf;
  rm__sp_t sp;
  rm__ar_secure_t sec;
  int secure;                /* the job ran secure steps */
} ar_state_t;

static rm_status_t parse_opt(ar_state_t *s, const char *key, const char *val,
                             char *err, size_t errlen)
{
  if (!strcmp(key, "count")) {
    uint64_t v = 0;
    char msg[200];
    if (rm__opt_u64(key, val, 0, 1ull << 31, &v, msg, sizeof msg) != RM_OK) {
      snprintf(err, errlen, "allreduce: %s", msg);
      return RM_ERR_INVALID_ARG;
    }
    s->count = (size_t)v;
  } else if (!strcmp(key, "dtype")) {
    if (rm_dtype_parse(val, &s->dtype) != RM_OK || s->dtype == RM_F16 ||
        s->dtype == RM_BF16 || s->dtype == RM_U8)
      goto bad;
  } else if (!strcmp(key, "algo")) {
    if (rm_algo_parse(val, &s->algo) != RM_OK) goto bad;
  } else if (!strcmp(key, "verify")) {
    if (strcmp(val, "0") && strcmp(val, "1") && strcmp(val, "exact")) goto bad;
    s->verify = val[0] == 'e' ? 2 : val[0] == '1';
  } else {
    snprintf(err, errlen, "allreduce: unknown option '%s' (count, dtype, algo, verify)", key);
    return RM_ERR_INVALID_ARG;
  }
  return RM_OK;
bad:
  snprintf(err, errlen, "allreduce: bad value '%s' for option '%s'", val, key);
  return RM_ERR_INVALID_ARG;
}

static rm_status_t ar_create(const char *options, void **state, char *err,
                             size_t errlen)
{
  ar_state_t *s = calloc(1, sizeof *s);
  const char *p = options ? options : "";
  char key[64], val[256], msg[400];
  rm_status_t st = RM_OK;
  int r;
  if (!s) return RM_ERR_NOMEM;
  s->count = 1 << 20;
  s->dtype = RM_F32;
  s->algo = RM_ALGO_AUTO;
  s->verify = 1;
  while (st == RM_OK &&
         (r = rm__opt_next(&p, key, sizeof key, val, sizeof val, msg, sizeof msg)) != 0) {
    if (r < 0) {
      snprintf(err, errlen, "allreduce: %s", msg);
      st = RM_ERR_INVALID_ARG;
      break;
    }
    st = parse_opt(s, key, val, err, errlen);
  }
  if (st == RM_OK && !(s->buf = malloc(s->count * rm_dtype_size(s->dtype) + 1)))
    st = RM_ERR_NOMEM;
  if (st != RM_OK && s) {
    free(s->buf);
    free(s);
  } else {
    *state = s;
  }
  return st;
}

static double value(size_t i, uint64_t step) { return 1.0 + (double)((i + step) % 7); }

static void fill(ar_state_t *s, int rank, uint64_t step)
{
  for (size_t i = 0; i < s->count; i++) {
    double v = (rank + 1) * value(i, step);
    switch (s->dtype) {
    case RM_F32: ((float *)s->buf)[i] = (float)v; break;
    case RM_F64: ((double *)s->buf)[i] = v; break;
    case RM_I32: ((int32_t *)s->buf)[i] = (int32_t)v; break;
    default: ((int64_t *)s->buf)[i] = (int64_t)v; break;
    }
  }
}

static size_t check(ar_state_t *s, double k, uint64_t step, double *got)
{
  for (size_t i = 0; i < s->count; i++) {
    double v;
    switch (s->dtype) {
    case RM_F32: v = ((float *)s->buf)[i]; break;
    case RM_F64: v = ((double *)s->buf)[i]; break;
    case RM_I32: v = ((int32_t *)s->buf)[i]; break;
    default: v = (double)((int64_t *)s->buf)[i]; break;
    }
    if (v != k * value(i, step)) {
      *got = v;
      return i;
    }
  }
  return (size_t)-1;
}

static rm_status_t ar_run(void *state, rm_workload_env_t *env)
{
  ar_state_t *s = state;
  rm__sp_t *sp = &s->sp;
  rm_status_t st = rm__sp_start(sp, env->straggler_policy, env->rank, env->world,
                                0, env->max_staleness, env->gate, env->report_ctx);
  if (st == RM_OK && (sp->kind == RM__SP_CODED || sp->kind == RM__SP_STALE)) {
    snprintf(env->error, sizeof env->error, "straggler_policy %s is not "
             "available for workload allreduce", rm__sp_kind_name(sp->kind));
    st = RM_ERR_INVALID_ARG;
  }
  if (st != RM_OK) return st;
  if (env->secure && (s->dtype != RM_F32 || rm__sp_gated(sp))) {
    snprintf(env->error, sizeof env->error, "secure aggregation sums f32 "
             "vectors under straggler_policy none (this job: dtype %s, "
             "policy %s)", rm_dtype_name(s->dtype), rm__sp_kind_name(sp->kind));
    return RM_ERR_INVALID_ARG;
  }
  s->secure |= env->secure;
  for (uint64_t step = env->start_step + 1; step <= env->max_steps; step++) {
    rm_step_report_t r;
    rm_allreduce_info_t info;
    double got = 0, k = 0;
    memset(&r, 0, sizeof r);
    sp->wait_ms = 0;
    int64_t t0 = rm__now_ns();
    fill(s, env->rank, step);
    if (rm__sp_gated(sp) && (st = rm__sp_decide(sp, step - 1)) != RM_OK) return st;
    int64_t t1 = rm__now_ns();
    if (env->secure) {
      st = rm__ar_secure_step(&s->sec, env, s->count, step, s->verify, s->buf);
      if (st != RM_OK) return st;
      rm__sp_count(sp, 1, env->world);
      r.step = step;
      r.comm_ms = (double)(rm__now_ns() - t1) / 1e6;
      r.compute_ms = (double)(t1 - t0) / 1e6;
      r.loss = r.accuracy = NAN;
      r.allreduce_bytes = s->count * sizeof(float);
      if (env->report && env->report(env->report_ctx, &r)) break;
      continue;
    }
    if (rm__sp_gated(sp))
      st = rm__masked_allreduce(env->comm, s->buf, s->buf, s->count, s->dtype,
                                RM_SUM, sp->members, 0, NULL);
    else
      st = rm_allreduce_ex(env->comm, s->buf, s->buf, s->count, s->dtype,
                           RM_SUM, s->algo, &info);
    int64_t t2 = rm__now_ns();
    if (st != RM_OK) return st;
    int n = 0;
    for (int q = 0; q < env->world; q++)
      if (!rm__sp_gated(sp) || sp->members[q]) k += q + 1, n++;
    rm__sp_count(sp, !rm__sp_gated(sp) || sp->members[env->rank], n);
    size_t bad = s->verify ? check(s, k, step, &got) : (size_t)-1;
    if (bad != (size_t)-1) {
      RM_ERROR("allreduce step %llu: element %zu is %g, expected %g (the sum "
               "over %d contributors)", (unsigned long long)step, bad, got,
               k * value(bad, step), n);
      return RM_ERR_INTERNAL;
    }
    r.step = step;
    r.wait_ms = sp->wait_ms;
    r.compute_ms = (double)(t1 - t0) / 1e6 - r.wait_ms;
    r.comm_ms = (double)(t2 - t1) / 1e6;
    r.loss = r.accuracy = NAN;
    r.allreduce_bytes = s->count * rm_dtype_size(s->dtype);
    if (env->report && env->report(env->report_ctx, &r)) break;
  }
  return RM_OK;
}

static void ar_summary(void *state, char *buf, size_t len)
{
  ar_state_t *s = state;
  char strag[256];
  char sec[512] = "";
  rm__sp_summary(&s->sp, strag, sizeof strag);
  if (s->secure) {
    sec[0] = ',';
    rm__ar_secure_summary(&s->sec, sec + 1, sizeof sec - 1);
  }
  snprintf(buf, len, "{\"count\":%zu,\"dtype\":\"%s\",\"verified\":%s,%s%s}", s->count,
           rm_dtype_name(s->dtype), s->verify ? "true" : "false", strag, sec);
}

static void ar_destroy(void *state)
{
  ar_state_t *s = state;
  if (!s) return;
  free(s->buf);
  rm__sp_free(&s->sp);
  rm__ar_secure_free(&s->sec);
  free(s);
}

const rm_workload_ops_t rm__workload_allreduce = {
    .name = "allreduce",
    .create = ar_create,
    .run = ar_run,
    .summary = ar_summary,
    .destroy = ar_destroy,
};
