"""The coordinator is SIGKILLed mid-job and restarted on the same db file and
address: no job or acknowledged event is lost, the workers re-join and the job
finishes at the next generation."""
import time

import rmtest


def run(env, via=None):
    """The scenario; via: the workers' environment for a relay (or None).
    Returns the job's events after the restart."""
    # 20 ms of simulated compute per step keeps the job running well past the
    # crash however fast the data plane is (it once finished 400 plain
    # all-reduce steps before the coordinator was killed).
    job = env.submit(name="restart", world_size=4, steps=300, heartbeat_timeout_ms=2000,
                     workload="synthetic", workload_options="bytes=524288,compute_ms=20")
    other = env.submit(name="other", world_size=2, steps=5)
    ws = [env.start_worker(job, i, env=via) for i in range(4)]
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 20, 60)
    before = env.events(job.id, job.token, timeout=1)
    addr = env.addr
    env.kill_coordinator()
    time.sleep(0.5)
    env.start_coordinator(addr)
    assert env.get(other.id).state == env.m.JOB_STATE_PENDING
    for i, w in enumerate(ws):
        assert rmtest.wait_exit(w, 90) == 0, env.worker_log(i)
    j = env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_SUCCEEDED, 20)
    assert j.generation == 2, j
    after = env.events(job.id, job.token, timeout=1)
    seqs = [e.seq for e in after]
    for e in before:  # every event acknowledged before the crash is still there
        assert e.seq in seqs, (e, seqs)
    kinds = [e.kind for e in after]
    assert "coordinator_restarted" in kinds and kinds.count("generation") == 2, kinds
    return after


def test(env):
    env.start_coordinator()
    run(env)


if __name__ == "__main__":
    rmtest.main(test)
