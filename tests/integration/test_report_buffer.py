"""Step reports while the coordinator is away ("Hardening"):
"step reports sent while the coordinator is down are buffered by the agent
and delivered after it returns".

The agent (worker/session/session_step.c, REPORT BUFFER) keeps the reports
that fail with UNAVAILABLE while it trains on, and re-sends them in order,
with their original generation, once calls succeed again. The restarted
coordinator re-forms the job at the next generation; a report of the ended
generation from a worker that was a member of it is accepted into the step
history only (coordinator/rpc/rpc.c, LATE STEP REPORTS), labelled with its
generation and rank, and touches nothing of the current generation.

Checked, with the coordinator SIGKILLed for about a second:
  * for every rank, generation-1 steps reported after the restart - those
    past the last step the coordinator had before the kill - are there,
    consecutive, and at least a few dozen (the outage's steps);
  * the agent dropped none of them, also after it re-joined generation 2,
    and each rank's late steps reach the step generation 2 started from;
  * generation 2 starts after the outage (progress did not move back);
  * after a second SIGKILL + restart, those late steps are still in the
    history (they were stored as step summaries, not only in memory)."""
import json
import re
import time
import urllib.request

import rmtest


def steps(http, job_id):
    return rmtest.get_json("http://%s/api/v1/jobs/%d/steps?limit=100000" % (http, job_id))["steps"]


DROP = re.compile(r"dropping (\d+) undelivered step reports? of generation (\d+) "
                  r"\(steps (\d+)\.\.(\d+)\)")


def test(env):
    p = env.start_coordinator(extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(p)
    # heartbeats every 1.5 s: the agent learns of generation 2 from one and
    # re-joins; it delivers its backlog before generation 2's reports
    job = env.submit(name="report-buffer", world_size=2, steps=100000, heartbeat_timeout_ms=6000,
                     workload="synthetic", workload_options="bytes=65536,compute_ms=10")
    ws = [env.start_worker(job, i) for i in range(2)]
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 30, 60)
    pre = {}
    for s in steps(http, job.id):
        if s["generation"] == 1:
            pre[s["rank"]] = max(pre.get(s["rank"], 0), s["step"])
    assert sorted(pre) == [0, 1], pre
    addr = env.addr
    env.kill_coordinator()
    time.sleep(1.0)  # the workers train on (the data plane does not need the coordinator)
    p = env.start_coordinator(addr, extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(p)
    j = env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.generation == 2
                     and j.step > max(pre.values()) + 20, 60)
    time.sleep(0.5)
    hist = steps(http, job.id)
    late, dropped = {}, 0
    for r in (0, 1):
        got = sorted({s["step"] for s in hist
                      if s["generation"] == 1 and s["rank"] == r and s["step"] > pre[r]})
        assert got, (r, pre[r], hist[-5:])
        assert got == list(range(got[0], got[-1] + 1)), (r, got)  # in order, no gap
        late[r] = got
    for i in (0, 1):  # worker i (its rank may be the other one)
        for n, gen, a, b in (tuple(int(x) for x in m) for m in DROP.findall(env.worker_log(i))):
            # only an undelivered remainder is dropped, right after what arrived
            assert gen != 1 or a in (late[0][-1] + 1, late[1][-1] + 1), (i, (n, gen, a, b), late)
            dropped += n if gen == 1 else 0
    # the outage (>= 1 s at ~10 ms a step) made dozens of reports per worker
    assert sum(len(v) for v in late.values()) >= 40 and dropped == 0, (late, dropped)
    gen2 = [s for s in hist if s["generation"] == 2]
    assert gen2, hist[-5:]
    first2 = min(s["step"] for s in gen2)
    for r, v in late.items():  # up to the step generation 2 resumed after
        assert v[-1] >= first2 - 1, (r, v[-1], first2)
    assert min(s["step"] for s in gen2) > max(pre.values()), (gen2[:3], pre)
    print("report buffer: generation-1 steps delivered after the restart, per rank:",
          {r: (v[0], v[-1], len(v)) for r, v in late.items()}, "dropped by the agents", dropped,
          "last before the kill", pre,
          "generation 2 from", min(s["step"] for s in gen2))
    # durable: a second restart rebuilds the history from the stored summaries
    env.kill_coordinator()
    p = env.start_coordinator(addr, extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(p)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.generation == 3, 60)
    again = steps(http, job.id)
    for r, v in late.items():
        kept = {s["step"] for s in again if s["generation"] == 1 and s["rank"] == r}
        assert set(v) <= kept, (r, sorted(set(v) - kept)[:10])
    env.jobs.CancelJob(env.m.CancelJobRequest(job_id=job.id, reason="test over"), timeout=10)
    for w in ws:
        rmtest.wait_exit(w, 30)


rmtest.main(test)
