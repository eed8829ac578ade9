/*
 * test_agg_mp.c - masked, coded and robust aggregation across real processes
 * (one per rank, TCP on 127.0.0.1, free ports).
 *
 *   test_agg_mp WORLD S
 *
 * Every rank can rebuild every other rank's input (deterministic integer
 * values), so each rank checks its result bitwise against a local
 * computation:
 *  1. masked all-reduce, SUM and AVG, for several member sets (including
 *     non-members and in place): every rank, member or not, gets the sum /
 *     average over the members;
 *  2. member-set verification: equal masks pass; a mask that differs on one
 *     rank fails with RM_ERR_PROTOCOL on EVERY rank and the communicator
 *     stays usable;
 *  3. gradient coding over the data plane (N = WORLD, s = S): for every
 *     pattern of up to S stragglers (the stragglers still join the
 *     collective, contributing zeros) the all-reduced decode equals the
 *     uncoded full-batch gradient exactly;
 *  4. robust all-reduce with Byzantine ranks sending 1e30 and NaN: median and
 *     trimmed mean equal the local combine of the same rows on every rank.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregate/aggregate.h"
#include "aggregate/gradcode.h"
#include "rm_testlib.h"

#define MAXW 16
#define D 1000

static int g_s;

#define EXPECT(cond)                                                          \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s\n", rank, __FILE__,   \
              __LINE__, #cond);                                               \
      return 1;                                                               \
    }                                                                         \
  } while (0)

static float value(int r, int j) { return (float)((r + 1) * 1000 + (j % 97) - 48); }

static int test_masked(rm_comm_t *c, int rank, int world)
{
  static float send[D], recv[D];
  uint8_t member[MAXW];
  for (int j = 0; j < D; j++) send[j] = value(rank, j);
  /* member sets: everybody; all but rank 1; only the last rank */
  for (int set = 0; set < 3; set++) {
    for (int r = 0; r < world; r++)
      member[r] = set == 0 || (set == 1 && r != 1) || (set == 2 && r == world - 1);
    if (world == 1) member[0] = 1;
    int k = rm__members_count(member, world);
    for (int avg = 0; avg <= 1; avg++) {
      int got_k = -1;
      rm_status_t st = rm__masked_allreduce(c, send, recv, D, RM_F32,
                                            avg ? RM_AVG : RM_SUM, member,
                                            RM__AGG_VERIFY_MEMBERS, &got_k);
      EXPECT(st == RM_OK && got_k == k);
      for (int j = 0; j < D; j++) {
        float sum = 0;
        for (int r = 0; r < world; r++)
          if (member[r]) sum += value(r, j);
        if (avg) sum /= (float)k;
        EXPECT(recv[j] == sum);
      }
    }
  }
  /* in place, and a non-member passing send == NULL */
  for (int r = 0; r < world; r++) member[r] = (r % 2 == 0);
  for (int j = 0; j < D; j++) recv[j] = value(rank, j);
  EXPECT(rm__masked_allreduce(c, member[rank] ? recv : NULL, recv, D, RM_F32,
                              RM_SUM, member, 0, NULL) == RM_OK);
  for (int j = 0; j < D; j++) {
    float sum = 0;
    for (int r = 0; r < world; r += 2) sum += value(r, j);
    EXPECT(recv[j] == sum);
  }
  /* empty vector; f64 and i64 averages (integers divide truncating) */
  EXPECT(rm__masked_allreduce(c, NULL, NULL, 0, RM_F32, RM_AVG, member, 0, NULL) == RM_OK);
  double d = rank + 0.5;
  int64_t i = 10 * rank + 1;
  int k = rm__members_count(member, world);
  EXPECT(rm__masked_allreduce(c, &d, &d, 1, RM_F64, RM_AVG, member, 0, NULL) == RM_OK);
  EXPECT(rm__masked_allreduce(c, &i, &i, 1, RM_I64, RM_AVG, member, 0, NULL) == RM_OK);
  double dsum = 0;
  int64_t isum = 0;
  for (int r = 0; r < world; r += 2) {
    dsum += r + 0.5;
    isum += 10 * r + 1;
  }
  EXPECT(d == dsum / k && i == isum / k);
  /* bad arguments fail locally, before any collective */
  EXPECT(rm__masked_allreduce(c, send, recv, D, RM_F32, RM_MAX, member, 0, NULL) == RM_ERR_INVALID_ARG);
  memset(member, 0, (size_t)world);
  EXPECT(rm__masked_allreduce(c, send, recv, D, RM_F32, RM_SUM, member, 0, NULL) == RM_ERR_INVALID_ARG);
  return 0;
}

