"""A coordinator restart is not a restart of the job's budget:
a `replace` job with max_restarts 1 survives one coordinator restart
(SIGKILL, restarted on the same file) and then one worker loss, which its
standby replaces; the job runs on at generation 3 and the recovery event
says "restart 1". Before the fix the restart used the budget up and the loss
failed the job with "max_restarts (1) reached"."""
import signal
import time

import rmtest


def test(env):
    env.start_coordinator()
    job = env.submit(name="budget", world_size=3, steps=2000, heartbeat_timeout_ms=2000,
                     on_failure="replace", max_restarts=1, workload="synthetic",
                     workload_options="bytes=65536,compute_ms=5")
    ws = [env.start_worker(job, i) for i in range(3)]
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 5, 60)
    standby = env.start_worker(job, 3)  # beyond world_size: waits as the standby
    time.sleep(0.5)
    addr = env.addr
    env.kill_coordinator()
    time.sleep(0.3)
    env.start_coordinator(addr)
    j = env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.generation == 2
                     and j.step >= 20, 90)
    # The restarted coordinator forms generation 2 from the first three to
    # re-join, which may include the standby: the victim is a member of it
    # (its log says so), and the one left out is the standby now.
    procs = ws + [standby]
    members = []
    deadline = time.time() + 30
    while len(members) < 3 and time.time() < deadline:
        members = [i for i in range(4) if "generation 2: rank" in env.worker_log(i)]
        time.sleep(0.05)
    assert len(members) == 3, [env.worker_log(i)[-300:] for i in range(4)]
    victim = members[1]
    procs[victim].send_signal(signal.SIGKILL)
    procs[victim].wait(timeout=20)
    done = (env.m.JOB_STATE_SUCCEEDED, env.m.JOB_STATE_FAILED, env.m.JOB_STATE_CANCELLED)
    j = env.wait_job(job.id, lambda j: j.state in done or
                     (j.state == env.m.JOB_STATE_RUNNING and j.generation >= 3), 60)
    assert j.state == env.m.JOB_STATE_RUNNING and j.generation == 3, j
    kinds = [(e.kind, e.message) for e in env.events(job.id, job.token, timeout=1)]
    assert any(k == "coordinator_restarted" for k, _ in kinds), kinds
    rec = [msg for k, msg in kinds if k == "recovery"]
    assert len(rec) == 1 and "(restart 1)" in rec[0], rec
    assert not any("max_restarts" in msg for _, msg in kinds), kinds
    env.jobs.CancelJob(env.m.CancelJobRequest(job_id=job.id, reason="test over"), timeout=10)
    for i, p in enumerate(procs):
        if i != victim:
            rmtest.wait_exit(p, 30)


rmtest.main(test)
