/*
 * train_workload.c - the `train` workload: data-parallel SGD of a two-layer
 * MLP on the optical-digits set (see trainer.c for the step and its maths).
 *
 * Options ("key=value,..."; every key optional):
 *
 *   key          default   meaning
 *   dataset      (1)       CSV path: 64 features then a label 0..9 per row
 *   batch        64        GLOBAL batch size B, split across the ranks
 *   hidden       64        hidden units
 *   act          relu      relu | tanh
 *   lr           0.05      learning rate
 *   momentum     0.9       heavy-ball momentum (0 = plain SGD)
 *   seed         1         initialisation and data order
 *   split_seed   1         train/test split (80/20)
 *   steps        (2)       stop after this many global steps
 *   epochs       (2)       or after this many passes (floor(n_train/B) steps each)
 *   verify       0         every K steps all-gather the parameter checksums
 *                          and fail with RM_ERR_INTERNAL if ranks differ
 *
 *   (1) RINGMASTER_TRAIN_DATASET, else the repository's data/digits/digits.csv
 *   (2) the step limit is the smallest of: steps, epochs * steps-per-epoch,
 *       and the agent's max_steps (when nonzero); 200 when none is given.
 *
 * Gradient reduction: each rank sums per-sample gradients of its shard, the
 * f32 sums are all-reduced with RM_SUM, and every rank divides by B.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_clock.h"
#include "rm_log.h"
#include "rm_param.h"
#include "train_int.h"

#ifndef RM_TRAIN_DEFAULT_DATASET
#define RM_TRAIN_DEFAULT_DATASET "data/digits/digits.csv"
#endif

enum { DEFAULT_STEPS = 200 };

typedef struct train_state {
  rm__trainer_t t;
  uint64_t steps, epochs, verify;
  char dataset[1024];
} train_state_t;

static rm_status_t set_option(train_state_t *s, rm__train_cfg_t *cfg,
                              const char *key, const char *val, char *err,
                              size_t errlen)
{
  uint64_t u = 0;
  double d = 0;
  rm_status_t st = RM_OK;
  if (!strcmp(key, "dataset")) {
    snprintf(s->dataset, sizeof(s->dataset), "%s", val);
  } else if (!strcmp(key, "batch")) {
    st = rm__opt_u64(key, val, 1, 1u << 20, &u, err, errlen);
    cfg->batch = (uint32_t)u;
  } else if (!strcmp(key, "hidden")) {
    st = rm__opt_u64(key, val, 1, 1u << 16, &u, err, errlen);
    cfg->hidden = (uint32_t)u;
  } else if (!strcmp(key, "act")) {
    if (!strcmp(val, "relu")) cfg->act = RM__ACT_RELU;
    else if (!strcmp(val, "tanh")) cfg->act = RM__ACT_TANH;
    else {
      snprintf(err, errlen, "option act=%s: expected relu or tanh", val);
      st = RM_ERR_INVALID_ARG;
    }
  } else if (!strcmp(key, "lr")) {
    st = rm__opt_double(key, val, 0, 100, &d, err, errlen);
    cfg->lr = (float)d;
  } else if (!strcmp(key, "momentum")) {
    st = rm__opt_double(key, val, 0, 0.999999, &d, err, errlen);
    cfg->momentum = (float)d;
  } else if (!strcmp(key, "seed")) {
    st = rm__opt_u64(key, val, 0, UINT64_MAX, &cfg->seed, err, errlen);
  } else if (!strcmp(key, "split_seed")) {
    st = rm__opt_u64(key, val, 0, UINT64_MAX, &cfg->split_seed, err, errlen);
  } else if (!strcmp(key, "steps")) {
    st = rm__opt_u64(key, val, 1, UINT64_MAX, &s->steps, err, errlen);
  } else if (!strcmp(key, "epochs")) {
    st = rm__opt_u64(key, val, 1, 1u << 30, &s->epochs, err, errlen);
  } else if (!strcmp(key, "verify")) {
    st = rm__opt_u64(key, val, 0, UINT64_MAX, &s->verify, err, errlen);
  } else {
    snprintf(err, errlen, "unknown option '%s' for workload train (known: "
             "dataset batch hidden act lr momentum seed split_seed steps "
             "epochs verify)", key);
    st = RM_ERR_INVALID_ARG;
  }
  return st;
}

static rm_status_t train_create(const char *options, void **state, char *err,
                                size_t errlen)
{
  rm_status_t st = RM_OK;
  char key[64], val[1024];
  train_state_t *s = calloc(1, sizeof(*s));
  if (!s) return RM_ERR_NOMEM;
  rm__train_cfg_t cfg = {.batch = 64, .hidden = 64, .act = RM__ACT_RELU,
                         .lr = 0.05f, .momentum = 0.9f, .seed = 1,
                         .split_seed = 1};
  snprintf(s->dataset, sizeof(s->dataset), "%s",
           rm__env_str("RINGMASTER_TRAIN_DATASET", RM_TRAIN_DEFAULT_DATASET));
  const char *p = options ? options : "";
  int r;
  while ((r = rm__opt_next(&p, key, sizeof(key), val, sizeof(val), err,
                           errlen)) > 0) {
    st = set_option(s, &cfg, key, val, err, errlen);
    if (st != RM_OK) goto fail;
  }
  if (r < 0) {
    st = RM_ERR_INVALID_ARG;
    goto fail;
  }
  cfg.dataset = s->dataset;
  st = rm__trainer_init(&s->t, &cfg, err, errlen);
  if (st != RM_OK) goto fail;
  s->t.cfg.dataset = s->dataset;
  *state = s;
  return RM_OK;
fail:
  free(s);
  return st;
}

static uint64_t step_limit(const train_state_t *s, uint64_t max_steps)
{
  uint64_t lim = UINT64_MAX;
  if (s->steps) lim = s->steps;
  if (s->epochs) {
    uint64_t e = s->epochs * rm__trainer_steps_per_epoch(&s->t);
    if (e < lim) lim = e;
  }
  if (max_steps && max_steps < lim) lim = max_steps;
  return lim == UINT64_MAX ? DEFAULT_STEPS : lim;
}

/* All-gather every rank's checksum; RM_ERR_INTERNAL naming the first rank
 * that differs from rank 0. */
