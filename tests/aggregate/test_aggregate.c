/*
 * test_aggregate.c - rm_aggregate across real processes (one per rank, TCP
 * on 127.0.0.1, tests/lib/rm_testlib.h).
 *
 *   test_aggregate WORLD
 *
 * Every rank rebuilds every rank's input (deterministic hash values), so
 * each rank computes the reference itself, in double, from the same
 * dtype-rounded inputs, and checks its result against it; then the ranks
 * compare a hash of (result bytes, excluded, scores) and must agree bitwise.
 *
 * DEFINITIONS PINNED HERE (the reference; rows x_1..x_n after clipping):
 *   clip       norm = ||x||_2 in double; norm > c: x <- round_dt(x * c/norm);
 *              a non-finite norm: unchanged for robust methods, zeros for mean
 *   median     per coordinate, NaN read as +inf; n odd the middle value, n
 *              even 0.5*lo + 0.5*hi
 *   trimmed    per coordinate sorted (NaN = +inf), drop f per side, mean of
 *              the n - 2f left; "trimmed" rows of a coordinate: the f lowest
 *              and f highest in (value, rank) order
 *   Krum       (Blanchard et al. 2017) score(i) = sum of the n - f - 2
 *              smallest squared distances ||x_i - x_j||^2, j != i; a row
 *              with a non-finite value is at distance +inf from all others
 *              and ranks after all finite rows; then lowest score, then
 *              lowest rank. krum: the best row; multi_krum: the mean of the
 *              m best (m = n - f when 0), finite rows only while one is left
 *   Bulyan     (El Mhamdi et al. 2018) theta = n - 2f rows chosen by Krum
 *              repeatedly over the rows left (k = max(1, left - f - 2));
 *              per coordinate the mean of the beta = theta - 2f values
 *              nearest the chosen rows' median (ties to the lower value)
 *   centered_clip (Karimireddy et al. 2021) v = coordinate-wise median;
 *              `iterations` times: w_i = min(1, tau / ||x_i - v||) (0 when
 *              not finite), v += (1/n) sum_i w_i (x_i - v)
 *
 * SUSPECTS (info->excluded, what the coordinator counts for byzantine_suspect;
 * worker/aggregate/suspects.c): s = the Krum score (Krum family), 1 / w
 * (centered_clip), the fraction trimmed (median/trimmed, f > 0); a row is
 * marked when s is not finite, or it is one of the max(f,1) worst s (ties:
 * the higher rank is worse) and t = log(s / med s) exceeds max(log 4,
 * 4 * 1.4826 * med |t|) (trimmed: t = s - med s exceeds 2.5 * 1.4826 *
 * med |t| and s > (2f/n + 1) / 2), medians over the finite s, at least 3
 *
 * Tolerance (relative + absolute, values of order 1): f64 1e-12, f32 2e-6
 * (an f32 rounding of a double result computed in another order), f16 2e-3
 * (one f16 ulp is 2^-10), bf16 1.6e-2 (one ulp 2^-7).
 *
 * Attackers: with f > 0 the last f ranks send one of: NaN and +-1e30 mixed,
 * all +inf, all 1e30, all NaN, a constant 50 (finite, far). The output of
 * every robust method must then stay finite and match the reference.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce/half.h"
#include "agg_test.h"
#include "rm_testlib.h"

#define MAXW 9
#define MAXC 4099

static int g_rank, g_fails, g_ran, g_refused, g_attacked;

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s: ", g_rank, __FILE__, \
              __LINE__, #cond);                                               \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, "\n");                                                  \
      if (++g_fails > 10) return 1;                                           \
    }                                                                         \
  } while (0)

static uint64_t mix(uint64_t x)
{
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

static double unif(uint64_t a, uint64_t b, uint64_t c)
{
  return (double)(mix(a * 1000003u ^ mix(b * 7919u ^ mix(c + 1))) >> 11) * 0x1.0p-52 - 1.0;
}

/* ---- dtype rounding ---- */
static size_t esz(rm_dtype_t dt) { return rm_dtype_size(dt); }

static double get(const void *p, size_t i, rm_dtype_t dt)
{
  switch (dt) {
  case RM_F32: return ((const float *)p)[i];
  case RM_F64: return ((const double *)p)[i];
  case RM_F16: return rm__h2f(((const uint16_t *)p)[i]);
  default: return rm__b2f(((const uint16_t *)p)[i]);
  }
}

