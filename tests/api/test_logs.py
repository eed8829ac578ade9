#!/usr/bin/python3
"""test_logs.py - GET /api/v1/jobs/{id}/workers/{index}/log against a real
`ringmaster serve --log-dir DIR --worker FAKE`.

The worker binary is a small shell script (the local launcher runs it like
ringmaster-worker, stdout+stderr captured in DIR/job-<id>/worker-<i>.log)
that prints known lines and exits, so every answer can be compared with
the file byte for byte. Checks: whole file, ?tail=N lines (incl. a final
line without newline), ?bytes=N, X-Log-Size/X-Log-Offset, 404 for unknown
job / index out of range / non-numeric or traversal-shaped index / a job
whose launcher starts nothing here / a log not written yet; 400 for bad
query values; a symbolic link planted in place of a log (or of the job's
folder) is refused, never followed. Every wait has a deadline.

usage: test_logs.py --ringmaster PATH
"""
import os
import stat
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rmserver import args as rmserver_args  # noqa: E402
from rmserver import Server, check, verdict  # noqa: E402

LINES = 300



FAKE_WORKER = """#!/bin/sh
# stands in for ringmaster-worker: known output on stdout and stderr, then exit 0
i=1
while [ $i -le %d ]; do
  echo "worker $RINGMASTER_LAUNCH_INDEX line $i"
  i=$((i + 1))
done
echo "worker $RINGMASTER_LAUNCH_INDEX to stderr" >&2
printf 'worker %%s end-without-newline' "$RINGMASTER_LAUNCH_INDEX"
""" % LINES


def wait_file(path, needle, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path, "rb") as f:
                data = f.read()
            if needle in data:
                return data
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    return None


def expect_404(srv, path, what):
    st, h, body = srv.request("GET", path)
    check(st == 404 and isinstance(body, dict) and body.get("error", {}).get("code") == "not_found",
          f"{what}: {path} -> {st} {body}")


def test_logs(srv, logdir):
    j = srv.submit(name="logs", world_size=2, launcher="local")
    jid = j["id"]
    base = f"/api/v1/jobs/{jid}/workers"
    files = [os.path.join(logdir, f"job-{jid}", f"worker-{i}.log") for i in range(2)]
    data = [wait_file(f, f"worker {i} end-without-newline".encode()) for i, f in enumerate(files)]
    check(all(d is not None for d in data), f"the launcher wrote both logs: {files}")
    if not all(data):
        return
    for i in range(2):
        st, h, text = srv.request("GET", f"{base}/{i}/log")
        check(st == 200 and h.get("content-type", "").startswith("text/plain"), f"log {i}: {st} {h}")
        check(text.encode() == data[i], f"log {i}: body == file ({len(text)} vs {len(data[i])} bytes)")
        check(h.get("x-log-size") == str(len(data[i])) and h.get("x-log-offset") == "0",
              f"log {i}: X-Log-Size/Offset {h.get('x-log-size')} {h.get('x-log-offset')}")
    st, h, text = srv.request("GET", f"{base}/1/log?tail=3")
    want = b"\n".join(data[1].split(b"\n")[-3:])
    check(st == 200 and text.encode() == want, f"tail=3: {text!r} != {want!r}")
    check(text.endswith("worker 1 end-without-newline") and text.count("\n") == 2,
          "tail=3: a final line without newline counts as a line")
    check(int(h.get("x-log-offset", -1)) == len(data[1]) - len(want), "tail=3: X-Log-Offset")
    st, _, text = srv.request("GET", f"{base}/0/log?tail=1")
    check(text == "worker 0 end-without-newline", f"tail=1: {text!r}")
    st, _, text = srv.request("GET", f"{base}/0/log?tail=100000")
    check(st == 200 and text.encode() == data[0], "tail larger than the file: whole file")
    st, h, text = srv.request("GET", f"{base}/0/log?bytes=10")
    check(st == 200 and text.encode() == data[0][-10:], f"bytes=10: {text!r}")
    check(h.get("x-log-offset") == str(len(data[0]) - 10), "bytes=10: X-Log-Offset")
    st, _, _ = srv.request("HEAD", f"{base}/0/log")
    check(st == 200, "HEAD on a log")
    # errors
    for q, field in (("tail=0", "tail"), ("tail=abc", "tail"), ("bytes=0", "bytes"),
                     ("bytes=99999999", "bytes"), ("tail=2&bytes=2", "bytes")):
        st, _, b = srv.request("GET", f"{base}/0/log?{q}")
        check(st == 400 and b["error"]["field"] == field, f"?{q}: {st} {b}")
    expect_404(srv, f"{base}/2/log", "index out of range")
    expect_404(srv, f"{base}/abc/log", "non-numeric index")
    expect_404(srv, f"{base}/-1/log", "negative index")
    expect_404(srv, f"{base}/..%2F..%2Fserver.log/log", "encoded traversal index")
    expect_404(srv, f"/api/v1/jobs/{jid}/workers/../../../etc/passwd/log", "traversal path")
    expect_404(srv, "/api/v1/jobs/987654/workers/0/log", "unknown job")
    expect_404(srv, "/api/v1/jobs/abc/workers/0/log", "non-numeric job")
    none_job = srv.submit(name="nolog", world_size=1, launcher="none")
    expect_404(srv, f"/api/v1/jobs/{none_job['id']}/workers/0/log", "launcher none has no logs")
    st, _, b = srv.request("POST", f"{base}/0/log", {}, token=srv.token)
    check(st == 405, f"POST on a log -> 405 ({st})")
    # A link in place of a log, or of the job folder, is refused (not followed).
    secret = os.path.join(logdir, "secret.txt")
    with open(secret, "w") as f:
        f.write("do not serve me\n")
    os.unlink(files[1])
    os.symlink(secret, files[1])
    st, _, b = srv.request("GET", f"{base}/1/log")
    check(st == 404 and "do not serve me" not in str(b), f"symlinked log refused: {st} {b}")
    jobdir = os.path.join(logdir, f"job-{jid}")
    os.rename(jobdir, jobdir + ".moved")
    os.symlink(jobdir + ".moved", jobdir)
    st, _, b = srv.request("GET", f"{base}/0/log")
    check(st == 404, f"symlinked job folder refused: {st} {b}")
    os.unlink(jobdir)
    os.mkdir(jobdir)
    os.mkfifo(files[0])  # a FIFO must not block the handler
    st, _, b = srv.request("GET", f"{base}/0/log")
    check(st == 404, f"FIFO in place of a log refused: {st} {b}")
    os.unlink(files[0])
    expect_404(srv, f"{base}/0/log", "log removed")
    check(stat.S_ISDIR(os.stat(jobdir).st_mode), "job folder still there")


def main():
    a = rmserver_args()
    tmp = tempfile.TemporaryDirectory(prefix="rm-logs-")
    logdir = os.path.join(tmp.name, "logs")
    fake = os.path.join(tmp.name, "fake-worker")
    with open(fake, "w") as f:
        f.write(FAKE_WORKER)
    os.chmod(fake, 0o755)
    srv = Server(a.ringmaster, extra=("--log-dir", logdir, "--worker", fake))
    try:
        test_logs(srv, logdir)
        st, _, _ = srv.request("GET", "/healthz")
        check(st == 200, "server still healthy")
    finally:
        rc = srv.stop()
        tmp.cleanup()
    check(rc == 0, f"server exit status {rc} after SIGTERM")
    return verdict("api logs: all checks passed")


if __name__ == "__main__":
    sys.exit(main())
