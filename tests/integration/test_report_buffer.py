"""Step reports while the coordinator is away (issue 11, "Hardening";
worker/session/session_step.c, REPORT BUFFER): a worker keeps the reports
that fail with UNAVAILABLE while it trains on, and delivers them once calls
succeed again at the same generation. A restarted coordinator re-forms the
job at the next generation and refuses reports of the old one
(FAILED_PRECONDITION), so after the re-join the backlog of generation 1 is
dropped with one warning line naming its steps, none of those steps shows
up as a generation-1 sample, and training goes on at generation 2."""
import json
import re
import time
import urllib.request

import rmtest


def steps(http, job_id):
    with urllib.request.urlopen("http://%s/api/v1/jobs/%d/steps?limit=100000" % (http, job_id),
                                timeout=10) as r:
        return json.loads(r.read())["steps"]


DROP = re.compile(r"dropping (\d+) undelivered step reports? of generation (\d+) "
                  r"\(steps (\d+)\.\.(\d+)\)")


def test(env):
    p = env.start_coordinator(extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(p)
    job = env.submit(name="report-buffer", world_size=2, steps=100000, heartbeat_timeout_ms=3000,
                     workload="synthetic", workload_options="bytes=65536,compute_ms=10")
    ws = [env.start_worker(job, i) for i in range(2)]
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 30, 60)
    before = env.get(job.id).step
    addr = env.addr
    env.kill_coordinator()
    time.sleep(1.0)  # the workers train on (the data plane does not need the coordinator)
    p = env.start_coordinator(addr, extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(p)
    j = env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.generation == 2
                     and j.step > before + 20, 60)
    time.sleep(0.5)
    hist = steps(http, job.id)
    drops = {}
    for i in range(2):
        m = DROP.findall(env.worker_log(i))
        assert m, env.worker_log(i)[-2000:]
        n, gen, a, b = (int(x) for x in m[0])
        assert gen == 1 and n == b - a + 1 and a > 0, m
        drops[i] = (a, b)
    print("report buffer: generation-1 backlog dropped per worker (steps):", drops,
          "step before kill", before, "now", j.step)
    # What the coordinator got of generation 1 stops before the dropped range
    # (those reports never reached it), for every rank.
    for s in hist:
        if s["generation"] == 1:
            assert s["step"] < max(a for a, _ in drops.values()), (s, drops)
    gen2 = [s for s in hist if s["generation"] == 2]
    assert gen2, hist[-5:]
    # Generation 2 starts from the steps the workers completed during the
    # outage (start_step = min steps done), not from the last one reported.
    assert min(s["step"] for s in gen2) > min(a for a, _ in drops.values()), (gen2[:3], drops)
    env.jobs.CancelJob(env.m.CancelJobRequest(job_id=job.id, reason="test over"), timeout=10)
    for w in ws:
        rmtest.wait_exit(w, 30)


rmtest.main(test)
