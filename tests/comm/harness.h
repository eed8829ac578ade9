/*
 * harness.h - run one real process per rank on 127.0.0.1 (header-only, for
 * the tests in this folder).
 *
 * The parent opens every rank's endpoint on port 0 before forking, so the
 * addresses are known and no port can be taken by someone else; each child
 * keeps its own endpoint and closes the others. Results come back through a
 * MAP_SHARED array (one rm_result_t per rank). Every wait has a deadline:
 * harness_wait() SIGKILLs whatever is still running when it expires. A
 * rank that exits non-zero (e.g. LeakSanitizer found a leak) fails the test.
 */
#ifndef RM_TESTS_COMM_HARNESS_H
#define RM_TESTS_COMM_HARNESS_H

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ringmaster/ringmaster.h"

#define H_MAX_WORLD 16

typedef struct rm_result {
  int done;         /* 1 when the rank filled this in */
  int status;       /* rm_status_t the rank ended with */
  int failed_peer;
  int bad;          /* number of wrong elements / failed checks */
  double value;     /* free measurement (MB/s, ...) */
  char msg[256];
} rm_result_t;

typedef struct harness {
  int world;
  rm_endpoint_t *ep[H_MAX_WORLD];
  char addr[H_MAX_WORLD][128];
  const char *peers[H_MAX_WORLD];
  pid_t pid[H_MAX_WORLD];
  rm_result_t *res; /* shared */
} harness_t;

typedef void (*harness_rank_fn)(harness_t *h, int rank, void *arg);

#define H_FAIL(...)                                                           \
  do {                                                                        \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                      \
    fprintf(stderr, __VA_ARGS__);                                             \
    fprintf(stderr, "\n");                                                    \
    exit(1);                                                                  \
  } while (0)

static inline double h_now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline int harness_open(harness_t *h, int world)
{
  memset(h, 0, sizeof *h);
  h->world = world;
  h->res = mmap(NULL, sizeof(rm_result_t) * H_MAX_WORLD, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (h->res == MAP_FAILED) return -1;
  memset(h->res, 0, sizeof(rm_result_t) * H_MAX_WORLD);
  for (int r = 0; r < world; r++) {
    if (rm_endpoint_open("127.0.0.1:0", &h->ep[r]) != RM_OK) return -1;
    snprintf(h->addr[r], sizeof h->addr[r], "%s", rm_endpoint_address(h->ep[r]));
    h->peers[r] = h->addr[r];
  }
  return 0;
}

static inline void harness_close(harness_t *h)
{
  for (int r = 0; r < h->world; r++) rm_endpoint_close(h->ep[r]);
  munmap(h->res, sizeof(rm_result_t) * H_MAX_WORLD);
}

/* Config for `rank` using the harness endpoints. */
static inline void harness_config(harness_t *h, int rank, rm_comm_config_t *cfg)
{
  rm_comm_config_init(cfg);
  cfg->job_id = 42;
  cfg->generation = 1;
  cfg->rank = rank;
  cfg->world = h->world;
  cfg->peers = h->peers;
  cfg->endpoint = h->ep[rank];
  cfg->timeout_ms = 10000;
  cfg->connect_timeout_ms = 10000;
}

static inline void harness_start(harness_t *h, harness_rank_fn fn, void *arg)
{
  fflush(NULL);
  for (int r = 0; r < h->world; r++) {
    pid_t p = fork();
    if (p == 0) {
      for (int o = 0; o < h->world; o++)
        if (o != r) rm_endpoint_close(h->ep[o]);
      fn(h, r, arg);
      h->res[r].done = 1;
      rm_endpoint_close(h->ep[r]);
      exit(0); /* not _exit: LeakSanitizer runs at exit in every rank */
    }
    h->pid[r] = p;
  }
}

/* Reap every child within limit_ms; SIGKILL stragglers. Returns the number
 * of ranks that did not exit 0 (killed ranks listed in `expect_killed` are
 * not counted). */
static inline int harness_wait(harness_t *h, double limit_ms, int expect_killed)
{
  double end = h_now_ms() + limit_ms;
  int bad = 0, left = h->world;
  int reaped[H_MAX_WORLD] = {0};
  while (left > 0) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      for (int r = 0; r < h->world; r++) {
        if (h->pid[r] != p) continue;
        reaped[r] = 1;
        left--;
        if (r == expect_killed) break;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
          fprintf(stderr, "rank %d exited abnormally (status 0x%x)\n", r, st);
          bad++;
        }
      }
      continue;
    }
    if (h_now_ms() > end) {
      for (int r = 0; r < h->world; r++) {
        if (reaped[r]) continue;
        fprintf(stderr, "rank %d still running after %.0f ms: killing it\n", r,
                limit_ms);
        kill(h->pid[r], SIGKILL);
        if (h->pid[r] > 0) waitpid(h->pid[r], NULL, 0);
        reaped[r] = 1;
        left--;
        bad++;
      }
      break;
    }
    usleep(2000);
  }
  return bad;
}

static inline int count_open_fds(void)
{
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  if (d == NULL) return -1;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the DIR's own fd */
}

#endif
