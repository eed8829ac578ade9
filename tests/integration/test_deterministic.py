"""Bitwise reproducible jobs (item 11): "deterministic": true.

Three runs of one `train` spec (3 workers, the local launcher) end on the
same parameter checksum, and so does a run in which a worker is SIGKILLed
mid-training and replaced (on_failure replace: the launcher starts a new
one, which loads the last checkpoint and receives the live parameters); the
spec is refused with straggler policies whose participants depend on timing.
Without the flag the choice of `auto` comes from timing (1 of 6 plain runs
ended on other bits when this test was written), which is why the flag
exists. Runs against a real `ringmaster serve` over REST."""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from rmserver import Server  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DATASET = os.path.join(HERE, "..", "..", "data", "digits", "digits.csv")


def arg(name):
    return sys.argv[sys.argv.index("--" + name) + 1]


def wait(srv, job_id, pred, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        st, _, j = srv.request("GET", "/api/v1/jobs/%d" % job_id)
        if st == 200 and pred(j):
            return j
        time.sleep(0.05)
    raise AssertionError("job %d: condition not met in %d s: %s" % (job_id, timeout, j))


def worker_pid(srv, logs, job_id, index):
    path = os.path.join(logs, "job-%d" % job_id, "worker-%d.log" % index)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("ringmaster-worker: pid "):
                        return int(line.split()[-1])
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("no pid line in " + path)


def main():
    logs = None
    srv = None
    try:
        import tempfile
        tmp = tempfile.TemporaryDirectory(prefix="rm-det-")
        logs = os.path.join(tmp.name, "logs")
        srv = Server(arg("coordinator"), extra=["--worker", arg("worker"), "--log-dir", logs])
        spec = dict(world_size=3, steps=150, workload="train", launcher="local",
                    deterministic=True, heartbeat_timeout_ms=3000,
                    workload_options="dataset=%s,batch=64,hidden=64,verify=5,ckpt_dir=%s" %
                    (DATASET, os.path.join(tmp.name, "ckpt")))
        sums = []
        for k in range(3):
            j = srv.submit(name="det%d" % k, **spec)
            assert j["spec"]["deterministic"] is True, j["spec"]
            j = wait(srv, j["id"], lambda x: x["state"] in ("succeeded", "failed", "cancelled"))
            assert j["state"] == "succeeded", j
            sums.append(j["result"]["param_checksum"])
        assert len(set(sums)) == 1, sums
        # a replaced worker: the same bits
        rs = dict(spec, on_failure="replace", max_restarts=1, checkpoint_every=10,
                  workload_options=spec["workload_options"] + ",sim_compute_ms=20")
        j = srv.submit(name="det-replace", **rs)
        wait(srv, j["id"], lambda x: x["state"] == "running" and x["step"] >= 40)
        os.kill(worker_pid(srv, logs, j["id"], 1), signal.SIGKILL)
        j = wait(srv, j["id"], lambda x: x["state"] in ("succeeded", "failed", "cancelled"))
        assert j["state"] == "succeeded" and j["generation"] == 2, j
        st, _, ev = srv.request("GET", "/api/v1/jobs/%d/events" % j["id"])
        assert any(e["kind"] == "recovery" for e in ev["events"]), ev
        assert j["result"]["param_checksum"] == sums[0], (j["result"], sums)
        # refused where timing decides the participants
        for pol in ("backup", "deadline", "coded"):
            st, _, e = srv.request("POST", "/api/v1/jobs", dict(spec, name="x", straggler_policy=pol,
                                   backup_workers=1), token=srv.token)
            assert st == 400 and e["error"]["field"] == "deterministic", (pol, st, e)
        st, _, e = srv.request("POST", "/api/v1/jobs", dict(spec, name="x", deterministic="yes"),
                               token=srv.token)
        assert st == 400 and e["error"]["field"] == "deterministic", (st, e)
        print("PASS")
        return 0
    finally:
        if srv:
            srv.stop()


sys.exit(main())
