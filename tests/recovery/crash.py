"""crash.py - the deterministic kill-point matrix: one coordinator
with the local launcher whose workers inherit
RINGMASTER_TEST_CRASH_AT=WHERE:STEP@1 (worker/train/crash_hook.c), so the
worker with launch index 1 SIGKILLs itself at WHERE of step STEP. Three jobs
run side by side, one per on_failure policy:

  shrink   finishes at generation 2 with 2 workers
  replace  the launcher relaunches one worker (index 3, no crash: new
           index); finishes at generation 2 with 3 workers
  fail     fails, the reason naming the lost rank

For every job: the survivors' processes end (no hang past the detection
deadlines: the test waits far longer than the 5 s heartbeat timeout but
never needs it), parameters are bitwise equal across ranks (verify=5
all-gathers the checksums every 5 steps and at the last step, and fails the
job otherwise), the accuracy band is reached (>= 0.85 on the held-out
split).

The jobs add 2 ms of simulated compute per step, which runs the step on
straggler_step.c's path; plain=True leaves it out, so the step runs on
trainer.c's plain path (policy none, nothing simulated: what a default job
runs).

The kill points exist only in test builds (RINGMASTER_TEST_HOOKS=ON); under
CTest, RM_TEST_HOOKS=0 says the build has none and every test here skips
(exit 77)."""
import os
import sys

import rc

STEP = 20
STEPS = 150


def run(env, where, policy_opts=None, plain=False):
    rc.start_local_coordinator(env, crash_at="%s:%d@1" % (where, STEP))
    extra = policy_opts or {}
    jobs = {}
    for pol in ("shrink", "replace", "fail"):
        jobs[pol] = env.submit(
            name="crash-%s-%s" % (where, pol), world_size=3,
            steps=STEPS if pol != "fail" else 10**6, heartbeat_timeout_ms=5000,
            workload="train", launcher="local",
            workload_options=rc.train_opts(env, "" if plain else "sim_compute_ms=2"),
            on_failure=pol, max_restarts=1, checkpoint_every=10, **extra)
    for pol, job in jobs.items():
        j = rc.wait_final(env, job, 120)
        log1 = rc.launcher_log(env, job, 1)
        assert "RINGMASTER_TEST_CRASH_AT: SIGKILL at %s of step %d" % (where, STEP) in log1, log1
        lost = [e for e in rc.events(env, job) if e.kind == "worker_lost"]
        assert len(lost) == 1, (pol, lost)
        if pol == "fail":
            assert j.state == env.m.JOB_STATE_FAILED, j
            assert ("rank %d" % lost[0].rank) in j.reason, j.reason
            survivors = (0, 2)
        else:
            world = 2 if pol == "shrink" else 3
            assert j.state == env.m.JOB_STATE_SUCCEEDED and j.generation == 2 \
                and j.world == world, (pol, j)
            survivors = (0, 2) if pol == "shrink" else (0, 2, 3)
        for i in survivors:
            rc.wait_pid_gone(rc.launcher_pid(env, job, i), 60)
            if pol != "fail":
                acc = rc.local_accuracy(env, job, i)
                assert acc is not None and acc >= 0.85, (pol, i, acc)
        if pol == "replace":
            assert "relaunch" in rc.kinds(env, job)
    print("%s%s: shrink, replace, fail ok" % (where, " (plain step)" if plain else ""))


def main(where, policy_opts=None, plain=False):
    if os.environ.get("RM_TEST_HOOKS") == "0":
        print("skipped: the kill points need a worker built with "
              "-DRINGMASTER_TEST_HOOKS=ON (scripts/test builds one)")
        sys.exit(77)
    rc.main_local(lambda env: run(env, where, policy_opts, plain))
