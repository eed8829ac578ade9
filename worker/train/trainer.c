/*
 * trainer.c - synchronous data-parallel SGD, one step at a time.
 *
 * Data order. The training set is visited epoch by epoch; epoch e uses the
 * permutation P_e = FisherYates(train rows, seed', e) and is cut into
 * floor(n_train / B) global batches of B rows (the tail is dropped). Global
 * step s (0-based) uses batch s mod bpe of epoch s / bpe, so the order depends
 * only on (seed, s): a resumed run, or a run on a different world size, sees
 * exactly the same global batches.
 *
 * Sharding. Rank r of N takes rows [floor(B r / N), floor(B (r+1) / N)) of the
 * global batch: the shards tile the batch exactly, also when N does not
 * divide B (shard sizes differ by at most one; a rank may get zero rows when
 * N > B and then contributes zeros).
 *
 * Step, on every rank:
 *   1. g = sum over my shard of per-sample gradients (f32, fixed order);
 *      two extra slots carry the shard's loss sum and correct count.
 *   2. rm_allreduce(g, RM_F32, RM_SUM), in place: g = sum over the batch.
 *   3. g /= B (the GLOBAL batch size, not N): the mean gradient of the batch,
 *      the same number a single process with batch B computes, up to the
 *      order of the f32 additions (N partial sums instead of one).
 *   4. keep a copy of (params, velocity); SGD with momentum; step += 1.
 * Every rank applies the same update to the same bytes, so parameters stay
 * bitwise identical across ranks as long as the all-reduce hands every rank
 * the same result bits (the collectives guarantee it; tests check it).
 *
 * Invariants:
 *   I1  t->step = number of updates applied to t->model.
 *   I2  a failed all-reduce leaves params, velocity and step untouched.
 *   I3  have_prev => prev holds (params, velocity) of step t->step - 1.
 *
 * Resync at the start of a generation (rm__trainer_resync): a rank that
 * finished step start+1 while another did not (the all-reduce completed on
 * some ranks only) rolls back via I3; then the lowest rank holding step
 * `start` broadcasts params and velocity to all, so a restarted member
 * catches up from live peers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rm_clock.h"
#include "rm_log.h"
#include "train_int.h"

enum { TEST_DIV = 5, CLASSES = 10 }; /* 20% held out; digits 0..9 */

rm_status_t rm__trainer_init(rm__trainer_t *t, const rm__train_cfg_t *cfg,
                             char *err, size_t errlen)
{
  rm_status_t st;
  rm__dataset_t all = {0};
  memset(t, 0, sizeof(*t));
  t->cfg = *cfg;
  t->perm_epoch = UINT64_MAX;
  st = rm__dataset_load_csv(cfg->dataset, CLASSES, &all, err, errlen);
  if (st != RM_OK) return st;
  st = rm__dataset_split(&all, cfg->split_seed, TEST_DIV, &t->train, &t->test);
  rm__dataset_free(&all);
  if (st != RM_OK) {
    snprintf(err, errlen, "%s: cannot split into train/test (%s)",
             cfg->dataset, rm_status_name(st));
    goto fail;
  }
  if (cfg->batch == 0 || cfg->batch > t->train.n) {
    snprintf(err, errlen, "option batch=%u: must be in [1, %u] (training "
             "rows of %s)", cfg->batch, t->train.n, cfg->dataset);
    st = RM_ERR_INVALID_ARG;
    goto fail;
  }
  rm__dataset_standardize(&t->train, &t->test);
  st = rm__mlp_init(&t->model, t->train.dim, cfg->hidden, CLASSES, cfg->act,
                    cfg->seed);
  if (st != RM_OK) {
    snprintf(err, errlen, "model: %s", rm_status_string(st));
    goto fail;
  }
  size_t np = t->model.nparams;
  t->grad = malloc((np + 2) * sizeof(float));
  t->prev = malloc(2 * np * sizeof(float));
  t->perm = malloc((size_t)t->train.n * sizeof(uint32_t));
  if (!t->grad || !t->prev || !t->perm) {
    snprintf(err, errlen, "out of memory");
    st = RM_ERR_NOMEM;
    goto fail;
  }
  return RM_OK;
fail:
  rm__trainer_free(t);
  return st;
}

void rm__trainer_free(rm__trainer_t *t)
{
  rm__dataset_free(&t->train);
  rm__dataset_free(&t->test);
  rm__mlp_free(&t->model);
  free(t->grad);
  free(t->prev);
  free(t->perm);
  t->grad = t->prev = NULL;
  t->perm = NULL;
}

uint64_t rm__trainer_steps_per_epoch(const rm__trainer_t *t)
{
  return t->train.n / t->cfg.batch;
}

uint64_t rm__trainer_checksum(const rm__trainer_t *t)
{
  return rm__fnv1a(t->model.params, t->model.nparams * sizeof(float));
}

/* The B row indices of global step s (see "Data order"). */
static const uint32_t *global_batch(rm__trainer_t *t, uint64_t s)
{
  uint64_t bpe = rm__trainer_steps_per_epoch(t), epoch = s / bpe;
  if (epoch != t->perm_epoch) {
    uint64_t es = (t->cfg.seed ^ 0x646174612d6f7264ULL) /* "data-ord" */ +
                  epoch * 0xD1B54A32D192ED03ULL;
    rm__permute(t->perm, t->train.n, rm__rng_next(&es));
    t->perm_epoch = epoch;
  }
  return t->perm + (s % bpe) * t->cfg.batch;
}