static double round_dt(double v, rm_dtype_t dt)
{
  unsigned char b[8];
  agg_test_store(b, 0, dt, v);
  return get(b, 0, dt);
}

static double tol_rel(rm_dtype_t dt)
{
  return dt == RM_F64 ? 1e-12 : dt == RM_F32 ? 2e-6 : dt == RM_F16 ? 2e-3 : 1.6e-2;
}

/* ---- inputs ---- */
static double input(int seed, int r, int world, int attackers, size_t j)
{
  if (r >= world - attackers) {
    switch ((seed + r) % 5) {
    case 0: return j % 3 == 0 ? NAN : (j % 3 == 1 ? 1e30 : -1e30);
    case 1: return INFINITY;
    case 2: return 1e30;
    case 3: return NAN;
    default: return 50.0;
    }
  }
  double mu = 0.5 * sin(0.1 * (double)j + seed);
  return mu + 0.1 * unif((uint64_t)seed, (uint64_t)r, j);
}

/* ---- the reference (definitions above), rows[i][j] in double ---- */
static double key(double v) { return isnan(v) ? INFINITY : v; }

typedef struct {
  double v;
  int i;
} vi_t;

static int cmp_vi(const void *a, const void *b)
{
  const vi_t *x = a, *y = b;
  if (x->v < y->v) return -1;
  if (x->v > y->v) return 1;
  return (x->i > y->i) - (x->i < y->i);
}

static int row_bad(const double *x, size_t count)
{
  for (size_t j = 0; j < count; j++)
    if (!isfinite(x[j])) return 1;
  return 0;
}

static double dist(const double *rows, size_t count, int i, int j, const int *bad)
{
  if (bad[i] || bad[j]) return INFINITY;
  double s = 0;
  for (size_t q = 0; q < count; q++) {
    double e = rows[(size_t)i * count + q] - rows[(size_t)j * count + q];
    s += e * e;
  }
  return s;
}

static double krum_score(const double *D, int n, const int *alive, int i, int k)
{
  vi_t v[MAXW];
  int m = 0;
  for (int j = 0; j < n; j++)
    if (j != i && alive[j]) v[m++] = (vi_t){D[i * n + j], j};
  qsort(v, (size_t)m, sizeof *v, cmp_vi);
  double s = 0;
  for (int p = 0; p < k && p < m; p++) s += v[p].v;
  return s;
}

static int better(int i, int b, const int *bad, const double *score)
{
  if (bad[i] != bad[b]) return bad[i] < bad[b];
  if (score[i] != score[b]) return score[i] < score[b];
  return i < b;
}

