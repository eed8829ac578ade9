"""End to end with the local launcher: a real 4-worker `train` job submitted
over the REST API trains to the stated accuracy band and succeeds, and its
history is in the coordinator's SQLite file.

Stated band: held-out test accuracy >= 0.90 after 200 steps (global batch 64,
64 hidden units, lr 0.05; measured 0.9721 on the digits' 20% test split). Every
rank logs the same accuracy (identical parameters; verify=50 also compares the
parameter checksums across ranks every 50 steps and would fail the job).

After the job, with the coordinator stopped, the SQLite file holds:
  events        job_submitted; job_state pending->forming, forming->running,
                running->succeeded; 4 worker_joined; generation 1 formed; 4
                worker_left "finished after step 200"
  step_summaries per rank, steps 1..200 exactly once (sum of counts = 200)
  jobs/workers  state succeeded, step 200 (the job's and every worker's);
                jobs.result = rank 0's summary (result_rank 0), workers.result
                = each rank's, one job_result event
The job's result over the API (GET /jobs/{id} "result") is rank 0's Leave
summary: its accuracy equals the logged one, every rank agrees (the
job_result event says so, no result_mismatch), the job list carries none.
"""
import glob
import json
import os
import re
import sqlite3
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rmdemo  # noqa: E402

WORLD, STEPS, BAND = 4, 200, 0.90


def accuracies(logs):
    acc = {}
    for f in sorted(glob.glob(os.path.join(logs, "worker-*.log"))):
        with open(f) as fh:
            m = re.search(r"test accuracy ([0-9.]+), test loss ([0-9.]+)", fh.read())
        assert m, "no final accuracy line in %s" % f
        acc[os.path.basename(f)] = float(m.group(1))
    return acc


def check_api(c, job):
    info = c.wait_state(job, 180)
    assert info["state"] == "succeeded", "job ended %s: %s" % (info["state"], info["reason"])
    assert info["step"] == STEPS and info["steps_total"] == STEPS, \
        "job step %d of %d, wanted %d" % (info["step"], info["steps_total"], STEPS)
    workers = c.get("/api/v1/jobs/%d/workers" % job)["workers"]
    assert sorted(w["rank"] for w in workers) == list(range(WORLD)), workers
    assert all(w["launch_index"] == w["rank"] for w in workers), \
        "first generation: launch index == rank: %s" % workers
    assert all(w["state"] == "left" and w["step"] == STEPS for w in workers), workers
    steps = c.get("/api/v1/jobs/%d/steps?limit=%d" % (job, WORLD * STEPS))["steps"]
    last = [s for s in steps if s["step"] == STEPS]
    assert sorted(s["rank"] for s in last) == list(range(WORLD)), last
    assert all(s["allreduce_bytes"] > 0 and s["loss"] is not None for s in last), last
    acc = accuracies(os.path.join(c.logs, "job-%d" % job))
    assert len(acc) == WORLD, acc
    assert len(set(acc.values())) == 1, "ranks disagree: %s" % acc
    a = next(iter(acc.values()))
    print("test accuracy %.4f (band >= %.2f), final train loss %.4f" % (a, BAND, last[0]["loss"]))
    assert BAND <= a <= 1.0, "test accuracy %.4f outside [%.2f, 1]" % (a, BAND)
    # the job's result (rank 0's Leave summary) is what the workers logged
    res = info.get("result")
    assert isinstance(res, dict), "no result in GET /jobs/%d: %s" % (job, res)
    assert abs(res["accuracy"] - a) < 5e-5, "result accuracy %s, logs %.4f" % (res["accuracy"], a)
    assert res["steps"] == STEPS and res["test_samples"] > 0 and "test_loss" in res, res
    ev = c.get("/api/v1/jobs/%d/events" % job)["events"]
    jr = [e for e in ev if e["kind"] == "job_result"]
    assert len(jr) == 1 and jr[0]["rank"] == 0, jr
    assert "%d of %d ranks reported one, they agree" % (WORLD, WORLD) in jr[0]["message"], jr
    assert ("accuracy %.6f" % res["accuracy"]) in jr[0]["message"], jr
    assert not [e for e in ev if e["kind"] in ("result_mismatch", "result_refused")], ev
    print("result: %s" % jr[0]["message"])
    listed = c.get("/api/v1/jobs")["jobs"]
    assert all("result" not in j for j in listed), "the job list carries no result"


def check_sqlite(db, job):
    con = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    try:
        ev = con.execute("SELECT kind, message FROM events WHERE job_id=? ORDER BY seq",
                         (job,)).fetchall()
        kinds = [k for k, _ in ev]
        states = [m.split(":")[0] for k, m in ev if k == "job_state"]
        assert kinds[0] == "job_submitted", kinds
        assert states == ["pending -> forming", "forming -> running",
                          "running -> succeeded"], states
        assert kinds.count("worker_joined") == WORLD, kinds
        assert kinds.count("generation") == 1, kinds
        left = [m for k, m in ev if k == "worker_left"]
        assert len(left) == WORLD and all(("after step %d" % STEPS) in m for m in left), left
        rows = con.execute("SELECT rank, SUM(count), MIN(first_step), MAX(last_step) FROM "
                           "step_summaries WHERE job_id=? GROUP BY rank ORDER BY rank",
                           (job,)).fetchall()
        assert rows == [(r, STEPS, 1, STEPS) for r in range(WORLD)], rows
        job_row = con.execute("SELECT state, step, world FROM jobs WHERE id=?", (job,)).fetchone()
        assert job_row == (3, STEPS, WORLD), "jobs row (state 3 = succeeded): %s" % (job_row,)
        wsteps = con.execute("SELECT step FROM workers WHERE job_id=?", (job,)).fetchall()
        assert wsteps == [(STEPS,)] * WORLD, wsteps
        res = con.execute("SELECT result, result_rank FROM jobs WHERE id=?", (job,)).fetchone()
        assert res[1] == 0 and json.loads(res[0])["steps"] == STEPS, "jobs.result: %s" % (res,)
        wres = con.execute("SELECT result FROM workers WHERE job_id=?", (job,)).fetchall()
        assert len(wres) == WORLD and all(json.loads(r)["steps"] == STEPS for r, in wres), wres
        assert kinds.count("job_result") == 1, kinds
        print("sqlite: %d events, %d step-summary rows" %
              (len(ev), con.execute("SELECT COUNT(*) FROM step_summaries WHERE job_id=?",
                                    (job,)).fetchone()[0]))
    finally:
        con.close()


def test(opts):
    c = rmdemo.Coordinator(opts["coordinator"], opts["worker"])
    try:
        job = c.submit({"name": "e2e-train", "world_size": WORLD, "workload": "train",
                        "steps": STEPS, "workload_options": "batch=64,hidden=64,lr=0.05,verify=50"})
        assert job["spec"]["launcher"] == "local", job
        check_api(c, job["id"])
        # the CLI shows the result too (`ringmaster job ID`)
        env = dict(os.environ, RINGMASTER_SERVER=c.url, RINGMASTER_API_TOKEN=c.token)
        out = subprocess.run([opts["coordinator"], "job", str(job["id"])], env=env,
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0 and re.search(r"^  result +accuracy 0\.\d{4} ", out.stdout, re.M), \
            "cli job: %s %s" % (out.stdout, out.stderr)
        assert c.stop() == 0, "coordinator exit status"
        check_sqlite(c.db, job["id"])
    finally:
        c.cleanup()


if __name__ == "__main__":
    sys.exit(rmdemo.run(test, sys.argv))
