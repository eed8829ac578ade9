/*
 * straggler_step.c - one training step under a straggler policy.
 * The policy's protocol is the session's step engine
 * (session/step_engine.c); this file is what `train` computes and reduces
 * in each of its phases.
 *
 * Who computes what, for global step s with batch B on world W, rank r:
 *
 *   none, backup, deadline,  rows [B r/W, B (r+1)/W) of batch s (trainer.c
 *   auto, stale              sharding); backup runs W = N + b ranks; under
 *                            stale the rows of the batch of the step the
 *                            owed gradient is from
 *   coded (s tolerated)      fractional repetition (aggregate/gradcode.h):
 *                            batch cut into W partitions; rank r computes
 *                            the s+1 partitions of its group g = r/(s+1),
 *                            i.e. rows [begin(g(s+1)), end(g(s+1)+s)).
 *
 * Step protocol (every rank):
 *   1. compute the local gradient sum (+ loss sum, correct count); the
 *      simulated compute (sim_compute_ms) and the simulated stragglers
 *      (slow_* / stall_* options, session/step_engine.h) are spent by the
 *      engine, which under a gated policy stops as soon as the gate says
 *      this rank was dropped;
 *   2. gated policies: the member mask M of step s from the engine, the
 *      same on every rank (the coordinator decides it once);
 *   3. reduce:
 *        none      all-reduce SUM;                     rows = B
 *                  or, with a robust aggregation,
 *                  clipping or an attack:
 *                  robust_step.c (rm_aggregate of the
 *                  per-worker mean gradients)          rows = 1
 *        backup,   masked SUM over M (late ranks add   rows = sum of the
 *        deadline, zeros, still receive the result)   shard sizes in M
 *        auto
 *        coded     masked SUM over the decode plan of  rows = B (exact
 *                  M (one arrived worker per group)    full-batch gradient)
 *        stale     the engine's header (who folds      rows = sum of the
 *                  which step), then SUM of the owed   rows contributed
 *                  gradients that are done (the rest
 *                  add zeros and keep computing)
 *   4. apply: g /= rows, SGD. Every rank applies the same bytes, so
 *      parameters stay bitwise identical (checksums in the step reports).
 *
 * RESCALING (backup, deadline, auto, stale): the step's gradient is the mean
 * over the rows that were actually contributed (k of W shards), not over B:
 * an unbiased estimate of the batch-B gradient as long as lateness does not
 * depend on the data, with variance larger by about W/k; the learning rate
 * is not changed. coded loses nothing: the decoded sum IS the batch-B sum.
 *
 * TEST HOOK: the kill points of crash_hook.c (compute, barrier, allreduce,
 * checkpoint) are called on this path as on trainer.c's plain step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "aggregate/aggregate.h"
#include "checkpoint/checkpoint.h"
#include "aggregate/gradcode.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "train_int.h"

static void shard(const rm__policy_t *p, uint32_t B, uint32_t *lo,
                  uint32_t *hi)
{
  const rm__sp_t *sp = &p->sp;
  if (sp->kind == RM__SP_CODED) {
    rm__gradcode_t gc;
    uint64_t b0, e0, b1, e1;
    int g = sp->rank / (sp->s + 1);
    rm__gradcode_init(&gc, sp->world, sp->s);
    rm__gradcode_partition_range(&gc, g * (sp->s + 1), B, &b0, &e0);
    rm__gradcode_partition_range(&gc, g * (sp->s + 1) + sp->s, B, &b1, &e1);
    *lo = (uint32_t)b0;
    *hi = (uint32_t)e1;
  } else {
    *lo = (uint32_t)((uint64_t)B * sp->rank / sp->world);
    *hi = (uint32_t)((uint64_t)B * (sp->rank + 1) / sp->world);
  }
}

static uint32_t member_rows(const rm__sp_t *sp, const uint8_t *m, uint32_t B)
{
  uint32_t rows = 0;
  for (int r = 0; r < sp->world; r++)
    if (m[r])
      rows += (uint32_t)((uint64_t)B * (r + 1) / sp->world -
                         (uint64_t)B * r / sp->world);
  return rows;
}

/* The simulated compute of this step beyond the real one (real_ms). */
static double extra_ms(const rm__policy_t *p, uint64_t step, double real_ms)
{
  return p->sim_compute_ms +
         rm__slow_extra_ms(&p->slow, p->sp.rank, step, p->sim_compute_ms + real_ms);
}

static void fill_report(rm__trainer_t *t, rm_step_report_t *rep, int64_t t0,
                        int64_t t1, int64_t t2, double wait_ms)
{
  size_t np = t->model.nparams;
  rep->step = t->step;
  rep->wait_ms = wait_ms;
  rep->compute_ms = (double)(t1 - t0) / 1e6 - wait_ms;
  if (rep->compute_ms < 0) rep->compute_ms = 0;
  rep->comm_ms = (double)(t2 - t1) / 1e6;
  rep->loss = t->last_loss;
  rep->accuracy = t->last_acc;
  rep->allreduce_bytes = (np + 2) * sizeof(float);
  rep->param_checksum = rm__trainer_checksum(t);
}

/* stale: the owed gradient is computed on the parameters of the step it is
 * from, kept in p->owed, and folded in when done (step_engine.c). */
