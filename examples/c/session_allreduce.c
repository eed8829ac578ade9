/*
 * session_allreduce.c - a user program on libringmaster's session API: run
 * it as a "command" job and every worker's agent starts one copy of it.
 *
 *   ringmaster run -n 4 -- build/examples/c/session_allreduce --steps 200
 *
 * Each step fills a vector with values that depend on the rank and the step,
 * all-reduces it (sum) and checks every element exactly: with ranks 0..W-1
 * contributing (r+1)*v the sum is W(W+1)/2*v, small integers that float32
 * holds exactly. The step is reported to the coordinator (dashboard, step
 * times, straggler detection).
 *
 * Membership changes: when a peer dies (on_failure shrink or replace), the
 * all-reduce fails (RM_ERR_PEER_LOST naming the peer) or a step call says
 * RM_ERR_RECONFIGURED; the program calls rm_session_reform, which re-joins
 * in this same process, and resumes after the last step every member
 * completed. Each generation prints one line,
 *   session_allreduce: pid P generation G rank R of W start_step S
 * which the tests read to check that survivors kept their process.
 *
 * Options: --steps N (default: the job's steps), --count N (elements,
 * default 4096), --step-ms MS (simulated compute per step, default 5),
 * --gradient: use rm_session_allreduce_step, the gradient all-reduce that
 * honours the job's straggler policy (backup, deadline): every rank
 * contributes the same values, so the average over whichever ranks the
 * coordinator let into the step is known exactly; --slow-rank R and
 * --slow-ms MS make rank R a straggler. The summary counts the steps that
 * ran with fewer contributors than the world ("partial_steps").
 * --barrier-every N: after every Nth step all ranks meet at the named
 * barrier "sync" (rm_session_barrier; --barrier-ms MS its deadline,
 * default the job's barrier_timeout_ms).
 * Exit status: 0 when the job's steps are done and the worker left; 1 on
 * a wrong element or when the job ended without us finishing.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringmaster/ringmaster.h"

static float value(size_t i, uint64_t step) { return (float)(i % 97 + step % 13 + 1); }

static void banner(rm_session_t *s)
{
  printf("session_allreduce: pid %d generation %llu rank %d of %d start_step %llu\n",
         (int)getpid(), (unsigned long long)rm_session_generation(s), rm_session_rank(s),
         rm_session_world(s), (unsigned long long)rm_session_start_step(s));
  fflush(stdout);
}

/* One step: fill, compute, all-reduce, verify. RM_ERR_INTERNAL on a wrong
 * element (a bug, not a membership change). */
typedef struct {
  int step_ms, gradient, slow_rank, slow_ms, partial_steps, barrier_every, barrier_ms;
} opts_t;

static void sleep_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static rm_status_t step(rm_session_t *s, float *buf, size_t n, uint64_t k, opts_t *o)
{
  int r = rm_session_rank(s), w = rm_session_world(s), got = 0;
  rm_status_t st = rm_session_step_begin(s);
  if (st != RM_OK) return st;
  for (size_t i = 0; i < n; i++) buf[i] = (float)(o->gradient ? 1 : r + 1) * value(i, k);
  sleep_ms(o->step_ms);
  /* a straggler may stop computing once the gate dropped it from the step */
  for (int t = 0; r == o->slow_rank && t < o->slow_ms && !rm_session_step_dropped(s); t += 2)
    sleep_ms(2);
  if (o->gradient) {
    st = rm_session_allreduce_step(s, buf, buf, n, RM_F32, &got);
    if (st == RM_OK && got < w) o->partial_steps++;
  } else {
    st = rm_allreduce(rm_session_comm(s), buf, buf, n, RM_F32, RM_SUM);
  }
  if (st != RM_OK) return st;
  float k_w = o->gradient ? 1.0f : (float)w * (float)(w + 1) / 2.0f;
  for (size_t i = 0; i < n; i++)
    if (buf[i] != k_w * value(i, k)) {
      fprintf(stderr, "session_allreduce: step %llu element %zu is %g, expected %g\n",
              (unsigned long long)k, i, buf[i], k_w * value(i, k));
      return RM_ERR_INTERNAL;
    }
  st = rm_session_step_end(s, NAN, NAN);
  if (st == RM_OK && o->barrier_every > 0 && k % (uint64_t)o->barrier_every == 0)
    st = rm_session_barrier(s, "sync", o->barrier_ms);
  return st;
}

