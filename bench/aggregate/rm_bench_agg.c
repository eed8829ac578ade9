/*
 * rm_bench_agg - rm_aggregate against plain rm_allreduce, nccl-tests style,
 * over the public API only (one forked process per rank on 127.0.0.1).
 *
 *   rm_bench_agg [-n WORLD,WORLD...] [-s MiB,MiB...] [-i ITERS]
 *
 * Defaults: worlds 4 and 8, sizes 1, 4, 16, 64 MiB of f32. Per (world, size)
 * first rm_allreduce_ex(AVG) then every rm_aggregate method on the same
 * buffers in the same run, each with f = the largest of {0, 1} its rule
 * allows at that world. Per iteration: restore the input (untimed), barrier,
 * time one call, take the max over ranks; the row reports the median over
 * iterations, algbw = bytes / time (GB/s, 1e9), the bytes rank 0 sent in
 * the call (info.bytes_sent), and the ratio of the time to the all-reduce's.
 * Inputs: honest Gaussian-like values; no attacker (the cost does not depend
 * on the values).
 *
 * cpu(ms): the CPU time the call took, summed over the ranks (each process's
 * CLOCK_PROCESS_CPUTIME_ID), median over iterations, and "x cpu" its ratio
 * to the all-reduce's. On a host with fewer cores than ranks (every rank of
 * a shared-memory run competing for them) and other load, wall time mostly
 * measures the scheduler; the CPU time is the work itself, and where the
 * ranks are CPU-bound on C cores the wall time is about cpu / C, so the
 * "x cpu" ratio is what "x allred" would read on an otherwise idle host.
 * Waiting ranks yield or sleep (oversubscribed shared memory), so waiting
 * adds little CPU time.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ringmaster/ringmaster.h"
#include "bench_fork.h"

#define MAX_WORLD 64

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double cpu_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct opts {
  size_t mib[16];
  int nsizes, iters;
} opts_t;

/* method -1 = plain all-reduce. OUT *med_us, *cpu (median of the CPU time
 * summed over ranks), *bytes. */
static int time_cell(rm_comm_t *c, int method, float *buf, const float *pristine,
                     size_t count, int iters, double *med_us, double *cpu, size_t *bytes)
{
  int n = rm_comm_world(c);
  double t[64], u[64];
  rm_agg_config_t cfg;
  rm_agg_config_init(&cfg);
  if (method >= 0) {
    cfg.method = (rm_agg_method_t)method;
    cfg.f = 1;
    if (rm_agg_check(&cfg, n, NULL, 0) != RM_OK) cfg.f = 0;
    if (rm_agg_check(&cfg, n, NULL, 0) != RM_OK) return 1; /* not at this world */
  }
  for (int k = -1; k < iters; k++) {
    memcpy(buf, pristine, count * sizeof *buf);
    if (rm_barrier(c) != RM_OK) return -1;
    double t0 = now_us(), c0 = cpu_us();
    rm_status_t st;
    if (method == -2) { /* the bare exchange: all-to-all + all-gather */
      static float *tmp;
      if (!tmp) tmp = malloc(count * sizeof *tmp + 64);
      st = rm_alltoall(c, buf, tmp, count / (size_t)n, RM_F32);
      if (st == RM_OK) st = rm_allgather(c, tmp, buf, count / (size_t)n, RM_F32);
      *bytes = 0;
    } else if (method < 0) {
      rm_allreduce_info_t ai = {0};
      st = rm_allreduce_ex(c, buf, buf, count, RM_F32, RM_AVG, RM_ALGO_AUTO, &ai);
      *bytes = ai.bytes_sent;
    } else {
      rm_agg_info_t ai = {.struct_size = sizeof ai};
      st = rm_aggregate(c, buf, buf, count, RM_F32, &cfg, &ai);
      *bytes = ai.bytes_sent;
    }
    if (st != RM_OK) return -1;
    double dt = now_us() - t0, du = cpu_us() - c0;
    if (rm_allreduce(c, &dt, &dt, 1, RM_F64, RM_MAX) != RM_OK) return -1;
    if (rm_allreduce(c, &du, &du, 1, RM_F64, RM_SUM) != RM_OK) return -1;
    if (k >= 0) {
      t[k] = dt;
      u[k] = du;
    }
  }
  qsort(t, (size_t)iters, sizeof t[0], cmp_d);
  qsort(u, (size_t)iters, sizeof u[0], cmp_d);
  *med_us = t[iters / 2];
  *cpu = u[iters / 2];
  return 0;
}

