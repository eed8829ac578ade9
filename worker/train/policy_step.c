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
 * TEST HOOK: deterministic kill points (issue 6 fault tests). Compiled in
 * always, inert unless the environment says
 *
 *   RINGMASTER_TEST_CRASH_AT=WHERE:STEP[@INDEX]
 *
 * and then the process SIGKILLs itself (no cleanup, like a real crash) at
 * WHERE of global step STEP (1-based, the step being computed), after one
 * line on stderr. With @INDEX only the process whose
 * RINGMASTER_LAUNCH_INDEX is INDEX does (the local launcher gives every
 * worker the coordinator's environment; a relaunched worker gets a new
 * index and never crashes). WHERE:
 *   compute     in the middle of the step's compute (after the shard
 *               gradient, before the simulated compute)
 *   barrier     in the step gate: after this rank asked the coordinator
 *               for the step's participant set, before it is ready, while
 *               its peers wait there (gated straggler policies; under
 *               `none` there is no gate and this is the same as allreduce)
 *   allreduce   entering the step's (masked) all-reduce, with its peers
 *               already in it and waiting for its data
 *   checkpoint  inside the atomic write of the step's checkpoint: the
 *               temporary file is written and fsynced, not yet renamed
 *               (aggregate/checkpoint.c's "synced" hook), so a partial
 *               checkpoint is left behind for recovery to ignore
 * The points are on this file's path (straggler policies, or
 * sim_compute_ms/slow_rank set), which every recovery test uses.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "aggregate/aggregate.h"
#include "aggregate/checkpoint.h"
#include "aggregate/gradcode.h"
#include "rm_clock.h"
#include "rm_log.h"
#include "train_int.h"

/* ---- test hook: RINGMASTER_TEST_CRASH_AT ---- */
static struct {
  int parsed;
  char where[16];
  uint64_t step;
  int ckpt_armed;
} crash;

static void crash_now(const char *where, uint64_t step)
{
  fprintf(stderr, "ringmaster-worker: test hook RINGMASTER_TEST_CRASH_AT: "
          "SIGKILL at %s of step %llu (pid %d)\n", where,
          (unsigned long long)step, (int)getpid());
  fflush(stderr);
  kill(getpid(), SIGKILL);
}

static void crash_ckpt_hook(const char *stage)
{
  if (crash.ckpt_armed && !strcmp(stage, "synced"))
    crash_now("checkpoint", crash.step);
}

static void crash_parse(void)
{
  const char *v = getenv("RINGMASTER_TEST_CRASH_AT"), *at, *mine;
  unsigned long long step = 0;
  crash.parsed = 1;
  if (!v || sscanf(v, "%15[a-z]:%llu", crash.where, &step) != 2) {
    crash.where[0] = 0;
    return;
  }
  crash.step = step;
  at = strchr(v, '@');
  mine = getenv("RINGMASTER_LAUNCH_INDEX");
  if (at && (!mine || atoi(at + 1) != atoi(mine))) crash.where[0] = 0;
  if (!strcmp(crash.where, "checkpoint")) rm__ckpt_test_hook = crash_ckpt_hook;
}

/* 1 when the hook names (where, step). */
static int crash_wants(const char *where, uint64_t step)
{
  if (!crash.parsed) crash_parse();
  return crash.where[0] && step == crash.step && !strcmp(where, crash.where);
}

/* Kill this process if the hook names (where, step); step is 1-based. */
static void crash_point(const char *where, uint64_t step)
{
  if (!crash.parsed) crash_parse();
  if (!crash.where[0] || step != crash.step) return;
  if (!strcmp(where, "checkpoint")) crash.ckpt_armed = 1; /* write follows */
  else if (!strcmp(where, crash.where)) crash_now(where, step);
}

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
  crash_point("compute", step + 1);
  double extra = p->sim_compute_ms;
  if (p->rank == p->slow_rank && p->slow_factor > 1)
    extra = (extra + (double)(rm__now_ns() - t0) / 1e6) * p->slow_factor -
            (double)(rm__now_ns() - t0) / 1e6;
  if (extra > 0) dropped = slow_down(p, step, extra, members, &decided);
  int64_t t1 = rm__now_ns();
  if (p->kind == RM__POL_NONE) {
    crash_point("barrier", step + 1); /* no gate: the collective is it */
    crash_point("allreduce", step + 1);
    st = rm_allreduce(comm, t->grad, t->grad, np + 2, RM_F32, RM_SUM);
  } else {
    if (crash_wants("barrier", step + 1)) {
      /* Not ready: the gate opens the step and peers wait. A rank the gate
       * already dropped from this step (slow under load) still dies here,
       * so the kill point does not depend on timing. */
      int dummy = 0;
      if (!decided && p->gate(p->ctx, step, 0, 0, members, &dummy) == 1) decided = 1;
      crash_point("barrier", step + 1);
    }
    if (!decided) st = decide(p, step, members);
    if (st == RM_OK) crash_point("allreduce", step + 1);
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
    crash_point("checkpoint", t->step); /* arms the write that follows */
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
