/*
 * synthetic_workload.c - the `synthetic` workload: a gradient of chosen size
 * and a chosen compute time per step, for bandwidth and straggler runs.
 *
 * Options ("key=value,..."; every key optional):
 *
 *   key          default  meaning
 *   bytes        16M      gradient bytes per step (K/M/G = powers of 1024),
 *                         rounded down to whole elements; up to 4G
 *   dtype        f32      f32 | f64 | i32 | i64
 *   compute_ms   0        simulated compute per step
 *   compute      sleep    sleep (frees the CPU) | spin (busy-waits)
 *   slow_rank    -1       this rank's compute is multiplied by slow_factor
 *   slow_factor  1        (a deliberate straggler)
 *   algo         auto     all-reduce algorithm: auto ring hd butterfly tree
 *   steps        -        step limit; the smaller of it and the agent's
 *                         max_steps (the job's steps); 100 when neither is set
 *   verify       1        check every element of the result, every step
 *
 * Each step: fill, compute, all-reduce (RM_SUM, in place), verify.
 * Element i of rank r at step s holds ((i + s + 3r) mod 5) - 2, a small
 * integer: sums over any world size are exact in every dtype, so the
 * expected result, which depends only on (i + s) mod 5, is compared exactly.
 * The step number in the pattern catches a stale buffer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rm_clock.h"
#include "rm_log.h"
#include "train_int.h"

typedef struct synth_state {
  uint64_t bytes, steps, verify;
  double compute_ms, slow_factor;
  int64_t slow_rank;
  int spin;
  rm_dtype_t dtype;
  rm_algo_t algo;
  void *buf;
  size_t count;
  uint64_t step, done_steps, verified;
  double comm_ms_sum;
  int world;
} synth_state_t;

static rm_status_t synth_option(synth_state_t *s, const char *key,
                                const char *val, char *err, size_t errlen)
{
  uint64_t u;
  rm_status_t st = RM_OK;
  if (!strcmp(key, "bytes")) {
    st = rm__opt_u64(key, val, 1, 4ULL << 30, &s->bytes, err, errlen);
  } else if (!strcmp(key, "dtype")) {
    if (rm_dtype_parse(val, &s->dtype) != RM_OK ||
        (s->dtype != RM_F32 && s->dtype != RM_F64 && s->dtype != RM_I32 &&
         s->dtype != RM_I64)) {
      snprintf(err, errlen, "option dtype=%s: expected f32, f64, i32 or i64",
               val);
      st = RM_ERR_INVALID_ARG;
    }
  } else if (!strcmp(key, "compute_ms")) {
    st = rm__opt_double(key, val, 0, 3600e3, &s->compute_ms, err, errlen);
  } else if (!strcmp(key, "compute")) {
    s->spin = !strcmp(val, "spin");
    if (!s->spin && strcmp(val, "sleep")) {
      snprintf(err, errlen, "option compute=%s: expected sleep or spin", val);
      st = RM_ERR_INVALID_ARG;
    }
  } else if (!strcmp(key, "slow_rank")) {
    st = rm__opt_u64(key, val, 0, 1 << 24, &u, err, errlen);
    s->slow_rank = (int64_t)u;
  } else if (!strcmp(key, "slow_factor")) {
    st = rm__opt_double(key, val, 0, 1000, &s->slow_factor, err, errlen);
  } else if (!strcmp(key, "algo")) {
    if (rm_algo_parse(val, &s->algo) != RM_OK) {
      snprintf(err, errlen, "option algo=%s: expected auto, ring, hd, "
               "butterfly or tree", val);
      st = RM_ERR_INVALID_ARG;
    }
  } else if (!strcmp(key, "steps")) {
    st = rm__opt_u64(key, val, 1, UINT64_MAX, &s->steps, err, errlen);
  } else if (!strcmp(key, "verify")) {
    st = rm__opt_u64(key, val, 0, 1, &s->verify, err, errlen);
  } else {
    snprintf(err, errlen, "unknown option '%s' for workload synthetic "
             "(known: bytes dtype compute_ms compute slow_rank slow_factor "
             "algo steps verify)", key);
    st = RM_ERR_INVALID_ARG;
  }
  return st;
}

static rm_status_t synth_create(const char *options, void **state, char *err,
                                size_t errlen)
{
  rm_status_t st = RM_OK;
  char key[64], val[256];
  synth_state_t *s = calloc(1, sizeof(*s));
  if (!s) return RM_ERR_NOMEM;
  *s = (synth_state_t){.bytes = 16u << 20, .steps = 0, .verify = 1,
                       .slow_factor = 1, .slow_rank = -1, .dtype = RM_F32,
                       .algo = RM_ALGO_AUTO};
  const char *p = options ? options : "";
  int r;
  while ((r = rm__opt_next(&p, key, sizeof(key), val, sizeof(val), err,
                           errlen)) > 0)
    if ((st = synth_option(s, key, val, err, errlen)) != RM_OK) goto fail;
  if (r < 0) {
    st = RM_ERR_INVALID_ARG;
    goto fail;
  }
  s->count = s->bytes / rm_dtype_size(s->dtype);
  if (s->count == 0) {
    snprintf(err, errlen, "option bytes=%llu: less than one %s element",
             (unsigned long long)s->bytes, rm_dtype_name(s->dtype));
    st = RM_ERR_INVALID_ARG;
    goto fail;
  }
  s->buf = malloc(s->count * rm_dtype_size(s->dtype));
  if (!s->buf) {
    snprintf(err, errlen, "option bytes=%llu: out of memory",
             (unsigned long long)s->bytes);
    st = RM_ERR_NOMEM;
    goto fail;
  }
  *state = s;
  return RM_OK;
fail:
  free(s);
  return st;
}

/* Fill with the pattern, or count elements that differ from the expected
 * sum (table want[(i + s) mod 5]). One macro body per element type. */
