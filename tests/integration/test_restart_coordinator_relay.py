"""The coordinator is SIGKILLed mid-job and restarted on the same db file and
address while the workers talk to it through `ringmaster relay`: the relay's
stream ends, the workers re-join and re-open their Sessions through the
relay on a new stream (or at the coordinator, whichever answers first), no
acknowledged event is lost, and the job finishes
at the next generation with nobody declared lost by the relay."""
import os
import time

import rmtest


def test(env):
    env.start_coordinator()
    relay, via = env.start_relay(os.path.join(env.dir, "relay.sock"))
    job = env.submit(name="restart-relay", world_size=4, steps=300, heartbeat_timeout_ms=2000,
                     workload="synthetic", workload_options="bytes=524288,compute_ms=20")
    ws = [env.start_worker(job, i, env=via) for i in range(4)]
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 20, 60)
    before = env.events(job.id, job.token, timeout=1)
    addr = env.addr
    env.kill_coordinator()
    time.sleep(0.5)
    env.start_coordinator(addr)
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
    assert not [e.message for e in after if "its relay saw" in e.message]
    assert relay.poll() is None, "the relay exited"


rmtest.main(test)
