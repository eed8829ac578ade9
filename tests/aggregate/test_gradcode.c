/*
 * test_gradcode.c - fractional repetition gradient coding: exact recovery of
 * the full-batch gradient for EVERY straggler pattern of small N.
 *
 * Per-partition gradients are small integers stored in f64 and i64 (sums
 * are exact), so "recovered == uncoded full-batch sum" is bitwise equality.
 * For each (N, s): every subset of missing workers of size 0..s must decode
 * exactly; every pattern with a whole group (s+1 workers) missing must be
 * reported as undecodable, naming that group.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregate/gradcode.h"

#include "rm_testcheck.h"

#define D 7     /* gradient dimension */
#define MAXN 16

/* grad[p][j]: integer-valued gradient of partition p */
static double gradf[MAXN][D];
static int64_t gradi[MAXN][D];

static void make_grads(int n)
{
  for (int p = 0; p < n; p++)
    for (int j = 0; j < D; j++) {
      int64_t v = (int64_t)((p + 1) * 1000 + j * 37 - 500 * (p % 3));
      gradi[p][j] = v;
      gradf[p][j] = (double)v;
    }
}

/* what worker w sends: the sum of its assigned partitions' gradients */
static void encode(const rm__gradcode_t *gc, int w, double *mf, int64_t *mi)
{
  int parts[MAXN];
  CHECK(rm__gradcode_assignment(gc, w, parts) == RM_OK);
  memset(mf, 0, D * sizeof *mf);
  memset(mi, 0, D * sizeof *mi);
  for (int k = 0; k < gc->group; k++)
    for (int j = 0; j < D; j++) {
      mf[j] += gradf[parts[k]][j];
      mi[j] += gradi[parts[k]][j];
    }
}

/* returns the number of patterns checked */
static int check_all_patterns(int n, int s)
{
  rm__gradcode_t gc;
  double msgf[MAXN][D], fullf[D], outf[D];
  int64_t msgi[MAXN][D], fulli[D], outi[D];
  int patterns = 0;
  CHECK(rm__gradcode_init(&gc, n, s) == RM_OK);
  make_grads(n);
  memset(fullf, 0, sizeof fullf);
  memset(fulli, 0, sizeof fulli);
  for (int p = 0; p < n; p++)
    for (int j = 0; j < D; j++) {
      fullf[j] += gradf[p][j];
      fulli[j] += gradi[p][j];
    }
  for (int w = 0; w < n; w++) encode(&gc, w, msgf[w], msgi[w]);

  for (uint32_t missing = 0; missing < (1u << n); missing++) {
    int nmiss = __builtin_popcount(missing);
    uint8_t arrived[MAXN], coeff[MAXN];
    const void *pf[MAXN], *pi[MAXN];
    int bad = -1, whole_group_missing = -1;
    for (int w = 0; w < n; w++) {
      arrived[w] = !(missing & (1u << w));
      pf[w] = arrived[w] ? msgf[w] : NULL; /* a straggler's message is absent */
      pi[w] = arrived[w] ? msgi[w] : NULL;
    }
    for (int g = gc.groups - 1; g >= 0; g--) {
      uint32_t gm = ((1u << gc.group) - 1) << (g * gc.group);
      if ((missing & gm) == gm) whole_group_missing = g; /* lowest such g */
    }
    rm_status_t st = rm__gradcode_decode_plan(&gc, arrived, coeff, &bad);
    if (whole_group_missing >= 0) {
      CHECK(st == RM_ERR_UNAVAILABLE);
      CHECK(bad == whole_group_missing);
      CHECK(nmiss > s); /* never for a tolerated pattern */
      continue;
    }
    CHECK(st == RM_OK);
    int ones = 0;
    for (int w = 0; w < n; w++) {
      CHECK(coeff[w] <= 1);
      CHECK(!coeff[w] || arrived[w]);
      ones += coeff[w];
    }
    CHECK(ones == gc.groups);
    memset(outf, 0xff, sizeof outf);
    CHECK(rm__gradcode_decode(&gc, coeff, pf, outf, D, RM_F64) == RM_OK);
    CHECK(memcmp(outf, fullf, sizeof outf) == 0);
    CHECK(rm__gradcode_decode(&gc, coeff, pi, outi, D, RM_I64) == RM_OK);
    CHECK(memcmp(outi, fulli, sizeof outi) == 0);
    if (nmiss <= s) patterns++;
  }
  return patterns;
}

static int binom(int n, int k)
{
  int r = 1;
  for (int i = 1; i <= k; i++) r = r * (n - k + i) / i;
  return r;
}

static void test_every_pattern(void)
{
  static const int cases[][2] = {{4, 1}, {6, 1}, {6, 2}, {6, 5}, {8, 3},
                                 {8, 1}, {9, 2}, {1, 0}, {5, 0}, {12, 3}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int n = cases[i][0], s = cases[i][1];
    int want = 0;
    for (int k = 0; k <= s; k++) want += binom(n, k);
    int got = check_all_patterns(n, s);
    CHECK(got == want); /* every subset of <= s missing decoded */
    printf("N=%d s=%d: %d tolerated patterns recovered exactly\n", n, s, got);
  }
}

