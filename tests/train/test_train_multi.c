/*
 * test_train_multi.c - N real worker processes (127.0.0.1, one per rank)
 * train with global batch B through rm_allreduce; the result must equal one
 * process training with batch B.
 *
 *   test_train_multi N B STEPS [verify]
 *   test_train_multi resume N B             (see resume_main)
 *   test_train_multi synthetic N OPTIONS   (the synthetic workload on N
 *                                           ranks; it verifies every result)
 *
 * Each rank:
 *   1. runs the `train` workload on the communicator; after every step the
 *      report callback all-gathers the parameter checksums (FNV-1a) and
 *      counts steps where any rank differs (must be 0: bitwise identical);
 *      with `verify` the workload also checks them itself (verify=1);
 *   2. trains the single-process reference (no communicator, same options,
 *      same B) in the same process and compares the parameters.
 *
 * Tolerance (stated): N = 1 must be bitwise equal to the reference. For
 * N > 1 the f32 gradient is summed as N partial sums instead of one running
 * sum, so parameters drift by rounding only: after the <= 100 steps the
 * tests run, max |p_N - p_1| <= 1e-4 and max |p_N - p_1| / max |p_1| <= 1e-5;
 * test accuracy must agree within 0.01. Observed (TCP, auto algorithm):
 * N = 2..4, B = 10, 100 steps: abs 4.8e-7 .. 1.5e-6, rel 4.2e-7 .. 1.3e-6,
 * same test accuracy. The drift grows with steps (B = 10, 400 steps, N = 4:
 * abs 5.2e-5, rel 1.1e-5), as rounding differences are amplified by SGD. The
 * observed values are printed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_testlib.h" /* tests/lib: fork one process per rank */
#include "train_int.h"

#ifndef RM_TEST_DATASET
#error "RM_TEST_DATASET must name data/digits/digits.csv"
#endif

typedef struct args {
  int batch, steps, verify;
  const char *synthetic; /* options of a synthetic run instead, or NULL */
  int resume;            /* the two-generation resume scenario */
} args_t;

typedef struct cb_ctx {
  rm_comm_t *comm;
  int world;
  uint64_t steps, mismatched;
  rm_status_t st;
  uint64_t *all;
} cb_ctx_t;

/* After every step: all-gather the checksums through the data plane. */
static int after_step(void *p, const rm_step_report_t *r)
{
  cb_ctx_t *c = p;
  c->steps++;
  uint64_t mine = r->param_checksum;
  c->st = rm_allgather(c->comm, &mine, c->all, 1, RM_I64);
  if (c->st != RM_OK) return 1;
  for (int i = 1; i < c->world; i++)
    if (c->all[i] != c->all[0]) {
      if (c->mismatched++ == 0)
        fprintf(stderr, "step %llu: rank %d checksum %016llx != rank 0 "
                "%016llx\n", (unsigned long long)r->step, i,
                (unsigned long long)c->all[i], (unsigned long long)c->all[0]);
      break;
    }
  return 0;
}

static void *create(const args_t *a, char *opts, size_t len)
{
  char err[512];
  void *s = NULL;
  snprintf(opts, len, "dataset=%s,batch=%d,steps=%d,hidden=32,lr=0.05,"
           "momentum=0.9,seed=5%s", RM_TEST_DATASET, a->batch, a->steps,
           a->verify ? ",verify=1" : "");
  rm_status_t st = rm__workload_train.create(opts, &s, err, sizeof(err));
  if (st != RM_OK) fprintf(stderr, "create: %s\n", err);
  return s;
}

/* The synthetic workload checks every element of every all-reduce itself. */
static int synthetic_main(rm_comm_t *comm, const char *opts)
{
  char err[512], js[512];
  void *s = NULL;
  int rank = rm_comm_rank(comm);
  rm_status_t st = rm__workload_synthetic.create(opts, &s, err, sizeof(err));
  if (st != RM_OK) {
    fprintf(stderr, "create(%s): %s\n", opts, err);
    return 1;
  }
  rm_workload_env_t env = {.comm = comm, .rank = rank,
                           .world = rm_comm_world(comm)};
  st = rm__workload_synthetic.run(s, &env);
  rm__workload_synthetic.summary(s, js, sizeof(js));
  rm__workload_synthetic.destroy(s);
  if (rank == 0 || st != RM_OK)
    printf("rank %d: synthetic %s: %s %s\n", rank, opts, rm_status_name(st),
           js);
  return st == RM_OK && strstr(js, "\"verified_steps\":0") == NULL ? 0 : 1;
}

