"""test_secret_env.py - a job's env values are secret, end to end.

A command job whose env holds HF_TOKEN=<secret> runs under the local
launcher with the real agent; its program writes the SHA-256 of $HF_TOKEN
to a file (so the test sees that the program got the value without the
value itself passing through any output). Then the secret must be absent
from:

  REST         GET job, the job list (keys shown, values "***"), events
  SSE          the event stream replayed from the start
  gRPC         Jobs.GetJob / Jobs.ListJobs answers (raw bytes)
  CLI          `ringmaster job ID`
  manifest     GET .../k8s-manifest of a second (pending) job with the same env
  /metrics
  files        the SQLite file, its -wal and -shm, the coordinator's log
               (debug level) and every file under the launcher's log folder

a worker log that prints the secret comes back masked ("***") from the log
endpoint (whole, tail, and an offset inside the secret) and from `ringmaster
logs`; and a database written before sealing (the env column in plaintext, no
seal columns filled) is converted on the next start: the value leaves the
file and its WAL, and the job still reads back with its keys.
"""
import hashlib
import http.client
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from rmserver import Server  # noqa: E402

import cmdtest  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from rmtestutil import wait_until  # noqa: E402

SECRET = "hf_SUPERSECRET_%d_x9Q" % os.getpid()


def no_secret(where, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    assert SECRET.encode() not in data, "the secret env value leaked into %s" % where


def sse_replay(srv, job_id, seconds=3):
    c = http.client.HTTPConnection(srv.host, srv.port, timeout=seconds)
    c.request("GET", "/api/v1/events?job=%d&last_event_id=0" % job_id,
              headers={"Authorization": "Bearer " + srv.token})
    r = c.getresponse()
    assert r.status == 200, r.status
    data = b""
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            chunk = r.read1(65536)
            if not chunk:
                break
            data += chunk
    except OSError:  # the read deadline: the stream stays open
        pass
    c.close()
    return data


def grpc_raw(srv, method, req):
    import grpc
    ch = grpc.insecure_channel(srv.grpc)
    try:
        f = ch.unary_unary("/ringmaster.v1.Jobs/" + method)  # bytes in, bytes out
        return f(req, timeout=10, metadata=(("authorization", "Bearer " + srv.token),))
    finally:
        ch.close()


def files_clean(tmp):
    for root, _, names in os.walk(tmp):
        for n in names:
            p = os.path.join(root, n)
            if os.path.isfile(p) and not n.startswith("hash"):
                with open(p, "rb") as f:
                    no_secret(p, f.read())


def running(a, tmp):
    db = os.path.join(tmp, "rm.db")
    logs = os.path.join(tmp, "logs")
    out = os.path.join(tmp, "hash.txt")
    srvlog = os.path.join(tmp, "serve.log")
    srv = Server(a.ringmaster, extra=("--db", db, "--worker", a.worker, "--log-dir", logs),
                 env={"RINGMASTER_LOG_LEVEL": "debug",
                      "RINGMASTER_COORDINATOR_TIMEOUT_MS": "8000"})
    try:
        prog = 'printf %s "$HF_TOKEN" | sha256sum | cut -d" " -f1 > "$0"; exec "$1" --steps 3 --step-ms 1'
        j = srv.submit(name="secret", workload="command", launcher="local", world_size=1,
                       command=["/bin/sh", "-c", prog, out, a.example],
                       env={"HF_TOKEN": SECRET, "OMP_NUM_THREADS": "1"})
        jid = j["id"]
        no_secret("the submit answer", repr(j))

        def done():
            st, _, g = srv.request("GET", "/api/v1/jobs/%d" % jid, token=srv.token)
            return g if g["state"] in ("succeeded", "failed", "cancelled") else None
        g = wait_until(done, "the job to end", 90)
        want = hashlib.sha256(SECRET.encode()).hexdigest()
        with open(out) as f:
            assert f.read().strip() == want, "the program did not receive the secret"
        assert g["spec"]["env"] == {"HF_TOKEN": "***", "OMP_NUM_THREADS": "***"}, g["spec"]
        # a second job with the same env, left pending: its manifest
        p = srv.submit(name="pending", workload="command", launcher="none", world_size=1,
                       command=["x"], env={"HF_TOKEN": SECRET})
        for path in ("/api/v1/jobs/%d" % jid, "/api/v1/jobs", "/api/v1/jobs/%d/events" % jid,
                     "/api/v1/jobs/%d/workers" % jid, "/api/v1/jobs/%d/k8s-manifest" % p["id"],
                     "/metrics"):
            st, _, body = srv.request("GET", path, token=srv.token)
            assert st == 200, (path, st, body)
            no_secret(path, repr(body))
        no_secret("the event stream", sse_replay(srv, jid))
        gj = grpc_raw(srv, "GetJob", b"\x08" + bytes([jid]))
        assert b"HF_TOKEN=***" in gj, gj
        no_secret("gRPC GetJob", gj)
        no_secret("gRPC ListJobs", grpc_raw(srv, "ListJobs", b"\x08\x01"))
        cli = subprocess.run([a.ringmaster, "job", str(jid), "--server", "http://" + srv.http,
                              "--token", srv.token], capture_output=True, text=True, timeout=30)
        assert cli.returncode == 0 and "HF_TOKEN=***" in cli.stdout, cli
        no_secret("ringmaster job", cli.stdout + cli.stderr)
        shutil.copy(srv.log.name, srvlog)
    finally:
        srv.stop()
    files_clean(tmp)
    return db


def logs_masked(a, tmp):
    """A program that prints the secret: the log endpoint and `ringmaster
    logs` mask it, a read from an offset inside it too."""
    logs = os.path.join(tmp, "logs2")
    srv = Server(a.ringmaster, extra=("--db", os.path.join(tmp, "l.db"), "--worker", a.worker,
                                      "--log-dir", logs),
                 env={"RINGMASTER_COORDINATOR_TIMEOUT_MS": "8000"})
    try:
        prog = 'echo "key=$HF_TOKEN end"; echo "again $HF_TOKEN"; exec "$0" --steps 3 --step-ms 1'
        jid = srv.submit(name="printer", workload="command", launcher="local", world_size=1,
                         command=["/bin/sh", "-c", prog, a.example],
                         env={"HF_TOKEN": SECRET, "SHORT": "2"})["id"]

        def done():
            st, _, g = srv.request("GET", "/api/v1/jobs/%d" % jid)
            return g["state"] in ("succeeded", "failed", "cancelled")
        wait_until(done, "the printing job to end", 90)
        path = "/api/v1/jobs/%d/workers/0/log" % jid
        raw = open(os.path.join(logs, "job-%d" % jid, "worker-0.log"), "rb").read()
        assert SECRET.encode() in raw, "the program did not print the secret"
        st, h, body = srv.request("GET", path)
        assert st == 200 and "key=*** end" in body and "again ***" in body, body
        no_secret("the worker log", body)
        assert h["x-log-next-offset"] == str(len(raw)), (h, len(raw))
        st, _, body = srv.request("GET", path + "?tail=5")
        no_secret("the worker log's tail", body)
        inside = raw.index(SECRET.encode()) + 3  # an offset in the middle of the secret
        st, h, body = srv.request("GET", path + "?offset=%d" % inside)
        assert st == 200 and SECRET[3:] not in body and body.startswith(" end"), body
        assert int(h["x-log-next-offset"]) == len(raw), h
        for args in (["logs", str(jid)], ["logs", str(jid), "--worker", "0"]):
            out = subprocess.run([a.ringmaster, *args, "--server", "http://" + srv.http],
                                 capture_output=True, text=True, timeout=30)
            assert out.returncode == 0 and "key=*** end" in out.stdout, out
            no_secret("ringmaster " + " ".join(args), out.stdout + out.stderr)
    finally:
        srv.stop()


def migrated(a, tmp):
    """A database whose env column holds the plaintext (as before sealing)."""
    db = os.path.join(tmp, "old.db")
    srv = Server(a.ringmaster, extra=("--db", db))
    try:
        jid = srv.submit(name="old", workload="command", command=["x"],
                         env={"HF_TOKEN": "placeholder"})["id"]
    finally:
        srv.stop()
    con = sqlite3.connect(db)
    con.execute("UPDATE jobs SET env=?, env_salt='', env_sealed='', env_mac='' WHERE id=?",
                (("HF_TOKEN=%s\0" % SECRET).encode(), jid))
    con.commit()
    con.close()
    with open(db, "rb") as f:
        assert SECRET.encode() in f.read(), "the fixture did not write the plaintext"
    srv = Server(a.ringmaster, extra=("--db", db))
    try:
        for n in ("", "-wal"):
            if os.path.exists(db + n):
                with open(db + n, "rb") as f:
                    no_secret("the converted " + db + n, f.read())
        st, _, g = srv.request("GET", "/api/v1/jobs/%d" % jid, token=srv.token)
        assert st == 200 and g["spec"]["env"] == {"HF_TOKEN": "***"}, g
    finally:
        srv.stop()
    con = sqlite3.connect(db)
    (sealed,) = con.execute("SELECT env_sealed FROM jobs WHERE id=?", (jid,)).fetchone()
    con.close()
    assert len(sealed) == 2 * len("HF_TOKEN=%s\0" % SECRET), sealed


def main():
    a = cmdtest.args()
    tmp = tempfile.mkdtemp(prefix="rm-secret-")
    try:
        running(a, tmp)
        migrated(a, tmp)
        logs_masked(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
