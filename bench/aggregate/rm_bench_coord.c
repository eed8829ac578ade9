/*
 * rm_bench_coord - the coordinate-wise kernel alone, one process: the
 * vectorised rm__agg_coord (sorting network) against rm__agg_coord_ref
 * (rank per coordinate, what it replaced) on the slice one rank computes
 * in rm_aggregate, no communication. Separates the statistic's cost from
 * the exchange's, which rm_bench_agg measures together.
 *
 *   rm_bench_coord [-c COORDS] [-r REPEATS]
 *
 * Per n in {4, 8} and method (median, trimmed_mean; f = 1), f32 rows of
 * uniform values, the best of REPEATS (default 5) calls of each; prints ms
 * per call and the speed-up. COORDS (default 1048576 = a 16 MiB f32
 * vector's slice at n = 4) is the slice length.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aggregate/agg_int.h"

static double now_ms(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
  size_t len = 1u << 20;
  int reps = 5, ns[2] = {4, 8}, rc = 0;
  for (int a = 1; a + 1 < argc; a += 2) {
    if (!strcmp(argv[a], "-c")) len = (size_t)atol(argv[a + 1]);
    else if (!strcmp(argv[a], "-r")) reps = atoi(argv[a + 1]);
    else {
      fprintf(stderr, "usage: %s [-c COORDS] [-r REPEATS]\n", argv[0]);
      return 2;
    }
  }
  if (len < 1 || reps < 1) {
    fprintf(stderr, "rm_bench_coord: COORDS and REPEATS must be positive\n");
    return 2;
  }
  printf("# %-12s %2s %9s %10s %10s %8s\n", "method", "n", "coords", "ref(ms)", "vec(ms)", "speedup");
  for (int a = 0; a < 2 && rc == 0; a++) {
    int n = ns[a];
    float *rows = malloc((size_t)n * len * sizeof *rows), *out = malloc(len * sizeof *out);
    if (!rows || !out) {
      fprintf(stderr, "rm_bench_coord: out of memory\n");
      rc = 1;
    }
    uint64_t s = 0x636f6f7264ULL;
    for (size_t i = 0; i < (size_t)n * len && rows; i++) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      rows[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
    rm__agg_block_t b = {rows, len, len, n, RM_F32};
    for (int m = 0; m < 2 && rc == 0; m++) {
      rm_agg_method_t meth = m ? RM_AGG_TRIMMED_MEAN : RM_AGG_MEDIAN;
      double best[2] = {1e300, 1e300};
      for (int r = 0; r < reps; r++)
        for (int v = 0; v < 2; v++) {
          uint32_t tr[8] = {0};
          double t0 = now_ms();
          rm_status_t st = v ? rm__agg_coord(&b, meth, 1, out, tr)
                             : rm__agg_coord_ref(&b, meth, 1, out, tr);
          double dt = now_ms() - t0;
          if (st != RM_OK) rc = 1;
          if (dt < best[v]) best[v] = dt;
        }
      printf("  %-12s %2d %9zu %10.2f %10.2f %7.1fx\n", m ? "trimmed_mean" : "median", n, len,
             best[0], best[1], best[0] / best[1]);
    }
    free(rows);
    free(out);
  }
  return rc;
}
