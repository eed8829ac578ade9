/*
 * rm_bench_suspects - false positives and misses of the suspect rule
 * (worker/aggregate/suspects.c) over a seeded matrix of methods x attacks x
 * seeds, in one process: the aggregation kernels (agg_int.h) on a block
 * that holds every rank's whole vector (what n ranks compute slice by
 * slice and all-reduce), then the coordinator's window (M of the last W
 * steps, coordinator/core/suspect.c; defaults 10 of 20).
 *
 *   rm_bench_suspects [-s SEEDS] [-t STEPS] [-d DIM] [-r new|old|both] [-m METHOD]
 *
 * Model per seed (splitmix64 + Box-Muller, so a seed is the same run on
 * every machine): n = 10 ranks (11 for bulyan), the last 2 attack, f = 2.
 * A true gradient g ~ N(0, snr / D) per coordinate, snr alternating over
 * seeds in {0.05, 0.3, 2} (||g||^2 / honest noise^2: noisy late training
 * to clean early training). Honest rank i at step t sends g + h_i e^{0.3
 * z_it} N(0, 1 / D): h_i = e^{0.2 z_i} a worker's persistent noise level,
 * and rank 5 is the NOISY HONEST worker, h_5 = 1.8 (a small or unusual
 * shard), the case the old rule named; e^{0.3 z} is one batch's luck.
 * Attacks (as worker/train/robust_step.c): signflip -a (a: the attacker's
 * own honest vector), signflip4 -4a, gaussian N(0, 100 ||a||^2 / D),
 * alie mu + 0.2533 sigma (honest statistics), ipm -0.1 mu, nan.
 *
 * A worker is NAMED when the window flags it at any step. Reported per
 * (method, attack): fp = named honest workers / honest workers, noisy =
 * runs in which rank 5 was named / runs, miss = attackers never named /
 * attackers (only with an attack). All over SEEDS runs of STEPS steps.
 * The old rule (2x median etc., what suspects.c replaced) runs on the same
 * scores for the before/after table.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregate/agg_int.h"

enum { NMAX = 16, ATK = 2, WIN_M = 10, WIN_W = 20 };

static uint64_t g_rng;
static uint64_t next_u64(void)
{
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
static double gauss(void)
{
  double u = ((next_u64() >> 11) + 0.5) / 9007199254740992.0;
  double v = ((next_u64() >> 11) + 0.5) / 9007199254740992.0;
  return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static const char *const METHODS[] = {"krum", "multi_krum", "bulyan", "median",
                                      "trimmed_mean", "centered_clip"};
static const rm_agg_method_t MCODE[] = {RM_AGG_KRUM, RM_AGG_MULTI_KRUM, RM_AGG_BULYAN,
                                        RM_AGG_MEDIAN, RM_AGG_TRIMMED_MEAN,
                                        RM_AGG_CENTERED_CLIP};
static const char *const ATTACKS[] = {"none", "signflip", "signflip4", "gaussian",
                                      "alie", "ipm", "nan"};
enum { NMETH = 6, NATK = 7 };

/* the rule suspects.c replaced, on the same statistic */
static int cmp_d(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  if (isnan(x) || isnan(y)) return isnan(x) - isnan(y);
  return (x > y) - (x < y);
}
static double median_of(const double *v, int n)
{
  double w[NMAX];
  memcpy(w, v, (size_t)n * sizeof *w);
  qsort(w, (size_t)n, sizeof *w, cmp_d);
  return n % 2 ? w[n / 2] : (w[n / 2 - 1] + w[n / 2]) / 2;
}
static void old_rule(int kind, const double *s, int n, int f, uint8_t *ex)
{
  double med = median_of(s, n);
  for (int i = 0; i < n; i++) {
    if (kind == 0) { /* krum family */
      int worse = 0;
      for (int j = 0; j < n; j++)
        worse += j != i && (isnan(s[j]) || s[j] > s[i] || (s[j] == s[i] && j > i));
      ex[i] = !isfinite(s[i]) || (worse < (f > 0 ? f : 1) && s[i] > 2 * med);
    } else if (kind == 1) { /* trimmed fraction */
      ex[i] = s[i] > (2.0 * f / n + 1.0) / 2;
    } else { /* cc weight */
      ex[i] = s[i] < 0.5 * med;
    }
  }
}

