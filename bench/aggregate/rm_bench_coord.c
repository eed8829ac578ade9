/*
 * rm_bench_coord - the robust statistics' kernels alone, one process: each
 * vectorised kernel (worker/aggregate/agg_kernels.c lists their files), in
 * its SSE2 and its AVX2 build, against the scalar reference it replaced, on the slice one
 * rank computes in rm_aggregate, no communication. Separates the
 * statistics' cost from the exchange's, which rm_bench_agg measures
 * together.
 *
 *   rm_bench_coord [-c COORDS] [-r REPEATS]
 *
 * Per n in {4, 8}: median and trimmed_mean (f = 1; rm__agg_coord against
 * rm__agg_coord_ref), the Krum family's pair distances (rm__agg_pair_dist,
 * f32 lanes, against rm__agg_pair_dist_ref, double) and Bulyan's second
 * phase over the n - 2f rows it keeps (f = 1 where n >= 7, else 0;
 * rm__agg_bulyan_coord against rm__agg_bulyan_coord_ref). f32 rows of
 * uniform values; the best of REPEATS (default 5) calls of each, timed in
 * this thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so that other work on a
 * shared machine does not count; ms per call and the reference's time over
 * the AVX2 build's. COORDS (default 1048576 = a 16 MiB f32 vector's slice
 * at n = 4) is the slice length.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aggregate/agg_int.h"

static double cpu_ms(void)
{
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

enum { MEDIAN, TRIMMED, PAIR_DIST, BULYAN, NKERNELS };
static const char *const kname[] = {"median", "trimmed_mean", "pair_dist", "bulyan_coord"};

/* one call of kernel k; ref: the scalar reference */
static rm_status_t call(int k, int ref, const rm__agg_block_t *b, void *out)
{
  uint32_t tr[8] = {0};
  double d[64] = {0};
  int n = b->n, f = n >= 7 ? 1 : 0, sel[8];
  for (int i = 0; i < n - 2 * f; i++) sel[i] = i;
  switch (k) {
  case MEDIAN:
  case TRIMMED: {
    rm_agg_method_t m = k == MEDIAN ? RM_AGG_MEDIAN : RM_AGG_TRIMMED_MEAN;
    return ref ? rm__agg_coord_ref(b, m, 1, out, tr) : rm__agg_coord(b, m, 1, out, tr);
  }
  case PAIR_DIST:
    return ref ? rm__agg_pair_dist_ref(b, d) : rm__agg_pair_dist(b, d);
  default:
    return ref ? rm__agg_bulyan_coord_ref(b, sel, n - 2 * f, n - 4 * f, out)
               : rm__agg_bulyan_coord(b, sel, n - 2 * f, n - 4 * f, out);
  }
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
  printf("# CPU time per call, best of %d\n# %-12s %2s %9s %10s %10s %10s %8s\n", reps, "kernel",
         "n", "coords", "ref(ms)", "sse2(ms)", "avx2(ms)", "ref/avx2");
  for (int a = 0; a < 2 && rc == 0; a++) {
    int n = ns[a];
    float *rows = malloc((size_t)n * len * sizeof *rows), *out = malloc(len * sizeof *out);
    if (!rows || !out) {
      fprintf(stderr, "rm_bench_coord: out of memory\n");
      rc = 1;
      break;
    }
    uint64_t s = 0x636f6f7264ULL;
    for (size_t i = 0; i < (size_t)n * len; i++) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      rows[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
    rm__agg_block_t b = {rows, len, len, n, RM_F32, NULL, 0};
    for (int k = 0; k < NKERNELS && rc == 0; k++) {
      double best[3] = {1e300, 1e300, 1e300}; /* ref, sse2, avx2 */
      for (int r = 0; r < reps; r++)
        for (int v = 0; v < 3; v++) {
          rm__agg_sse2_only(v == 1);
          double t0 = cpu_ms();
          if (call(k, v == 0, &b, out) != RM_OK) rc = 1;
          double dt = cpu_ms() - t0;
          if (dt < best[v]) best[v] = dt;
        }
      rm__agg_sse2_only(0);
      printf("  %-12s %2d %9zu %10.2f %10.2f %10.2f %7.1fx\n", kname[k], n, len, best[0],
             best[1], best[2], best[0] / best[2]);
    }
    free(rows);
    free(out);
  }
  return rc;
}
