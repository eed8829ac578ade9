/*
 * policy_step.c - one training step under a straggler policy (issue 6).
 *
 * Who computes what, for global step s with batch B on world W, rank r:
 *
 *   none, backup, deadline   rows [B r/W, B (r+1)/W) of batch s (trainer.c
 *                            sharding); backup runs W = N + b ranks.
 *   coded (s tolerated)      fractional repetition (aggregate/gradcode.h):
 *                            batch cut into W partitions; rank r computes
 *                            the s+1 partitions of its group g = r/(s+1),
 *                            i.e. rows [begin(g(s+1)), end(g(s+1)+s)).
 *
 * Step protocol (every rank):
 *   1. compute the local gradient sum (+ loss sum, correct count);
 *      a rank slowed on purpose (options slow_rank/slow_factor, or the
 *      simulated compute sim_compute_ms) sleeps in 1 ms slices and, under a
 *      gated policy, asks the gate every 2 ms whether it was already
 *      dropped; if so it stops computing at once;
 *   2. gated policies: StepGate(s, ready) -> the member mask M of step s,
 *      the same on every rank (the coordinator decides it once);
 *   3. reduce:
 *        none      all-reduce SUM;                     rows = B
 *                  or, with a robust aggregation,
 *                  clipping or an attack (issue 12):
 *                  robust_step.c (rm_aggregate of the
 *                  per-worker mean gradients)          rows = 1
 *        backup,   masked SUM over M (late ranks add   rows = sum of the
 *        deadline  zeros, still receive the result)   shard sizes in M
 *        coded     masked SUM over the decode plan of  rows = B (exact
 *                  M (one arrived worker per group)    full-batch gradient)
 *   4. apply: g /= rows, SGD. Every rank applies the same bytes, so
 *      parameters stay bitwise identical (checksums in the step reports).
 *
 * RESCALING (backup, deadline): the step's gradient is the mean over the
 * rows that were actually contributed (k of W shards), not over B: an
 * unbiased estimate of the batch-B gradient as long as lateness does not
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

static void sleep_ms(double ms)
{
  struct timespec ts = {(time_t)(ms / 1000), (long)((ms - (time_t)(ms / 1000) * 1000) * 1e6)};
  nanosleep(&ts, NULL);
}

static void shard(const rm__policy_t *p, uint32_t B, uint32_t *lo,
                  uint32_t *hi)
{
  if (p->kind == RM__POL_CODED) {
    rm__gradcode_t gc;
    uint64_t b0, e0, b1, e1;
    int g = p->rank / (p->s + 1);
    rm__gradcode_init(&gc, p->world, p->s);
    rm__gradcode_partition_range(&gc, g * (p->s + 1), B, &b0, &e0);
    rm__gradcode_partition_range(&gc, g * (p->s + 1) + p->s, B, &b1, &e1);
    *lo = (uint32_t)b0;
    *hi = (uint32_t)e1;
  } else {
    *lo = (uint32_t)((uint64_t)B * p->rank / p->world);
    *hi = (uint32_t)((uint64_t)B * (p->rank + 1) / p->world);
  }
}

/* Simulated extra compute; returns 1 when the gate says we were dropped. */
static int slow_down(const rm__policy_t *p, uint64_t step, double ms,
                     uint8_t *members, int *decided)
{
  int64_t end = rm__now_ns() + (int64_t)(ms * 1e6), last = 0;
  while (rm__now_ns() < end) {
    double left = (double)(end - rm__now_ns()) / 1e6;
    sleep_ms(left < 1 ? left : 1);
    if (p->kind == RM__POL_NONE || !p->gate || rm__now_ns() - last < 2000000)
      continue;
    last = rm__now_ns();
    int dropped = 0;
    if (p->gate(p->ctx, step, 0, 0, members, &dropped) == 1) {
      *decided = 1;
      if (dropped) return 1;
    }
  }
  return 0;
}

