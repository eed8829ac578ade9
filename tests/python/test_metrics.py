"""python.metrics: named metrics from a program's ringmaster.step() to the
REST API, through the real parts (`ringmaster serve`, its local launcher and
agents, libringmaster, SQLite).

A 2-worker command job of a small program: 24 steps, each reported with
``ringmaster.step(loss=..., metrics={"perplexity": ..., "lr": ...})`` (rank 0
also sets ``s.metrics["tokens/s"]`` inside the block at step 10). Before its
steps, each rank tries four bad reports (a name with a space, "loss", NaN, 9
metrics): each raises ringmaster.InvalidArgument whose words name the metric
and the rule, and no step is reported for them. Checked:
  * the job succeeds; the four refusals were printed by both ranks;
  * REST /steps has steps 1..24 of each rank, each with exactly the metrics
    its program reported (values as reported);
  * after the coordinator stops and a new one opens the same database, the
    finished job's stored history (summaries of up to 16 steps) carries the
    last value of each metric of its window: tokens/s from step 10 in the
    row of step 16, perplexity and lr of steps 16 and 24.
"""
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rmtest  # noqa: E402
from rmserver import stop_serve  # noqa: E402

PROG = r"""
import json, math, ringmaster
ringmaster.init()
r = ringmaster.rank()
for bad in ({"bad name": 1.0}, {"loss": 1.0}, {"x": float("nan")},
            {"m%d" % k: 1.0 for k in range(9)}):
    try:
        with ringmaster.step(metrics=bad):
            pass
        print("ACCEPTED %r" % (bad,), flush=True)
    except ringmaster.InvalidArgument as e:
        print("REFUSED " + json.dumps(str(e)), flush=True)
for k in range(1, 25):
    with ringmaster.step(loss=4.0 / k, metrics={"perplexity": math.exp(4.0 / k),
                                                "lr": 0.01 * (r + 1) / k}) as s:
        if r == 0 and k == 10:
            s.metrics["tokens/s"] = 1234.5
ringmaster.finalize()
"""

REFUSALS = ("metric name 'bad name': byte 4 (0x20) is not allowed",
            "metric name 'loss' is the step's own field",
            "metric 'x' is NaN; a metric's value must be finite",
            "9 metrics in one step; at most 8")


def want(rank, k):
    m = {"perplexity": math.exp(4.0 / k), "lr": 0.01 * (rank + 1) / k}
    if rank == 0 and k == 10:
        m["tokens/s"] = 1234.5
    return m


def arg(name):
    return sys.argv[sys.argv.index(name) + 1]


def wait_done(c, job_id, timeout_s):
    deadline = time.monotonic() + timeout_s
    while True:
        j = c.get("/api/v1/jobs/%d" % job_id)
        if j["state"] in ("succeeded", "failed", "cancelled"):
            return j
        assert time.monotonic() < deadline, j
        time.sleep(0.2)


def steps_by_rank(srv, job_id):
    st, _, body = srv.request("GET", "/api/v1/jobs/%d/steps?limit=100000" % job_id)
    assert st == 200, (st, body)
    out = {}
    for s in body["steps"]:
        out.setdefault(s["rank"], {})[s["step"]] = s
    return out


def test():
    rm_bin = arg("--coordinator")
    c = rmtest.Coordinator(rm_bin, arg("--worker"))
    d = rmtest.tmpdir("metrics")
    prog = os.path.join(d, "metrics_prog.py")
    with open(prog, "w") as f:
        f.write(PROG)
    db = os.path.join(c.tmp.name, "rm.db")
    try:
        env = {k: os.environ[k] for k in ("PYTHONPATH", "OMP_NUM_THREADS")
               if os.environ.get(k)}
        body = {"name": "metrics", "world_size": 2, "workload": "command", "launcher": "local",
                "env": env, "command": [rmtest.PY, prog]}
        st, _, job = c.request("POST", "/api/v1/jobs", body, token=c.token)
        assert st == 201, (st, job)
        j = wait_done(c, job["id"], 120)
        logs = []
        for i in range(2):
            with open(os.path.join(c.logs, "job-%d" % job["id"], "worker-%d.log" % i),
                      errors="replace") as fh:
                logs.append(fh.read())
        assert j["state"] == "succeeded", (j, [t[-2000:] for t in logs])
        for text in logs:
            assert "ACCEPTED" not in text, text[-2000:]
            refused = [json.loads(line.split(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith("REFUSED ")]
            assert len(refused) == 4, text[-2000:]
            for got, words in zip(refused, REFUSALS):
                assert words in got, (got, words)
        live = steps_by_rank(c, job["id"])
        for rank in (0, 1):
            assert sorted(live[rank]) == list(range(1, 25)), (rank, sorted(live.get(rank, {})))
            for k, s in live[rank].items():
                assert s["metrics"] == want(rank, k), (rank, k, s["metrics"], want(rank, k))
        stop_serve(c.proc)
        again = rmtest.Server(rm_bin, token=c.token, db=db)
        try:
            back = steps_by_rank(again, job["id"])
        finally:
            again.stop()
        for rank in (0, 1):
            assert sorted(back[rank]) == [16, 24], (rank, sorted(back[rank]))
            w16 = want(rank, 16)
            if rank == 0:
                w16["tokens/s"] = 1234.5  # step 10's, the last in the window 1..16
            assert back[rank][16]["metrics"] == w16, (rank, back[rank][16])
            assert back[rank][24]["metrics"] == want(rank, 24), (rank, back[rank][24])
        print("job %d: 2 x 24 steps with perplexity and lr; after a restart the stored "
              "summaries carry %s" % (job["id"], sorted(back[0][16]["metrics"])))
    finally:
        c.stop()


if __name__ == "__main__":
    rmtest.require(torch=False)
    rmtest.main(test)