#define SYNTH_FILL(T)                                                         \
  do {                                                                        \
    T *b = s->buf;                                                            \
    unsigned c = (unsigned)((step + 3u * (unsigned)rank) % 5);                \
    for (size_t i = 0; i < s->count; i++) {                                   \
      b[i] = (T)((int)c - 2);                                                 \
      c = c == 4 ? 0 : c + 1;                                                 \
    }                                                                         \
  } while (0)
#define SYNTH_CHECK(T)                                                        \
  do {                                                                        \
    const T *b = s->buf;                                                      \
    unsigned c = (unsigned)(step % 5);                                        \
    for (size_t i = 0; i < s->count; i++) {                                   \
      if (b[i] != (T)want[c] && bad++ == 0) first = i;                         \
      c = c == 4 ? 0 : c + 1;                                                 \
    }                                                                         \
  } while (0)

static void fill(synth_state_t *s, uint64_t step, int rank)
{
  switch (s->dtype) {
  case RM_F64: SYNTH_FILL(double); break;
  case RM_I32: SYNTH_FILL(int32_t); break;
  case RM_I64: SYNTH_FILL(int64_t); break;
  default: SYNTH_FILL(float); break;
  }
}

static rm_status_t check(synth_state_t *s, uint64_t step, int rank,
                         int world)
{
  int64_t want[5];
  size_t bad = 0, first = 0;
  for (unsigned k = 0; k < 5; k++) {
    want[k] = 0;
    for (int r = 0; r < world; r++) want[k] += (int64_t)((k + 3u * r) % 5) - 2;
  }
  switch (s->dtype) {
  case RM_F64: SYNTH_CHECK(double); break;
  case RM_I32: SYNTH_CHECK(int32_t); break;
  case RM_I64: SYNTH_CHECK(int64_t); break;
  default: SYNTH_CHECK(float); break;
  }
  if (!bad) return RM_OK;
  RM_ERROR("synthetic: rank %d step %llu: %zu of %zu elements wrong, first "
           "at index %zu", rank, (unsigned long long)step, bad, s->count,
           first);
  return RM_ERR_INTERNAL;
}