int main(int argc, char **argv)
{
  uint64_t steps = 0;
  size_t count = 4096;
  int reforms = 0;
  opts_t o = {.step_ms = 5, .slow_rank = -1};
  char err[700], summary[160];
  rm_session_t *s;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--gradient")) o.gradient = 1;
    else if (v && !strcmp(argv[i], "--steps")) steps = strtoull(argv[++i], NULL, 10);
    else if (v && !strcmp(argv[i], "--count")) count = strtoull(argv[++i], NULL, 10);
    else if (v && !strcmp(argv[i], "--step-ms")) o.step_ms = atoi(argv[++i]);
    else if (v && !strcmp(argv[i], "--slow-rank")) o.slow_rank = atoi(argv[++i]);
    else if (v && !strcmp(argv[i], "--slow-ms")) o.slow_ms = atoi(argv[++i]);
    else if (v && !strcmp(argv[i], "--barrier-every")) o.barrier_every = atoi(argv[++i]);
    else if (v && !strcmp(argv[i], "--barrier-ms")) o.barrier_ms = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: session_allreduce [--steps N] [--count N] [--step-ms MS]\n"
                      "       [--gradient] [--slow-rank R --slow-ms MS]\n"
                      "       [--barrier-every N [--barrier-ms MS]]\n");
      return 2;
    }
  }
  rm_status_t st = rm_session_join_env(&s, err, sizeof err);
  if (st != RM_OK) {
    fprintf(stderr, "session_allreduce: cannot join: %s\n", err);
    return 1;
  }
  if (!steps) steps = rm_session_spec_uint(s, "steps");
  rm_session_set_total_steps(s, steps); /* the job's progress: step s of steps */
  float *buf = malloc((count ? count : 1) * sizeof *buf);
  if (!buf) return 1;
  banner(s);
  for (;;) {
    uint64_t k = rm_session_step(s) + 1;
    st = RM_OK;
    for (; k <= steps && st == RM_OK; k++) st = step(s, buf, count, k, &o);
    if (st == RM_OK) {
      snprintf(summary, sizeof summary, "{\"steps\":%llu,\"verified\":true,\"world\":%d,"
               "\"reforms\":%d,\"partial_steps\":%d}", (unsigned long long)steps,
               rm_session_world(s), reforms, o.partial_steps);
      printf("session_allreduce: done %s\n", summary);
      fflush(stdout);
      st = rm_session_leave(s, 1, NULL, summary);
      if (st != RM_ERR_RECONFIGURED) break;
    }
    if (st == RM_ERR_INTERNAL || st == RM_ERR_JOB_ENDED) break;
    /* a peer was lost or the coordinator re-formed the job: same process,
     * next generation */
    fprintf(stderr, "session_allreduce: %s: %s\n", rm_status_name(st),
            rm_comm_last_error(rm_session_comm(s))[0] ? rm_comm_last_error(rm_session_comm(s))
                                                      : rm_session_last_error(s));
    st = rm_session_reform(s);
    if (st != RM_OK) break;
    reforms++;
    banner(s);
  }
  if (st != RM_OK)
    fprintf(stderr, "session_allreduce: stopping: %s (%s)\n", rm_status_name(st),
            rm_session_last_error(s));
  if (st == RM_ERR_INTERNAL) rm_session_leave(s, 0, "wrong all-reduce result", NULL);
  free(buf);
  rm_session_close(s);
  return st == RM_OK ? 0 : 1;
}