/* one step's statistic: kind 0 Krum scores, 1 trimmed fractions, 2 weights */
static int statistic(rm_agg_method_t m, const float *rows, int n, size_t dim, int f,
                     double *s)
{
  rm__agg_block_t b = {rows, dim, dim, n, RM_F32, NULL, 0};
  if (m == RM_AGG_MEDIAN || m == RM_AGG_TRIMMED_MEAN) {
    uint32_t tr[NMAX] = {0};
    float *out = malloc(dim * sizeof *out);
    if (!out || rm__agg_coord(&b, m, f, out, tr) != RM_OK) exit(1);
    free(out);
    for (int i = 0; i < n; i++) s[i] = tr[i] / (double)dim;
    return 1;
  }
  if (m == RM_AGG_CENTERED_CLIP) { /* rm_aggregate's loop, one contributor */
    double *v = malloc(dim * sizeof *v), part[NMAX], w[NMAX];
    if (!v || rm__agg_cc_start(&b, v, part) != RM_OK) exit(1);
    for (int t = 0; t < 3; t++) {
      for (int i = 0; i < n; i++) {
        double nrm = sqrt(part[i]);
        w[i] = !isfinite(nrm) ? 0.0 : (nrm > 1.0 ? 1.0 / nrm : 1.0);
      }
      if (rm__agg_cc_step(&b, w, v, t < 2 ? part : NULL) != RM_OK) exit(1);
    }
    free(v);
    memcpy(s, w, (size_t)n * sizeof *s);
    return 2;
  }
  double d[NMAX * NMAX] = {0}, work[NMAX];
  uint8_t alive[NMAX];
  memset(alive, 1, sizeof alive);
  if (rm__agg_pair_dist(&b, d) != RM_OK) exit(1);
  rm__agg_krum_scores(d, n, alive, n - f - 2, s, work);
  return 0;
}

typedef struct tally {
  long honest, honest_named, runs, noisy_named, atk, atk_missed;
} tally_t;

static void run(int mi, int ai, int seed, int steps, size_t dim, tally_t *old, tally_t *new)
{
  int n = MCODE[mi] == RM_AGG_BULYAN ? 11 : 10, f = ATK, nh = n - ATK, noisy = 5;
  double snrs[3] = {0.05, 0.3, 2.0}, snr = snrs[seed % 3], h[NMAX];
  float *rows = malloc((size_t)n * dim * sizeof *rows);
  double *g = malloc(dim * sizeof *g), *mu = calloc(dim, sizeof *mu),
         *sq = calloc(dim, sizeof *sq);
  uint64_t mask[2][NMAX] = {{0}};
  int named[2][NMAX] = {{0}};
  if (!rows || !g || !mu || !sq) exit(1);
  g_rng = 0x5eed0000ULL + (uint64_t)seed * 7919 + (uint64_t)mi * 131 + (uint64_t)ai;
  for (size_t k = 0; k < dim; k++) g[k] = gauss() * sqrt(snr / (double)dim);
  for (int i = 0; i < n; i++) h[i] = i == noisy ? 1.8 : exp(0.2 * gauss());
  for (int t = 0; t < steps; t++) {
    memset(mu, 0, dim * sizeof *mu);
    memset(sq, 0, dim * sizeof *sq);
    for (int i = 0; i < n; i++) {
      double sc = h[i] * exp(0.3 * gauss()) / sqrt((double)dim);
      float *x = rows + (size_t)i * dim;
      for (size_t k = 0; k < dim; k++) x[k] = (float)(g[k] + sc * gauss());
      if (i < nh)
        for (size_t k = 0; k < dim; k++) {
          mu[k] += x[k] / nh;
          sq[k] += (double)x[k] * x[k] / nh;
        }
    }
    for (int i = nh; i < n && ai > 0; i++) {
      float *x = rows + (size_t)i * dim;
      double nn = 0;
      for (size_t k = 0; k < dim; k++) nn += (double)x[k] * x[k];
      for (size_t k = 0; k < dim; k++) {
        double sd = sqrt(fmax(sq[k] - mu[k] * mu[k], 0));
        switch (ai) {
        case 1: x[k] = -x[k]; break;
        case 2: x[k] = -4 * x[k]; break;
        case 3: x[k] = (float)(gauss() * 10 * sqrt(nn / (double)dim)); break;
        case 4: x[k] = (float)(mu[k] + 0.2533 * sd); break;
        case 5: x[k] = (float)(-0.1 * mu[k]); break;
        default: x[k] = NAN;
        }
      }
    }
    double s[NMAX];
    uint8_t ex[2][NMAX];
    int kind = statistic(MCODE[mi], rows, n, dim, f, s);
    old_rule(kind, s, n, f, ex[0]);
    if (kind == 0) rm__agg_suspects_dist(s, n, f, ex[1]);
    else if (kind == 1) rm__agg_suspects_trim(s, n, f, ex[1]);
    else rm__agg_suspects_cc(s, n, f, ex[1]);
    for (int r = 0; r < 2; r++)
      for (int i = 0; i < n; i++) {
        mask[r][i] = ((mask[r][i] << 1) | ex[r][i]) & ((1ULL << WIN_W) - 1);
        if (__builtin_popcountll(mask[r][i]) >= WIN_M) named[r][i] = 1;
      }
  }
  for (int r = 0; r < 2; r++) {
    tally_t *ty = r ? new : old;
    ty->runs++;
    for (int i = 0; i < n; i++) {
      int attacker = ai > 0 && i >= nh;
      if (attacker) {
        ty->atk++;
        ty->atk_missed += !named[r][i];
      } else {
        ty->honest++;
        ty->honest_named += named[r][i];
      }
    }
    ty->noisy_named += named[r][noisy];
  }
  free(rows);
  free(g);
  free(mu);
  free(sq);
}

