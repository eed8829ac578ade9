/*
 * test_robust.c - the single-process math of robust and masked aggregation:
 * coordinate-wise median and trimmed mean (with Byzantine rows holding huge
 * values, infinities and NaN), clipped mean, norm clipping, scaling, member
 * masks. Inputs are small integers / dyadic fractions so results are exact.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "aggregate/aggregate.h"
#include "reduce/reduce.h"

#include "rm_testcheck.h"

static void test_median(void)
{
  /* 5 rows x 4 coordinates; rows 3 and 4 are Byzantine */
  double rows[5][4] = {
      {1, -2, 10, 0.5},
      {3, -1, 30, 0.25},
      {2, -3, 20, 0.75},
      {1e30, INFINITY, -1e30, NAN},
      {NAN, -INFINITY, 1e30, 1e30},
  };
  double out[4], work[5];
  rm__robust_opts_t o = {RM__ROBUST_MEDIAN, 0, 0};
  CHECK(rm__robust_combine(rows, 5, 4, RM_F64, &o, out, work) == RM_OK);
  /* sorted columns: {1,2,3,1e30,inf} {-inf,-3,-2,-1,inf} {-1e30,10,20,30,1e30}
   * {.25,.5,.75,1e30,inf(NaN)} */
  CHECK(out[0] == 3 && out[1] == -2 && out[2] == 20 && out[3] == 0.75);
  /* every result lies within the honest rows' range of its coordinate */
  for (int j = 0; j < 4; j++) {
    double lo = fmin(fmin(rows[0][j], rows[1][j]), rows[2][j]);
    double hi = fmax(fmax(rows[0][j], rows[1][j]), rows[2][j]);
    CHECK(out[j] >= lo && out[j] <= hi);
  }
  /* even number of rows: mean of the two middle values; f32 */
  float fr[4][2] = {{1, 8}, {4, 2}, {2, 6}, {100, -50}}, fo[2];
  CHECK(rm__robust_combine(fr, 4, 2, RM_F32, &o, fo, work) == RM_OK);
  CHECK(fo[0] == 3.0f && fo[1] == 4.0f);
  /* one row: itself */
  CHECK(rm__robust_combine(fr, 1, 2, RM_F32, &o, fo, work) == RM_OK);
  CHECK(fo[0] == 1.0f && fo[1] == 8.0f);
  /* more than 32 rows (qsort path): median of 0..40 shuffled = 20 */
  double big[41], bo;
  double w41[41];
  for (int r = 0; r < 41; r++) big[r] = (double)((r * 17) % 41);
  CHECK(rm__robust_combine(big, 41, 1, RM_F64, &o, &bo, w41) == RM_OK && bo == 20.0);
}

static void test_trimmed_mean(void)
{
  double rows[6][2] = {
      {-1e30, 5}, {1, NAN}, {2, 7}, {3, 6}, {4, -INFINITY}, {NAN, 8},
  };
  double out[2], work[6];
  rm__robust_opts_t o = {RM__ROBUST_TRIMMED_MEAN, 2, 0};
  CHECK(rm__robust_combine(rows, 6, 2, RM_F64, &o, out, work) == RM_OK);
  /* col 0 sorted {-1e30,1,2,3,4,inf}: mean(2,3); col 1 {-inf,5,6,7,8,inf}: mean(6,7) */
  CHECK(out[0] == 2.5 && out[1] == 6.5);
  /* trim 0 = plain mean */
  double clean[3][2] = {{1, 2}, {2, 4}, {6, 6}};
  o.trim = 0;
  CHECK(rm__robust_combine(clean, 3, 2, RM_F64, &o, out, work) == RM_OK);
  CHECK(out[0] == 3.0 && out[1] == 4.0);
  /* 2*trim must be < rows */
  o.trim = 3;
  CHECK(rm__robust_combine(rows, 6, 2, RM_F64, &o, out, work) == RM_ERR_INVALID_ARG);
  o.trim = -1;
  CHECK(rm__robust_combine(rows, 6, 2, RM_F64, &o, out, work) == RM_ERR_INVALID_ARG);
}

static void test_clipped_mean(void)
{
  /* norms 5, 0.5, NaN (dropped), 10 */
  float rows[4][2] = {{3, 4}, {0, 0.5f}, {NAN, 1}, {-6, 8}}, out[2];
  double work[4];
  rm__robust_opts_t o = {RM__ROBUST_CLIPPED_MEAN, 0, 1.0};
  CHECK(rm__robust_combine(rows, 4, 2, RM_F32, &o, out, work) == RM_OK);
  /* clipped: (0.6,0.8), (0,0.5), (-0.6,0.8); mean over 3 kept rows */
  CHECK(fabsf(out[0] - 0.0f) < 1e-6f);
  CHECK(fabsf(out[1] - 0.7f) < 1e-6f);
  o.clip_norm = 0.0;
  CHECK(rm__robust_combine(rows, 4, 2, RM_F32, &o, out, work) == RM_ERR_INVALID_ARG);
  float bad[1][2] = {{NAN, 0}};
  o.clip_norm = 1.0;
  CHECK(rm__robust_combine(bad, 1, 2, RM_F32, &o, out, work) == RM_ERR_INVALID_ARG);
}