static int rank_main(rm_comm_t *comm, void *arg)
{
  const args_t *a = arg;
  if (a->synthetic) return synthetic_main(comm, a->synthetic);
  int rank = rm_comm_rank(comm), world = rm_comm_world(comm), fails = 0;
  char opts[512];
  void *dist = create(a, opts, sizeof(opts)), *ref = create(a, opts,
                                                            sizeof(opts));
  if (!dist || !ref) return 1;
  cb_ctx_t c = {.comm = comm, .world = world,
                .all = calloc((size_t)world, sizeof(uint64_t))};
  rm_workload_env_t env = {.comm = comm, .rank = rank, .world = world,
                           .report = after_step, .report_ctx = &c};
  rm_status_t st = rm__workload_train.run(dist, &env);
  if (st != RM_OK || c.st != RM_OK || c.steps != (uint64_t)a->steps ||
      c.mismatched) {
    fprintf(stderr, "rank %d: run %s, allgather %s, %llu steps, %llu with "
            "differing checksums (%s)\n", rank, rm_status_name(st),
            rm_status_name(c.st), (unsigned long long)c.steps,
            (unsigned long long)c.mismatched, rm_comm_last_error(comm));
    fails++;
  }
  rm_workload_env_t solo = {.rank = 0, .world = 1};
  if (rm__workload_train.run(ref, &solo) != RM_OK) fails++;

  rm__trainer_t *td = rm__train_workload_trainer(dist);
  rm__trainer_t *tr = rm__train_workload_trainer(ref);
  double max_abs = 0, max_ref = 0;
  for (size_t i = 0; i < tr->model.nparams; i++) {
    max_abs = fmax(max_abs, fabs((double)td->model.params[i] -
                                 tr->model.params[i]));
    max_ref = fmax(max_ref, fabs(tr->model.params[i]));
  }
  double rel = max_abs / max_ref, l1, a1, ln, an;
  rm__mlp_evaluate(&tr->model, &tr->test, &l1, &a1);
  rm__mlp_evaluate(&td->model, &td->test, &ln, &an);
  int bitwise = !memcmp(td->model.params, tr->model.params,
                        tr->model.nparams * sizeof(float));
  if (rank == 0)
    printf("N=%d B=%d steps=%d: params max abs diff %.3g, relative %.3g "
           "(%s), test accuracy %.4f vs %.4f (N=1), checksums equal across "
           "ranks at all %llu steps: %s\n", world, a->batch, a->steps,
           max_abs, rel, bitwise ? "bitwise equal" : "not bitwise", an, a1,
           (unsigned long long)c.steps, c.mismatched ? "NO" : "yes");
  if (world == 1 && !bitwise) {
    fprintf(stderr, "N=1 through the data plane is not bitwise equal to the "
            "reference\n");
    fails++;
  }
  if (max_abs > 1e-4 || rel > 1e-5 || fabs(an - a1) > 0.01) {
    fprintf(stderr, "rank %d: beyond tolerance: abs %.3g rel %.3g acc %.4f "
            "vs %.4f\n", rank, max_abs, rel, an, a1);
    fails++;
  }
  free(c.all);
  rm__workload_train.destroy(dist);
  rm__workload_train.destroy(ref);
  return fails ? 1 : 0;
}

/* Child body: build the communicator from the world's endpoints, run, and
 * exit nonzero on any failure (rm_test_wait reaps with a deadline). */
static int resume_main(rm_test_world_t *h, int rank, const args_t *a);

static int child(rm_test_world_t *h, int rank, void *arg)
{
  if (((const args_t *)arg)->resume) return resume_main(h, rank, arg);
  rm_comm_config_t cfg;
  rm_comm_t *comm = NULL;
  rm_test_config(h, rank, &cfg);
  rm_status_t st = rm_comm_init(&cfg, &comm);
  if (st != RM_OK) RM_TEST_FAIL("rank %d: rm_comm_init: %s", rank,
                          rm_status_name(st));
  int rc = rank_main(comm, arg);
  rm_comm_destroy(comm);
  h->res[rank].bad = rc;
  return rc ? 1 : 0;
}

/* Two generations on the same endpoints. Generation 1 trains steps 1..20.
 * Then rank 1 restarts (a fresh workload at step 0) and the last rank
 * applies a step 21 of its own that nobody else finished. Generation 2 runs
 * from start_step 20 to 40: the last rank must roll back, rank 1 must get
 * step 20's parameters from rank 0, checksums must agree after every step,
 * and the end must match one process training 40 steps. */
