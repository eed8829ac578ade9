/*
 * session_nccl - the program of a command job whose algorithm is nccl
 * (test_session_nccl.py): joins its session from the environment, all-
 * reduces a device buffer (tests/lib/rm_testdev.h: the stand-in GPU, or
 * CUDA on a GPU machine) with the job's algorithm, checks the sum exactly,
 * prints "rank R: all-reduce of N floats on ALGORITHM: ok", leaves.
 *   session_nccl [--count N] [--rounds K] [--kill-index I --kill-round J]
 * With --kill-index the program of launch index I SIGKILLs itself before
 * round J; the others' all-reduce fails (RM_ERR_RECONFIGURED, or the data
 * plane's words), they re-form (rm_session_reform: the next generation,
 * its own NCCL id through the coordinator), print "rank R: re-formed:
 * generation G, N members" and redo the round.
 * Exit 0 ok, 1 a wrong element or a failed call (printed), 77 no GPU
 * runtime.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_testdev.h"
#include "ringmaster/ringmaster.h"

int main(int argc, char **argv)
{
  size_t count = 1 << 16;
  int rounds = 3, bad = 0, kill_index = -1, kill_round = -1;
  char err[512];
  rm_session_t *s = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--count")) count = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--kill-index")) kill_index = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--kill-round")) kill_round = atoi(argv[i + 1]);
  }
  rm_status_t st = rm_session_join_env(&s, err, sizeof err);
  if (st != RM_OK) {
    fprintf(stderr, "join: %s: %s\n", rm_status_name(st), err);
    return 1;
  }
  rm_comm_t *c = rm_session_comm(s);
  int r = rm_session_rank(s), n = rm_session_world(s);
  const char *li = getenv("RINGMASTER_LAUNCH_INDEX");
  int me = li ? atoi(li) : r;
  float *h = malloc(count * sizeof *h);
  void *d = rm_test_dev_alloc(count * sizeof *h);
  if (d == NULL) {
    rm_session_leave(s, 0, "no device memory", NULL);
    rm_session_close(s);
    return 77;
  }
  rm_allreduce_info_t info = {0};
  for (int k = 0; k < rounds && !bad; k++) {
    if (me == kill_index && k == kill_round) raise(SIGKILL);
    for (size_t i = 0; i < count; i++) h[i] = (float)(r + 1 + (int)(i % 13) + k);
    rm_test_dev_put(d, h, count * sizeof *h);
    st = rm_allreduce_ex(c, d, d, count, RM_F32, RM_SUM, RM_ALGO_AUTO, &info);
    if ((st == RM_ERR_RECONFIGURED || st == RM_ERR_PEER_LOST || st == RM_ERR_TIMEOUT ||
         st == RM_ERR_ABORTED) && kill_index >= 0) {
      printf("rank %d: round %d: %s (%s)\n", r, k, rm_status_name(st), rm_comm_last_error(c));
      st = rm_session_reform(s);
      if (st != RM_OK) {
        fprintf(stderr, "rank %d: reform: %s: %s\n", r, rm_status_name(st), rm_session_last_error(s));
        bad = 1;
        break;
      }
      c = rm_session_comm(s);
      r = rm_session_rank(s);
      n = rm_session_world(s);
      printf("rank %d: re-formed: generation %llu, %d members\n", r,
             (unsigned long long)rm_session_generation(s), n);
      k--; /* the round again, with the new members */
      continue;
    }
    if (st != RM_OK) {
      fprintf(stderr, "rank %d: all-reduce: %s\n", r, rm_comm_last_error(c));
      bad = 1;
      break;
    }
    rm_test_dev_get(h, d, count * sizeof *h);
    for (size_t i = 0; i < count; i++) {
      float want = (float)(n * (n + 1) / 2 + n * ((int)(i % 13) + k));
      if (h[i] != want) {
        fprintf(stderr, "rank %d: element %zu: %g, want %g\n", r, i, h[i], want);
        bad = 1;
        break;
      }
    }
  }
  if (!bad) printf("rank %d: all-reduce of %zu floats on %s: ok\n", r, count, rm_algo_name(info.algorithm));
  fflush(stdout);
  rm_test_dev_free(d);
  free(h);
  rm_session_leave(s, !bad, bad ? "wrong all-reduce" : NULL, NULL);
  rm_session_close(s);
  return bad;
}
