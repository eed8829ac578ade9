/*
 * test_comm_churn - create and destroy a communicator N times (default 1000)
 * in one process, generation 1..N on the same endpoints, as a worker does
 * across re-formations. Two ranks (two processes); each iteration exchanges
 * one value to prove the connection works.
 *
 * Checks: every iteration succeeds; the number of open fds is the same
 * after the loop as after the first iteration; heap in use (mallinfo2) has
 * not grown by more than 256 KiB (a leak of even 300 bytes per iteration
 * exceeds it). Under ASan, LeakSanitizer checks memory at exit as well.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <malloc.h>

#include "rm_testlib.h"

#include "comm/comm_int.h"
#include "transport/transport.h"

static int one_generation(rm_test_world_t *h, int rank, uint64_t gen)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  uint64_t mine = gen * 10 + (uint64_t)rank, theirs = 0;
  int other = 1 - rank, bad = 0;

  rm_test_config(h, rank, &cfg);
  cfg.generation = gen;
  if (rm_comm_init(&cfg, &c) != RM_OK) return 1;
  if (rm__coll_begin(c) != RM_OK ||
      rm__sendrecv(c, other, &mine, sizeof mine, 0, other, &theirs,
                   sizeof theirs, 0) != RM_OK ||
      theirs != gen * 10 + (uint64_t)other)
    bad = 1;
  rm_comm_destroy(c);
  return bad;
}

static int churn_rank(rm_test_world_t *h, int rank, void *arg)
{
  long n = *(long *)arg;
  rm_test_result_t *res = &h->res[rank];
  int fds0;
  size_t heap0;

  res->bad += one_generation(h, rank, 1);
  fds0 = rm_test_open_fds();
  heap0 = mallinfo2().uordblks;
  for (long g = 2; g <= n && res->bad == 0; g++)
    res->bad += one_generation(h, rank, (uint64_t)g);
  if (rm_test_open_fds() != fds0) {
    snprintf(res->msg, sizeof res->msg, "fds %d -> %d", fds0, rm_test_open_fds());
    res->bad++;
  }
  res->value = (double)mallinfo2().uordblks - (double)heap0;
  if (res->value > 256 * 1024) {
    snprintf(res->msg, sizeof res->msg, "heap grew by %.0f bytes", res->value);
    res->bad++;
  }
  res->status = RM_OK;
  return 0;
}

int main(int argc, char **argv)
{
  rm_test_world_t h;
  long n = argc > 1 ? atol(argv[1]) : 1000;
  int bad;
  if (rm_test_world_open(&h, 2) != 0) RM_TEST_FAIL("rm_test_world_open");
  rm_test_start(&h, churn_rank, &n);
  bad = rm_test_wait(&h, 240000, -1);
  for (int r = 0; r < 2; r++) {
    printf("rank %d: %ld generations, heap delta %.0f bytes, %s %s\n", r, n,
           h.res[r].value, h.res[r].bad ? "FAIL" : "ok", h.res[r].msg);
    if (!h.res[r].done || h.res[r].bad) bad++;
  }
  rm_test_world_close(&h);
  return bad ? 1 : 0;
}
