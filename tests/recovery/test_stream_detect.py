"""Detection from a broken control stream (recovery.c source 2), with a 60 s
heartbeat timeout so heartbeats cannot be what detects anything here:
(1) the only worker of a 1-worker job (no data-plane peer to report it) is
SIGKILLed: the job fails with a reason saying its control stream broke;
(2) a member of a 3-worker shrink job is SIGKILLed: it is declared lost by
the stream or a survivor's data-plane report (never a heartbeat timeout),
the job re-forms and finishes with bitwise-equal ranks (verify=5).
Also: every worker reported its devices from rm__devices_probe in Join."""
import re
import signal
import sqlite3

import rc


def test(env):
    env.start_coordinator()
    job = env.submit(name="stream1", world_size=1, steps=10**6, heartbeat_timeout_ms=60000,
                     workload="train", workload_options=rc.train_opts(env, "sim_compute_ms=2"),
                     on_failure="fail")
    w = rc.start(env, job, 1)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 10, 60)
    w[0].send_signal(signal.SIGKILL)
    w[0].wait(timeout=10)
    j = env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_FAILED, 50)
    assert "control stream broke" in j.reason and "rank 0" in j.reason, j.reason

    job = env.submit(name="stream3", world_size=3, steps=200, heartbeat_timeout_ms=60000,
                     workload="train", workload_options=rc.train_opts(env, "sim_compute_ms=2"),
                     on_failure="shrink")
    ws = rc.start(env, job, 3, first=10)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 20, 60)
    ws[1].send_signal(signal.SIGKILL)
    ws[1].wait(timeout=10)
    j = env.wait_job(job.id, lambda j: j.state in (env.m.JOB_STATE_SUCCEEDED,
                                                   env.m.JOB_STATE_FAILED), 50)
    assert j.state == env.m.JOB_STATE_SUCCEEDED and j.generation == 2 and j.world == 2, j
    lost = [e for e in rc.events(env, job) if e.kind == "worker_lost"]
    assert len(lost) == 1 and "no heartbeat" not in lost[0].message, lost
    assert "control stream broke" in lost[0].message or "reported by rank" in lost[0].message, lost
    for i in (0, 2):
        assert rc.wait_exit(ws[i], 30) == 0, env.worker_log(10 + i)
    # Join carries rm__devices_probe's list ("none", or "cuda:0 ...; rdma:...")
    with sqlite3.connect(env.db) as db:
        devs = [r[0] for r in db.execute("SELECT devices FROM workers")]
    assert devs and all(d == "none" or re.match(r"(cuda|rdma):", d) for d in devs), devs


rc.main(test)