/* Median of v[0..n) in double, NaN sorting last (insertion sort: n <= 9). */
static double ref_median(const double *v, int n)
{
  double t[MAXW];
  for (int i = 0; i < n; i++) {
    int k = i;
    while (k > 0 && (isnan(t[k - 1]) ? !isnan(v[i]) : (!isnan(v[i]) && t[k - 1] > v[i]))) {
      t[k] = t[k - 1];
      k--;
    }
    t[k] = v[i];
  }
  return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* the suspect rule of the header, written from its words */
static void ref_mark(const double *s, int n, int f, int trim, uint8_t *excl)
{
  double fin[MAXW], t[MAXW], dev[MAXW];
  int m = 0;
  for (int i = 0; i < n; i++) {
    excl[i] = !isfinite(s[i]);
    if (isfinite(s[i])) fin[m++] = s[i];
  }
  if (m < 3) return;
  double med = ref_median(fin, m);
  if (!trim && !(med > 0)) return;
  for (int i = 0, k = 0; i < n; i++) {
    t[i] = trim ? s[i] - med : log(s[i] / med);
    if (isfinite(s[i])) dev[k++] = fabs(t[i]);
  }
  double bar = (trim ? 2.5 : 4.0) * 1.4826 * ref_median(dev, m);
  if (!trim) bar = fmax(bar, log(4.0));
  for (int i = 0; i < n; i++) {
    int worse = 0;
    for (int j = 0; j < n; j++)
      worse += j != i && (!isfinite(s[j]) || s[j] > s[i] || (s[j] == s[i] && j > i));
    if (!excl[i])
      excl[i] = worse < (f > 0 ? f : 1) && t[i] > bar && (!trim || s[i] > (2.0 * f / n + 1.0) / 2);
  }
}

static void ref_aggregate(const rm_agg_config_t *cfg, const double *rows, int n,
                          size_t count, double *out, uint8_t *excl, double *scores)
{
  int f = cfg->f, bad[MAXW], alive[MAXW], sel[MAXW], nsel = 0;
  double D[MAXW * MAXW], score[MAXW];
  vi_t col[MAXW];
  for (int i = 0; i < n; i++) {
    excl[i] = 0;
    scores[i] = NAN;
    bad[i] = row_bad(rows + (size_t)i * count, count);
    alive[i] = 1;
  }
  rm_agg_method_t m = cfg->method;
  if (m == RM_AGG_MEAN) {
    for (size_t j = 0; j < count; j++) {
      double s = 0;
      for (int i = 0; i < n; i++) s += rows[(size_t)i * count + j];
      out[j] = s / n;
    }
    return;
  }
  if (m == RM_AGG_MEDIAN || m == RM_AGG_TRIMMED_MEAN) {
    unsigned trim[MAXW] = {0};
    for (size_t j = 0; j < count; j++) {
      for (int i = 0; i < n; i++) col[i] = (vi_t){key(rows[(size_t)i * count + j]), i};
      qsort(col, (size_t)n, sizeof *col, cmp_vi);
      if (m == RM_AGG_MEDIAN) {
        out[j] = n % 2 ? col[n / 2].v : 0.5 * col[n / 2 - 1].v + 0.5 * col[n / 2].v;
      } else {
        double s = 0;
        for (int p = f; p < n - f; p++) s += col[p].v;
        out[j] = s / (n - 2 * f);
      }
      for (int p = 0; p < f; p++) {
        trim[col[p].i]++;
        trim[col[n - 1 - p].i]++;
      }
    }
    for (int i = 0; i < n && count; i++) scores[i] = (double)trim[i] / (double)count;
    if (count && f > 0) ref_mark(scores, n, f, 1, excl);
    return;
  }
  if (m == RM_AGG_CENTERED_CLIP) {
    double w[MAXW], tau = cfg->tau > 0 ? cfg->tau : 1;
    int rounds = cfg->iterations ? cfg->iterations : 3;
    for (size_t j = 0; j < count; j++) {
      for (int i = 0; i < n; i++) col[i] = (vi_t){key(rows[(size_t)i * count + j]), i};
      qsort(col, (size_t)n, sizeof *col, cmp_vi);
      out[j] = n % 2 ? col[n / 2].v : 0.5 * col[n / 2 - 1].v + 0.5 * col[n / 2].v;
    }
    for (int t = 0; t < rounds; t++) {
      for (int i = 0; i < n; i++) {
        double s = 0;
        for (size_t j = 0; j < count; j++) {
          double e = rows[(size_t)i * count + j] - out[j];
          s += e * e;
        }
        double nrm = sqrt(s);
        w[i] = !isfinite(nrm) ? 0 : (nrm > tau ? tau / nrm : 1);
      }
      for (size_t j = 0; j < count; j++) {
        double acc = 0;
        for (int i = 0; i < n; i++)
          if (w[i] > 0) acc += w[i] * (rows[(size_t)i * count + j] - out[j]);
        out[j] += acc / n;
      }
    }
    double inv[MAXW];
    for (int i = 0; i < n; i++) {
      scores[i] = w[i];
      inv[i] = w[i] > 0 ? 1 / w[i] : INFINITY;
    }
    ref_mark(inv, n, f, 0, excl);
    return;
  }
  /* Krum family */
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) D[i * n + j] = i == j ? 0 : dist(rows, count, i, j, bad);
  for (int i = 0; i < n; i++) scores[i] = krum_score(D, n, alive, i, n - f - 2);
  int want = m == RM_AGG_KRUM ? 1 : m == RM_AGG_MULTI_KRUM ? (cfg->m ? cfg->m : n - f) : n - 2 * f;
  for (int t = 0; t < want; t++) {
    int left = n - t, k = m == RM_AGG_BULYAN ? (left - f - 2 < 1 ? 1 : left - f - 2) : n - f - 2;
    int best = -1;
    for (int i = 0; i < n; i++) {
      if (!alive[i]) continue;
      score[i] = m == RM_AGG_BULYAN ? krum_score(D, n, alive, i, k) : scores[i];
      if (best < 0 || better(i, best, bad, score)) best = i;
    }
    if (nsel > 0 && bad[best]) break;
    sel[nsel++] = best;
    alive[best] = 0;
  }
  ref_mark(scores, n, f, 0, excl);
  for (size_t j = 0; j < count; j++) {
    if (m != RM_AGG_BULYAN) {
      double s = 0;
      for (int i = 0; i < n; i++)
        if (!alive[i]) s += rows[(size_t)i * count + j];
      out[j] = s / nsel;
      continue;
    }
    int beta = nsel - 2 * f < 1 ? 1 : nsel - 2 * f;
    for (int p = 0; p < nsel; p++) col[p] = (vi_t){key(rows[(size_t)sel[p] * count + j]), p};
    qsort(col, (size_t)nsel, sizeof *col, cmp_vi);
    double med = nsel % 2 ? col[nsel / 2].v : 0.5 * col[nsel / 2 - 1].v + 0.5 * col[nsel / 2].v;
    vi_t byd[MAXW]; /* (distance, rank in the sorted order) */
    for (int p = 0; p < nsel; p++) byd[p] = (vi_t){fabs(col[p].v - med), p};
    qsort(byd, (size_t)nsel, sizeof *byd, cmp_vi);
    int take[MAXW] = {0};
    for (int p = 0; p < beta; p++) take[byd[p].i] = 1;
    double s = 0;
    for (int p = 0; p < nsel; p++)
      if (take[p]) s += col[p].v;
    out[j] = s / beta;
  }
}