static double ms_between(int64_t a, int64_t b) { return (b - a) / 1e6; }

void rm__trainer_shard_grad(rm__trainer_t *t, uint64_t step, uint32_t lo,
                            uint32_t hi, float *grad)
{
  size_t np = t->model.nparams;
  uint32_t dim = t->train.dim;
  const uint32_t *batch = global_batch(t, step);
  double loss = 0;
  uint32_t correct = 0;
  memset(grad, 0, (np + 2) * sizeof(float));
  unsigned top = t->train.classes ? t->train.classes - 1 : 9;
  for (uint32_t i = lo; i < hi; i++) {
    unsigned y = t->train.y[batch[i]];
    rm__mlp_sample(&t->model, t->train.x + (size_t)batch[i] * dim,
                   t->flip_labels ? top - y : y, grad, &loss, &correct);
  }
  grad[np] = (float)loss;
  grad[np + 1] = (float)correct;
}

void rm__trainer_apply(rm__trainer_t *t, float *grad, uint32_t rows)
{
  size_t np = t->model.nparams;
  for (size_t i = 0; i < np; i++) grad[i] /= (float)rows;
  memcpy(t->prev, t->model.params, np * sizeof(float));
  memcpy(t->prev + np, t->model.velocity, np * sizeof(float));
  t->have_prev = 1;
  rm__mlp_sgd(&t->model, grad, t->cfg.lr, t->cfg.momentum);
  t->step++;
  t->last_loss = grad[np] / rows;
  t->last_acc = grad[np + 1] / rows;
}

rm_status_t rm__trainer_step(rm__trainer_t *t, rm_comm_t *comm,
                             rm_step_report_t *rep)
{
  int rank = comm ? rm_comm_rank(comm) : 0;
  int world = comm ? rm_comm_world(comm) : 1;
  size_t np = t->model.nparams;
  uint32_t B = t->cfg.batch;
  uint32_t lo = (uint32_t)((uint64_t)B * rank / world);
  uint32_t hi = (uint32_t)((uint64_t)B * (rank + 1) / world);

  int64_t t0 = rm__now_ns();
  rm__trainer_shard_grad(t, t->step, lo, hi, t->grad);
  rm__crash_point("compute", t->step + 1);
  int64_t t1 = rm__now_ns();
  if (comm) {
    rm__crash_point("barrier", t->step + 1); /* no gate: the collective is it */
    rm__crash_point("allreduce", t->step + 1);
    rm_status_t st = rm_allreduce(comm, t->grad, t->grad, np + 2, RM_F32,
                                  RM_SUM);
    if (st != RM_OK) return st; /* I2 */
  }
  int64_t t2 = rm__now_ns();
  rm__trainer_apply(t, t->grad, B);
  rm__crash_point("checkpoint", t->step); /* arms the write that follows */
  int64_t t3 = rm__now_ns();

  memset(rep, 0, sizeof(*rep));
  rep->step = t->step;
  rep->compute_ms = ms_between(t0, t1) + ms_between(t2, t3);
  rep->comm_ms = ms_between(t1, t2);
  rep->loss = t->last_loss;
  rep->accuracy = t->last_acc;
  rep->allreduce_bytes = comm ? (np + 2) * sizeof(float) : 0;
  rep->param_checksum = rm__trainer_checksum(t);
  return RM_OK;
}

static void rollback(rm__trainer_t *t)
{
  size_t np = t->model.nparams;
  memcpy(t->model.params, t->prev, np * sizeof(float));
  memcpy(t->model.velocity, t->prev + np, np * sizeof(float));
  t->step--;
  t->have_prev = 0;
}

rm_status_t rm__trainer_resync(rm__trainer_t *t, rm_comm_t *comm,
                               uint64_t start)
{
  rm_status_t st;
  if (t->have_prev && t->step == start + 1) rollback(t);
  int world = comm ? rm_comm_world(comm) : 1;
  int rank = comm ? rm_comm_rank(comm) : 0;
  if (world == 1) {
    if (t->step == start) return RM_OK;
    RM_ERROR("train: cannot resume at step %llu: this process holds step "
             "%llu and has no peer to copy from",
             (unsigned long long)start, (unsigned long long)t->step);
    return RM_ERR_INVALID_ARG;
  }
  /* v[0]: lowest rank holding step `start`; v[1]: -1 if anyone does not. */
  int64_t v[2] = {t->step == start ? rank : world, t->step == start ? 0 : -1};
  st = rm_allreduce(comm, v, v, 2, RM_I64, RM_MIN);
  if (st != RM_OK) return st;
  if (v[0] >= world) {
    RM_ERROR("train: no rank holds the parameters of step %llu (this rank "
             "holds step %llu)", (unsigned long long)start,
             (unsigned long long)t->step);
    return RM_ERR_NOT_FOUND;
  }
  if (v[1] == 0) return RM_OK; /* everybody is at `start` already */
  size_t np = t->model.nparams;
  st = rm_broadcast(comm, t->model.params, np, RM_F32, (int)v[0]);
  if (st == RM_OK)
    st = rm_broadcast(comm, t->model.velocity, np, RM_F32, (int)v[0]);
  if (st != RM_OK) return st;
  if (t->step != start)
    RM_INFO("train: rank %d: parameters of step %llu copied from rank %d",
            rank, (unsigned long long)start, (int)v[0]);
  t->step = start;
  t->have_prev = 0;
  return RM_OK;
}
