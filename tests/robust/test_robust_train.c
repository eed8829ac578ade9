/*
 * test_robust_train.c - Byzantine-robust training: the `train`
 * workload on N real processes (127.0.0.1, tests/lib/rm_testlib.h, no
 * coordinator), the last K ranks attacking, aggregated by rm_aggregate.
 *
 *   test_robust_train run N ATTACK K METHOD F [STEPS [BATCH]]
 *       one run; prints its test accuracy and, per rank, in how many steps
 *       rm_aggregate excluded it
 *   test_robust_train check ATTACK METHOD...   (the default suite)
 *       the clean run (mean, no attack) and then, under ATTACK, plain mean
 *       and each METHOD; fails when a METHOD ends more than BAND below the
 *       clean run
 *   test_robust_train matrix                    (label large; bench)
 *       every attack x (mean + every method): the table of the README
 *
 * Setup (stated): digits MLP hidden=32, lr 0.05, momentum 0.9, seed 5,
 * global batch B = 640 (64 rows per worker), STEPS = 200 by default (about
 * 100 epochs of the 1,438 training rows; ~1.5 s a run on 2 cores), 10 workers, K = 2 attackers (ranks 8
 * and 9), f = 2 for every method. Bulyan needs n >= 4f + 3: it runs on 11
 * workers (ranks 9 and 10 attack), same global batch. centered_clip: tau =
 * 1, 3 iterations (the defaults). verify=10: the workload all-gathers the
 * parameter checksums every 10 steps and fails if any rank differs
 * (bitwise identical parameters under every method and attack).
 *
 * Band (stated): a robust method under attack must end within BAND = 0.02
 * (2 accuracy points, the bar; Krum 3 points, see KRUM_BAND) of the
 * clean plain-mean run or of its own clean run, or above. Known breaks
 * (known_break: IPM against Krum) are printed, not counted. The measured
 * numbers are printed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_testlib.h"
#include "train_int.h"

#ifndef RM_TEST_DATASET
#error "RM_TEST_DATASET must name data/digits/digits.csv"
#endif

#define BAND 0.02
/* Krum follows ONE worker's 64-row gradient per step: measured 2.2 to 2.8
 * points below the clean runs under signflip with the all-gather reference
 * implementation, so its stated band is 3 points. */
#define KRUM_BAND 0.03

typedef struct run_args {
  int world, attackers, f, steps, batch;
  const char *attack, *method;
  const char *scale; /* attack_scale, or NULL for the attack's default */
} run_args_t;

typedef struct cb {
  uint64_t steps;
  uint64_t *excluded; /* per rank: steps in which rm_aggregate excluded it */
  int world;
} cb_t;

static int after_step(void *p, const rm_step_report_t *r)
{
  cb_t *c = p;
  c->steps++;
  for (size_t i = 0; i < r->n_excluded; i++)
    if (r->excluded_ranks[i] < (uint32_t)c->world) c->excluded[r->excluded_ranks[i]]++;
  return 0;
}

static int child(rm_test_world_t *h, int rank, void *arg)
{
  const run_args_t *a = arg;
  rm_comm_config_t cfg;
  rm_comm_t *comm = NULL;
  char opts[512], err[512];
  void *s = NULL;
  rm_test_config(h, rank, &cfg);
  cfg.timeout_ms = 60000;
  if (rm_comm_init(&cfg, &comm) != RM_OK) RM_TEST_FAIL("rank %d: comm init", rank);
  snprintf(opts, sizeof opts, "dataset=%s,batch=%d,steps=%d,hidden=32,lr=0.05,"
           "momentum=0.9,seed=5,verify=10,attack=%s,attackers=%d%s%s",
           RM_TEST_DATASET, a->batch, a->steps, a->attack,
           strcmp(a->attack, "none") ? a->attackers : 0,
           a->scale ? ",attack_scale=" : "", a->scale ? a->scale : "");
  if (rm__workload_train.create(opts, &s, err, sizeof err) != RM_OK)
    RM_TEST_FAIL("create(%s): %s", opts, err);
  cb_t c = {.world = h->world, .excluded = calloc((size_t)h->world, sizeof(uint64_t))};
  rm_workload_env_t env = {.comm = comm, .rank = rank, .world = h->world,
                           .report = after_step, .report_ctx = &c,
                           .aggregation = a->method, .agg_f = a->f};
  rm_status_t st = rm__workload_train.run(s, &env);
  rm__trainer_t *t = rm__train_workload_trainer(s);
  double loss, acc;
  rm__mlp_evaluate(&t->model, &t->test, &loss, &acc);
  rm_test_result_t *res = &h->res[rank];
  res->status = st;
  res->value = acc;
  int off = 0;
  for (int r = 0; r < h->world && off < (int)sizeof res->msg - 12; r++)
    off += snprintf(res->msg + off, sizeof res->msg - off, "%s%llu", r ? " " : "",
                    (unsigned long long)c.excluded[r]);
  if (st != RM_OK)
    snprintf(res->msg, sizeof res->msg, "%.40s: %.200s", rm_status_name(st),
             env.error[0] ? env.error : rm_comm_last_error(comm));
  free(c.excluded);
  rm__workload_train.destroy(s);
  rm_comm_destroy(comm);
  return st == RM_OK && c.steps == (uint64_t)a->steps ? 0 : 1;
}

