/*
 * rooted_bench - rm_gather and rm_scatter (root 0) against rm_alltoallv
 * moving the same block per pair, over the public API only.
 *
 *   rooted_bench [-n WORLD] [-s SIZE,SIZE...] [-i ITERS]
 *
 * WORLD ranks forked on 127.0.0.1 (default 2), block sizes in bytes per
 * rank (default 4 KiB, 1 MiB, 16 MiB), ITERS timed calls per cell after one
 * warm-up (default 9). Per call: barrier, time one call, the max over ranks
 * (untimed all-reduce). Each cell's calls are interleaved with the other
 * two kinds' (gather, scatter, all-to-all, gather, ...), so load drifts hit
 * all alike. Rank 0 prints the median and min per cell, and checks every
 * byte of every result (untimed).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringmaster/ringmaster.h"
#include "bench_fork.h"

#define MAX_SIZES 16
#define MAX_ITERS 101

typedef struct opts {
  size_t sizes[MAX_SIZES];
  int nsizes, iters;
} opts_t;


static unsigned char val(int from, int to, size_t i)
{
  return (unsigned char)(from * 31 + to * 7 + i * 13 + (i >> 12));
}

static int run_one(int rank, int world, const char **peers, rm_endpoint_t *ep, const void *arg)
{
  const opts_t *o = arg;
  rm_comm_t *c = NULL;
  int bad = 0;
  if (rm_bench_comm(rank, world, peers, ep, 0, &c) != RM_OK) return 1;
  if (rank == 0)
    printf("# rooted_bench: world %d, root 0, %d calls per cell after 1 warm-up; "
           "time = max over ranks, us\n# %10s | %10s %10s | %10s %10s | %10s %10s\n",
           world, o->iters, "block(B)", "gather", "(min)", "scatter", "(min)", "alltoallv",
           "(min)");
  for (int si = 0; si < o->nsizes; si++) {
    size_t blk = o->sizes[si], n = (size_t)world;
    unsigned char *mine = malloc(blk), *all = malloc(blk * n), *src = malloc(blk * n),
                  *a2s = malloc(blk * n), *a2r = malloc(blk * n);
    size_t *cnt = malloc(n * sizeof *cnt), *dsp = malloc(n * sizeof *dsp);
    double t[3][MAX_ITERS];
    if (!mine || !all || !src || !a2s || !a2r || !cnt || !dsp) return 1;
    for (size_t j = 0; j < n; j++) {
      cnt[j] = blk;
      dsp[j] = j * blk;
      for (size_t i = 0; i < blk; i++) {
        src[j * blk + i] = val(0, (int)j, i);
        a2s[j * blk + i] = val(rank, (int)j, i);
      }
    }
    for (size_t i = 0; i < blk; i++) mine[i] = val(rank, 0, i);
    for (int k = -1; k < o->iters; k++) {
      for (int kind = 0; kind < 3; kind++) {
        rm_status_t st;
        memset(kind == 2 ? a2r : all, 0xEE, blk * n);
        if (kind == 1) memset(mine, 0xEE, blk);
        if (rm_barrier(c) != RM_OK) return 1;
        double t0 = rm_bench_now_us();
        if (kind == 0) st = rm_gather(c, mine, all, blk, RM_U8, 0);
        else if (kind == 1) st = rm_scatter(c, src, mine, blk, RM_U8, 0);
        else st = rm_alltoallv(c, a2s, cnt, dsp, a2r, cnt, dsp, RM_U8);
        double dt = rm_bench_now_us() - t0;
        if (st != RM_OK) {
          fprintf(stderr, "rank %d: %s: %s\n", rank, rm_status_name(st), rm_comm_last_error(c));
          return 1;
        }
        if (rm_allreduce(c, &dt, &dt, 1, RM_F64, RM_MAX) != RM_OK) return 1;
        if (k >= 0) t[kind][k] = dt;
        for (size_t j = 0; j < n; j++)
          for (size_t i = 0; i < blk; i++) {
            if (kind == 0 && rank == 0) bad += all[j * blk + i] != val((int)j, 0, i);
            if (kind == 2) bad += a2r[j * blk + i] != val((int)j, rank, i);
          }
        if (kind == 1)
          for (size_t i = 0; i < blk; i++) bad += mine[i] != val(0, rank, i);
        if (kind == 1) /* gather's input again */
          for (size_t i = 0; i < blk; i++) mine[i] = val(rank, 0, i);
      }
    }
    if (rank == 0) {
      double med[3], mn[3];
      for (int kind = 0; kind < 3; kind++) {
        qsort(t[kind], (size_t)o->iters, sizeof(double), rm_bench_cmp_double);
        med[kind] = t[kind][o->iters / 2];
        mn[kind] = t[kind][0];
      }
      printf("  %10zu | %10.1f %10.1f | %10.1f %10.1f | %10.1f %10.1f\n", blk, med[0], mn[0],
             med[1], mn[1], med[2], mn[2]);
      fflush(stdout);
    }
    free(mine); free(all); free(src); free(a2s); free(a2r); free(cnt); free(dsp);
  }
  double b = bad;
  if (rm_allreduce(c, &b, &b, 1, RM_F64, RM_SUM) != RM_OK) return 1;
  if (rank == 0) printf("# wrong bytes over all ranks and calls: %.0f\n", b);
  rm_comm_destroy(c);
  return b != 0;
}

int main(int argc, char **argv)
{
  opts_t o = {{4096, 1 << 20, 16 << 20}, 3, 9};
  int world = 2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-n") && i + 1 < argc) {
      world = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "-i") && i + 1 < argc) {
      o.iters = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "-s") && i + 1 < argc) {
      char *p = argv[++i];
      o.nsizes = 0;
      while (*p && o.nsizes < MAX_SIZES) {
        o.sizes[o.nsizes++] = strtoull(p, &p, 0);
        if (*p == ',') p++;
      }
    } else {
      fprintf(stderr, "usage: %s [-n WORLD] [-s SIZE,SIZE...] [-i ITERS]\n", argv[0]);
      return 2;
    }
  }
  if (world < 1 || world > RM_BENCH_MAX_WORLD || o.iters < 1 || o.iters > MAX_ITERS ||
      o.nsizes < 1) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  return rm_bench_run_forked(world, run_one, &o);
}
