"""The coordinator is SIGKILLed mid-training and restarted on the same db
file and address: the workers re-join, the job finishes at the next
generation with bitwise-equal parameters (verify=5), every event
acknowledged before the crash is still there in the same order, and the
last complete checkpoint recorded before the crash is kept."""
import time

import rc


def test(env):
    env.start_coordinator()
    job = env.submit(name="crestart", world_size=3, steps=400, heartbeat_timeout_ms=2000,
                     workload="train", workload_options=rc.train_opts(env, "sim_compute_ms=2"),
                     on_failure="shrink", checkpoint_every=10)
    ws = rc.start(env, job, 3)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 40, 60)
    before = env.events(job.id, job.token, timeout=1)
    addr = env.addr
    env.kill_coordinator()
    time.sleep(0.3)
    env.start_coordinator(addr)
    j = env.wait_job(job.id, lambda j: j.state in (env.m.JOB_STATE_SUCCEEDED,
                                                   env.m.JOB_STATE_FAILED), 90)
    # a re-formation to a third generation means a worker went silent after
    # re-joining: its own log says what it was doing
    assert j.state == env.m.JOB_STATE_SUCCEEDED and j.generation == 2, \
        (j, [env.worker_log(i)[-3000:] for i in range(len(ws))])
    for i, w in enumerate(ws):
        assert rc.wait_exit(w, 30) == 0, env.worker_log(i)
        acc = rc.accuracy(env, i)
        assert acc is not None and acc >= 0.85, (i, acc)
    after = env.events(job.id, job.token, timeout=1)
    assert [(e.seq, e.kind, e.message) for e in after[:len(before)]] == \
        [(e.seq, e.kind, e.message) for e in before]
    kinds = [e.kind for e in after]
    assert "coordinator_restarted" in kinds and "checkpoint" in kinds, kinds


rc.main(test)
