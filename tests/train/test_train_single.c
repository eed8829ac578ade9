/*
 * test_train_single.c - the training workloads in one process (no data
 * plane): convergence band, gradient check, loader errors, option errors,
 * determinism, resume and roll-back, and the synthetic workload's pattern.
 *
 *   test_train_single [NAME]   runs every case, or the one named
 *
 * Stated accuracy band: with the defaults (batch 64, hidden 64, ReLU,
 * lr 0.05, momentum 0.9) 300 steps (~13 epochs) reach >= 0.95 test accuracy
 * on the 359 held-out rows for seeds 1, 2 and 3 (measured: 0.972 - 0.981).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_int.h"

#ifndef RM_TEST_DATASET
#error "RM_TEST_DATASET must name data/digits/digits.csv"
#endif


#include "rm_testcheck.h"

/* Create a train workload or fail the test. */
static void *make_train(const char *opts)
{
  char o[512], err[512] = "";
  void *state = NULL;
  snprintf(o, sizeof(o), "dataset=%s%s%s", RM_TEST_DATASET, *opts ? "," : "",
           opts);
  rm_status_t st = rm__workload_train.create(o, &state, err, sizeof(err));
  CHECKF(st == RM_OK, "create(%s): %s", o, err);
  return st == RM_OK ? state : NULL;
}

static rm_status_t run_steps(void *state, uint64_t start, uint64_t max)
{
  rm_workload_env_t env = {.rank = 0, .world = 1, .start_step = start,
                           .max_steps = max};
  return rm__workload_train.run(state, &env);
}

static void test_accuracy(void)
{
  for (int seed = 1; seed <= 3; seed++) {
    char o[64];
    snprintf(o, sizeof(o), "seed=%d,steps=300", seed);
    void *s = make_train(o);
    if (!s) return;
    rm__trainer_t *t = rm__train_workload_trainer(s);
    double loss0, acc0, loss, acc;
    rm__mlp_evaluate(&t->model, &t->test, &loss0, &acc0);
    CHECKF(run_steps(s, 0, 0) == RM_OK, "run");
    CHECKF(t->step == 300, "steps %llu", (unsigned long long)t->step);
    rm__mlp_evaluate(&t->model, &t->test, &loss, &acc);
    printf("seed %d: test accuracy %.4f -> %.4f, loss %.4f -> %.4f after "
           "300 steps\n", seed, acc0, acc, loss0, loss);
    CHECKF(acc >= 0.95, "seed %d: test accuracy %.4f below 0.95", seed, acc);
    CHECKF(loss < loss0 / 4, "seed %d: loss %.4f vs initial %.4f", seed, loss,
          loss0);
    char js[512];
    rm__workload_train.summary(s, js, sizeof(js));
    CHECKF(strstr(js, "\"accuracy\":0.9") != NULL, "summary %s", js);
    rm__workload_train.destroy(s);
  }
}

/* Independent double-precision forward pass of the same model (layout in
 * train_int.h): the summed cross-entropy of ns samples. */
static double ref_loss(const rm__mlp_t *m, const double *w, const float *x,
                       const uint8_t *y, int ns)
{
  size_t b1 = (size_t)m->hidden * m->in, w2 = b1 + m->hidden;
  size_t b2 = w2 + (size_t)m->out * m->hidden;
  double h[256], z[16], total = 0;
  for (int n = 0; n < ns; n++, x += m->in) {
    for (uint32_t j = 0; j < m->hidden; j++) {
      double a = w[b1 + j];
      for (uint32_t i = 0; i < m->in; i++) a += w[j * m->in + i] * x[i];
      h[j] = m->act == RM__ACT_TANH ? tanh(a) : (a > 0 ? a : 0);
    }
    double zmax = -INFINITY, sum = 0;
    for (uint32_t k = 0; k < m->out; k++) {
      z[k] = w[b2 + k];
      for (uint32_t j = 0; j < m->hidden; j++)
        z[k] += w[w2 + k * m->hidden + j] * h[j];
      zmax = fmax(zmax, z[k]);
    }
    for (uint32_t k = 0; k < m->out; k++) sum += exp(z[k] - zmax);
    total += log(sum) - (z[y[n]] - zmax);
  }
  return total;
}

/* backward() (f32) against central differences (eps 1e-6) of the double
 * reference loss, summed over 8 training samples, for every parameter. */
