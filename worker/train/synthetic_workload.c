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
 *   slow_rank    -        rank(s) whose compute is multiplied by
 *                         slow_factor: R or R1:R2:R3 (deliberate stragglers)
 *   slow_factor  1
 *   slow_from    0        0-based steps [slow_from, slow_until) that are
 *   slow_until   0        slow (a transient straggler; 0 = to the end)
 *   stall_rank   -        one rank's compute at stall_step takes stall_ms
 *   stall_step, stall_ms  more (a worker that stalls for seconds)
 *   algo         auto     all-reduce algorithm: auto ring hd butterfly tree hierarchical
 *   steps        -        step limit; the smaller of it and the agent's
 *                         max_steps (the job's steps); 100 when neither is set
 *   verify       1        check every element of the result, every step
 *
 * Each step: fill, compute, all-reduce (RM_SUM, in place), verify.
 * Element i of rank r at step s holds ((i + s + 3r) mod 5) - 2, a small
 * integer: sums over any world size are exact in every dtype, so the
 * expected result, which depends only on i mod 5 and on who contributed
 * from which step, is compared exactly. The step number in the pattern
 * catches a stale buffer.
 *
 * Straggler policies (the engine is session/step_engine.c), and
 * what "exact" means under each:
 *   none                 the sum over every rank
 *   backup, deadline,    the sum over exactly the member set the gate
 *   auto                 decided (late ranks add zeros)
 *   coded (s)            rank r stands for the s+1 partitions of its group
 *                        g = r/(s+1): it fills the sum of the patterns of
 *                        ranks g(s+1) .. g(s+1)+s and computes s+1 times
 *                        compute_ms; the decode plan takes one arrival per
 *                        group, and the result is the full sum over every
 *                        rank although stragglers were left out
 *   stale (k)            the sum over the contributors of the step, each
 *                        with the pattern of the step its gradient is
 *                        from (the engine's header says which), every one
 *                        at most k steps old
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aggregate/aggregate.h"
#include "aggregate/gradcode.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "train_int.h"

typedef struct synth_state {
  uint64_t bytes, steps, verify;
  double compute_ms;
  rm__slow_t slow;
  rm__sp_t sp;
  int spin;
  rm_dtype_t dtype;
  rm_algo_t algo;
  void *buf;
  size_t count;
  uint8_t *coeff; /* world: coded's decode plan */
  uint64_t step, done_steps, verified;
  double comm_ms_sum;
  int world;
} synth_state_t;

static rm_status_t synth_option(synth_state_t *s, const char *key,
                                const char *val, char *err, size_t errlen)
{
  rm_status_t st = RM_OK;
  int slow = rm__slow_option(&s->slow, key, val, err, errlen);
  if (slow) return slow > 0 ? RM_OK : RM_ERR_INVALID_ARG;
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
  } else if (!strcmp(key, "algo")) {
    if (rm_algo_parse(val, &s->algo) != RM_OK) {
      snprintf(err, errlen, "option algo=%s: expected auto, ring, hd, "
               "butterfly, tree or hierarchical", val);
      st = RM_ERR_INVALID_ARG;
    }
  } else if (!strcmp(key, "steps")) {
    st = rm__opt_u64(key, val, 1, UINT64_MAX, &s->steps, err, errlen);
  } else if (!strcmp(key, "verify")) {
    st = rm__opt_u64(key, val, 0, 1, &s->verify, err, errlen);
  } else {
    snprintf(err, errlen, "unknown option '%s' for workload synthetic "
             "(known: bytes dtype compute_ms compute " RM__SLOW_OPTION_NAMES
             " algo steps verify)", key);
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
                       .dtype = RM_F32, .algo = RM_ALGO_AUTO};
  rm__slow_init(&s->slow);
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

/* The expected (or contributed) value of element i is tab[i mod 5]: the
 * sum over the (rank, from-step) pairs of ((i + from + 3 rank) mod 5) - 2. */
typedef struct {
  int64_t v[5];
} synth_tab_t;

static void tab_add(synth_tab_t *t, int rank, uint64_t from)
{
  for (unsigned c = 0; c < 5; c++)
    t->v[c] += (int64_t)((c + from % 5 + 3u * (unsigned)(rank % 5)) % 5) - 2;
}

#define SYNTH_FILL(T)                                                         \
  do {                                                                        \
    T *b = s->buf;                                                            \
    unsigned c = 0;                                                           \
    for (size_t i = 0; i < s->count; i++) {                                   \
      b[i] = (T)t->v[c];                                                      \
      c = c == 4 ? 0 : c + 1;                                                 \
    }                                                                         \
  } while (0)
#define SYNTH_CHECK(T)                                                        \
  do {                                                                        \
    const T *b = s->buf;                                                      \
    unsigned c = 0;                                                           \
    for (size_t i = 0; i < s->count; i++) {                                   \
      if (b[i] != (T)t->v[c] && bad++ == 0) first = i;                        \
      c = c == 4 ? 0 : c + 1;                                                 \
    }                                                                         \
  } while (0)

static void fill(synth_state_t *s, const synth_tab_t *t)
{
  switch (s->dtype) {
  case RM_F64: SYNTH_FILL(double); break;
  case RM_I32: SYNTH_FILL(int32_t); break;
  case RM_I64: SYNTH_FILL(int64_t); break;
  default: SYNTH_FILL(float); break;
  }
}

static rm_status_t check(synth_state_t *s, const synth_tab_t *t, uint64_t step,
                         int rank, int contributors)
{
  size_t bad = 0, first = 0;
  switch (s->dtype) {
  case RM_F64: SYNTH_CHECK(double); break;
  case RM_I32: SYNTH_CHECK(int32_t); break;
  case RM_I64: SYNTH_CHECK(int64_t); break;
  default: SYNTH_CHECK(float); break;
  }
  if (!bad) return RM_OK;
  RM_ERROR("synthetic: rank %d step %llu: %zu of %zu elements wrong (the sum "
           "over %d contributors), first at index %zu", rank,
           (unsigned long long)step, bad, s->count, contributors, first);
  return RM_ERR_INTERNAL;
}

static void simulate_compute(const synth_state_t *s, int rank, uint64_t step)
{
  double ms = s->compute_ms + rm__slow_extra_ms(&s->slow, rank, step, s->compute_ms);
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

/* none, backup, deadline, auto, coded: fill, compute, decide, reduce;
 * OUT *expect: what the sum must be. */
static rm_status_t gated_step(synth_state_t *s, rm_comm_t *comm, int rank,
                              int world, uint64_t step, synth_tab_t *expect,
                              int *contributors, int64_t *t1)
{
  rm__sp_t *sp = &s->sp;
  synth_tab_t mine = {{0}};
  int coded = sp->kind == RM__SP_CODED, parts = coded ? sp->s + 1 : 1;
  int g0 = coded ? rank / parts * parts : rank;
  for (int p = g0; p < g0 + parts; p++) tab_add(&mine, p, step);
  fill(s, &mine);
  double ms = s->compute_ms * parts;
  ms += rm__slow_extra_ms(&s->slow, rank, step, ms);
  int dropped = rm__sp_spend(sp, step, ms, NULL);
  rm_status_t st = dropped ? RM_OK : rm__sp_decide(sp, step);
  if (st != RM_OK) return st;
  *t1 = rm__now_ns();
  uint8_t *use = sp->members;
  if (coded) {
    rm__gradcode_t gc;
    st = rm__gradcode_init(&gc, world, sp->s);
    if (st == RM_OK) st = rm__gradcode_decode_plan(&gc, sp->members, s->coeff, NULL);
    if (st != RM_OK) return st;
    use = s->coeff;
  }
  st = rm__masked_allreduce(comm, s->buf, s->buf, s->count, s->dtype, RM_SUM,
                            use, 0, NULL);
  if (st != RM_OK) return st;
  *contributors = 0;
  for (int r = 0; r < world; r++) {
    if (!use[r]) continue;
    (*contributors)++;
    int q0 = coded ? r / parts * parts : r;
    for (int p = q0; p < q0 + parts; p++) tab_add(expect, p, step);
  }
  rm__sp_count(sp, use[rank] != 0, *contributors);
  return RM_OK;
}

/* stale: the owed pattern is the one of the step it is from. */
static rm_status_t stale_step(synth_state_t *s, rm_comm_t *comm, int rank,
                              int world, uint64_t step, synth_tab_t *expect,
                              int *contributors, int64_t *t1)
{
  rm__sp_t *sp = &s->sp;
  char err[256];
  double rows = 0;
  if (rm__sp_stale_fresh(sp))
    rm__sp_stale_owe(sp, step, s->compute_ms + rm__slow_extra_ms(&s->slow, rank, step,
                                                               s->compute_ms));
  uint64_t from = sp->pending_from;
  int ready = rm__sp_stale_work(sp, step);
  if (ready < 0) return RM_ERR_ABORTED;
  *t1 = rm__now_ns();
  rm_status_t st = rm__sp_stale_header(sp, comm, step, ready, 1, &rows, err, sizeof err);
  if (st == RM_ERR_INTERNAL) RM_ERROR("synthetic: %s", err);
  if (st != RM_OK) return st;
  synth_tab_t mine = {{0}};
  if (ready) tab_add(&mine, rank, from);
  fill(s, &mine);
  st = rm_allreduce(comm, s->buf, s->buf, s->count, s->dtype, RM_SUM);
  if (st != RM_OK) return st;
  *contributors = 0;
  for (int r = 0; r < world; r++) {
    int64_t f = rm__sp_stale_from(sp, r);
    if (f < 0) continue;
    (*contributors)++;
    tab_add(expect, r, (uint64_t)f);
  }
  return RM_OK;
}

static rm_status_t synth_step(synth_state_t *s, rm_comm_t *comm, int rank,
                              int world, rm_step_report_t *rep)
{
  uint64_t step = s->step; /* 0-based index of this step */
  synth_tab_t expect = {{0}};
  int contributors = world;
  rm_status_t st = RM_OK;
  int64_t t0 = rm__now_ns(), t1;
  s->sp.wait_ms = 0;
  if (comm && s->sp.kind == RM__SP_STALE) {
    st = stale_step(s, comm, rank, world, step, &expect, &contributors, &t1);
  } else if (comm && rm__sp_gated(&s->sp)) {
    st = gated_step(s, comm, rank, world, step, &expect, &contributors, &t1);
  } else {
    for (int r = 0; r < world; r++) tab_add(&expect, r, step);
    synth_tab_t mine = {{0}};
    tab_add(&mine, rank, step);
    fill(s, &mine);
    simulate_compute(s, rank, step);
    t1 = rm__now_ns();
    if (comm)
      st = rm_allreduce_ex(comm, s->buf, s->buf, s->count, s->dtype, RM_SUM,
                           s->algo, NULL);
    if (st == RM_OK) rm__sp_count(&s->sp, 1, world);
  }
  if (st != RM_OK) return st;
  int64_t t2 = rm__now_ns();
  if (s->verify) {
    st = check(s, &expect, step, rank, contributors);
    if (st != RM_OK) return st;
    s->verified++;
  }
  s->step++;
  memset(rep, 0, sizeof(*rep));
  rep->step = s->step;
  rep->wait_ms = s->sp.wait_ms;
  rep->compute_ms = (t1 - t0) / 1e6 - rep->wait_ms;
  if (rep->compute_ms < 0) rep->compute_ms = 0;
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
  rm_status_t st = rm__sp_start(&s->sp, env->straggler_policy, rank, world,
                                env->coded_s, env->max_staleness,
                                env->comm ? env->gate : NULL, env->report_ctx);
  if (st == RM_OK) {
    free(s->coeff);
    s->coeff = calloc((size_t)world, 1);
    if (!s->coeff) st = RM_ERR_NOMEM;
  }
  if (st != RM_OK) {
    snprintf(env->error, sizeof env->error, "straggler_policy %s: cannot "
             "start it on %d workers (%s)", env->straggler_policy ?
             env->straggler_policy : "none", world, rm_status_name(st));
    return st == RM_ERR_NOMEM ? st : RM_ERR_INVALID_ARG;
  }
  s->sp.spin = s->spin;
  s->step = env->start_step;
  s->world = world;
  while (s->step < lim) {
    rm_step_report_t rep;
    st = synth_step(s, env->comm, rank, world, &rep);
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
  char strag[256];
  rm__sp_summary(&s->sp, strag, sizeof strag);
  snprintf(buf, len,
           "{\"steps\":%llu,\"bytes\":%.0f,\"dtype\":\"%s\",\"world\":%d,"
           "\"mean_comm_ms\":%.4f,\"algbw_gbps\":%.4f,\"busbw_gbps\":%.4f,"
           "\"verified_steps\":%llu,%s}",
           (unsigned long long)s->step, bytes, rm_dtype_name(s->dtype),
           s->world, mean_ms, algbw, busbw,
           (unsigned long long)s->verified, strag);
}

static void synth_destroy(void *state)
{
  synth_state_t *s = state;
  if (!s) return;
  free(s->buf);
  free(s->coeff);
  rm__sp_free(&s->sp);
  free(s);
}

const rm_workload_ops_t rm__workload_synthetic = {
    .name = "synthetic",
    .create = synth_create,
    .run = synth_run,
    .summary = synth_summary,
    .destroy = synth_destroy,
};
