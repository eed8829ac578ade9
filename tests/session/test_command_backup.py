"""Straggler policies for a session program: a command job of 4 workers
running examples/c/session_allreduce --gradient (rm_session_allreduce_step)
with rank 3 slowed by 60 ms a step. Under straggler_policy backup with one
backup worker the coordinator lets the first 3 gradients of a step in, the
straggler stops computing when it learns it was dropped
(rm_session_step_dropped) and still receives the average: every element is
checked exactly on every rank, some steps ran with 3 contributors, and the
job succeeds. The same under deadline, and under auto, which
starts synchronous and handles the straggler once it was late in 6 of 10
steps."""
import re

import sess


def run(env, policy):
    job = sess.submit(env, "c-" + policy,
                      [sess.EXAMPLE, "--gradient", "--steps", "40", "--step-ms", "2",
                       "--slow-rank", "3", "--slow-ms", "60"],
                      steps=40, straggler_policy=policy, backup_workers=1 if policy == "backup" else 0)
    j = sess.wait_final(env, job, timeout=120)
    assert j.state == env.m.JOB_STATE_SUCCEEDED, (policy, j, sess.log(env, job, 0)[-3000:])
    partial = []
    for i in range(4):
        m = sess.wait_log(env, job, i, r'session_allreduce: done .*"partial_steps":(\d+)')
        partial.append(int(m.group(1)))
        assert "wrong" not in sess.log(env, job, i)
    # every rank applied the same steps: the partial counts agree
    assert len(set(partial)) == 1 and partial[0] > 0, (policy, partial)


def test(env):
    sess.start(env)
    run(env, "backup")
    run(env, "deadline")
    run(env, "auto")


sess.main(test)
