"""tests/demo/rmdemo.py - a real `ringmaster serve` for the end-to-end tests.

Coordinator(rm_bin, worker_bin, env=...) starts the coordinator in a fresh
temporary folder with a SQLite file, a log folder and free ports (127.0.0.1:0,
read back from its "listening on" lines), talks REST to it with a bearer token
(urllib), and stops it by PID (SIGTERM, then SIGKILL after a deadline).

Every wait has a deadline; a helper that times out raises AssertionError with
what it last saw. Standard library only (runs on Debian's /usr/bin/python3).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
import contract  # noqa: E402


def args(argv):
    """--coordinator PATH --worker PATH [--source DIR] -> dict."""
    out, i = {}, 1
    while i + 1 < len(argv):
        out[argv[i].lstrip("-")] = argv[i + 1]
        i += 2
    return out


class Coordinator:
    def __init__(self, rm_bin, worker_bin, env=None, name="rm-demo-test"):
        self.dir = tempfile.mkdtemp(prefix=name + "-")
        self.db = os.path.join(self.dir, "ringmaster.db")
        self.logs = os.path.join(self.dir, "logs")
        self.token = "test-token-%d" % os.getpid()
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.out = open(os.path.join(self.dir, "serve.out"), "w+")
        self.err = open(os.path.join(self.dir, "serve.err"), "w+")
        self.proc = subprocess.Popen(
            [rm_bin, "serve", "--db", self.db, "--grpc", "127.0.0.1:0",
             "--http", "127.0.0.1:0", "--api-token", self.token,
             "--log-dir", self.logs, "--worker", worker_bin],
            stdout=self.out, stderr=self.err, stdin=subprocess.DEVNULL,
            cwd=self.dir, env=full_env)
        self.pid = self.proc.pid
        self.http = self.grpc = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            with open(self.out.name) as f:
                for line in f:
                    if line.startswith("ringmaster: http listening on "):
                        self.http = line.split()[-1]
                    if line.startswith("ringmaster: grpc listening on "):
                        self.grpc = line.split()[-1]
            if self.http and self.grpc:
                break
            time.sleep(0.05)
        if not self.http:
            self.stop()
            raise AssertionError("coordinator did not start: " + self.stderr())
        self.url = "http://" + self.http

    def stderr(self):
        with open(self.err.name) as f:
            return f.read()[-4000:]

    def request(self, method, path, body=None, auth=True):
        """-> (status, decoded JSON body or None)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if auth:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=20) as r:
                raw, code, hdrs = r.read(), r.status, r.headers
        except urllib.error.HTTPError as e:
            raw, code, hdrs = e.read(), e.code, e.headers
        # every answer is the document's (tests/api/contract.py)
        contract.check_answer(method, path, code, {k.lower(): v for k, v in hdrs.items()}, raw)
        return code, (json.loads(raw) if raw else None)

    def get(self, path):
        code, body = self.request("GET", path)  # reads need a token too
        assert code == 200, "GET %s -> %d %s" % (path, code, body)
        return body

    def submit(self, spec):
        code, body = self.request("POST", "/api/v1/jobs", spec)
        assert code == 201, "submit -> %d %s" % (code, body)
        return body

    def wait_state(self, job, timeout_s=120):
        """Waits for a terminal state; returns the job."""
        deadline = time.monotonic() + timeout_s
        info = None
        while time.monotonic() < deadline:
            info = self.get("/api/v1/jobs/%d" % job)
            if info["state"] in ("succeeded", "failed", "cancelled"):
                return info
            time.sleep(0.1)
        raise AssertionError("job %d not finished after %d s: %s" % (job, timeout_s, info))

    def children(self):
        """PIDs whose parent is the coordinator (its live workers)."""
        kids = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % d) as f:
                    stat = f.read()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == self.pid:
                kids.append(int(d))
        return kids

    def stop(self):
        """SIGTERM, wait 10 s, SIGKILL; by PID only."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.out.close()
        self.err.close()
        return self.proc.returncode

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def run(test, argv):
    """Runs test(opts), prints PASS/FAIL, returns the exit status."""
    opts = args(argv)
    try:
        test(opts)
    except AssertionError as e:
        print("FAIL:", e)
        return 1
    print("PASS")
    return 0
