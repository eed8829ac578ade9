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
 * default 4096), --step-ms MS (simulated compute per step, default 5).
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
static rm_status_t step(rm_session_t *s, float *buf, size_t n, uint64_t k, int step_ms)
{
  int r = rm_session_rank(s), w = rm_session_world(s);
  rm_status_t st = rm_session_step_begin(s);
  if (st != RM_OK) return st;
  for (size_t i = 0; i < n; i++) buf[i] = (float)(r + 1) * value(i, k);
  struct timespec ts = {step_ms / 1000, (long)(step_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  st = rm_allreduce(rm_session_comm(s), buf, buf, n, RM_F32, RM_SUM);
  if (st != RM_OK) return st;
  float k_w = (float)w * (float)(w + 1) / 2.0f;
  for (size_t i = 0; i < n; i++)
    if (buf[i] != k_w * value(i, k)) {
      fprintf(stderr, "session_allreduce: step %llu element %zu is %g, expected %g\n",
              (unsigned long long)k, i, buf[i], k_w * value(i, k));
      return RM_ERR_INTERNAL;
    }
  return rm_session_step_end(s, NAN, NAN);
}

int main(int argc, char **argv)
{
  uint64_t steps = 0;
  size_t count = 4096;
  int step_ms = 5, reforms = 0;
  char err[700], summary[160];
  rm_session_t *s;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--steps")) steps = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--count")) count = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--step-ms")) step_ms = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: session_allreduce [--steps N] [--count N] [--step-ms MS]\n");
      return 2;
    }
  }
  rm_status_t st = rm_session_join_env(&s, err, sizeof err);
  if (st != RM_OK) {
    fprintf(stderr, "session_allreduce: cannot join: %s\n", err);
    return 1;
  }
  if (!steps) steps = rm_session_spec_uint(s, "steps");
  float *buf = malloc((count ? count : 1) * sizeof *buf);
  if (!buf) return 1;
  banner(s);
  for (;;) {
    uint64_t k = rm_session_step(s) + 1;
    st = RM_OK;
    for (; k <= steps && st == RM_OK; k++) st = step(s, buf, count, k, step_ms);
    if (st == RM_OK) {
      snprintf(summary, sizeof summary, "{\"steps\":%llu,\"verified\":true,\"world\":%d,"
               "\"reforms\":%d}", (unsigned long long)steps, rm_session_world(s), reforms);
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
