/*
 * wl_allreduce.c - the `allreduce` workload: repeated, verified all-reduce
 * benchmark steps.
 *
 * Options: count=N (elements, default 1048576), dtype=f32|f64|i32|i64
 * (default f32), algo=auto|ring|hd|butterfly|tree, verify=0|1 (default 1),
 * in the workload option grammar of common/rm_opts.h.
 *
 * Verification (nccl-tests style, exact): rank r at step s fills element i
 * with (r + 1) * v(i, s), v = 1 + (i + s) % 7, small integers that every
 * dtype represents exactly; the SUM over world ranks is
 * world * (world + 1) / 2 * v(i, s), also exact, so any wrong byte shows.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_clock.h"
#include "rm_log.h"
#include "rm_opts.h"
#include "workload.h"

typedef struct {
  size_t count;
  rm_dtype_t dtype;
  rm_algo_t algo;
  int verify;
  void *buf;
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
    if (strcmp(val, "0") && strcmp(val, "1")) goto bad;
    s->verify = val[0] == '1';
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

static size_t check(ar_state_t *s, int world, uint64_t step, double *got)
{
  double k = (double)world * (world + 1) / 2;
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
  for (uint64_t step = env->start_step + 1; step <= env->max_steps; step++) {
    rm_step_report_t r;
    rm_allreduce_info_t info;
    double got = 0;
    memset(&r, 0, sizeof r);
    int64_t t0 = rm__now_ns();
    fill(s, env->rank, step);
    int64_t t1 = rm__now_ns();
    rm_status_t st = rm_allreduce_ex(env->comm, s->buf, s->buf, s->count,
                                     s->dtype, RM_SUM, s->algo, &info);
    int64_t t2 = rm__now_ns();
    if (st != RM_OK) return st;
    size_t bad = s->verify ? check(s, env->world, step, &got) : (size_t)-1;
    if (bad != (size_t)-1) {
      RM_ERROR("allreduce step %llu: element %zu is %g, expected %g",
               (unsigned long long)step, bad, got,
               (double)env->world * (env->world + 1) / 2 * value(bad, step));
      return RM_ERR_INTERNAL;
    }
    r.step = step;
    r.compute_ms = (double)(t1 - t0) / 1e6;
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
  snprintf(buf, len, "{\"count\":%zu,\"dtype\":\"%s\",\"verified\":%s}", s->count,
           rm_dtype_name(s->dtype), s->verify ? "true" : "false");
}

static void ar_destroy(void *state)
{
  ar_state_t *s = state;
  if (!s) return;
  free(s->buf);
  free(s);
}

const rm_workload_ops_t rm__workload_allreduce = {
    .name = "allreduce",
    .create = ar_create,
    .run = ar_run,
    .summary = ar_summary,
    .destroy = ar_destroy,
};
