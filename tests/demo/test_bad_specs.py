"""Bad job specs are refused before anything is launched.

Each spec below is POSTed to a real coordinator (local launcher registered).
Wanted for every one: 400 with error.field naming the culprit, and nothing
created: no job in GET /api/v1/jobs, no job folder under the log dir, no
child process of the coordinator, no row in the SQLite jobs table.

  launcher "mpi"                          -> field launcher
  world_size 0 (no min/max_workers)       -> field world_size
  train, workload_options dataset=/nonexistent/digits.csv (string form)
                                          -> field workload_options
  train, workload_options {"dataset": ...} (object form)  -> workload_options
  world_size "four"                        -> field world_size (type)

Then a good spec on the same coordinator still runs (the refusals left no
state behind that stops it) and gets job id 1.
"""
import os
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rmdemo  # noqa: E402

BAD = [
    ({"name": "bad-launcher", "world_size": 2, "launcher": "mpi"}, "launcher"),
    ({"name": "bad-world", "world_size": 0, "workload": "train"}, "world_size"),
    ({"name": "bad-dataset", "world_size": 2, "workload": "train",
      "workload_options": "batch=16, dataset=/nonexistent/digits.csv"}, "workload_options"),
    ({"name": "bad-dataset-obj", "world_size": 2, "workload": "train",
      "workload_options": {"dataset": "/nonexistent/digits.csv", "batch": 16}},
     "workload_options"),
    ({"name": "bad-type", "world_size": "four"}, "world_size"),
]


def test(opts):
    c = rmdemo.Coordinator(opts["coordinator"], opts["worker"])
    try:
        for spec, field in BAD:
            code, body = c.request("POST", "/api/v1/jobs", spec)
            assert code == 400, "%s -> %d %s" % (spec, code, body)
            err = body["error"]
            assert err["field"] == field, "%s: field %r, wanted %r (%s)" % (
                spec["name"], err["field"], field, err["message"])
            print("refused %-16s %s" % (spec["name"], err["message"]))
        # the local launcher forks synchronously after submit; give a wrongly
        # accepted job's start a moment to show before looking
        time.sleep(0.5)
        listed = c.get("/api/v1/jobs")
        assert listed["total"] == 0 and listed["jobs"] == [], listed
        assert not os.path.exists(c.logs) or os.listdir(c.logs) == [], os.listdir(c.logs)
        assert c.children() == [], "coordinator has children: %s" % c.children()
        con = sqlite3.connect("file:%s?mode=ro" % c.db, uri=True)
        try:
            n = con.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
        finally:
            con.close()
        assert n == 0, "%d job rows in SQLite" % n
        # a good spec still works on the same coordinator
        job = c.submit({"name": "good", "world_size": 2, "workload": "train", "steps": 20,
                        "workload_options": {"batch": 16}})
        assert job["id"] == 1, job
        info = c.wait_state(job["id"], 120)
        assert info["state"] == "succeeded", info
    finally:
        c.cleanup()


if __name__ == "__main__":
    sys.exit(rmdemo.run(test, sys.argv))