/* ---- one case ---- */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

typedef struct {
  rm_agg_method_t method;
  int f, m;
  double clip, tau;
  int iterations;
} case_t;

static double g_rows[MAXW * MAXC], g_out[MAXC];
static unsigned char g_mine[MAXC * 8], g_res[MAXC * 8];

/* run one case: 0 = pass */
static int run_case(rm_comm_t *c, const case_t *k, size_t count, rm_dtype_t dt,
                    int seed, int attackers, int inplace)
{
  int n = rm_comm_world(c), r = rm_comm_rank(c);
  rm_agg_config_t cfg;
  rm_agg_config_init(&cfg);
  cfg.method = k->method;
  cfg.f = k->f;
  cfg.m = k->m;
  cfg.clip_norm = k->clip;
  cfg.tau = k->tau;
  cfg.iterations = k->iterations;
  const char *name = rm_agg_method_name(k->method);
  /* every rank's row as the library sees it (dtype-rounded, clipped) */
  double my_norm = 0;
  for (int i = 0; i < n; i++) {
    double *x = g_rows + (size_t)i * count, ss = 0;
    for (size_t j = 0; j < count; j++) {
      x[j] = round_dt(input(seed, i, n, attackers, j), dt);
      ss += x[j] * x[j];
    }
    double nrm = sqrt(ss);
    if (i == r) my_norm = nrm;
    if (k->clip > 0 && !(nrm <= k->clip))
      for (size_t j = 0; j < count; j++)
        x[j] = isfinite(nrm) ? round_dt(x[j] * (k->clip / nrm), dt)
                             : (k->method == RM_AGG_MEAN ? 0 : x[j]);
  }
  for (size_t j = 0; j < count; j++) agg_test_store(g_mine, j, dt, input(seed, r, n, attackers, j));
  uint8_t excl[MAXW], rexcl[MAXW];
  double scores[MAXW], rscores[MAXW];
  memset(excl, 0xAA, sizeof excl);
  rm_agg_info_t info = {.struct_size = sizeof info, .excluded = excl, .scores = scores};
  void *out = inplace ? g_mine : g_res;
  rm_status_t st = rm_aggregate(c, g_mine, out, count, dt, &cfg, &info);
  if (rm_agg_check(&cfg, n, NULL, 0) != RM_OK) {
    CHECK(st == RM_ERR_INVALID_ARG, "%s f=%d n=%d: refused rule gave %s", name, k->f, n,
          rm_status_name(st));
    g_refused++;
    float one = 1, sum = 0; /* still usable */
    CHECK(rm_allreduce(c, &one, &sum, 1, RM_F32, RM_SUM) == RM_OK && sum == (float)n,
          "communicator unusable after a refusal");
    return g_fails;
  }
  g_ran++;
  g_attacked += attackers > 0;
  CHECK(st == RM_OK, "%s f=%d count=%zu dt=%s: %s", name, k->f, count, rm_dtype_name(dt),
        rm_status_name(st));
  if (st != RM_OK) return g_fails;
  CHECK(info.contributors == n, "contributors %d", info.contributors);
  /* this rank's norm before clipping, whichever way the method took it
   * (up front, or summed from the slices: aggregate.c, NORM FUSED) */
  CHECK(isnan(my_norm) ? isnan(info.norm)
                       : isinf(my_norm) ? info.norm == my_norm
                                        : fabs(info.norm - my_norm) <= 1e-12 * (1 + my_norm),
        "%s f=%d n=%d count=%zu dt=%s: norm %.17g want %.17g", name, k->f, n, count,
        rm_dtype_name(dt), info.norm, my_norm);
  ref_aggregate(&cfg, g_rows, n, count, g_out, rexcl, rscores);
  double tr = tol_rel(dt);
  int bad = 0;
  for (size_t j = 0; j < count && bad < 3; j++) {
    double got = get(out, j, dt), want = g_out[j];
    int ok = fabs(got - want) <= tr * (1 + fabs(want));
    if (k->method != RM_AGG_MEAN && attackers <= k->f) ok = ok && isfinite(got);
    if (!ok) {
      bad++;
      CHECK(0, "%s f=%d m=%d n=%d count=%zu dt=%s seed=%d att=%d: [%zu] got %.9g want %.9g",
            name, k->f, k->m, n, count, rm_dtype_name(dt), seed, attackers, j, got, want);
    }
  }
  if (count > 0)
    for (int i = 0; i < n; i++) {
      CHECK(excl[i] == rexcl[i], "%s f=%d n=%d count=%zu: excluded[%d] %d want %d", name,
            k->f, n, count, i, excl[i], rexcl[i]);
      CHECK((isnan(scores[i]) && isnan(rscores[i])) ||
                fabs(scores[i] - rscores[i]) <= 1e-6 * (1 + fabs(rscores[i])) ||
                (isinf(scores[i]) && scores[i] == rscores[i]),
            "%s n=%d: scores[%d] %g want %g", name, n, i, scores[i], rscores[i]);
    }
  /* robust methods move about 2(N-1)/N of the data, never an all-gather */
  size_t blk = (count + (size_t)n - 1) / (size_t)n, data = 2 * (size_t)(n - 1) * blk * esz(dt);
  if (k->method != RM_AGG_MEAN && count > 0)
    CHECK(info.bytes_sent >= data &&
              info.bytes_sent <= data + 4u * n * n + 16u * n * n * (k->iterations + 3),
          "%s bytes_sent %zu, data %zu", name, info.bytes_sent, data);
  /* every rank the same bytes */
  uint64_t h = fnv(0xcbf29ce484222325ULL, out, count * esz(dt));
  h = fnv(h, excl, (size_t)n);
  h = fnv(h, scores, (size_t)n * sizeof *scores);
  uint64_t all[MAXW];
  CHECK(rm_allgather(c, &h, all, 8, RM_U8) == RM_OK, "hash gather");
  for (int i = 0; i < n; i++)
    CHECK(all[i] == h, "%s f=%d count=%zu dt=%s: rank %d's result differs", name, k->f,
          count, rm_dtype_name(dt), i);
  return g_fails;
}

