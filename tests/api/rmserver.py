"""rmserver.py - start a real `ringmaster serve` on free ports for tests.

The server is started with --grpc 127.0.0.1:0 --http 127.0.0.1:0 and a temp
SQLite file; the bound ports are read from its stdout lines
"ringmaster: grpc listening on HOST:PORT" / "ringmaster: http listening on
HOST:PORT" (with a deadline). stop() sends SIGTERM to that PID, waits, and
SIGKILLs it if it does not exit in time.
"""
import argparse
import http.client
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import contract  # noqa: E402


# The read-only token every test server accepts (RINGMASTER_READ_TOKEN), and
# run_cli hands the CLI: reads need a token (docs/security.md).
READ_TOKEN = "test-read-token"
# Every process a test starts inherits it: its `ringmaster job/jobs/logs`
# calls read with it, while submit and cancel still need the API token.
os.environ.setdefault("RINGMASTER_READ_TOKEN", READ_TOKEN)


def read_addresses(proc, seconds=20):
    """(http, grpc): the addresses a `ringmaster serve` process prints on its
    stdout, None for one not printed within seconds or before it exited."""
    http = grpc = None
    deadline = time.monotonic() + seconds
    buf = b""
    fd = proc.stdout.fileno()
    while (http is None or grpc is None) and time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.5)
        if not r:
            if proc.poll() is not None:
                break
            continue
        data = os.read(fd, 4096)  # raw reads: no hidden buffering behind select()
        if not data:
            break
        buf += data
        for line in buf.decode(errors="replace").splitlines():
            if line.startswith("ringmaster: http listening on "):
                http = line.rsplit(" ", 1)[1].strip()
            if line.startswith("ringmaster: grpc listening on "):
                grpc = line.rsplit(" ", 1)[1].strip()
    return http, grpc


