/*
 * consumer.c - a user's program built against an *installed* libringmaster
 * (tests/install/run.sh): only <ringmaster/ringmaster.h> and the flags that
 * pkg-config or find_package(ringmaster) give.
 *
 * Two processes (this one is rank 0, a forked child rank 1) each open a
 * data-plane endpoint on 127.0.0.1:0, exchange the addresses over pipes,
 * form a 2-rank communicator with rm_comm_init, all-reduce (sum) a vector
 * whose exact result is known, pass a barrier and close. Prints
 *   consumer: lib PATH                  the file rm_status_name comes from
 *   consumer: session config N bytes    (links the session API too)
 *   consumer: ok world 2 algorithm A
 * and exits 0, or prints what failed and exits 1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ringmaster/ringmaster.h>

#define COUNT 4099 /* not a multiple of the world: uneven blocks */

static int fail(int rank, const char *what, rm_status_t st)
{
  fprintf(stderr, "consumer: rank %d: %s: %s (%s)\n", rank, what, rm_status_name(st),
          rm_status_string(st));
  return 1;
}

static int rank_main(int rank, int wfd, int rfd)
{
  rm_endpoint_t *ep = NULL;
  rm_status_t st = rm_endpoint_open("127.0.0.1:0", &ep);
  if (st != RM_OK) return fail(rank, "rm_endpoint_open", st);
  char mine[128] = {0}, theirs[128] = {0};
  snprintf(mine, sizeof mine, "%s", rm_endpoint_address(ep));
  if (write(wfd, mine, sizeof mine) != (ssize_t)sizeof mine ||
      read(rfd, theirs, sizeof theirs) != (ssize_t)sizeof theirs) {
    perror("consumer: address exchange");
    return 1;
  }
  const char *peers[2];
  peers[rank] = mine;
  peers[1 - rank] = theirs;

  rm_comm_config_t cfg;
  rm_comm_config_init(&cfg);
  cfg.job_id = 7;
  cfg.generation = 1;
  cfg.rank = rank;
  cfg.world = 2;
  cfg.peers = peers;
  cfg.endpoint = ep;
  cfg.timeout_ms = 20000;
  rm_comm_t *comm = NULL;
  st = rm_comm_init(&cfg, &comm);
  if (st != RM_OK) return fail(rank, "rm_comm_init", st);

  float *v = malloc(COUNT * sizeof *v);
  if (v == NULL) return 1;
  for (int i = 0; i < COUNT; i++) v[i] = (float)((rank + 1) * (i % 1000));
  rm_allreduce_info_t info;
  memset(&info, 0, sizeof info);
  st = rm_allreduce_ex(comm, v, v, COUNT, RM_F32, RM_SUM, RM_ALGO_AUTO, &info);
  if (st != RM_OK) return fail(rank, "rm_allreduce_ex", st);
  for (int i = 0; i < COUNT; i++) {
    if (v[i] != (float)(3 * (i % 1000))) {
      fprintf(stderr, "consumer: rank %d: element %d is %g, want %d\n", rank, i, v[i],
              3 * (i % 1000));
      return 1;
    }
  }
  st = rm_barrier(comm);
  if (st != RM_OK) return fail(rank, "rm_barrier", st);
  if (rank == 0)
    printf("consumer: ok world %d algorithm %s\n", rm_comm_world(comm),
           rm_algo_name(info.algorithm));
  free(v);
  rm_comm_destroy(comm);
  rm_endpoint_close(ep);
  return 0;
}

int main(void)
{
  Dl_info dl;
  memset(&dl, 0, sizeof dl);
  if (dladdr((void *)rm_status_name, &dl) == 0 || dl.dli_fname == NULL) dl.dli_fname = "?";
  printf("consumer: lib %s\n", dl.dli_fname);
  if (strcmp(rm_status_name(RM_ERR_PEER_LOST), "RM_ERR_PEER_LOST") != 0) {
    fprintf(stderr, "consumer: rm_status_name(RM_ERR_PEER_LOST) = %s\n",
            rm_status_name(RM_ERR_PEER_LOST));
    return 1;
  }
  printf("consumer: session config %zu bytes\n", rm_session_config_size());
  fflush(stdout);

  int to1[2], to0[2];
  if (pipe(to1) != 0 || pipe(to0) != 0) {
    perror("consumer: pipe");
    return 1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    perror("consumer: fork");
    return 1;
  }
  if (pid == 0) {
    alarm(60);
    _exit(rank_main(1, to0[1], to1[0]));
  }
  alarm(60);
  int rc = rank_main(0, to1[1], to0[0]);
  int wst = 0;
  if (rc != 0) kill(pid, SIGKILL);
  if (waitpid(pid, &wst, 0) != pid || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0) {
    fprintf(stderr, "consumer: rank 1 failed (wait status %d)\n", wst);
    return 1;
  }
  return rc;
}