static int bench_rank(rm_comm_t *c, const opts_t *o)
{
  int n = rm_comm_world(c), r = rm_comm_rank(c);
  size_t maxc = 0;
  for (int s = 0; s < o->nsizes; s++)
    if (o->mib[s] * 262144 > maxc) maxc = o->mib[s] * 262144;
  float *buf = malloc(maxc * sizeof *buf), *pristine = malloc(maxc * sizeof *buf);
  if (!buf || !pristine) return 1;
  for (size_t i = 0; i < maxc; i++)
    pristine[i] = (float)(0.001 * (double)((i * 2654435761u + (size_t)r * 40503u) % 2001) - 1.0);
  if (r == 0)
    printf("# rm_bench_agg: world %d, f32, in place, time = median over %d iterations of the max over ranks\n"
           "# %-13s %2s %2s %10s %11s %9s %12s %8s %9s %6s\n", n, o->iters, "method", "n", "f",
           "size(B)", "time(ms)", "algbw", "sent/rank(B)", "x allred", "cpu(ms)", "x cpu");
  for (int s = 0; s < o->nsizes; s++) {
    size_t count = o->mib[s] * 262144, bytes = 0;
    double base = 0, t = 0, cbase = 0, cu = 0;
    int iters = o->mib[s] >= 64 ? (o->iters > 3 ? 3 : o->iters) : o->iters;
    if (time_cell(c, -1, buf, pristine, count, iters, &base, &cbase, &bytes) != 0) return 1;
    if (r == 0)
      printf("  %-13s %2d %2s %10zu %11.2f %9.3f %12zu %8.2f %9.2f %6.2f\n", "allreduce", n, "-",
             count * 4, base / 1e3, count * 4.0 / base / 1e3, bytes, 1.0, cbase / 1e3, 1.0);
    if (getenv("RM_BENCH_AGG_EXCHANGE")) {
      if (time_cell(c, -2, buf, pristine, count, iters, &t, &cu, &bytes) != 0) return 1;
      if (r == 0)
        printf("  %-13s %2d %2s %10zu %11.2f %9.3f %12s %8.2f %9.2f %6.2f\n", "a2a+allgather", n,
               "-", count * 4, t / 1e3, count * 4.0 / t / 1e3, "-", t / base, cu / 1e3,
               cu / cbase);
    }
    for (int m = 0; m < RM_AGG_COUNT; m++) {
      int rc = time_cell(c, m, buf, pristine, count, iters, &t, &cu, &bytes);
      if (rc < 0) return 1;
      if (rc > 0) continue;
      rm_agg_config_t cfg;
      rm_agg_config_init(&cfg);
      cfg.method = (rm_agg_method_t)m;
      cfg.f = 1;
      int f = rm_agg_check(&cfg, n, NULL, 0) == RM_OK ? 1 : 0;
      if (r == 0)
        printf("  %-13s %2d %2d %10zu %11.2f %9.3f %12zu %8.2f %9.2f %6.2f\n",
               rm_agg_method_name((rm_agg_method_t)m), n, f, count * 4, t / 1e3,
               count * 4.0 / t / 1e3, bytes, t / base, cu / 1e3, cu / cbase);
      fflush(stdout);
    }
  }
  free(buf);
  free(pristine);
  return 0;
}

static int run_one(int rank, int world, const char **peers, rm_endpoint_t *ep,
                   const void *arg)
{
  const opts_t *o = arg;
  rm_comm_t *c;
  if (rm_bench_comm(rank, world, peers, ep, 120000, &c) != RM_OK) return 1;
  int rc = bench_rank(c, o);
  if (rc) fprintf(stderr, "rank %d: %s\n", rank, rm_comm_last_error(c));
  rm_comm_destroy(c);
  return rc;
}

static int run_forked(int world, const opts_t *o)
{
  return rm_bench_run_forked(world, run_one, o);
}

int main(int argc, char **argv)
{
  opts_t o = {{1, 4, 16, 64}, 4, 5};
  int worlds[8] = {4, 8}, nw = 2, opt;
  while ((opt = getopt(argc, argv, "n:s:i:")) != -1) {
    char *p = optarg, *end;
    switch (opt) {
    case 'n':
      for (nw = 0; nw < 8 && *p; p = *end ? end + 1 : end) worlds[nw++] = (int)strtol(p, &end, 10);
      break;
    case 's':
      for (o.nsizes = 0; o.nsizes < 16 && *p; p = *end ? end + 1 : end)
        o.mib[o.nsizes++] = strtoul(p, &end, 10);
      break;
    case 'i': o.iters = atoi(optarg); break;
    default:
      fprintf(stderr, "usage: rm_bench_agg [-n WORLD,...] [-s MiB,...] [-i ITERS]\n");
      return 2;
    }
  }
  if (o.iters < 1 || o.iters > 64) o.iters = 5;
  for (int w = 0; w < nw; w++) {
    if (worlds[w] < 1 || worlds[w] > MAX_WORLD) return 2;
    if (run_forked(worlds[w], &o)) return 1;
  }
  return 0;
}