def terminate(proc, seconds=15):
    """SIGTERM, up to seconds to exit, then SIGKILL; its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait(timeout=10)


def stop_serve(proc):
    """terminate() a `ringmaster serve`, then close its stdout; its exit
    status."""
    rc = terminate(proc)
    proc.stdout.close()
    return rc


class Server:
    def __init__(self, binary, token="test-token", env=None, extra=(), db=None):
        self.tmp = tempfile.TemporaryDirectory(prefix="rm-api-")
        self.binary = binary
        self.token = token
        e = dict(os.environ)
        e.update({"RINGMASTER_API_TOKEN": token, "RINGMASTER_LOG_LEVEL": "warn",
                  "RINGMASTER_READ_TOKEN": READ_TOKEN})
        self.read_token = READ_TOKEN
        e.update(env or {})
        self.log = open(os.path.join(self.tmp.name, "server.log"), "w")
        self.proc = subprocess.Popen(
            [binary, "serve", "--db", db or os.path.join(self.tmp.name, "rm.db"), "--grpc", "127.0.0.1:0",
             "--http", "127.0.0.1:0", *extra],
            stdout=subprocess.PIPE, stderr=self.log, env=e)
        self.http, self.grpc = read_addresses(self.proc)
        if self.http is None:
            self.stop()
            raise RuntimeError("ringmaster serve did not print its http address")
        self.host, port = self.http.rsplit(":", 1)
        self.port = int(port)

    def request(self, method, path, body=None, token=None, headers=None, raw=None):
        """Returns (status, headers dict lower-cased, parsed JSON or text).
        Reads (GET, HEAD) carry the API token unless token is given ("" for
        none): the server guards them; mutations carry only the token given."""
        c = http.client.HTTPConnection(self.host, self.port, timeout=30)
        h = dict(headers or {})
        if token is None and method in ("GET", "HEAD"):
            token = self.token
        if token:
            h["Authorization"] = "Bearer " + token
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if data is not None:
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read().decode("utf-8", "replace")
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        # Every answer a test receives is the document's (contract.py).
        contract.check_answer(method, path, r.status, hdrs, None if method == "HEAD" else text)
        if method != "HEAD" and hdrs.get("content-type", "").startswith("application/json"):
            return r.status, hdrs, json.loads(text)
        return r.status, hdrs, text

    def submit(self, **spec):
        spec.setdefault("launcher", "none")
        spec.setdefault("world_size", 1)
        st, _, j = self.request("POST", "/api/v1/jobs", spec, token=self.token)
        assert st == 201, (st, j)
        return j

    def stop(self):
        stop_serve(self.proc)
        self.log.close()
        self.tmp.cleanup()
        return self.proc.returncode


# ---- shared by the HTTP tests ----
FAILS = []  # every failed check(); a test exits 1 when it is not empty


def check(cond, what):
    """Record (and print) a failed check; the test goes on."""
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, file=sys.stderr)
    return cond


def verdict(ok_line):
    """A test's exit status: 1 when a check() failed (their count on
    stderr), else 0 after printing ok_line."""
    if FAILS:
        print(f"{len(FAILS)} check(s) failed", file=sys.stderr)
        return 1
    print(ok_line)
    return 0


def spec_post(srv, body):
    """POST body as a job spec with the admin token: (status, JSON)."""
    st, _, j = srv.request("POST", "/api/v1/jobs", body, token=srv.token)
    return st, j


def spec_refused(srv, body, field, words=(), code="invalid_value"):
    """The spec is a 400 `code` naming `field`, its message holding every
    word and not cut short."""
    st, j = spec_post(srv, body)
    e = j.get("error", {}) if isinstance(j, dict) else {}
    ok = check(st == 400 and e.get("field") == field and e.get("code") == code,
               f"{body}: wanted 400 {code} naming {field}, got {st} {j}")
    msg = e.get("message", "")
    for w in words:
        check(w in msg, f"{body}: {w!r} not in {msg!r}")
    check(not msg.endswith("..."), f"{body}: message cut: {msg!r}")
    return ok


def spec_accepted(srv, body):
    """The spec is a 201: the job as GET /api/v1/jobs/ID shows it, or None."""
    st, j = spec_post(srv, body)
    if not check(st == 201, f"{body}: wanted 201, got {st} {j}"):
        return None
    st, _, g = srv.request("GET", "/api/v1/jobs/%d" % j["id"])
    return g if check(st == 200, f"GET job {j['id']}: {st}") else None


def args():
    """The HTTP tests' command line: --ringmaster BINARY, parsed."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringmaster", required=True)
    return ap.parse_args()


def spec_main(label, tests, restart):
    """The job-spec tests' main: each of tests(srv) against one server,
    then restart(binary) with its own; exit status 1 on any failed check."""
    a = args()
    srv = Server(a.ringmaster)
    try:
        for t in tests:
            t(srv)
    finally:
        rc = srv.stop()
    check(rc == 0, f"server exit status {rc} after SIGTERM")
    restart(a.ringmaster)
    return verdict(f"api {label}: all checks passed")


def run_cli(binary, url, *args, token=None, timeout=60):
    """Run the CLI against url with only the given token in its environment:
    (exit code, stdout, stderr)."""
    env = dict(os.environ)
    env.pop("RINGMASTER_API_TOKEN", None)
    env["RINGMASTER_SERVER"] = url
    env["RINGMASTER_READ_TOKEN"] = READ_TOKEN  # reads work; mutations need token
    if token:
        env["RINGMASTER_API_TOKEN"] = token
    p = subprocess.run([binary, *args], env=env, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def sse_slots(srv):
    """Event-stream slots in use, from /metrics (ringmaster_sse_streams);
    -1 when the gauge is missing."""
    st, _, text = srv.request("GET", "/metrics")
    for line in text.splitlines():
        if line.startswith("ringmaster_sse_streams"):
            return int(float(line.split()[-1]))
    return -1