static void test_half_types(void)
{
  unsigned short h[3][2], out[2];
  double work[3];
  float v[3][2] = {{1, -4}, {3, 2}, {2, 1000}};
  rm__robust_opts_t o = {RM__ROBUST_MEDIAN, 0, 0};
  for (int r = 0; r < 3; r++)
    for (int j = 0; j < 2; j++) h[r][j] = rm__f32_to_f16(v[r][j]);
  CHECK(rm__robust_combine(h, 3, 2, RM_F16, &o, out, work) == RM_OK);
  CHECK(rm__f16_to_f32(out[0]) == 2.0f && rm__f16_to_f32(out[1]) == 2.0f);
  for (int r = 0; r < 3; r++)
    for (int j = 0; j < 2; j++) h[r][j] = rm__f32_to_bf16(v[r][j]);
  CHECK(rm__robust_combine(h, 3, 2, RM_BF16, &o, out, work) == RM_OK);
  CHECK(rm__bf16_to_f32(out[0]) == 2.0f && rm__bf16_to_f32(out[1]) == 2.0f);
  /* integer dtypes are refused */
  int32_t ir[2] = {1, 2}, io[1];
  CHECK(rm__robust_combine(ir, 2, 1, RM_I32, &o, io, work) == RM_ERR_INVALID_ARG);
}

static void test_clip_and_scale(void)
{
  float v[2] = {3, 4};
  double before = 0;
  CHECK(rm__clip_norm(v, 2, RM_F32, 2.5, &before) == RM_OK);
  CHECK(before == 5.0 && v[0] == 1.5f && v[1] == 2.0f);
  CHECK(rm__clip_norm(v, 2, RM_F32, 10.0, &before) == RM_OK); /* under: untouched */
  CHECK(before == 2.5 && v[0] == 1.5f && v[1] == 2.0f);
  double d[3] = {1, NAN, 2};
  CHECK(rm__clip_norm(d, 3, RM_F64, 1.0, NULL) == RM_ERR_INVALID_ARG);
  CHECK(d[0] == 1.0 && d[2] == 2.0);
  CHECK(rm__clip_norm(v, 2, RM_F32, -1.0, NULL) == RM_ERR_INVALID_ARG);
  CHECK(rm__l2_norm(v, 0, RM_F32) == 0.0);
  CHECK(isnan(rm__l2_norm(v, 2, RM_I32)));
  /* a long f32 vector is clipped to the threshold within f32 rounding */
  static float big[100000];
  for (int i = 0; i < 100000; i++) big[i] = (float)((i % 7) - 3);
  CHECK(rm__clip_norm(big, 100000, RM_F32, 1.0, &before) == RM_OK && before > 1.0);
  CHECK(fabs(rm__l2_norm(big, 100000, RM_F32) - 1.0) < 1e-6);
  double s[2] = {1.5, -2};
  CHECK(rm__scale(s, 2, RM_F64, 0.5) == RM_OK && s[0] == 0.75 && s[1] == -1.0);
  CHECK(rm__scale(s, 2, RM_I64, 0.5) == RM_ERR_INVALID_ARG);
}

static void test_members(void)
{
  uint8_t m[5];
  int ranks[3] = {4, 0, 2};
  CHECK(rm__members_from_list(ranks, 3, 5, m) == RM_OK);
  CHECK(m[0] && !m[1] && m[2] && !m[3] && m[4]);
  CHECK(rm__members_count(m, 5) == 3);
  int dup[2] = {1, 1}, out_of_range[1] = {5};
  CHECK(rm__members_from_list(dup, 2, 5, m) == RM_ERR_INVALID_ARG);
  CHECK(rm__members_from_list(out_of_range, 1, 5, m) == RM_ERR_INVALID_ARG);
  CHECK(rm__members_from_list(NULL, 0, 5, m) == RM_OK && rm__members_count(m, 5) == 0);
}

/* The masked-aggregation contract in memory: non-members contribute zeros,
 * the sum over all ranks equals the sum over members, RM_AVG divides by the
 * member count (what rm__masked_allreduce computes across processes). */
static void test_masked_math(void)
{
  float grads[4][3] = {{2, 2, 3}, {10, 20, 30}, {100, 200, 300}, {3, 2, 3}};
  uint8_t member[4] = {1, 0, 1, 1};
  float z[4][3], acc[3] = {0, 0, 0};
  rm__reduce_fn_t add = rm__reduce_fn(RM_F32, RM_SUM);
  for (int r = 0; r < 4; r++) {
    if (member[r]) memcpy(z[r], grads[r], sizeof z[r]);
    else memset(z[r], 0, sizeof z[r]);
    add(acc, z[r], 3);
  }
  rm__scale_avg(acc, 3, RM_F32, rm__members_count(member, 4));
  CHECK(acc[0] == 35.0f && acc[1] == 68.0f && acc[2] == 102.0f);
}

int main(void)
{
  test_median();
  test_trimmed_mean();
  test_clipped_mean();
  test_half_types();
  test_clip_and_scale();
  test_members();
  test_masked_math();
  return rm_check_exit("test_robust");
}
