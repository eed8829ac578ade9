/*
 * test_suspects.c - the suspect rule (worker/aggregate/suspects.c) on seeded
 * steps, white-box through the kernels: n = 10 rows of D = 1024 f32 per
 * step, an honest gradient g plus per-row noise, rank 5 an honest worker
 * whose noise is 1.8x the others' (a small or unusual shard), then the
 * coordinator's window (named = marked in 10 of the last 20 steps,
 * coordinator/core/suspect.c's defaults). Cases:
 *   honest    no attack, no attack that hides in the honest spread (alie):
 *             nobody is named, in particular not rank 5, for Krum, Multi-Krum
 *             and centered clipping, in every seed
 *   attacker  ranks 8 and 9 sign-flip their gradient scaled by 4, or send
 *             Gaussian noise 10x the gradient's rms: exactly they are named,
 *             for Krum, Multi-Krum and trimmed mean (centered clipping with
 *             tau = 1 misses the scaled flip of a noisy gradient: the
 *             matrix of bench/aggregate/rm_bench_suspects)
 * The rule it replaced (a worst-f Krum score above twice the median) names
 * rank 5 in the honest case; a rule that names nobody fails the attacker
 * case.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregate/agg_int.h"

#include "rm_testcheck.h"
#include "rm_testrng.h"

enum { N = 10, D = 1024, STEPS = 30, WIN_M = 10, WIN_W = 20, NOISY = 5 };

static uint64_t g_rng;
static double gauss(void)
{
  double u[2];
  for (int k = 0; k < 2; k++) {
    u[k] = ((rm_test_splitmix(&g_rng) >> 11) + 0.5) / 9007199254740992.0;
  }
  return sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

enum { NONE, ALIE, FLIP4, GAUSS };

/* named[i] = 1 when the window named rank i in some step */
static void run(rm_agg_method_t m, int attack, uint64_t seed, double snr, int *named)
{
  static float rows[N * D];
  static double g[D], mu[D], sq[D];
  int f = 2, nh = N - 2;
  uint64_t mask[N] = {0};
  g_rng = seed;
  memset(named, 0, N * sizeof *named);
  for (int k = 0; k < D; k++) g[k] = gauss() * sqrt(snr / D);
  for (int t = 0; t < STEPS; t++) {
    memset(mu, 0, sizeof mu);
    memset(sq, 0, sizeof sq);
    for (int i = 0; i < N; i++) {
      double sc = (i == NOISY ? 1.8 : 1.0) * exp(0.3 * gauss()) / sqrt((double)D);
      for (int k = 0; k < D; k++) {
        float x = (float)(g[k] + sc * gauss());
        rows[i * D + k] = x;
        if (i < nh) {
          mu[k] += x / (double)nh;
          sq[k] += (double)x * x / nh;
        }
      }
    }
    for (int i = nh; i < N && attack != NONE; i++) {
      double nn = 0;
      for (int k = 0; k < D; k++) nn += (double)rows[i * D + k] * rows[i * D + k];
      for (int k = 0; k < D; k++) {
        float *x = &rows[i * D + k];
        if (attack == FLIP4) *x = -4 * *x;
        else if (attack == GAUSS) *x = (float)(gauss() * 10 * sqrt(nn / D));
        else *x = (float)(mu[k] + 0.2533 * sqrt(fmax(sq[k] - mu[k] * mu[k], 0)));
      }
    }
    rm__agg_block_t b = {rows, D, D, N, RM_F32, NULL, 0};
    double s[N];
    uint8_t ex[N];
    if (m == RM_AGG_TRIMMED_MEAN) {
      static float out[D];
      uint32_t tr[N] = {0};
      CHECK(rm__agg_coord(&b, m, f, out, tr) == RM_OK);
      for (int i = 0; i < N; i++) s[i] = tr[i] / (double)D;
      rm__agg_suspects_trim(s, N, f, ex);
    } else if (m == RM_AGG_CENTERED_CLIP) {
      static double v[D];
      double part[N];
      CHECK(rm__agg_cc_start(&b, v, part) == RM_OK);
      for (int r = 0; r < 3; r++) {
        for (int i = 0; i < N; i++) s[i] = isfinite(sqrt(part[i])) ? fmin(1, 1 / sqrt(part[i])) : 0;
        CHECK(rm__agg_cc_step(&b, s, v, r < 2 ? part : NULL) == RM_OK);
      }
      rm__agg_suspects_cc(s, N, f, ex);
    } else {
      double d[N * N] = {0}, work[N];
      uint8_t alive[N];
      memset(alive, 1, sizeof alive);
      CHECK(rm__agg_pair_dist(&b, d) == RM_OK);
      rm__agg_krum_scores(d, N, alive, N - f - 2, s, work);
      rm__agg_suspects_dist(s, N, f, ex);
    }
    for (int i = 0; i < N; i++) {
      mask[i] = ((mask[i] << 1) | ex[i]) & ((1ULL << WIN_W) - 1);
      named[i] |= __builtin_popcountll(mask[i]) >= WIN_M;
    }
  }
}

static const char *list(const int *named, char *buf)
{
  char *p = buf;
  *p = 0;
  for (int i = 0; i < N; i++)
    if (named[i]) p += sprintf(p, "%s%d", p == buf ? "" : ",", i);
  return buf;
}

int main(void)
{
  static const double snr[] = {0.05, 0.3, 2.0};
  int named[N];
  char buf[64];
  for (uint64_t seed = 1; seed <= 6; seed++) {
    rm_agg_method_t hm[] = {RM_AGG_KRUM, RM_AGG_MULTI_KRUM, RM_AGG_CENTERED_CLIP};
    for (int a = NONE; a <= ALIE; a++)
      for (int k = 0; k < 3; k++) {
        run(hm[k], a, seed * 1000 + (uint64_t)a, snr[seed % 3], named);
        int honest = 0;
        for (int i = 0; i < N - 2; i++) honest += named[i];
        CHECKF(honest == 0, "seed %llu method %d attack %s: honest ranks named: [%s]",
              (unsigned long long)seed, (int)hm[k], a == NONE ? "none" : "alie",
              list(named, buf));
      }
    rm_agg_method_t am[] = {RM_AGG_KRUM, RM_AGG_MULTI_KRUM, RM_AGG_TRIMMED_MEAN};
    for (int a = FLIP4; a <= GAUSS; a++)
      for (int k = 0; k < 3; k++) {
        run(am[k], a, seed * 1000 + (uint64_t)a, snr[seed % 3], named);
        int ok = named[N - 2] && named[N - 1];
        for (int i = 0; i < N - 2; i++) ok &= !named[i];
        CHECKF(ok, "seed %llu method %d attack %s: named [%s], want exactly 8,9",
              (unsigned long long)seed, (int)am[k], a == FLIP4 ? "signflip4" : "gaussian",
              list(named, buf));
      }
  }
  return rm_check_exit("test_suspects");
}
