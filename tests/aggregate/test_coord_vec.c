/*
 * test_coord_vec.c - the vectorised coordinate-wise kernel (rm__agg_coord,
 * worker/aggregate/agg_coord.c: a sorting network over the rows) against
 * the rank-per-coordinate reference it replaced (rm__agg_coord_ref), bit
 * for bit, in its AVX2 and its SSE2 build (rm__agg_sse2_only): output bytes
 * and trimmed counts, median and trimmed mean, every f the rule allows,
 * n = 1..17 and 33, lengths that are not multiples of the tile, f32 / f64 /
 * f16 / bf16; and centered clipping's starting
 * median (rm__agg_cc_start), which uses the same kernel. Inputs (seeded) mix ordinary values
 * with NaN, +-inf, +0 and -0, values repeated across rows (ties, also at the
 * trimming boundaries), huge and subnormal values; one case is all ties,
 * one has no ties (the kernel's path for tiles without ties at the ranks it
 * reads).
 * Both are exact (order statistics and a fixed-order sum), so any
 * difference is a bug. A block whose own row lies outside it (rm_aggregate's
 * own slice, read where it lies) gives the same bytes as the contiguous one.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregate/agg_int.h"
#include "reduce/half.h"
#include "agg_test.h"

#include "rm_testcheck.h"
#include "rm_testrng.h"

static uint64_t g_rng = 0x636f6f7264766563ULL;
static uint64_t next_u64(void) { return rm_test_splitmix(&g_rng); }

/* a value from a small pool (so rows tie) or a special one */
static double pick(int ties)
{
  static const double special[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e30,
                                   -1e30, 1e-40, 3.0, -3.0};
  uint64_t r = next_u64();
  if (ties == 2) /* continuous values only: no ties, the kernel's fast path */
    return ((double)(r >> 11) / 9007199254740992.0 - 0.5) * 8.0;
  switch (r % 8) {
  case 0: return special[(r >> 8) % 10];
  case 1:
  case 2: return (double)((int)((r >> 8) % 5) - 2) * 0.5; /* ties */
  default:
    if (ties) return (double)((r >> 8) % 3);
    return ((double)(r >> 11) / 9007199254740992.0 - 0.5) * 8.0;
  }
}

int main(void)
{
  static const rm_dtype_t dts[] = {RM_F32, RM_F64, RM_F16, RM_BF16};
  static const char *const dtn[] = {"f32", "f64", "f16", "bf16"};
  static const size_t lens[] = {1, 7, 256, 613};
  int ns[18], nn = 0;
  for (int n = 1; n <= 17; n++) ns[nn++] = n;
  ns[nn++] = 33;
  long cases = 0;
  for (int d = 0; d < 4; d++)
    for (int a = 0; a < nn; a++)
      for (int l = 0; l < 4; l++)
        for (int ties = 0; ties < 3; ties++) {
          int n = ns[a];
          size_t len = lens[l], stride = len + 3, esz = rm_dtype_size(dts[d]);
          char *rows = malloc((size_t)n * stride * esz);
          char *o1 = malloc(len * esz), *o2 = malloc(len * esz);
          if (!rows || !o1 || !o2) return 1;
          for (size_t i = 0; i < (size_t)n * stride; i++) agg_test_store(rows, i, dts[d], pick(ties));
          rm__agg_block_t b = {rows, stride, len, n, dts[d], NULL, 0};
          for (int m = 0; m < 2; m++)
            for (int f = 0; 2 * f < n; f++) {
              rm_agg_method_t meth = m ? RM_AGG_TRIMMED_MEAN : RM_AGG_MEDIAN;
              for (int sse2 = 0; sse2 < 2; sse2++) { /* the AVX2 build, then the SSE2 one */
                uint32_t t1[64] = {0}, t2[64] = {0};
                memset(o1, 0x5a, len * esz);
                memset(o2, 0xa5, len * esz);
                rm__agg_sse2_only(sse2);
                CHECK(rm__agg_coord(&b, meth, f, o1, t1) == RM_OK);
                rm__agg_sse2_only(0);
                CHECK(rm__agg_coord_ref(&b, meth, f, o2, t2) == RM_OK);
                CHECKF(memcmp(o1, o2, len * esz) == 0 && memcmp(t1, t2, sizeof t1) == 0,
                       "%s n=%d len=%zu ties=%d %s f=%d sse2=%d: differs from the reference",
                       dtn[d], n, len, ties, m ? "trimmed_mean" : "median", f, sse2);
                cases++;
              }
            }
          /* a block whose own row lies elsewhere (rm_aggregate reads its own
           * slice in place, the all-to-all moving only the others' rows): the
           * same bytes as the contiguous block, with the row's slot in the
           * block poisoned so that reading it there would show */
          if (n >= 2) {
            int k = n / 2;
            char *own = malloc(len * esz), *slot = rows + (size_t)k * stride * esz;
            char *o3 = malloc(len * esz);
            if (!own || !o3) return 1;
            memcpy(own, slot, len * esz);
            for (int m = 0; m < 2; m++) {
              rm_agg_method_t meth = m ? RM_AGG_TRIMMED_MEAN : RM_AGG_MEDIAN;
              int f = n >= 3 ? 1 : 0;
              uint32_t t1[64] = {0}, t3[64] = {0};
              CHECK(rm__agg_coord(&b, meth, f, o1, t1) == RM_OK);
              for (size_t j = 0; j < len; j++) agg_test_store(slot, j, dts[d], 1e30 * (double)(j + 1));
              rm__agg_block_t bo = {rows, stride, len, n, dts[d], own, k};
              CHECK(rm__agg_coord(&bo, meth, f, o3, t3) == RM_OK);
              CHECKF(memcmp(o1, o3, len * esz) == 0 && memcmp(t1, t3, sizeof t1) == 0,
                     "%s n=%d len=%zu ties=%d %s: the own row read in place differs",
                     dtn[d], n, len, ties, m ? "trimmed_mean" : "median");
              memcpy(slot, own, len * esz);
              cases++;
            }
            free(own);
            free(o3);
          }
          /* centered clipping starts from the same median (narrowed here) */
          double *v = malloc((len ? len : 1) * sizeof *v), part[64];
          uint32_t t2[64] = {0};
          if (!v) return 1;
          CHECK(rm__agg_cc_start(&b, v, part) == RM_OK);
          rm__agg_narrow(v, len, dts[d], o1);
          CHECK(rm__agg_coord_ref(&b, RM_AGG_MEDIAN, 0, o2, t2) == RM_OK);
          CHECKF(memcmp(o1, o2, len * esz) == 0, "%s n=%d len=%zu ties=%d: cc_start's median "
                 "differs from the reference", dtn[d], n, len, ties);
          free(v);
          free(rows);
          free(o1);
          free(o2);
        }
  printf("test_coord_vec: %ld cases compared\n", cases);
  return rm_check_exit("test_coord_vec");
}
