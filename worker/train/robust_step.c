/*
 * robust_step.c - the `train` workload's gradient reduce through
 * rm_aggregate (clipping, Byzantine-robust methods), and the
 * attacks that tests and demonstrations mount against it.
 *
 * Reduce of one step (every rank; policy "none" only, see straggler_step.c):
 *   1. my contribution v = (my shard's gradient sum) / (my shard's rows):
 *      a per-worker MEAN gradient, the vector a robust method compares
 *      across workers (a rank with no rows contributes zeros);
 *   2. an attacker (one of the last `attackers` ranks) replaces v (below);
 *   3. one f64 all-reduce SUM of [loss sum, correct count, rows] (plus, for
 *      alie / ipm only, the honest ranks' sum of v and of v^2: the attack's
 *      cost, see below);
 *   4. method mean and clip_norm 0: rm_allreduce(v, AVG); otherwise
 *      rm_aggregate(v -> agg) with the job's config; both hand every rank
 *      the same bits, so parameters stay bitwise identical (verify=K);
 *   5. grad = agg, grad[np] = loss / B, grad[np+1] = correct / B: the caller
 *      applies with rows = 1 (dividing by 1 is exact).
 * With mean and an attack, v's are averaged per worker rather than per
 * sample: the same number when the world divides the batch.
 *
 * Attacks (options attack=NAME, attackers=K: ranks world-K .. world-1;
 * attack_scale=X overrides the default constant):
 *   signflip   v = -X g (g: the attacker's honest mean gradient; X = 1, the
 *              plain sign flip; X = 4 the "reversed gradient" of the Krum
 *              paper's experiments, which stands out from honest noise)
 *   gaussian   v_i ~ N(0, sigma^2), sigma = X * rms(g), rms(g) = ||g|| /
 *              sqrt(np); X = 10: the noise vector's norm is about 10 ||g||.
 *              Deterministic (splitmix64 of seed, step, rank; Box-Muller).
 *   alie       "A little is enough" (Baruch et al. 2019): v_i = mu_i + z
 *              sigma_i with mu, sigma the per-coordinate mean and standard
 *              deviation of the HONEST ranks' v; z = X, by default their
 *              z_max: s = floor(n/2 + 1) - K, z = Phi^-1((n - s) / n)
 *              (n = world; n = 10, K = 2: s = 4, z = 0.2533).
 *   ipm        inner-product manipulation (Xie et al. 2019): v = -eps mu,
 *              eps = X, default 0.1 (their setting against median / Krum);
 *              a large eps (attack_scale=10: (n - K - K eps) / n < 0) turns
 *              the plain mean uphill.
 *   labelflip  honest computation on labels 9 - y (trainer.c flip_labels).
 *   nan        every coordinate NaN.
 * Colluding attackers are assumed to know the honest statistics (the
 * papers' threat model): alie and ipm get them from an extra all-reduce of
 * 2 np doubles in which the honest ranks put (v, v^2) and the attackers
 * zeros. That all-reduce is the ATTACK's cost, not ringmaster's: no job
 * without attack=alie|ipm pays it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session/session_secure.h"
#include "train_int.h"

static const char *const ATTACKS[RM__ATK_COUNT] = {
    "none", "signflip", "gaussian", "alie", "ipm", "labelflip", "nan"};

const char *rm__attack_name(int a)
{
  return a >= 0 && a < RM__ATK_COUNT ? ATTACKS[a] : "?";
}

int rm__attack_parse(const char *s)
{
  for (int a = 0; a < RM__ATK_COUNT; a++)
    if (!strcmp(s, ATTACKS[a])) return a;
  return -1;
}

int rm__robust_active(const rm__robust_t *r)
{
  return r && (r->cfg.method != RM_AGG_MEAN || r->cfg.clip_norm > 0 || r->secure ||
               (r->attack != RM__ATK_NONE && r->attackers > 0));
}

int rm__robust_attacker(const rm__robust_t *r)
{
  return r->attack != RM__ATK_NONE && r->attackers > 0 &&
         r->rank >= r->world - r->attackers;
}

void rm__robust_free(rm__robust_t *r)
{
  free(r->vec);
  free(r->agg);
  free(r->stats);
  free(r->excluded);
  free(r->excluded_list);
  r->vec = r->agg = NULL;
  r->stats = NULL;
  r->excluded = NULL;
  r->excluded_list = NULL;
  r->cap_np = 0;
  r->cap_world = 0;
}

static rm_status_t grow(rm__robust_t *r, size_t np, int world)
{
  if (np > r->cap_np) {
    float *v = realloc(r->vec, np * sizeof(float));
    if (v) r->vec = v;
    float *a = v ? calloc(np, sizeof(float)) : NULL;
    double *s = a ? realloc(r->stats, (2 * np + 3) * sizeof(double)) : NULL;
    if (!s) {
      free(a);
      return RM_ERR_NOMEM;
    }
    free(r->agg);
    r->agg = a;
    r->stats = s;
    r->cap_np = np;
  }
  if (world > r->cap_world) {
    uint8_t *e = realloc(r->excluded, (size_t)world);
    if (e) r->excluded = e;
    uint32_t *l = e ? realloc(r->excluded_list, (size_t)world * sizeof(uint32_t)) : NULL;
    if (!l) return RM_ERR_NOMEM;
    r->excluded_list = l;
    r->cap_world = world;
  }
  return RM_OK;
}

/* Phi^-1(p) by bisection on the normal CDF (only attackers call it). */
static double probit(double p)
{
  double lo = -10, hi = 10;
  for (int i = 0; i < 200; i++) {
    double mid = (lo + hi) / 2;
    if (0.5 * erfc(-mid / sqrt(2.0)) < p) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

static double alie_z(int n, int k)
{
  int s = n / 2 + 1 - k;
  return probit((double)(n - s) / n);
}

/* Replace v by the attack (honest statistics in stats when needed). */
static void attack(const rm__robust_t *r, const rm__trainer_t *t, float *v,
                   size_t np, const double *hsum, const double *hsq, int nh)
{
  double x = r->attack_scale;
  switch (r->attack) {
  case RM__ATK_SIGNFLIP: {
    float k = (float)(x >= 0 ? x : 1.0);
    for (size_t i = 0; i < np; i++) v[i] = -k * v[i];
    break;
  }
  case RM__ATK_GAUSSIAN: {
    double n2 = 0;
    for (size_t i = 0; i < np; i++) n2 += (double)v[i] * v[i];
    double rms = sqrt(n2 / (double)(np ? np : 1));
    double sigma = (x >= 0 ? x : 10.0) * (rms > 1e-3 ? rms : 1e-3);
    uint64_t s = t->cfg.seed ^ 0x6761757373000000ULL /* "gauss" */ ^
                 (t->step * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)r->rank << 48);
    for (size_t i = 0; i < np; i += 2) {
      double u1 = (rm__rng_next(&s) >> 11) * (1.0 / 9007199254740992.0);
      double u2 = (rm__rng_next(&s) >> 11) * (1.0 / 9007199254740992.0);
      double rad = sqrt(-2.0 * log(u1 > 1e-300 ? u1 : 1e-300));
      v[i] = (float)(sigma * rad * cos(2 * M_PI * u2));
      if (i + 1 < np) v[i + 1] = (float)(sigma * rad * sin(2 * M_PI * u2));
    }
    break;
  }
  case RM__ATK_ALIE: {
    double z = x >= 0 ? x : alie_z(r->world, r->attackers);
    for (size_t i = 0; i < np; i++) {
      double mu = hsum[i] / nh, var = hsq[i] / nh - mu * mu;
      v[i] = (float)(mu + z * sqrt(var > 0 ? var : 0));
    }
    break;
  }
  case RM__ATK_IPM: {
    double eps = x >= 0 ? x : 0.1;
    for (size_t i = 0; i < np; i++) v[i] = (float)(-eps * hsum[i] / nh);
    break;
  }
  case RM__ATK_NAN:
    for (size_t i = 0; i < np; i++) v[i] = NAN;
    break;
  default: /* labelflip: the gradient itself was computed on flipped labels */
    break;
  }
}

rm_status_t rm__robust_reduce(rm__trainer_t *t, rm_comm_t *comm,
                              rm__robust_t *r, uint32_t rows,
                              rm_step_report_t *rep)
{
  size_t np = t->model.nparams;
  int world = rm_comm_world(comm);
  rm_status_t st = grow(r, np, world);
  if (st != RM_OK) return st;
  float *g = t->grad, *v = r->vec;
  int bad = rm__robust_attacker(r);
  int need_honest = r->attackers > 0 &&
                    (r->attack == RM__ATK_ALIE || r->attack == RM__ATK_IPM);
  for (size_t i = 0; i < np; i++) v[i] = rows ? g[i] / (float)rows : 0.0f;

  /* [loss, correct, rows] (+ honest sum of v, sum of v^2) */
  double *s = r->stats;
  size_t ns = 3 + (need_honest ? 2 * np : 0);
  s[0] = g[np];
  s[1] = g[np + 1];
  s[2] = rows;
  if (need_honest)
    for (size_t i = 0; i < np; i++) {
      double x = bad ? 0.0 : v[i];
      s[3 + i] = x;
      s[3 + np + i] = x * x;
    }
  st = rm_allreduce(comm, s, s, ns, RM_F64, RM_SUM);
  if (st != RM_OK) return st; /* I2: nothing applied */
  if (bad) attack(r, t, v, np, s + 3, s + 3 + np, world - r->attackers);

  if (r->secure) {
    /* the mean of the members' clipped mean gradients, of which nobody
     * sees one (session_secure.c); the clip is secure_aggregation.clip */
    rm_secure_info_t info = {.struct_size = sizeof info};
    st = rm__session_secure_sum(r->secure, v, r->agg, np, 1, NULL, NULL, &info);
    memset(r->excluded, 0, (size_t)world);
  } else if (r->cfg.method == RM_AGG_MEAN && !(r->cfg.clip_norm > 0)) {
    st = rm_allreduce(comm, v, r->agg, np, RM_F32, RM_AVG);
    memset(r->excluded, 0, (size_t)world);
  } else {
    rm_agg_info_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    memset(r->excluded, 0, (size_t)world);
    info.excluded = r->excluded;
    st = rm_aggregate(comm, v, r->agg, np, RM_F32, &r->cfg, &info);
  }
  if (st != RM_OK) return st;
  size_t n_ex = 0;
  for (int q = 0; q < world; q++)
    if (r->excluded[q]) r->excluded_list[n_ex++] = (uint32_t)q;
  rep->excluded_ranks = n_ex ? r->excluded_list : NULL;
  rep->n_excluded = n_ex;
  double B = s[2] > 0 ? s[2] : 1;
  memcpy(g, r->agg, np * sizeof(float));
  g[np] = (float)(s[0] / B);
  g[np + 1] = (float)(s[1] / B);
  return RM_OK;
}
