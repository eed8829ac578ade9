"""Finished jobs leave the coordinator's memory after their retention and
are served from SQLite (bounded memory): with
RINGMASTER_JOB_RETENTION_MS=300, a finished job's record, result, workers,
events and recent steps read the same before and after it is unloaded, and
a job cancelled at once is unloaded too. Runs against a real `ringmaster
serve` (local launcher) over REST."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from rmserver import Server  # noqa: E402


def arg(name):
    return sys.argv[sys.argv.index("--" + name) + 1]


def get(srv, path):
    st, _, body = srv.request("GET", path)
    assert st == 200, (path, st, body)
    return body


def main():
    import tempfile
    tmp = tempfile.TemporaryDirectory(prefix="rm-ret-")
    srv = Server(arg("coordinator"), env={"RINGMASTER_JOB_RETENTION_MS": "300"},
                 extra=["--worker", arg("worker"), "--log-dir", os.path.join(tmp.name, "logs")])
    try:
        j = srv.submit(name="short", world_size=2, steps=40, launcher="local",
                       workload_options="count=4096")
        deadline = time.time() + 60
        while time.time() < deadline:
            j = get(srv, "/api/v1/jobs/%d" % j["id"])
            if j["state"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.02)
        assert j["state"] == "succeeded", j
        base = "/api/v1/jobs/%d" % j["id"]
        before = [get(srv, base), get(srv, base + "/workers"), get(srv, base + "/events"),
                  get(srv, base + "/steps")]
        assert before[3]["steps"], before[3]
        time.sleep(1.0)  # past the retention: unloaded
        after = [get(srv, base), get(srv, base + "/workers"), get(srv, base + "/events"),
                 get(srv, base + "/steps")]
        for k in ("state", "reason", "result", "generation", "step", "spec", "finished_ms"):
            assert after[0][k] == before[0][k], (k, before[0][k], after[0][k])
        ws = lambda x: sorted((w["id"], w["rank"], w["state"], w["step"]) for w in x["workers"])
        assert ws(after[1]) == ws(before[1]), (before[1], after[1])
        assert after[2]["events"] == before[2]["events"]
        # the window came from the live samples; unloaded, from the stored
        # summaries: the last step of every rank is in both
        last = lambda x: {s["rank"]: max(t["step"] for t in x["steps"] if t["rank"] == s["rank"])
                          for s in x["steps"]}
        assert last(after[3]) == last(before[3]), (last(before[3]), last(after[3]))
        # a job cancelled before it ran, unloaded too, still answers
        c = srv.submit(name="gone", world_size=1)
        st, _, body = srv.request("POST", "/api/v1/jobs/%d/cancel" % c["id"], {}, token=srv.token)
        assert st == 200, (st, body)
        time.sleep(1.0)
        g = get(srv, "/api/v1/jobs/%d" % c["id"])
        assert g["state"] == "cancelled", g
        st, _, body = srv.request("POST", "/api/v1/jobs/%d/cancel" % c["id"], {}, token=srv.token)
        assert st == 409, (st, body)
        print("PASS")
    finally:
        srv.stop()
        tmp.cleanup()


main()
