"""A command job of 4 workers running examples/c/session_allreduce, one
program SIGKILLed by PID mid-run, under on_failure shrink and replace:
the survivors re-form in place (rm_session_reform: the same process ids
print the banner of generation 2), keep verifying every all-reduce exactly
over the new membership, and the job succeeds. shrink: 3 members at
generation 2, the worker_lost event names the killed rank and a
program_exited event carries the signal; replace: the local launcher
starts one more agent (launch index 4) whose program joins as the fourth
member."""
import os
import signal

import sess


def run(env, policy, **kw):
    job = sess.submit(env, "c-" + policy, [sess.EXAMPLE, "--steps", "300", "--step-ms", "5"],
                      steps=300, on_failure=policy, **kw)
    pids = {i: sess.program_pid(env, job, i) for i in range(4)}
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 30, 60)
    victim_rank = sess.banners(env, job, 1)[0][2]
    os.kill(pids[1], signal.SIGKILL)
    j = sess.wait_final(env, job, timeout=150)
    assert j.state == env.m.JOB_STATE_SUCCEEDED, (policy, j, sess.log(env, job, 0)[-3000:])
    assert j.generation == 2, j
    for i in (0, 2, 3):
        b = sess.banners(env, job, i)
        assert len(b) == 2 and b[0][1] == 1 and b[1][1] == 2, (policy, i, b)
        assert b[0][0] == b[1][0] == pids[i], ("survivor restarted", policy, i, b, pids[i])
        assert "wrong" not in sess.log(env, job, i)
    ev = sess.events(env, job)
    lost = [e for e in ev if e.kind == "worker_lost"]
    assert len(lost) == 1 and lost[0].rank == victim_rank, lost
    exited = [e for e in ev if e.kind == "program_exited" and "signal 9" in e.message]
    assert exited, [(e.kind, e.message) for e in ev]
    return job, j


def test(env):
    sess.start(env)
    job, j = run(env, "shrink")
    assert j.world == 3, j
    for i in (0, 2, 3):
        assert sess.banners(env, job, i)[1][3] == 3
    job, j = run(env, "replace", max_restarts=1)
    assert j.world == 4, j
    b = sess.banners(env, job, 4)  # the relaunched agent's program
    assert len(b) == 1 and b[0][1] == 2 and b[0][3] == 4, b


sess.main(test)