static rm_status_t verify_checksums(rm_comm_t *comm, uint64_t mine,
                                    uint64_t step)
{
  int world = rm_comm_world(comm);
  uint64_t *all = calloc((size_t)world, sizeof(uint64_t));
  if (!all) return RM_ERR_NOMEM;
  rm_status_t st = rm_allgather(comm, &mine, all, 1, RM_I64);
  for (int r = 1; st == RM_OK && r < world; r++)
    if (all[r] != all[0]) {
      RM_ERROR("train: step %llu: parameters differ: rank 0 checksum "
               "%016llx, rank %d %016llx", (unsigned long long)step,
               (unsigned long long)all[0], r, (unsigned long long)all[r]);
      st = RM_ERR_INTERNAL;
    }
  free(all);
  return st;
}

static rm_status_t train_run(void *state, rm_workload_env_t *env)
{
  train_state_t *s = state;
  rm_status_t st = rm__trainer_resync(&s->t, env->comm, env->start_step);
  if (st != RM_OK) return st;
  uint64_t lim = step_limit(s, env->max_steps);
  while (s->t.step < lim) {
    rm_step_report_t rep;
    st = rm__trainer_step(&s->t, env->comm, &rep);
    if (st != RM_OK) return st;
    if (s->verify && env->comm &&
        (rep.step % s->verify == 0 || rep.step == lim)) {
      int64_t t0 = rm__now_ns();
      st = verify_checksums(env->comm, rep.param_checksum, rep.step);
      rep.wait_ms = (rm__now_ns() - t0) / 1e6;
      if (st != RM_OK) return st;
    }
    if (env->report && env->report(env->report_ctx, &rep)) return RM_OK;
  }
  double loss, acc;
  rm__mlp_evaluate(&s->t.model, &s->t.test, &loss, &acc);
  RM_INFO("train: %llu steps done; test accuracy %.4f, test loss %.4f",
          (unsigned long long)s->t.step, acc, loss);
  return RM_OK;
}

static void train_summary(void *state, char *buf, size_t len)
{
  train_state_t *s = state;
  double loss, acc;
  rm__mlp_evaluate(&s->t.model, &s->t.test, &loss, &acc);
  snprintf(buf, len,
           "{\"accuracy\":%.6f,\"test_loss\":%.6f,\"test_samples\":%u,"
           "\"train_samples\":%u,\"steps\":%llu,\"train_loss\":%.6f,"
           "\"train_accuracy\":%.6f,\"param_checksum\":\"%016llx\"}",
           acc, loss, s->t.test.n, s->t.train.n,
           (unsigned long long)s->t.step,
           isfinite(s->t.last_loss) ? s->t.last_loss : 0.0,
           isfinite(s->t.last_acc) ? s->t.last_acc : 0.0,
           (unsigned long long)rm__trainer_checksum(&s->t));
}

static void train_destroy(void *state)
{
  train_state_t *s = state;
  if (!s) return;
  rm__trainer_free(&s->t);
  free(s);
}

rm__trainer_t *rm__train_workload_trainer(void *state)
{
  return &((train_state_t *)state)->t;
}

const rm_workload_ops_t rm__workload_train = {
    .name = "train",
    .create = train_create,
    .run = train_run,
    .summary = train_summary,
    .destroy = train_destroy,
};