static void test_assignment_and_ranges(void)
{
  rm__gradcode_t gc;
  int parts[3], seen[6] = {0};
  CHECK(rm__gradcode_init(&gc, 6, 2) == RM_OK);
  CHECK(gc.groups == 2 && gc.group == 3);
  for (int w = 0; w < 6; w++) {
    CHECK(rm__gradcode_assignment(&gc, w, parts) == RM_OK);
    CHECK(rm__gradcode_group_of(&gc, w) == w / 3);
    for (int k = 0; k < 3; k++) {
      CHECK(parts[k] / 3 == w / 3); /* its group's block */
      seen[parts[k]]++;
    }
  }
  for (int p = 0; p < 6; p++) CHECK(seen[p] == 3); /* replication s+1 */
  CHECK(rm__gradcode_assignment(&gc, 6, parts) == RM_ERR_INVALID_ARG);
  CHECK(rm__gradcode_group_of(&gc, -1) == -1);

  /* partitions of 1797 samples tile [0, 1797) with sizes differing by <= 1 */
  uint64_t b, e, next = 0;
  for (int p = 0; p < 6; p++) {
    CHECK(rm__gradcode_partition_range(&gc, p, 1797, &b, &e) == RM_OK);
    CHECK(b == next && (e - b == 299 || e - b == 300));
    next = e;
  }
  CHECK(next == 1797);
  CHECK(rm__gradcode_partition_range(&gc, 0, 2, &b, &e) == RM_OK && e - b == 1);
  CHECK(rm__gradcode_partition_range(&gc, 5, 2, &b, &e) == RM_OK && e == b);

  /* invalid configurations */
  CHECK(rm__gradcode_init(&gc, 6, 3) == RM_ERR_INVALID_ARG); /* 4 does not divide 6 */
  CHECK(rm__gradcode_init(&gc, 4, 4) == RM_ERR_INVALID_ARG);
  CHECK(rm__gradcode_init(&gc, 0, 0) == RM_ERR_INVALID_ARG);
  CHECK(rm__gradcode_init(&gc, 4, -1) == RM_ERR_INVALID_ARG);
}

/* the decoder refuses a plan that double-counts or skips a group, before
 * writing anything */
static void test_bad_plans(void)
{
  rm__gradcode_t gc;
  double m[4][2] = {{1, 2}, {1, 2}, {3, 4}, {3, 4}}, out[2] = {-1, -1};
  const void *msgs[4] = {m[0], m[1], m[2], m[3]};
  uint8_t both[4] = {1, 1, 1, 0}, none[4] = {1, 0, 0, 0}, two[4] = {1, 0, 2, 0};
  uint8_t ok[4] = {0, 1, 1, 0};
  CHECK(rm__gradcode_init(&gc, 4, 1) == RM_OK);
  CHECK(rm__gradcode_decode(&gc, both, msgs, out, 2, RM_F64) == RM_ERR_INVALID_ARG);
  CHECK(rm__gradcode_decode(&gc, none, msgs, out, 2, RM_F64) == RM_ERR_INVALID_ARG);
  CHECK(rm__gradcode_decode(&gc, two, msgs, out, 2, RM_F64) == RM_ERR_INVALID_ARG);
  CHECK(out[0] == -1 && out[1] == -1);
  msgs[1] = NULL;
  CHECK(rm__gradcode_decode(&gc, ok, msgs, out, 2, RM_F64) == RM_ERR_INVALID_ARG);
  msgs[1] = m[1];
  CHECK(rm__gradcode_decode(&gc, ok, msgs, out, 2, RM_F64) == RM_OK);
  CHECK(out[0] == 4 && out[1] == 6);
  /* f32 and an empty vector work too */
  float fm[4][1] = {{1.5f}, {1.5f}, {2.25f}, {2.25f}}, fo[1];
  const void *fmsgs[4] = {fm[0], fm[1], fm[2], fm[3]};
  CHECK(rm__gradcode_decode(&gc, ok, fmsgs, fo, 1, RM_F32) == RM_OK && fo[0] == 3.75f);
  CHECK(rm__gradcode_decode(&gc, ok, fmsgs, NULL, 0, RM_F32) == RM_OK);
  CHECK(rm__gradcode_decode(&gc, ok, fmsgs, fo, 1, RM_DTYPE_COUNT) == RM_ERR_INVALID_ARG);
  /* the plan picks the lowest arrived rank of each group */
  uint8_t arrived[4] = {0, 1, 1, 1}, coeff[4];
  CHECK(rm__gradcode_decode_plan(&gc, arrived, coeff, NULL) == RM_OK);
  CHECK(coeff[0] == 0 && coeff[1] == 1 && coeff[2] == 1 && coeff[3] == 0);
}

int main(void)
{
  test_every_pattern();
  test_assignment_and_ranges();
  test_bad_plans();
  return rm_check_exit("test_gradcode");
}
