/*
 * wl_secure.c - the `allreduce` workload under secure aggregation (issue
 * 13): every step one secure sum (ringmaster/secure.h) of f32 vectors that
 * every rank can predict, checked against that prediction.
 *
 * Inputs: rank r of a world of W at step s sends x_r[i] = a_r * v(i, s)
 * with the workload's pattern v (wl_allreduce.c), a_r = (r + 1) * clip /
 * (2 W ||v||) (norm well inside the clip), except the last rank of a world
 * of 2 or more, a = 4 clip / ||v||: four times the clip, so every step
 * checks clipping too (it contributes clip v / ||v||).
 *
 * Checks, every step:
 *   float   |recv[i] - sum_r min(a_r, clip / ||v||) v(i, s)| <= W / scale +
 *           1e-5 |that sum| (quantization: stochastic rounding errs by less
 *           than 1 / scale per input; float rounding of inputs and clip);
 *   members the call summed exactly the W members of the generation.
 * With verify=exact also
 *   exact   the unmasked integer sum equals a plain integer all-reduce of
 *           every member's quantized input, bit for bit. That all-reduce
 *           sends the quantized inputs in the clear: a test's check of the
 *           protocol, never for a private run (verify=1 reveals nothing).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_log.h"
#include "session/session_secure.h"
#include "wl_secure.h"

void rm__ar_secure_free(rm__ar_secure_t *z)
{
  free(z->x);
  free(z->my_q);
  free(z->sum_q);
  free(z->plain);
  memset(z, 0, sizeof *z);
}

static rm_status_t grow(rm__ar_secure_t *z, size_t count, size_t lane)
{
  if (count <= z->cap && lane <= z->lane) return RM_OK;
  free(z->x);
  free(z->my_q);
  free(z->sum_q);
  free(z->plain);
  z->x = malloc(count * sizeof(float) + 1);
  z->my_q = malloc(count * lane + 1);
  z->sum_q = malloc(count * lane + 1);
  z->plain = malloc(count * lane + 1);
  z->cap = z->lane = 0;
  if (!z->x || !z->my_q || !z->sum_q || !z->plain) return RM_ERR_NOMEM;
  z->cap = count;
  z->lane = lane;
  return RM_OK;
}

static double pattern(size_t i, uint64_t step) { return 1.0 + (double)((i + step) % 7); }

rm_status_t rm__ar_secure_step(rm__ar_secure_t *z, rm_workload_env_t *env,
                               size_t count, uint64_t step, int verify,
                               float *out)
{
  rm_session_t *s = env->session;
  int W = env->world, me = env->rank;
  double clip = rm_session_spec_double(s, "secagg_clip");
  int bits = (int)rm_session_spec_uint(s, "secagg_bits");
  size_t lane = bits > 32 ? 8 : 4;
  rm_status_t st = grow(z, count, lane);
  if (st != RM_OK) return st;
  double vn = 0;
  for (size_t i = 0; i < count; i++) vn += pattern(i, step) * pattern(i, step);
  vn = sqrt(vn);
  /* the sum of the clipped coefficients */
  double K = 0, mine = 0;
  for (int r = 0; r < W; r++) {
    double a = (W >= 2 && r == W - 1) ? 4 * clip / vn : (r + 1) * clip / (2.0 * W * vn);
    if (r == me) mine = a;
    K += fmin(a, clip / vn);
  }
  for (size_t i = 0; i < count; i++) z->x[i] = (float)(mine * pattern(i, step));
  rm_secure_info_t info = {.struct_size = sizeof info};
  st = rm__session_secure_sum(s, z->x, out, count, 0, verify > 1 ? z->my_q : NULL,
                              verify > 1 ? z->sum_q : NULL, &info);
  if (st == RM_ERR_PROTOCOL || st == RM_ERR_INVALID_ARG) {
    /* a key that does not verify, or a membership below the threshold: no
     * re-forming clears it (workload.h) */
    snprintf(env->error, sizeof env->error, "%s", rm_session_last_error(s));
    return st == RM_ERR_PROTOCOL ? RM_ERR_INTERNAL : st;
  }
  if (st != RM_OK) return st;
  if (info.members != W) {
    snprintf(env->error, sizeof env->error, "secure sum of step %llu summed "
             "%d members, the generation has %d", (unsigned long long)step,
             info.members, W);
    return RM_ERR_INTERNAL;
  }
  z->steps++;
  z->scale = info.scale;
  z->members_min = z->members_min && z->members_min < W ? z->members_min : W;
  z->ms_keys += info.ms_keys;
  z->ms_mask += info.ms_mask;
  z->ms_reduce += info.ms_reduce;
  z->ms_open += info.ms_open;
  z->ms_unmask += info.ms_unmask;
  if (verify <= 0) return RM_OK;
  double bound_q = (double)W / info.scale;
  for (size_t i = 0; i < count; i++) {
    double ref = K * pattern(i, step), err = fabs((double)out[i] - ref);
    if (err > z->max_err) z->max_err = err;
    if (err > bound_q + 1e-5 * fabs(ref)) {
      snprintf(env->error, sizeof env->error, "secure sum of step %llu: "
               "element %zu is %.9g, the clipped inputs sum to %.9g (off by "
               "%.3g, the bound is %.3g)", (unsigned long long)step, i,
               (double)out[i], ref, err, bound_q + 1e-5 * fabs(ref));
      return RM_ERR_INTERNAL;
    }
  }
  if (verify < 2) return RM_OK;
  st = rm_allreduce(env->comm, z->my_q, z->plain, count,
                    lane == 8 ? RM_I64 : RM_I32, RM_SUM);
  if (st != RM_OK) return st;
  if (memcmp(z->plain, z->sum_q, count * lane)) {
    size_t i = 0;
    while (i < count && !memcmp((char *)z->plain + i * lane,
                                (char *)z->sum_q + i * lane, lane))
      i++;
    snprintf(env->error, sizeof env->error, "secure sum of step %llu: the "
             "unmasked integer sum differs from the plain sum of the "
             "quantized inputs at element %zu", (unsigned long long)step, i);
    return RM_ERR_INTERNAL;
  }
  z->exact_steps++;
  return RM_OK;
}

int rm__ar_secure_summary(const rm__ar_secure_t *z, char *buf, size_t len)
{
  return snprintf(buf, len, "\"secure\":{\"steps\":%llu,\"exact_steps\":%llu,"
                  "\"members_min\":%d,\"scale\":%.17g,\"max_err\":%.6g,"
                  "\"ms_keys\":%.3f,\"ms_mask\":%.3f,\"ms_reduce\":%.3f,"
                  "\"ms_open\":%.3f,\"ms_unmask\":%.3f}",
                  (unsigned long long)z->steps, (unsigned long long)z->exact_steps,
                  z->members_min, z->scale, z->max_err, z->ms_keys, z->ms_mask,
                  z->ms_reduce, z->ms_open, z->ms_unmask);
}