/* clipping: an attacker of norm 1e6 moves the mean by at most clip / N */
static int test_clip(rm_comm_t *c)
{
  int n = rm_comm_world(c), r = rm_comm_rank(c);
  enum { C = 1000 };
  static float x[C], a[C], b[C];
  rm_agg_config_t cfg;
  rm_agg_config_init(&cfg);
  cfg.clip_norm = 2.0;
  rm_agg_info_t info = {.struct_size = sizeof info};
  for (int pass = 0; pass < 2; pass++) {
    for (int j = 0; j < C; j++)
      x[j] = r == n - 1 ? (pass ? (float)(1e6 / sqrt(C)) : 0.0f)
                        : (float)(0.01 * unif(9, (uint64_t)r, (uint64_t)j));
    CHECK(rm_aggregate(c, x, pass ? b : a, C, RM_F32, &cfg, &info) == RM_OK, "clip mean");
    if (pass && r == n - 1)
      CHECK(info.clipped == 1 && fabs(info.norm - 1e6) < 1, "norm %g clipped %d", info.norm,
            info.clipped);
  }
  double d = 0;
  for (int j = 0; j < C; j++) d += ((double)b[j] - a[j]) * ((double)b[j] - a[j]);
  CHECK(sqrt(d) <= cfg.clip_norm / n * (1 + 1e-5), "mean moved by %g > %g", sqrt(d),
        cfg.clip_norm / n);
  /* a NaN vector under clipping contributes nothing to the mean (the 0.5
   * vectors, norm 0.5 sqrt(C), are clipped to norm 2) */
  for (int j = 0; j < C; j++) x[j] = r == n - 1 ? NAN : 0.5f;
  CHECK(rm_aggregate(c, x, x, C, RM_F32, &cfg, &info) == RM_OK, "clip nan");
  for (int j = 0; j < C && n > 1; j++)
    CHECK(isfinite(x[j]) && fabs(x[j] - 2.0 / sqrt(C) * (n - 1) / n) < 1e-6,
          "nan row under clip: %g", x[j]);
  /* bad arguments: refused locally */
  cfg.clip_norm = -1;
  CHECK(rm_aggregate(c, x, x, C, RM_F32, &cfg, NULL) == RM_ERR_INVALID_ARG, "clip < 0");
  cfg.clip_norm = 0;
  CHECK(rm_aggregate(c, x, x, C, RM_I32, &cfg, NULL) == RM_ERR_INVALID_ARG, "int dtype");
  return g_fails;
}

