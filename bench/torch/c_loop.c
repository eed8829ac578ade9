/*
 * c_loop - the C side of bench_torch.py's Python-overhead row: ITERS
 * back-to-back in-place rm_allreduce calls of COUNT floats (sum) on a
 * communicator from an explicit peer list; rank 0 prints "us_per_call X".
 * No ctypes, no Python: the same loop bench_torch.py times through the
 * ringmaster package. Built by bench_torch.py with cc against the library.
 *
 *   c_loop RANK HOST:PORT,HOST:PORT,... COUNT ITERS
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringmaster/ringmaster.h"

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
  if (argc != 5) {
    fprintf(stderr, "usage: c_loop RANK PEERS COUNT ITERS\n");
    return 2;
  }
  int rank = atoi(argv[1]);
  char *list = strdup(argv[2]);
  const char *peers[64];
  int world = 0;
  for (char *t = strtok(list, ","); t && world < 64; t = strtok(NULL, ",")) peers[world++] = t;
  size_t count = (size_t)atol(argv[3]);
  int iters = atoi(argv[4]);
  rm_comm_config_t cfg;
  rm_comm_config_init(&cfg);
  cfg.rank = rank;
  cfg.world = world;
  cfg.peers = peers;
  cfg.generation = 1;
  rm_comm_t *c = NULL;
  rm_status_t st = rm_comm_init(&cfg, &c);
  if (st != RM_OK) {
    fprintf(stderr, "c_loop: rm_comm_init: %s\n", rm_status_name(st));
    return 1;
  }
  float *x = calloc(count, sizeof *x);
  for (int i = 0; i < 50; i++) rm_allreduce(c, x, x, count, RM_F32, RM_SUM);
  rm_barrier(c);
  double t0 = now_us();
  for (int i = 0; i < iters && st == RM_OK; i++) st = rm_allreduce(c, x, x, count, RM_F32, RM_SUM);
  double t1 = now_us();
  rm_barrier(c);
  if (st != RM_OK) fprintf(stderr, "c_loop: %s\n", rm_comm_last_error(c));
  if (rank == 0) printf("us_per_call %.3f\n", (t1 - t0) / iters);
  free(x);
  free(list);
  rm_comm_destroy(c);
  return st == RM_OK ? 0 : 1;
}