static void gradcheck(int act, double *max_rel_out)
{
  char err[256];
  rm__dataset_t all = {0}, tr = {0}, te = {0};
  rm__mlp_t m;
  enum { NS = 8 };
  CHECKF(rm__dataset_load_csv(RM_TEST_DATASET, 10, &all, err, sizeof(err)) ==
            RM_OK, "%s", err);
  CHECKF(rm__dataset_split(&all, 1, 5, &tr, &te) == RM_OK, "split");
  rm__dataset_standardize(&tr, &te);
  CHECKF(rm__mlp_init(&m, 64, 16, 10, act, 7) == RM_OK, "init");
  float *grad = calloc(m.nparams, sizeof(float));
  double *w = calloc(m.nparams, sizeof(double));
  double lf = 0;
  for (size_t p = 0; p < m.nparams; p++) w[p] = m.params[p];
  for (int i = 0; i < NS; i++)
    rm__mlp_sample(&m, tr.x + (size_t)i * 64, tr.y[i], grad, &lf, NULL);
  double ld = ref_loss(&m, w, tr.x, tr.y, NS);
  CHECKF(fabs(lf - ld) < 1e-4 * fabs(ld), "forward: f32 %.8f double %.8f",
        lf, ld);
  const double eps = 1e-6;
  double max_rel = 0;
  size_t bad = 0;
  for (size_t p = 0; p < m.nparams; p++) {
    double v = w[p];
    w[p] = v + eps;
    double lp = ref_loss(&m, w, tr.x, tr.y, NS);
    w[p] = v - eps;
    double lm = ref_loss(&m, w, tr.x, tr.y, NS);
    w[p] = v;
    double num = (lp - lm) / (2 * eps);
    double rel = fabs(num - grad[p]) / fmax(fabs(num), 1e-3);
    if (rel > max_rel) max_rel = rel;
    if (rel > 1e-3 && bad++ < 5)
      fprintf(stderr, "param %zu: analytic %.8g numeric %.8g\n", p, grad[p],
              num);
  }
  CHECKF(bad == 0, "%s: %zu of %zu gradients off by more than 1e-3 relative",
        act == RM__ACT_TANH ? "tanh" : "relu", bad, m.nparams);
  *max_rel_out = max_rel;
  free(grad);
  free(w);
  rm__mlp_free(&m);
  rm__dataset_free(&all);
  rm__dataset_free(&tr);
  rm__dataset_free(&te);
}

static void test_gradcheck(void)
{
  double tanh_rel, relu_rel;
  gradcheck(RM__ACT_TANH, &tanh_rel);
  gradcheck(RM__ACT_RELU, &relu_rel);
  printf("gradient check: max relative error tanh %.2e, relu %.2e "
         "(bound 1e-3; f32 backward vs double central differences)\n", tanh_rel, relu_rel);
}