static int run_rank(rm_comm_t *c, void *arg)
{
  (void)arg;
  g_rank = rm_comm_rank(c);
  int n = rm_comm_world(c);
  static const size_t counts[] = {0, 1, 7, 1000, 4099};
  static const rm_dtype_t others[] = {RM_F64, RM_F16, RM_BF16};
  case_t cases[64];
  int nc = 0;
  cases[nc++] = (case_t){RM_AGG_MEAN, 0, 0, 0, 0, 0};
  cases[nc++] = (case_t){RM_AGG_MEAN, 0, 0, 0.5, 0, 0};
  for (int f = 0; f <= 2; f++) {
    cases[nc++] = (case_t){RM_AGG_MEDIAN, f, 0, 0, 0, 0};
    cases[nc++] = (case_t){RM_AGG_TRIMMED_MEAN, f, 0, 0, 0, 0};
    cases[nc++] = (case_t){RM_AGG_KRUM, f, 0, 0, 0, 0};
    cases[nc++] = (case_t){RM_AGG_MULTI_KRUM, f, 0, 0, 0, 0};
    cases[nc++] = (case_t){RM_AGG_MULTI_KRUM, f, 2, 0, 0, 0};
    cases[nc++] = (case_t){RM_AGG_BULYAN, f, 0, 0, 0, 0};
    cases[nc++] = (case_t){RM_AGG_CENTERED_CLIP, f, 0, 0, 0, 0};
    cases[nc++] = (case_t){RM_AGG_CENTERED_CLIP, f, 0, 0, 0.05, 5};
  }
  cases[nc++] = (case_t){RM_AGG_MEDIAN, 1, 0, 3.0, 0, 0}; /* clip, then the method */
  cases[nc++] = (case_t){RM_AGG_KRUM, 1, 0, 3.0, 0, 0};
  int seed = 0;
  for (int i = 0; i < nc; i++) {
    const case_t *k = &cases[i];
    /* attackers: as many as the method tolerates (none for mean) */
    int att = k->method == RM_AGG_MEAN ? 0 : k->f;
    for (size_t q = 0; q < sizeof counts / sizeof *counts; q++)
      if (run_case(c, k, counts[q], RM_F32, seed++, att, q == 2)) return 1;
    for (size_t d = 0; d < 3; d++)
      for (size_t q = 2; q < 4; q++)
        if (run_case(c, k, counts[q], others[d], seed++, att, 0)) return 1;
  }
  if (test_clip(c)) return 1;
  if (g_rank == 0)
    printf("world %d: %d cases checked (%d with attackers), %d refused by the rule\n", n,
           g_ran, g_attacked, g_refused);
  return g_fails != 0;
}

int main(int argc, char **argv)
{
  int world = argc > 1 ? atoi(argv[1]) : 4;
  rm_test_opts_t o = {.timeout_ms = 90000, .comm_timeout_ms = 30000};
  if (world < 1 || world > MAXW) return 2;
  int bad = rm_test_run_opts(world, run_rank, NULL, &o);
  if (bad) {
    fprintf(stderr, "test_aggregate world %d: %d rank(s) failed\n", world, bad);
    return 1;
  }
  printf("test_aggregate world %d: all checks passed\n", world);
  return 0;
}
