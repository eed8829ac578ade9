"""The store's fault point walked over every write step of a job's whole
life (docs/storage.md): a 2-worker job (real ringmaster-worker processes:
Join, the Session's step reports and barriers, Leave with the result, the
job's end) while the coordinator's store fails ONE write step, the Nth
(test hook RINGMASTER_TEST_STORE_FAIL=N:full|ioerr:1, test builds only;
skipped otherwise), for N = 1, 2, ... until a run meets no fault. The
coordinator's write steps follow the workers' timing, so step N is not
the same write in every run; walking every N over the whole life still
puts the fault on each kind of write (kinds alternate between runs).

In every run:
  * the job succeeds (a refused call is retried by the agents, as across
    a coordinator restart; a fault between the two workers' Leaves reloads
    a generation one worker already finished: it re-forms with the other
    one alone, job.c rm__job_resume, instead of waiting for the finished
    one until the re-formation deadline fails the job);
  * what the running coordinator shows (job, workers, the last step of
    each rank, barriers, events of the job, the result) is what a coordinator
    restarted on the file without the hook shows: no acknowledged write
    missing, no state in memory that the database lacks."""
import json
import os
import urllib.request

import rmtest

STEPS = 6
LIMIT = 400  # fault points before the test calls the walk endless
FINISHING = []  # runs whose fault fell between the workers' Leaves


def rest(http, path):
    return rmtest.get_json("http://%s%s" % (http, path))


def view(http, job):
    """What the coordinator shows of the job, minus what moves on its own
    (times, heartbeat ages, the live counts of a loaded job)."""
    j = rest(http, "/api/v1/jobs/%d" % job)
    for k in ("updated_ms", "workers_alive", "workers_joined"):  # live counts, not rows
        j.pop(k, None)
    ws = rest(http, "/api/v1/jobs/%d/workers" % job)
    ws = ws.get("workers", ws) if isinstance(ws, dict) else ws
    workers = sorted((w.get("worker_id"), w.get("rank"), w.get("state"), w.get("generation"),
                      w.get("launch_index")) for w in ws)
    # per-step samples are memory's (the table keeps summaries): only the
    # stored rows are compared, as the last step each rank reported
    steps = rest(http, "/api/v1/jobs/%d/steps" % job).get("steps", [])
    last = {}
    for s in steps:
        last[s["rank"]] = max(last.get(s["rank"], 0), s["step"])
    bars = rest(http, "/api/v1/jobs/%d/barriers" % job).get("barriers", [])
    ev = rest(http, "/api/v1/jobs/%d/events?limit=1000" % job)
    events = [(e["seq"], e["kind"], e["message"]) for e in ev.get("events", [])]
    return {"job": j, "workers": workers, "steps": sorted(last.items()), "barriers": bars, "events": events}


def one_run(env, n, kind, relay=False):
    os.environ["RINGMASTER_TEST_STORE_FAIL"] = "%d:%s:1" % (n, kind)
    try:
        p = env.start_coordinator(extra=("--http", "127.0.0.1:0"))
    finally:
        del os.environ["RINGMASTER_TEST_STORE_FAIL"]
    http = rmtest.http_addr(p)
    job = None
    for _ in range(50):  # the submission itself may be refused: retried like any client
        try:
            job = env.submit(name="walk-%d" % n, world_size=2, steps=STEPS, heartbeat_timeout_ms=6000,
                             workload="synthetic", workload_options="bytes=1024,compute_ms=1")
            break
        except env.grpc.RpcError as e:
            assert e.code() in (env.grpc.StatusCode.RESOURCE_EXHAUSTED, env.grpc.StatusCode.UNAVAILABLE), e
            assert "storage:" in e.details(), e.details()
    assert job is not None, "N=%d: submission never stored" % n
    via = None
    if relay:  # the workers' Sessions and Joins as lanes of one Relay stream
        rp, via = env.start_relay(os.path.join(env.dir, "relay-%d.sock" % n))
    ws = [env.start_worker(job, i, env=via) for i in range(2)]
    j = env.wait_job(job.id, lambda j: j.state in (env.m.JOB_STATE_SUCCEEDED, env.m.JOB_STATE_FAILED,
                                                    env.m.JOB_STATE_CANCELLED), 120)
    assert j.state == env.m.JOB_STATE_SUCCEEDED, (n, kind, j)
    for w in ws:
        rmtest.wait_exit(w, 30)
    if relay:
        rp.kill()
        rp.wait(timeout=10)
    live = view(http, job.id)
    env.kill_coordinator()
    p = env.start_coordinator(extra=("--http", "127.0.0.1:0"))
    stored = view(rmtest.http_addr(p), job.id)
    env.kill_coordinator()
    for part in live:
        assert live[part] == stored[part], "N=%d %s: %s differ across a restart:\n shown  %s\n stored %s" % (
            n, kind, part, json.dumps(live[part])[:1500], json.dumps(stored[part])[:1500])
    assert stored["job"]["state"] == "succeeded" and stored["job"]["step"] == STEPS, (n, stored["job"])
    with open(os.path.join(env.dir, "coord.log"), "rb") as f:
        log = f.read().decode(errors="replace")
    faulted = log.count("(test hook)")
    if "the others finished before it" in log:
        FINISHING.append(n)
    os.unlink(os.path.join(env.dir, "coord.log"))
    for ext in ("", "-wal", "-shm", ".key", ".lock"):
        if os.path.exists(env.db + ext):
            os.unlink(env.db + ext)
    return faulted


def walk(env, relay=False):
    kinds = ("full", "ioerr")
    walked = faults = 0
    # RINGMASTER_TEST_WALK_STRIDE=k walks every k-th fault point only: the
    # sanitizer pass (scripts/test --sanitize) takes a third of the points,
    # the default pass every one
    stride = max(1, int(os.environ.get("RINGMASTER_TEST_WALK_STRIDE", "1")))
    for n in range(1, LIMIT + 1, stride):
        hit = one_run(env, n, kinds[n % 2], relay)
        print("N=%d %s: %d fault(s) hit" % (n, kinds[n % 2], hit), flush=True)
        walked += 1
        faults += hit > 0
        if not hit:
            break
    else:
        raise AssertionError("the walk never reached the end of the job's writes (%d points)" % LIMIT)
    if faults == 0:
        print("SKIP: the coordinator has no test hooks (no write failed)")
        raise SystemExit(77)
    print("walked %d fault points (every %s) over a %d-worker, %d-step job's life%s; %d hit a "
          "write; %d fell between the two Leaves (N %s)"
          % (walked, "one" if stride == 1 else "%d-th" % stride, 2, STEPS,
             " through a relay" if relay else "", faults, len(FINISHING), FINISHING))


def test(env):
    walk(env)


if __name__ == "__main__":
    rmtest.main(test)