static rm_status_t decide(const rm__policy_t *p, uint64_t step,
                          uint8_t *members)
{
  int dropped = 0, rc;
  int wait = p->kind == RM__POL_DEADLINE ? 0 : 30000;
  for (;;) {
    rc = p->gate(p->ctx, step, 1, wait, members, &dropped);
    if (rc != 0) break;
    if (p->kind == RM__POL_DEADLINE) sleep_ms(1);
  }
  return rc == 1 ? RM_OK : RM_ERR_ABORTED;
}

static uint32_t member_rows(const rm__policy_t *p, const uint8_t *m,
                            uint32_t B)
{
  uint32_t rows = 0;
  for (int r = 0; r < p->world; r++)
    if (m[r])
      rows += (uint32_t)((uint64_t)B * (r + 1) / p->world -
                         (uint64_t)B * r / p->world);
  return rows;
}

rm_status_t rm__policy_step(rm__trainer_t *t, rm_comm_t *comm,
                            const rm__policy_t *p, rm_step_report_t *rep)
{
  size_t np = t->model.nparams;
  uint32_t B = t->cfg.batch, lo, hi, rows = B;
  uint64_t step = t->step;
  uint8_t *members = calloc((size_t)p->world, 1), *coeff = NULL;
  rm_status_t st = RM_OK;
  int decided = 0, dropped = 0;
  memset(rep, 0, sizeof(*rep));
  if (!members) return RM_ERR_NOMEM;
  shard(p, B, &lo, &hi);
  int64_t t0 = rm__now_ns();
  rm__trainer_shard_grad(t, step, lo, hi, t->grad);
  rm__crash_point("compute", step + 1);
  double extra = p->sim_compute_ms;
  if (p->rank == p->slow_rank && p->slow_factor > 1)
    extra = (extra + (double)(rm__now_ns() - t0) / 1e6) * p->slow_factor -
            (double)(rm__now_ns() - t0) / 1e6;
  if (extra > 0) dropped = slow_down(p, step, extra, members, &decided);
  int64_t t1 = rm__now_ns();
  if (p->kind == RM__POL_NONE) {
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
      if (!decided && p->gate(p->ctx, step, 0, 0, members, &dummy) == 1) decided = 1;
      rm__crash_point("barrier", step + 1);
    }
    if (!decided) st = decide(p, step, members);
    if (st == RM_OK) rm__crash_point("allreduce", step + 1);
    int64_t tg = rm__now_ns();
    rep->wait_ms = (double)(tg - t1) / 1e6;
    t1 = tg;
    if (st == RM_OK && p->kind == RM__POL_CODED) {
      rm__gradcode_t gc;
      coeff = calloc((size_t)p->world, 1);
      st = coeff ? rm__gradcode_init(&gc, p->world, p->s) : RM_ERR_NOMEM;
      if (st == RM_OK) st = rm__gradcode_decode_plan(&gc, members, coeff, NULL);
      if (st == RM_OK)
        st = rm__masked_allreduce(comm, t->grad, t->grad, np + 2, RM_F32,
                                  RM_SUM, coeff, 0, NULL);
    } else if (st == RM_OK) {
      rows = member_rows(p, members, B);
      st = rm__masked_allreduce(comm, t->grad, t->grad, np + 2, RM_F32,
                                RM_SUM, members, 0, NULL);
    }
    (void)dropped;
  }
  int64_t t2 = rm__now_ns();
  if (st == RM_OK) {
    rm__trainer_apply(t, t->grad, rows ? rows : 1);
    rm__crash_point("checkpoint", t->step); /* arms the write that follows */
    rep->step = t->step;
    rep->compute_ms = (double)(t1 - t0) / 1e6 - rep->wait_ms;
    rep->comm_ms = (double)(t2 - t1) / 1e6;
    rep->loss = t->last_loss;
    rep->accuracy = t->last_acc;
    rep->allreduce_bytes = (np + 2) * sizeof(float);
    rep->param_checksum = rm__trainer_checksum(t);
  }
  free(members);
  free(coeff);
  return st;
}