int main(int argc, char **argv)
{
  int seeds = 30, steps = 40, which = 3; /* 1 old, 2 new, 3 both */
  const char *only = NULL;
  size_t dim = 2048;
  for (int a = 1; a + 1 < argc; a += 2) {
    if (!strcmp(argv[a], "-s")) seeds = atoi(argv[a + 1]);
    else if (!strcmp(argv[a], "-t")) steps = atoi(argv[a + 1]);
    else if (!strcmp(argv[a], "-m")) only = argv[a + 1];
    else if (!strcmp(argv[a], "-d")) dim = (size_t)atol(argv[a + 1]);
    else if (!strcmp(argv[a], "-r"))
      which = !strcmp(argv[a + 1], "old") ? 1 : !strcmp(argv[a + 1], "new") ? 2 : 3;
    else {
      fprintf(stderr, "usage: %s [-s SEEDS] [-t STEPS] [-d DIM] [-r new|old|both] [-m METHOD]\n", argv[0]);
      return 2;
    }
  }
  if (seeds < 1 || steps < 1 || dim < 1) {
    fprintf(stderr, "rm_bench_suspects: SEEDS, STEPS and DIM must be positive\n");
    return 2;
  }
  printf("# %d seeds x %d steps, D = %zu, n = 10 (bulyan 11), f = 2 attackers, window %d of %d\n",
         seeds, steps, dim, WIN_M, WIN_W);
  printf("# fp: honest workers named / honest workers; noisy: runs naming the noisy honest "
         "rank 5; miss: attackers never named / attackers\n");
  printf("%-14s %-10s", "method", "attack");
  if (which & 1) printf(" | %7s %7s %7s", "old fp", "noisy", "miss");
  if (which & 2) printf(" | %7s %7s %7s", "new fp", "noisy", "miss");
  printf("\n");
  for (int mi = 0; mi < NMETH; mi++)
    for (int ai = 0; ai < NATK && (!only || !strcmp(only, METHODS[mi])); ai++) {
      tally_t o = {0}, w = {0};
      for (int sd = 0; sd < seeds; sd++) run(mi, ai, sd, steps, dim, &o, &w);
      printf("%-14s %-10s", METHODS[mi], ATTACKS[ai]);
      for (int r = 0; r < 2; r++) {
        tally_t *ty = r ? &w : &o;
        if (!(which & (1 << r))) continue;
        printf(" | %7.3f %7.3f ", (double)ty->honest_named / ty->honest,
               (double)ty->noisy_named / ty->runs);
        if (ty->atk) printf("%7.3f", (double)ty->atk_missed / ty->atk);
        else printf("%7s", "-");
      }
      printf("\n");
    }
  return 0;
}
