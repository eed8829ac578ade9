"""test_run.py - `ringmaster run` with the real agent.

  succeeds     run -n 3 -- session_allreduce --steps 20: exit 0, the job id
               first on stdout, each rank's output prefixed [0] [1] [2], the
               progress lines (submitted, job_state ... succeeded) on stderr
  fails        run -n 2 -- sh -c 'echo oops >&2; exit 3': exit 1, the
               outcome names the status and the stderr line
  shrink       run -n 3 --on-failure shrink -- sh: every rank runs the
               example; rank 2's is SIGKILLed after 3 s: the run shows the
               worker loss and exits 0 (the job shrank to 2 and succeeded)
  private      no --server, RINGMASTER_SERVER unset, nothing at the default
               address: run starts its own coordinator (says so), state in
               ./ringmaster-run/, and stops it by PID at the end
  Ctrl-C       SIGINT while the example runs: the job is cancelled, exit 130
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from rmserver import Server  # noqa: E402

import cmdtest  # noqa: E402


def run(a, args, timeout=180, cwd=None, env=None):
    e = dict(os.environ, RINGMASTER_WORKER_BIN=a.worker)
    e.update(env or {})
    return subprocess.run([a.ringmaster, "run", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=e)


def default_port_free():
    s = socket.socket()
    try:
        return s.connect_ex(("127.0.0.1", 8080)) != 0
    finally:
        s.close()


def with_server(a):
    logs = tempfile.mkdtemp(prefix="rm-cmd-logs-")
    srv = Server(a.ringmaster, extra=("--worker", a.worker, "--log-dir", logs),
                 env={"RINGMASTER_COORDINATOR_TIMEOUT_MS": "8000"})
    url = ["--server", "http://" + srv.http, "--token", srv.token]
    try:
        r = run(a, ["-n", "3", *url, "--", a.example, "--steps", "20", "--step-ms", "1"])
        assert r.returncode == 0, (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
        out = r.stdout.splitlines()
        assert out[0].isdigit(), out[:3]
        for i in range(3):
            assert any(l.startswith("[%d] " % i) for l in out), r.stdout[-3000:]
        assert "submitted" in r.stderr and "succeeded" in r.stderr, r.stderr

        r = run(a, ["-n", "2", *url, "--", "/bin/sh", "-c", "echo oops >&2; exit 3"])
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        assert "failed" in r.stderr and "status 3" in r.stderr and "oops" in r.stderr, r.stderr
        assert "[0] oops" in r.stdout or "[1] oops" in r.stdout, r.stdout

        script = ('[ "$RINGMASTER_LAUNCH_INDEX" = 2 ] || exec "$0" --steps 300 --step-ms 20; '
                  '"$0" --steps 300 --step-ms 20 & p=$!; sleep 3; kill -9 $p; '
                  'echo "rank 2 killed" >&2; exit 1')
        r = run(a, ["-n", "3", "--on-failure", "shrink", *url, "--", "/bin/sh", "-c", script,
                    a.example])
        assert r.returncode == 0, (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
        assert "worker_lost" in r.stderr and "recovery" in r.stderr, r.stderr

        p = subprocess.Popen([a.ringmaster, "run", "-n", "2", *url, "--", a.example, "--steps",
                              "100000", "--step-ms", "20"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, RINGMASTER_WORKER_BIN=a.worker))
        job = p.stdout.readline().strip()
        deadline = time.time() + 60
        while time.time() < deadline:
            st, _, j = srv.request("GET", "/api/v1/jobs/%s" % job)
            if j.get("state") == "running":
                break
            time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 130, (p.returncode, err[-2000:])
        st, _, j = srv.request("GET", "/api/v1/jobs/%s" % job)
        assert j["state"] == "cancelled", j
    finally:
        srv.stop()
        shutil.rmtree(logs, ignore_errors=True)


def private(a):
    if not default_port_free():
        print("note: something listens on 127.0.0.1:8080; private-coordinator case skipped")
        return
    cwd = tempfile.mkdtemp(prefix="rm-run-private-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGMASTER_")}
    env.update(RINGMASTER_WORKER_BIN=a.worker, RINGMASTER_COORDINATOR_TIMEOUT_MS="8000")
    try:
        r = subprocess.run([a.ringmaster, "run", "-n", "2", "--", a.example, "--steps", "10",
                            "--step-ms", "1"], capture_output=True, text=True, timeout=180,
                           cwd=cwd, env=env)
        private_check(r, cwd)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def private_check(r, cwd):
    """What the private-coordinator case must show (its run's result r, in cwd)."""
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    assert "started a private one" in r.stderr and "stopping the private coordinator" in r.stderr
    assert os.path.exists(os.path.join(cwd, "ringmaster-run", "ringmaster.db"))
    pid = int(r.stderr.split("stopping the private coordinator (pid ")[1].split(")")[0])
    try:
        os.kill(pid, 0)
        raise AssertionError("private coordinator %d still runs" % pid)
    except ProcessLookupError:
        pass


def main():
    a = cmdtest.args()
    a.ringmaster, a.worker, a.example = map(os.path.abspath, (a.ringmaster, a.worker, a.example))
    with_server(a)
    private(a)
    print("PASS")


if __name__ == "__main__":
    main()
