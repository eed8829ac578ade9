"""Progress survives a coordinator restart (item 9): the step a
client was shown never goes backwards (not while the job re-forms, not after),
and the job's recent steps (REST /steps, the dashboard's chart) are there
again after the restart, from the stored step summaries (plus the
generation-1 reports the agents buffered during the outage, delivered after
the restart)."""
import json
import time
import urllib.request

import rmtest


def steps(http, job_id):
    return rmtest.get_json("http://%s/api/v1/jobs/%d/steps" % (http, job_id))["steps"]


def test(env):
    p = env.start_coordinator(extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(p)
    job = env.submit(name="progress", world_size=2, steps=100000, heartbeat_timeout_ms=2000,
                     workload="synthetic", workload_options="bytes=65536,compute_ms=10")
    ws = [env.start_worker(job, i) for i in range(2)]
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 40, 60)
    time.sleep(0.3)
    shown = env.get(job.id).step
    assert len(steps(http, job.id)) > 0
    addr = env.addr
    env.kill_coordinator()
    time.sleep(0.3)
    restart_ms = time.time() * 1000
    p = env.start_coordinator(addr, extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(p)
    seen = []
    deadline = time.time() + 60
    while time.time() < deadline:
        j = env.get(job.id)
        seen.append((j.state, j.step))
        if j.state == env.m.JOB_STATE_RUNNING and j.generation == 2:
            break
        time.sleep(0.05)
    assert seen[-1][0] == env.m.JOB_STATE_RUNNING, seen[-5:]
    back = [s for s in seen if s[1] < shown]
    assert not back, (shown, back[:5])
    hist = steps(http, job.id)
    old = [s for s in hist if s["generation"] == 1]
    # restored from the stored summaries: up to the last one written before
    # the kill; past it, only the reports the agents buffered while the
    # coordinator was down, delivered after the restart (rpc.c LATE STEP
    # REPORTS, tests/integration/test_report_buffer.py)
    stored = [s for s in old if s["time_ms"] < restart_ms]
    assert stored and max(s["step"] for s in stored) <= shown + 16, (shown, hist[-3:])
    assert all(s["time_ms"] > 0 for s in old), old[:3]
    env.jobs.CancelJob(env.m.CancelJobRequest(job_id=job.id, reason="test over"), timeout=10)
    for w in ws:
        rmtest.wait_exit(w, 30)


rmtest.main(test)
