"""launcher=local (the coordinator starts the workers): a worker process
SIGKILLed by PID is a member loss that the job's on_failure decides, not a
job failure.  shrink: the job finishes at generation 2 with 2 workers;
replace: the coordinator asks the launcher for ONE more worker (worker-3.log,
launch index 3) which loads the last complete checkpoint and receives the
live parameters; the job finishes at generation 2 with 3 workers; fail: the
job fails with a reason naming the lost rank.  Parameters are bitwise equal
across ranks (verify=5 all-gathers the checksums and fails the job
otherwise) and the accuracy band is reached."""
import os
import signal

import rc


def submit(env, name, policy, steps=300, **kw):
    return env.submit(name=name, world_size=3, steps=steps, heartbeat_timeout_ms=5000,
                      workload="train", launcher="local",
                      workload_options=rc.train_opts(env, "sim_compute_ms=2"),
                      on_failure=policy, checkpoint_every=10, **kw)


def kill_index(env, job, i, at_step=30):
    pid = rc.launcher_pid(env, job, i)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= at_step, 60)
    rank = rc.launcher_rank(env, job, i)
    os.kill(pid, signal.SIGKILL)
    rc.wait_pid_gone(pid)
    return rank


def check_finished(env, job, indices, gen, world):
    j = rc.wait_final(env, job)
    assert j.state == env.m.JOB_STATE_SUCCEEDED and j.generation == gen and j.world == world, j
    for i in indices:
        env.wait_job(job.id, lambda j: "test accuracy" in rc.launcher_log(env, job, i), 30)
        acc = rc.local_accuracy(env, job, i)
        assert acc is not None and acc >= 0.85, (i, acc, rc.launcher_log(env, job, i))


def test(env):
    rc.start_local_coordinator(env)
    # shrink
    job = submit(env, "local-shrink", "shrink")
    rank = kill_index(env, job, 1)
    check_finished(env, job, (0, 2), 2, 2)
    lost = [e for e in rc.events(env, job) if e.kind == "worker_lost"]
    assert len(lost) == 1 and lost[0].rank == rank, lost
    # replace: no standby, the launcher relaunches one worker (index 3)
    job = submit(env, "local-replace", "replace", max_restarts=1)
    kill_index(env, job, 1)
    check_finished(env, job, (0, 2, 3), 2, 3)
    k = rc.kinds(env, job)
    assert "relaunch" in k and k.count("recovery") == 1, k
    assert "loaded the checkpoint" in rc.launcher_log(env, job, 3), rc.launcher_log(env, job, 3)
    # fail
    job = submit(env, "local-fail", "fail", steps=10**6)
    rank = kill_index(env, job, 1, at_step=10)
    j = env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_FAILED, 60)
    assert ("rank %d" % rank) in j.reason and "lost" in j.reason, j.reason


rc.main_local(test)