static rm_status_t stale_step(rm__trainer_t *t, rm_comm_t *comm,
                              rm__policy_t *p, rm_step_report_t *rep)
{
  size_t np = t->model.nparams;
  uint32_t B = t->cfg.batch, lo, hi;
  uint64_t step = t->step;
  double rows = 0;
  char err[256];
  if (!p->owed && !(p->owed = malloc((np + 2) * sizeof(float)))) return RM_ERR_NOMEM;
  int64_t t0 = rm__now_ns();
  if (rm__sp_stale_fresh(&p->sp)) {
    shard(p, B, &lo, &hi);
    rm__trainer_shard_grad(t, step, lo, hi, p->owed);
    rm__crash_point("compute", step + 1);
    p->owed_rows = hi - lo;
    rm__sp_stale_owe(&p->sp, step, extra_ms(p, step, (double)(rm__now_ns() - t0) / 1e6));
  }
  int ready = rm__sp_stale_work(&p->sp, step);
  if (ready < 0) return RM_ERR_ABORTED;
  rm__crash_point("barrier", step + 1);
  rm__crash_point("allreduce", step + 1);
  int64_t t1 = rm__now_ns();
  rm_status_t st = rm__sp_stale_header(&p->sp, comm, step, ready, p->owed_rows,
                                       &rows, err, sizeof err);
  if (st == RM_ERR_INTERNAL) RM_ERROR("train: %s", err);
  if (st != RM_OK) return st;
  if (ready) memcpy(t->grad, p->owed, (np + 2) * sizeof(float));
  else memset(t->grad, 0, (np + 2) * sizeof(float));
  st = rm_allreduce(comm, t->grad, t->grad, np + 2, RM_F32, RM_SUM);
  if (st != RM_OK) return st;
  int64_t t2 = rm__now_ns();
  rm__trainer_apply(t, t->grad, rows >= 1 ? (uint32_t)rows : 1);
  rm__crash_point("checkpoint", t->step);
  fill_report(t, rep, t0, t1, t2, p->sp.wait_ms);
  return RM_OK;
}

rm_status_t rm__policy_step(rm__trainer_t *t, rm_comm_t *comm,
                            rm__policy_t *p, rm_step_report_t *rep)
{
  size_t np = t->model.nparams;
  uint32_t B = t->cfg.batch, lo, hi, rows = B;
  uint64_t step = t->step;
  rm__sp_t *sp = &p->sp;
  uint8_t *coeff = NULL;
  rm_status_t st = RM_OK;
  int decided = 0;
  memset(rep, 0, sizeof(*rep));
  sp->wait_ms = 0;
  if (sp->kind == RM__SP_STALE) return stale_step(t, comm, p, rep);
  shard(p, B, &lo, &hi);
  int64_t t0 = rm__now_ns();
  rm__trainer_shard_grad(t, step, lo, hi, t->grad);
  rm__crash_point("compute", step + 1);
  double extra = extra_ms(p, step, (double)(rm__now_ns() - t0) / 1e6);
  if (extra > 0) decided = rm__sp_spend(sp, step, extra, NULL);
  int64_t t1 = rm__now_ns();
  if (!rm__sp_gated(sp)) {
    rm__crash_point("barrier", step + 1); /* no gate: the collective is it */
    rm__crash_point("allreduce", step + 1);
    if (rm__robust_active(p->robust)) {
      st = rm__robust_reduce(t, comm, p->robust, hi - lo, rep);
      rows = 1; /* grad holds the aggregated mean gradient */
    } else {
      st = rm_allreduce(comm, t->grad, t->grad, np + 2, RM_F32, RM_SUM);
    }
  } else if (rm__robust_active(p->robust)) {
    st = RM_ERR_INVALID_ARG; /* refused by train_run before any step */
  } else {
    if (rm__crash_wants("barrier", step + 1)) {
      /* Not ready: the gate opens the step and peers wait. A rank the gate
       * already dropped from this step (slow under load) still dies here,
       * so the kill point does not depend on timing. */
      int dummy = 0;
      if (!decided && sp->gate(sp->ctx, step, 0, 0, sp->members, &dummy) == 1)
        decided = 1;
      rm__crash_point("barrier", step + 1);
    }
    if (!decided) st = rm__sp_decide(sp, step);
    if (st == RM_OK) rm__crash_point("allreduce", step + 1);
    t1 = rm__now_ns();
    if (st == RM_OK && sp->kind == RM__SP_CODED) {
      rm__gradcode_t gc;
      coeff = calloc((size_t)sp->world, 1);
      st = coeff ? rm__gradcode_init(&gc, sp->world, sp->s) : RM_ERR_NOMEM;
      if (st == RM_OK) st = rm__gradcode_decode_plan(&gc, sp->members, coeff, NULL);
      if (st == RM_OK)
        st = rm__masked_allreduce(comm, t->grad, t->grad, np + 2, RM_F32,
                                  RM_SUM, coeff, 0, NULL);
    } else if (st == RM_OK) {
      rows = member_rows(sp, sp->members, B);
      st = rm__masked_allreduce(comm, t->grad, t->grad, np + 2, RM_F32,
                                RM_SUM, sp->members, 0, NULL);
    }
    if (st == RM_OK) rm__sp_count(sp, sp->members[sp->rank] != 0, sp->nmembers);
  }
  int64_t t2 = rm__now_ns();
  if (st == RM_OK) {
    rm__trainer_apply(t, t->grad, rows ? rows : 1);
    rm__crash_point("checkpoint", t->step); /* arms the write that follows */
    if (!rm__sp_gated(sp)) rm__sp_count(sp, 1, sp->world);
    fill_report(t, rep, t0, t1, t2, sp->wait_ms);
  }
  free(coeff);
  return st;
}

void rm__policy_free(rm__policy_t *p)
{
  rm__sp_free(&p->sp);
  free(p->owed);
  p->owed = NULL;
}