/* One run; accuracy of rank 0 (NAN on failure). ex: rank 0's exclusion
 * counts, as text. */
static double run(const run_args_t *a, char *ex, size_t exlen)
{
  rm_test_world_t h;
  if (rm_test_world_open(&h, a->world) != 0) return NAN;
  double t0 = rm_test_now_ms();
  int bad = rm_test_start(&h, child, (void *)a) != 0 ? a->world : rm_test_wait(&h, 170000, -1);
  double acc = h.res[0].value;
  for (int r = 0; r < a->world; r++)
    if (h.res[r].value != acc) bad++; /* identical parameters => same accuracy */
  if (bad) {
    fprintf(stderr, "  %s/%s N=%d: %d ranks failed; rank 0: %s\n", a->attack,
            a->method, a->world, bad, h.res[0].msg);
    acc = NAN;
  }
  if (ex) snprintf(ex, exlen, "%s", bad ? "" : h.res[0].msg);
  fprintf(stderr, "  [%s/%s N=%d K=%d f=%d: %.1f s]\n", a->attack, a->method,
          a->world, a->attackers, a->f, (rm_test_now_ms() - t0) / 1000);
  rm_test_world_close(&h);
  return acc;
}

static run_args_t base_args(const char *attack, const char *method)
{
  run_args_t a = {.world = 10, .attackers = 2, .f = 2, .steps = 200,
                  .batch = 640, .attack = attack, .method = method};
  if (!strcmp(method, "mean")) a.f = 0;
  if (!strcmp(method, "bulyan")) a.world = 11; /* n >= 4f + 3 */
  return a;
}

static const char *const METHODS[] = {"median", "trimmed_mean", "krum",
                                      "multi_krum", "bulyan", "centered_clip"};
/* gaussian:100 and ipm:10: the attacks' constants raised until plain mean
 * breaks (sigma = 100 rms(g); eps = 10 turns the mean uphill). */
static const char *const ATTACKS[] = {"signflip", "gaussian", "gaussian:100",
                                      "alie", "ipm", "ipm:10", "labelflip", "nan"};
enum { NM = 6, NA = 8 };

/* Known breaks, measured (real rm_aggregate, this setup) and expected from
 * the literature: printed, not counted.
 *   ipm / krum            IPM with a small eps is built to pass Krum's
 *                         selection (Xie et al. 2019): -12.5 points
 *   ipm:10 / trimmed_mean the 2 attackers always sit on one side, so the
 *                         trim of f per side also drops the 2 most extreme
 *                         honest values on the other: a bias, -3.1 points
 *   ipm:10 / centered_clip tau = 1 fixed (the default) bounds each
 *                         attacker's pull to tau / n per round, which is not
 *                         small against this model's gradients: -8.6 points */
static int known_break(const char *spec, const char *method)
{
  return (!strcmp(spec, "ipm") && !strcmp(method, "krum")) ||
         (!strcmp(spec, "ipm:10") && (!strcmp(method, "trimmed_mean") ||
                                      !strcmp(method, "centered_clip")));
}

static double run_clean(const char *method)
{
  run_args_t a = base_args("none", method);
  a.attackers = 0;
  return run(&a, NULL, 0);
}

