"""Worker logs after a recovery: the log link follows the LAUNCH index, not
the rank.

A 3-worker train job (local launcher, on_failure replace, max_restarts 1):
the worker with launch index 1 is SIGKILLed by PID (the agent's first log
line) once the job has passed step 30; the coordinator asks the launcher for
one more worker, which gets launch index 3 (worker-3.log) and takes over a
rank below 3. Checked over the REST API once the job succeeded:
  - every worker row has "launch_index"; the replacement's is 3 and differs
    from its rank, the dead worker (launch index 1) is "lost";
  - GET /jobs/{id}/workers/{launch_index}/log serves exactly that process's
    log for every worker, the replacement's too (index 3 >= world 3: it was
    "index out of range" before), and its pid line is the replacement's;
  - an index no worker has (4) is still 404;
  - workers.launch_index in SQLite after the coordinator stopped.
"""
import json
import os
import re
import signal
import sqlite3
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rmdemo  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from rmtestutil import wait_until  # noqa: E402

WORLD = 3


def log_file(c, job, i):
    try:
        with open(os.path.join(c.logs, "job-%d" % job, "worker-%d.log" % i)) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def pid_of(text):
    m = re.search(r"ringmaster-worker: pid (\d+)", text)
    return int(m.group(1)) if m else None


def log_api(c, job, index):
    try:
        req = urllib.request.Request("%s/api/v1/jobs/%d/workers/%d/log" % (c.url, job, index),
                                     headers={"Authorization": "Bearer " + c.token})
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def test(opts):
    c = rmdemo.Coordinator(opts["coordinator"], opts["worker"], name="rm-log-index")
    try:
        ckpt = os.path.join(c.dir, "ckpt")
        job = c.submit({"name": "log-index", "world_size": WORLD, "workload": "train",
                        "steps": 300, "on_failure": "replace", "max_restarts": 1,
                        "checkpoint_every": 10, "heartbeat_timeout_ms": 5000,
                        "workload_options": "batch=64,verify=5,sim_compute_ms=2,ckpt_dir=" + ckpt})["id"]
        victim = wait_until(lambda: pid_of(log_file(c, job, 1)), "worker-1's pid line", 90, 0.05)
        wait_until(lambda: c.get("/api/v1/jobs/%d" % job)["step"] >= 30, "step 30", 90, 0.05)
        os.kill(victim, signal.SIGKILL)
        info = c.wait_state(job, 120)
        assert info["state"] == "succeeded", (info, c.get("/api/v1/jobs/%d/events" % job))
        # the logs are compared byte for byte: wait until no worker writes any more
        wait_until(lambda: not c.children(), "the workers to exit", 30, 0.05)
        workers = c.get("/api/v1/jobs/%d/workers" % job)["workers"]
        by_index = {w["launch_index"]: w for w in workers}
        assert sorted(by_index) == [0, 1, 2, 3], (workers, c.get("/api/v1/jobs/%d/events" % job))
        assert by_index[1]["state"] == "lost", by_index[1]
        repl = by_index[3]
        assert repl["state"] == "left" and 0 <= repl["rank"] < WORLD, repl
        print("replacement: launch index 3, rank %d" % repl["rank"])
        for i, w in sorted(by_index.items()):
            st, body = log_api(c, job, i)
            assert st == 200, (i, st, body)
            assert body == log_file(c, job, i), "log %d differs from worker-%d.log" % (i, i)
        assert pid_of(log_api(c, job, 3)[1]) not in (None, victim), "replacement log"
        assert pid_of(log_api(c, job, 1)[1]) == victim, "the dead worker's log"
        st, body = log_api(c, job, 4)
        assert st == 404 and "launch index" in json.loads(body)["error"]["message"], (st, body)
        assert c.stop() == 0, "coordinator exit status"
        con = sqlite3.connect("file:%s?mode=ro" % c.db, uri=True)
        try:
            rows = con.execute("SELECT launch_index, rank, state FROM workers WHERE job_id=? "
                               "ORDER BY launch_index", (job,)).fetchall()
        finally:
            con.close()
        assert [r[0] for r in rows] == [0, 1, 2, 3] and rows[3][1] == repl["rank"], rows
        print("sqlite workers (launch_index, rank, state): %s" % rows)
    finally:
        c.cleanup()


if __name__ == "__main__":
    sys.exit(rmdemo.run(test, sys.argv))
