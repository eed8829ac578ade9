/* coll_launch.c - see coll_launch.h. */
#include "coll_launch.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_WORLD 64

static int child_main(int world, int rank, rm_endpoint_t *ep, const char **peers,
                      coll_test_fn fn, void *arg)
{
  rm_comm_config_t cfg;
  rm_comm_t *c = NULL;
  rm_status_t st;
  int rc;
  rm_comm_config_init(&cfg);
  cfg.job_id = 7;
  cfg.generation = 1;
  cfg.rank = rank;
  cfg.world = world;
  cfg.peers = peers;
  cfg.endpoint = ep;
  if (cfg.timeout_ms == 0 || cfg.timeout_ms > 60000)
    cfg.timeout_ms = 60000;
  st = rm_comm_init(&cfg, &c);
  if (st != RM_OK) {
    fprintf(stderr, "rank %d: rm_comm_init: %s\n", rank, rm_status_name(st));
    return 2;
  }
  rc = fn(c, arg);
  rm_comm_destroy(c);
  return rc;
}

static void kill_all(pid_t *pid, int world)
{
  for (int r = 0; r < world; r++)
    if (pid[r] > 0) {
      kill(pid[r], SIGKILL);
      waitpid(pid[r], NULL, 0);
      pid[r] = -1;
    }
}

int coll_launch(int world, coll_test_fn fn, void *arg, int timeout_ms)
{
  rm_endpoint_t *ep[MAX_WORLD] = {0};
  const char *peers[MAX_WORLD];
  static char addr[MAX_WORLD][128]; /* copies: a child closes the others */
  pid_t pid[MAX_WORLD];
  int bad = 0, left = world;
  if (world < 1 || world > MAX_WORLD)
    return world;
  for (int r = 0; r < world; r++) {
    pid[r] = -1;
    if (rm_endpoint_open("127.0.0.1:0", &ep[r]) != RM_OK) {
      fprintf(stderr, "launcher: cannot open endpoint %d\n", r);
      bad = world;
      goto out;
    }
    snprintf(addr[r], sizeof addr[r], "%s", rm_endpoint_address(ep[r]));
    peers[r] = addr[r];
  }
  fflush(NULL);
  for (int r = 0; r < world; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      for (int q = 0; q < world; q++)
        if (q != r)
          rm_endpoint_close(ep[q]);
      int rc = child_main(world, r, ep[r], peers, fn, arg);
      rm_endpoint_close(ep[r]);
      fflush(NULL);
      _exit(rc);
    }
  }
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (left > 0) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      for (int r = 0; r < world; r++)
        if (pid[r] == p) {
          pid[r] = -1;
          left--;
          if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "launcher: rank %d failed (%s %d)\n", r,
                    WIFEXITED(status) ? "exit" : "signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            bad++;
          }
        }
      continue;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 > timeout_ms) {
      fprintf(stderr, "launcher: deadline %d ms passed, killing %d rank(s)\n",
              timeout_ms, left);
      bad += left;
      kill_all(pid, world);
      break;
    }
    usleep(5000);
  }
out:
  for (int r = 0; r < world; r++)
    if (ep[r])
      rm_endpoint_close(ep[r]);
  return bad;
}