/* Write text to a temp file; returns its path (static buffer). */
static const char *temp_csv(const char *text)
{
  static char path[64];
  snprintf(path, sizeof(path), "/tmp/rm-train-test-XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0) return "/nonexistent";
  FILE *f = fdopen(fd, "w");
  fputs(text, f);
  fclose(f);
  return path;
}

static void expect_load_error(const char *text, const char *want)
{
  char err[512] = "";
  rm__dataset_t d = {0};
  const char *p = temp_csv(text);
  rm_status_t st = rm__dataset_load_csv(p, 10, &d, err, sizeof(err));
  CHECKF(st != RM_OK, "loaded malformed file %s", want);
  CHECKF(strstr(err, p) != NULL, "error does not name the file: %s", err);
  CHECKF(strstr(err, want) != NULL, "error '%s' lacks '%s'", err, want);
  printf("  %-28s -> %s\n", want, err);
  unlink(p);
}

static void test_loader_errors(void)
{
  char err[512] = "";
  rm__dataset_t d = {0};
  rm_status_t st = rm__dataset_load_csv("/nonexistent/digits.csv", 10, &d,
                                        err, sizeof(err));
  CHECKF(st == RM_ERR_NOT_FOUND, "missing file: %s", rm_status_name(st));
  CHECKF(strstr(err, "/nonexistent/digits.csv") && strstr(err, "No such"),
        "missing file message: %s", err);
  printf("  %-28s -> %s\n", "missing", err);
  expect_load_error("1,2,3\n4,5,6\n7,x,9\n", ":3: field 2: not a number");
  expect_load_error("1,2,3\n4,5\n", ":2: expected 3 fields");
  expect_load_error("1,2,3\n4,5,6,7\n", ":2: expected 3 fields");
  expect_load_error("1,2,3\n\n1,2,12\n", ":3: label 12");
  expect_load_error("1,2,3.5\n", ":1: label 3.5");
  expect_load_error("1;2;3\n", ":1: field 1: unexpected ';'");
  expect_load_error("\n\n", "no samples");
  /* A good small file, with CRLF and a blank line. */
  const char *p = temp_csv("1,2,3\r\n\n4,5,6\n");
  st = rm__dataset_load_csv(p, 10, &d, err, sizeof(err));
  CHECKF(st == RM_OK && d.n == 2 && d.dim == 2 && d.y[1] == 6 &&
            d.x[2] == 4.0f, "small file: %s", err);
  rm__dataset_free(&d);
  unlink(p);
  /* The shipped file. */
  st = rm__dataset_load_csv(RM_TEST_DATASET, 10, &d, err, sizeof(err));
  CHECKF(st == RM_OK && d.n == 1797 && d.dim == 64, "digits: %s", err);
  rm__dataset_free(&d);
}

static void test_option_errors(void)
{
  static const struct {
    const char *opts, *want;
  } cases[] = {
      {"bogus=1", "unknown option 'bogus'"},
      {"batch=0", "batch=0"},
      {"batch=5000", "batch=5000"},
      {"lr=abc", "lr=abc"},
      {"act=sigmoid", "act=sigmoid"},
      {"steps", "expected key=value"},
      {"dataset=/nonexistent/x.csv", "/nonexistent/x.csv"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char o[256], err[512] = "";
    void *s = NULL;
    snprintf(o, sizeof(o), "dataset=%s,%s", RM_TEST_DATASET, cases[i].opts);
    rm_status_t st = rm__workload_train.create(o, &s, err, sizeof(err));
    CHECKF(st != RM_OK, "accepted '%s'", cases[i].opts);
    CHECKF(strstr(err, cases[i].want) != NULL, "'%s': error '%s'",
          cases[i].opts, err);
    if (st == RM_OK) rm__workload_train.destroy(s);
  }
  void *s = NULL;
  char err[256];
  CHECKF(rm__workload_synthetic.create("bytes=1,dtype=f64", &s, err,
                                      sizeof(err)) != RM_OK, "1 byte f64");
  CHECKF(rm__workload_synthetic.create("dtype=u8", &s, err, sizeof(err)) !=
            RM_OK, "u8");
}

static void test_split_and_determinism(void)
{
  void *a = make_train("steps=40"), *b = make_train("steps=40");
  void *c = make_train("steps=40,seed=9");
  if (!a || !b || !c) return;
  rm__trainer_t *ta = rm__train_workload_trainer(a);
  CHECKF(ta->train.n == 1438 && ta->test.n == 359, "split %u/%u",
        ta->train.n, ta->test.n);
  CHECKF(rm__trainer_checksum(ta) ==
            rm__trainer_checksum(rm__train_workload_trainer(b)),
        "same seed, different init");
  CHECKF(rm__trainer_checksum(ta) !=
            rm__trainer_checksum(rm__train_workload_trainer(c)),
        "different seed, same init");
  run_steps(a, 0, 0);
  run_steps(b, 0, 0);
  CHECKF(rm__trainer_checksum(ta) ==
            rm__trainer_checksum(rm__train_workload_trainer(b)),
        "same seed, different parameters after 40 steps");
  rm__workload_train.destroy(a);
  rm__workload_train.destroy(b);
  rm__workload_train.destroy(c);
}

/* 30 + 30 steps across two run() calls equal 60 in one; a step beyond
 * start_step is rolled back; a fresh process cannot start at step 30. */
static void test_resume(void)
{
  void *one = make_train("steps=60"), *two = make_train("steps=60");
  if (!one || !two) return;
  CHECKF(run_steps(one, 0, 0) == RM_OK, "run 60");
  CHECKF(run_steps(two, 0, 30) == RM_OK, "run 30");
  rm__trainer_t *t2 = rm__train_workload_trainer(two);
  uint64_t at30 = rm__trainer_checksum(t2);
  CHECKF(run_steps(two, 30, 31) == RM_OK && t2->step == 31, "step 31");
  CHECKF(run_steps(two, 30, 30) == RM_OK && t2->step == 30 &&
            rm__trainer_checksum(t2) == at30, "roll back 31 -> 30");
  CHECKF(run_steps(two, 30, 0) == RM_OK, "run 30..60");
  CHECKF(rm__trainer_checksum(rm__train_workload_trainer(one)) ==
            rm__trainer_checksum(t2), "30+30 steps differ from 60");
  void *fresh = make_train("steps=60");
  if (fresh) {
    CHECKF(run_steps(fresh, 30, 0) == RM_ERR_INVALID_ARG,
          "fresh process resumed at 30 with no peer");
    rm__workload_train.destroy(fresh);
  }
  rm__workload_train.destroy(one);
  rm__workload_train.destroy(two);
}

/* Save at step 40, load into a fresh trainer, train on to 80: bitwise equal
 * to 80 uninterrupted steps. Damaged or foreign files are refused. */
static void test_checkpoint(void)
{
  char dir[] = "/tmp/rm-train-ckpt-XXXXXX", path[4096] = "", err[512] = "";
  CHECKF(mkdtemp(dir) != NULL, "mkdtemp");
  void *a = make_train("steps=80"), *b = make_train("steps=80");
  void *other = make_train("steps=80,hidden=16");
  if (!a || !b || !other) return;
  rm__trainer_t *ta = rm__train_workload_trainer(a);
  rm__trainer_t *tb = rm__train_workload_trainer(b);
  CHECKF(run_steps(a, 0, 40) == RM_OK, "40 steps");
  CHECKF(rm__trainer_save(ta, dir, 7, 0, 1, path, sizeof(path), err,
                         sizeof(err)) == RM_OK, "%s", err);
  CHECKF(rm__trainer_load(tb, path, err, sizeof(err)) == RM_OK, "%s", err);
  CHECKF(tb->step == 40 && rm__trainer_checksum(ta) == rm__trainer_checksum(tb),
        "loaded state differs");
  CHECKF(run_steps(a, 40, 0) == RM_OK && run_steps(b, 40, 0) == RM_OK, "run");
  CHECKF(ta->step == 80 && rm__trainer_checksum(ta) == rm__trainer_checksum(tb),
        "40 + checkpoint + 40 steps differ from 80");
  rm__trainer_t *to = rm__train_workload_trainer(other);
  CHECKF(rm__trainer_load(to, path, err, sizeof(err)) == RM_ERR_INVALID_ARG &&
            strstr(err, "another model"), "foreign model: %s", err);
  /* Flip one payload byte, then truncate: both refused, trainer intact. */
  uint64_t before = rm__trainer_checksum(tb);
  FILE *f = fopen(path, "r+b");
  fseek(f, 100, SEEK_SET);
  int c = fgetc(f);
  fseek(f, 100, SEEK_SET);
  fputc(c ^ 1, f);
  fclose(f);
  CHECKF(rm__trainer_load(tb, path, err, sizeof(err)) == RM_ERR_INVALID_ARG &&
            strstr(err, "checksum"), "corrupt: %s", err);
  CHECKF(truncate(path, 1000) == 0, "truncate");
  CHECKF(rm__trainer_load(tb, path, err, sizeof(err)) == RM_ERR_INVALID_ARG &&
            strstr(err, "truncated"), "truncated: %s", err);
  CHECKF(rm__trainer_checksum(tb) == before && tb->step == 80,
        "failed load changed the trainer");
  unlink(path);
  CHECKF(rm__trainer_load(tb, path, err, sizeof(err)) == RM_ERR_NOT_FOUND,
        "missing: %s", err);
  rmdir(dir);
  rm__workload_train.destroy(a);
  rm__workload_train.destroy(b);
  rm__workload_train.destroy(other);
}

static int count_steps(void *ctx, const rm_step_report_t *r)
{
  int *n = ctx;
  (*n)++;
  return r->step >= 5; /* stop after step 5 */
}

static void test_synthetic(void)
{
  static const char *dts[] = {"f32", "f64", "i32", "i64"};
  for (int i = 0; i < 4; i++) {
    char o[128], err[256] = "", js[512];
    void *s = NULL;
    snprintf(o, sizeof(o), "bytes=1M,dtype=%s,compute_ms=1,steps=8", dts[i]);
    CHECKF(rm__workload_synthetic.create(o, &s, err, sizeof(err)) == RM_OK,
          "%s: %s", o, err);
    if (!s) continue;
    int n = 0;
    rm_workload_env_t env = {.world = 1, .report = count_steps,
                             .report_ctx = &n};
    CHECKF(rm__workload_synthetic.run(s, &env) == RM_OK, "synthetic %s",
          dts[i]);
    CHECKF(n == 5, "report asked to stop at step 5, saw %d", n);
    rm__workload_synthetic.summary(s, js, sizeof(js));
    CHECKF(strstr(js, "\"verified_steps\":5") != NULL, "summary %s", js);
    rm__workload_synthetic.destroy(s);
  }
}

static const struct {
  const char *name;
  void (*fn)(void);
} tests[] = {
    {"accuracy", test_accuracy},       {"gradcheck", test_gradcheck},
    {"loader", test_loader_errors},    {"options", test_option_errors},
    {"determinism", test_split_and_determinism},
    {"resume", test_resume},           {"synthetic", test_synthetic},
    {"checkpoint", test_checkpoint},
};

int main(int argc, char **argv)
{
  int ran = 0;
  for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
    if (argc > 1 && strcmp(argv[1], tests[i].name)) continue;
    printf("== %s\n", tests[i].name);
    tests[i].fn();
    ran++;
  }
  if (!ran) {
    fprintf(stderr, "no test named %s\n", argv[1]);
    return 2;
  }
  printf("%s (%d failures)\n", rm_check_failures ? "FAILED" : "ok", rm_check_failures);
  return rm_check_failures ? 1 : 0;
}
