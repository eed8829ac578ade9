"""A SIGKILLed worker is detected (missed heartbeats, or a survivor's
data-plane report when the recovery code is in): the job fails with a reason
naming the lost rank, and the survivors exit non-zero (no hang)."""
import signal
import time

import rmtest


def test(env):
    env.start_coordinator()
    job = env.submit(name="kill1", world_size=4, steps=10**9, heartbeat_timeout_ms=1500,
                     workload_options="count=4096")
    ws = [env.start_worker(job, i, ["--data-timeout-ms", "60000"]) for i in range(4)]
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 5, 60)
    victim = 2
    ws[victim].send_signal(signal.SIGKILL)
    ws[victim].wait(timeout=10)
    j = env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_FAILED, 30)
    assert "lost" in j.reason, j.reason
    lost = [e for e in env.events(job.id, job.token) if e.kind == "worker_lost"]
    assert len(lost) == 1, lost
    # the rank the coordinator names is the killed process's rank
    rank = lost[0].rank
    assert ("rank %d" % rank) in j.reason, j.reason
    assert ("rank %d of 4" % rank) in env.worker_log(victim), env.worker_log(victim)
    for i, w in enumerate(ws):
        if i != victim:
            assert rmtest.wait_exit(w, 60) == 1, env.worker_log(i)


rmtest.main(test)