static void simulate_compute(const synth_state_t *s, int rank)
{
  double ms = s->compute_ms * (rank == s->slow_rank ? s->slow_factor : 1.0);
  if (ms <= 0) return;
  int64_t end = rm__now_ns() + (int64_t)(ms * 1e6);
  if (s->spin) {
    while (rm__now_ns() < end) {
    }
    return;
  }
  struct timespec ts = {.tv_sec = end / 1000000000LL,
                        .tv_nsec = end % 1000000000LL};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
  }
}

static rm_status_t synth_step(synth_state_t *s, rm_comm_t *comm, int rank,
                              int world, rm_step_report_t *rep)
{
  uint64_t step = s->step; /* 0-based index of this step */
  fill(s, step, rank);
  int64_t t0 = rm__now_ns();
  simulate_compute(s, rank);
  int64_t t1 = rm__now_ns();
  rm_status_t st = RM_OK;
  if (comm)
    st = rm_allreduce_ex(comm, s->buf, s->buf, s->count, s->dtype, RM_SUM,
                         s->algo, NULL);
  if (st != RM_OK) return st;
  int64_t t2 = rm__now_ns();
  if (s->verify) {
    st = check(s, step, rank, world);
    if (st != RM_OK) return st;
    s->verified++;
  }
  s->step++;
  memset(rep, 0, sizeof(*rep));
  rep->step = s->step;
  rep->compute_ms = (t1 - t0) / 1e6;
  rep->comm_ms = (t2 - t1) / 1e6;
  rep->loss = NAN;
  rep->accuracy = NAN;
  rep->allreduce_bytes = s->count * rm_dtype_size(s->dtype);
  return RM_OK;
}

static rm_status_t synth_run(void *state, rm_workload_env_t *env)
{
  synth_state_t *s = state;
  int rank = env->comm ? rm_comm_rank(env->comm) : 0;
  int world = env->comm ? rm_comm_world(env->comm) : 1;
  /* The job's steps (max_steps) rule unless the option asks for fewer; a
   * built-in default would stop short of the job and look like a failure. */
  uint64_t lim = s->steps ? s->steps : UINT64_MAX;
  if (env->max_steps && env->max_steps < lim) lim = env->max_steps;
  if (lim == UINT64_MAX) lim = 100;
  s->step = env->start_step;
  s->world = world;
  while (s->step < lim) {
    rm_step_report_t rep;
    rm_status_t st = synth_step(s, env->comm, rank, world, &rep);
    if (st != RM_OK) return st;
    s->done_steps++;
    s->comm_ms_sum += rep.comm_ms;
    if (env->report && env->report(env->report_ctx, &rep)) break;
  }
  return RM_OK;
}

static void synth_summary(void *state, char *buf, size_t len)
{
  const synth_state_t *s = state;
  double bytes = (double)s->count * rm_dtype_size(s->dtype);
  double mean_ms = s->done_steps ? s->comm_ms_sum / s->done_steps : 0;
  double algbw = mean_ms > 0 ? bytes / (mean_ms * 1e-3) / 1e9 : 0;
  double busbw = s->world > 1 ? algbw * 2.0 * (s->world - 1) / s->world : 0;
  snprintf(buf, len,
           "{\"steps\":%llu,\"bytes\":%.0f,\"dtype\":\"%s\",\"world\":%d,"
           "\"mean_comm_ms\":%.4f,\"algbw_gbps\":%.4f,\"busbw_gbps\":%.4f,"
           "\"verified_steps\":%llu}",
           (unsigned long long)s->step, bytes, rm_dtype_name(s->dtype),
           s->world, mean_ms, algbw, busbw,
           (unsigned long long)s->verified);
}

static void synth_destroy(void *state)
{
  synth_state_t *s = state;
  if (!s) return;
  free(s->buf);
  free(s);
}

const rm_workload_ops_t rm__workload_synthetic = {
    .name = "synthetic",
    .create = synth_create,
    .run = synth_run,
    .summary = synth_summary,
    .destroy = synth_destroy,
};