static int resume_main(rm_test_world_t *h, int rank, const args_t *a)
{
  char opts[512];
  int fails = 0, world = h->world;
  void *w = create(a, opts, sizeof(opts));
  uint64_t *all = calloc((size_t)world, sizeof(uint64_t));
  for (uint64_t gen = 1; gen <= 2 && w; gen++) {
    rm_comm_config_t cfg;
    rm_comm_t *comm = NULL;
    rm_test_config(h, rank, &cfg);
    cfg.generation = gen;
    if (rm_comm_init(&cfg, &comm) != RM_OK) {
      fprintf(stderr, "rank %d gen %llu: comm init failed\n", rank,
              (unsigned long long)gen);
      fails++;
      break;
    }
    cb_ctx_t c = {.comm = comm, .world = world, .all = all};
    rm_workload_env_t env = {.comm = comm, .rank = rank, .world = world,
                             .start_step = gen == 1 ? 0 : 20,
                             .max_steps = gen == 1 ? 20 : 40,
                             .report = after_step, .report_ctx = &c};
    rm_status_t st = rm__workload_train.run(w, &env);
    if (st != RM_OK || c.st != RM_OK || c.mismatched || c.steps != 20) {
      fprintf(stderr, "rank %d gen %llu: %s, %llu steps, %llu mismatched\n",
              rank, (unsigned long long)gen, rm_status_name(st),
              (unsigned long long)c.steps, (unsigned long long)c.mismatched);
      fails++;
    }
    rm_comm_destroy(comm);
    if (gen == 1 && rank == 1) { /* a replaced worker */
      rm__workload_train.destroy(w);
      w = create(a, opts, sizeof(opts));
    } else if (gen == 1 && rank == world - 1) { /* ran ahead by one step */
      rm__trainer_t *t = rm__train_workload_trainer(w);
      rm__trainer_shard_grad(t, t->step, 0, 1, t->grad);
      rm__trainer_apply(t, t->grad, 1);
    }
  }
  void *ref = create(a, opts, sizeof(opts));
  rm_workload_env_t solo = {.rank = 0, .world = 1, .max_steps = 40};
  if (!w || !ref || rm__workload_train.run(ref, &solo) != RM_OK) return 1;
  rm__trainer_t *td = rm__train_workload_trainer(w);
  rm__trainer_t *tr = rm__train_workload_trainer(ref);
  double max_abs = 0;
  for (size_t i = 0; i < tr->model.nparams; i++)
    max_abs = fmax(max_abs, fabs((double)td->model.params[i] -
                                 tr->model.params[i]));
  if (td->step != 40 || max_abs > 1e-4) {
    fprintf(stderr, "rank %d: step %llu, max abs diff %.3g vs reference\n",
            rank, (unsigned long long)td->step, max_abs);
    fails++;
  }
  if (rank == 0)
    printf("resume N=%d: 20 steps, rank 1 replaced, rank %d one step ahead, "
           "20 more steps: max abs diff %.3g vs one process\n", world,
           world - 1, max_abs);
  free(all);
  rm__workload_train.destroy(w);
  rm__workload_train.destroy(ref);
  return fails ? 1 : 0;
}

static int run_world(int world, args_t *a, double limit_ms)
{
  rm_test_world_t h;
  if (world < 1 || world > RM_TEST_MAX_WORLD || rm_test_world_open(&h, world) != 0) {
    fprintf(stderr, "cannot open %d endpoints\n", world);
    return 1;
  }
  int bad = rm_test_start(&h, child, a) != 0 ? world : rm_test_wait(&h, (int)limit_ms, -1);
  rm_test_world_close(&h);
  return bad;
}

int main(int argc, char **argv)
{
  if (argc == 4 && !strcmp(argv[1], "resume")) {
    args_t a = {.batch = atoi(argv[3]), .steps = 40, .resume = 1};
    int rc = run_world(atoi(argv[2]), &a, 120000);
    printf("%s\n", rc == 0 ? "ok" : "FAILED");
    return rc == 0 ? 0 : 1;
  }
  if (argc == 4 && !strcmp(argv[1], "synthetic")) {
    args_t a = {.synthetic = argv[3]};
    int rc = run_world(atoi(argv[2]), &a, 120000);
    printf("%s\n", rc == 0 ? "ok" : "FAILED");
    return rc == 0 ? 0 : 1;
  }
  if (argc < 4) {
    fprintf(stderr, "usage: %s N BATCH STEPS [verify]\n"
            "       %s synthetic N OPTIONS\n", argv[0], argv[0]);
    return 2;
  }
  int world = atoi(argv[1]);
  args_t a = {.batch = atoi(argv[2]), .steps = atoi(argv[3]),
              .verify = argc > 4 && !strcmp(argv[4], "verify")};
  int rc = run_world(world, &a, 120000);
  printf("%s\n", rc == 0 ? "ok" : "FAILED");
  return rc == 0 ? 0 : 1;
}