/* An attack "name" or "name:scale" (attack_scale). */
static run_args_t attack_args(const char *spec, const char *method, char *buf, size_t len)
{
  snprintf(buf, len, "%s", spec);
  char *c = strchr(buf, ':');
  if (c) *c = 0;
  run_args_t a = base_args(buf, method);
  a.scale = c ? c + 1 : NULL;
  return a;
}

/* Attacked mean, then each method under attack; failures counted. A method
 * passes when it ends within BAND of the clean plain-mean run or of its own
 * clean run (Krum, one worker's gradient per step, trails the mean even
 * without attack). */
static int check(const char *attack, const char *const *methods, int nm,
                 double clean, const double *own)
{
  int fails = 0;
  char ex[256], buf[64];
  run_args_t a = attack_args(attack, "mean", buf, sizeof buf);
  double mean = run(&a, ex, sizeof ex);
  printf("%-12s %-14s acc %.4f (clean %.4f, %+.1f points)\n", attack, "mean",
         mean, clean, 100 * (mean - clean));
  for (int i = 0; i < nm; i++) {
    a = attack_args(attack, methods[i], buf, sizeof buf);
    double acc = run(&a, ex, sizeof ex);
    double ref = own[i] < clean ? own[i] : clean;
    double band = !strcmp(methods[i], "krum") ? KRUM_BAND : BAND;
    int ok = acc >= ref - band; /* NAN fails */
    int known = !ok && known_break(attack, methods[i]);
    printf("%-12s %-14s acc %.4f (clean mean %.4f: %+.1f points; clean %s "
           "%.4f: %+.1f) excluded per rank [%s] %s\n", attack, methods[i], acc,
           clean, 100 * (acc - clean), methods[i], own[i], 100 * (acc - own[i]),
           ex, ok ? "ok" : known ? "KNOWN BREAK (not counted)" : "BEYOND BAND");
    fails += !ok && !known;
  }
  return fails;
}

static double clean_runs(const char *const *methods, int nm, double *own)
{
  double acc = run_clean("mean");
  printf("clean        mean           acc %.4f (10 workers, no attack)\n", acc);
  for (int i = 0; i < nm; i++) {
    own[i] = run_clean(methods[i]);
    printf("clean        %-14s acc %.4f (%+.1f points vs mean)\n", methods[i],
           own[i], 100 * (own[i] - acc));
  }
  return acc;
}

int main(int argc, char **argv)
{
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 7 && !strcmp(argv[1], "run")) {
    run_args_t a = {.world = atoi(argv[2]), .attack = argv[3],
                    .attackers = atoi(argv[4]), .method = argv[5],
                    .f = atoi(argv[6]), .steps = argc > 7 ? atoi(argv[7]) : 200,
                    .batch = argc > 8 ? atoi(argv[8]) : 640};
    char ex[256];
    double acc = run(&a, ex, sizeof ex);
    printf("N=%d attack=%s K=%d method=%s f=%d steps=%d B=%d: test accuracy "
           "%.4f; excluded per rank [%s]\n", a.world, a.attack, a.attackers,
           a.method, a.f, a.steps, a.batch, acc, ex);
    return isnan(acc) ? 1 : 0;
  }
  if (argc >= 4 && !strcmp(argv[1], "check")) {
    double own[16];
    int nm = argc - 3 < 16 ? argc - 3 : 16;
    double clean = clean_runs((const char *const *)argv + 3, nm, own);
    if (isnan(clean)) return 1;
    int fails = check(argv[2], (const char *const *)argv + 3, nm, clean, own);
    printf("%s\n", fails ? "FAILED" : "ok");
    return fails ? 1 : 0;
  }
  if (argc == 2 && !strcmp(argv[1], "matrix")) {
    double own[NM];
    double clean = clean_runs(METHODS, NM, own);
    if (isnan(clean)) return 1;
    int fails = 0;
    for (int i = 0; i < NA; i++) fails += check(ATTACKS[i], METHODS, NM, clean, own);
    printf("%s (%d beyond the band of %.0f points)\n", fails ? "FAILED" : "ok",
           fails, 100 * BAND);
    return fails ? 1 : 0;
  }
  fprintf(stderr, "usage: %s run N ATTACK K METHOD F [STEPS [BATCH]]\n"
          "       %s check ATTACK METHOD...\n       %s matrix\n", argv[0],
          argv[0], argv[0]);
  return 2;
}
