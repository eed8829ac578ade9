"""test_owner_only.py - the coordinator's files are owner-only.

Under the usual umask 022, a fresh `ringmaster serve` with a command job
run by the local launcher leaves: the database, its -wal and -shm 0600,
the log folder and the job's folder 0700, the worker's log 0600. A restart
over a database and a log made wider (0644 / 0755) warns, naming them.
"""
import os
import shutil
import stat
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from rmserver import Server  # noqa: E402

import cmdtest  # noqa: E402


def mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def main():
    a = cmdtest.args()
    os.umask(0o022)
    tmp = tempfile.mkdtemp(prefix="rm-owner-")
    db, logs = os.path.join(tmp, "rm.db"), os.path.join(tmp, "logs")
    extra = ("--db", db, "--log-dir", logs, "--worker", a.worker)
    try:
        srv = Server(a.ringmaster, extra=extra, env={"RINGMASTER_COORDINATOR_TIMEOUT_MS": "8000"})
        try:
            j = srv.submit(name="o", workload="command", launcher="local", world_size=1,
                           command=[a.example, "--steps", "3", "--step-ms", "1"])
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                st, _, g = srv.request("GET", "/api/v1/jobs/%d" % j["id"])
                if g["state"] in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(0.2)
            assert g["state"] == "succeeded", g
            for f in (db, db + "-wal", db + "-shm"):
                assert os.path.exists(f), f
                assert mode(f) == 0o600, "%s is %o" % (f, mode(f))
            job_dir = os.path.join(logs, "job-%d" % j["id"])
            for d in (logs, job_dir):
                assert mode(d) == 0o700, "%s is %o" % (d, mode(d))
            log = os.path.join(job_dir, "worker-0.log")
            assert mode(log) == 0o600, "%s is %o" % (log, mode(log))
        finally:
            srv.stop()
        os.chmod(db, 0o644)
        os.chmod(logs, 0o755)
        os.chmod(log, 0o644)
        srv = Server(a.ringmaster, extra=extra)
        try:
            time.sleep(0.5)
            with open(srv.log.name) as f:
                text = f.read()
        finally:
            srv.stop()
        for want in (db + " has mode 0644", "log folder " + logs + " has mode 0755",
                     "1 worker log is"):
            assert want in text, (want, text)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