static int test_verify_mismatch(rm_comm_t *c, int rank, int world)
{
  float x[4] = {1, 2, 3, 4}, y[4];
  uint8_t member[MAXW];
  if (world < 2) return 0;
  for (int r = 0; r < world; r++) member[r] = 1;
  if (rank == 0) member[world - 1] = 0; /* rank 0 disagrees */
  rm_status_t st = rm__masked_allreduce(c, x, y, 4, RM_F32, RM_SUM, member,
                                        RM__AGG_VERIFY_MEMBERS, NULL);
  EXPECT(st == RM_ERR_PROTOCOL);
  EXPECT(rm_comm_status(c) == RM_OK); /* not sticky: still usable */
  EXPECT(rm_allreduce(c, x, y, 4, RM_F32, RM_SUM) == RM_OK);
  EXPECT(y[3] == 4.0f * (float)world);
  return 0;
}

/* integer gradient of partition p, exact in f32 */
static float part_grad(int p, int j) { return (float)((p + 1) * 100 + (j % 13) - 6); }

static int test_coded(rm_comm_t *c, int rank, int world)
{
  rm__gradcode_t gc;
  static float msg[D], out[D], full[D];
  int parts[MAXW];
  if (rm__gradcode_init(&gc, world, g_s) != RM_OK) return 0; /* not applicable */
  EXPECT(rm__gradcode_assignment(&gc, rank, parts) == RM_OK);
  memset(msg, 0, sizeof msg);
  memset(full, 0, sizeof full);
  for (int j = 0; j < D; j++) {
    for (int k = 0; k < gc.group; k++) msg[j] += part_grad(parts[k], j);
    for (int p = 0; p < world; p++) full[j] += part_grad(p, j);
  }
  int patterns = 0;
  for (uint32_t missing = 0; missing < (1u << world); missing++) {
    if (__builtin_popcount(missing) > g_s) continue;
    uint8_t arrived[MAXW], coeff[MAXW];
    for (int r = 0; r < world; r++) arrived[r] = !(missing & (1u << r));
    EXPECT(rm__gradcode_decode_plan(&gc, arrived, coeff, NULL) == RM_OK);
    /* a straggler that is not chosen contributes zeros, whatever it holds */
    EXPECT(rm__masked_allreduce(c, coeff[rank] ? msg : NULL, out, D, RM_F32,
                                RM_SUM, coeff, 0, NULL) == RM_OK);
    EXPECT(memcmp(out, full, sizeof out) == 0);
    patterns++;
  }
  EXPECT(patterns >= world);
  return 0;
}

static void byz_row(int r, int world, float *row)
{
  for (int j = 0; j < D; j++) {
    if (world >= 3 && r == world - 1) row[j] = (j % 2) ? 1e30f : NAN; /* Byzantine */
    else row[j] = value(r, j);
  }
}

static int test_robust(rm_comm_t *c, int rank, int world)
{
  static float rows[MAXW * D], mine[D], out[D], want[D];
  double work[MAXW];
  for (int r = 0; r < world; r++) byz_row(r, world, rows + (size_t)r * D);
  byz_row(rank, world, mine);
  for (int m = 0; m < 2; m++) {
    rm__robust_opts_t o = {m ? RM__ROBUST_TRIMMED_MEAN : RM__ROBUST_MEDIAN,
                           (m && world >= 3) ? 1 : 0, 0};
    EXPECT(rm__robust_allreduce(c, mine, out, D, RM_F32, &o) == RM_OK);
    EXPECT(rm__robust_combine(rows, world, D, RM_F32, &o, want, work) == RM_OK);
    EXPECT(memcmp(out, want, sizeof out) == 0);
    for (int j = 0; j < D && world >= 3; j++) /* within the honest range */
      EXPECT(out[j] >= value(0, j) && out[j] <= value(world - 2, j));
  }
  return 0;
}

static int run_rank(rm_comm_t *c, void *arg)
{
  int rank = rm_comm_rank(c), world = rm_comm_world(c);
  if (test_masked(c, rank, world)) return 1;
  if (test_verify_mismatch(c, rank, world)) return 1;
  if (test_coded(c, rank, world)) return 1;
  if (test_robust(c, rank, world)) return 1;
  return 0;
}

int main(int argc, char **argv)
{
  int world = argc > 1 ? atoi(argv[1]) : 4;
  /* one process per rank (tests/lib): 90 s for all, 30 s per collective wait */
  rm_test_opts_t o = {.timeout_ms = 90000, .comm_timeout_ms = 30000};
  g_s = argc > 2 ? atoi(argv[2]) : 1;
  if (world < 1 || world > MAXW) return 2;
  int bad = rm_test_run_opts(world, run_rank, NULL, &o);
  if (bad) {
    fprintf(stderr, "test_agg_mp world %d: %d rank(s) failed\n", world, bad);
    return 1;
  }
  printf("test_agg_mp world %d s %d: all checks passed\n", world, g_s);
  return 0;
}
