/*
 * crash_hook.c - RINGMASTER_TEST_CRASH_AT, the training step's kill points.
 *
 * Deterministic kill points (fault tests). Compiled only into test
 * builds (RINGMASTER_TEST_HOOKS=ON; common/rm_testhook.h has the no-op
 * versions for the others), inert unless the environment says
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
 *               (checkpoint/checkpoint.c's "synced" hook), so a partial
 *               checkpoint is left behind for recovery to ignore
 * The points are on both step paths: trainer.c's plain step (policy none,
 * no simulated compute) and straggler_step.c's (straggler policies, or
 * sim_compute_ms/slow_rank set).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rm_testhook.h"
#include "train_int.h"

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
  if (!strcmp(crash.where, "checkpoint")) rm__testhook_set_ckpt(crash_ckpt_hook);
}

int rm__crash_wants(const char *where, uint64_t step)
{
  if (!crash.parsed) crash_parse();
  return crash.where[0] && step == crash.step && !strcmp(where, crash.where);
}

void rm__crash_point(const char *where, uint64_t step)
{
  if (!crash.parsed) crash_parse();
  if (!crash.where[0] || step != crash.step) return;
  if (!strcmp(where, "checkpoint")) crash.ckpt_armed = 1; /* write follows */
  else if (!strcmp(where, crash.where)) crash_now(where, step);
}
