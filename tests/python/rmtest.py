"""Helpers of the Python tests: skipping (exit 77), free ports, starting N
real processes and killing what we started (by PID, with a deadline), and a
coordinator (tests/api/rmserver.py's) for the command-job tests. Standard library only; the tests run
under Debian's /usr/bin/python3."""
import atexit
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(REPO, "examples", "pytorch", "digits.py")
PY = "/usr/bin/python3"
SKIP = 77
_started = []


def skip(reason):
    print("SKIP: " + reason, flush=True)
    sys.exit(SKIP)


def require(torch=True):
    """Exit 77 unless numpy (and torch) import in this interpreter and the
    library loads."""
    try:
        import numpy  # noqa: F401
    except ImportError as e:
        skip("%s cannot import numpy (%s); install python3-numpy" % (sys.executable, e))
    if torch:
        try:
            import torch as _t  # noqa: F401
        except ImportError as e:
            skip("%s cannot import torch (%s); install python3-torch" % (sys.executable, e))
    sys.path.insert(0, os.path.join(REPO, "python"))
    try:
        import ringmaster  # noqa: F401
    except ImportError as e:
        skip("ringmaster does not load: %s" % e)


def env(**extra):
    e = dict(os.environ)
    pp = os.path.join(REPO, "python")
    e["PYTHONPATH"] = pp + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    e.setdefault("RINGMASTER_TIMEOUT_MS", "15000")
    e.setdefault("OMP_NUM_THREADS", "1")
    for k, v in extra.items():
        e[k] = str(v)
    return e


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n):
    """n distinct free TCP ports on 127.0.0.1 (held open together, then
    released), drawn below the kernel's ephemeral range: a program binds
    them seconds later (torch's store, a data plane), and in between any
    outgoing connect() on the host (the other tests run beside this one)
    could take a port of that range. Below it only an explicit bind can,
    as for the agent's MASTER_PORT (worker/agent/supervise.c)."""
    lo = _ephemeral_low()
    socks, ports = [], []
    tries = 0
    while len(ports) < n:
        s = socket.socket()
        tries += 1
        want = random.randrange(10000, lo) if lo > 11000 and tries <= 64 * n else 0
        try:
            s.bind(("127.0.0.1", want))
        except OSError:
            s.close()
            continue
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Proc:
    def __init__(self, argv, env_, log, name):
        self.name, self.log = name, log
        self.fh = open(log, "w")
        self.p = subprocess.Popen(argv, stdout=self.fh, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env_)
        self.pid = self.p.pid
        _started.append(self)

    def output(self):
        self.fh.flush()
        with open(self.log, errors="replace") as f:
            return f.read()

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


def wait_all(procs, timeout_s):
    """Wait for every process; past the deadline SIGKILL the rest (by PID)
    and fail. Returns the exit codes."""
    deadline = time.monotonic() + timeout_s
    for p in procs:
        left = deadline - time.monotonic()
        try:
            p.p.wait(timeout=max(left, 0.1))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            for q in procs:
                q.p.wait()
            raise AssertionError("%s still running after %d s; killed. Its output:\n%s"
                                 % (p.name, timeout_s, p.output()[-3000:]))
    return [p.p.returncode for p in procs]


def wait_for(proc, pattern, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = re.search(pattern, proc.output())
        if m:
            return m
        if proc.p.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError("%s: no %r within %d s (exit %s):\n%s"
                         % (proc.name, pattern, timeout_s, proc.p.poll(), proc.output()[-3000:]))


@atexit.register
def _kill_started():
    for p in _started:
        p.kill()
        try:
            p.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        p.fh.close()


def tmpdir(name):
    d = tempfile.mkdtemp(prefix="rm-py-%s-" % name)
    atexit.register(shutil.rmtree, d, True)
    return d


def results(text):
    return [json.loads(m) for m in re.findall(r"RESULT (\{.*\})", text)]


def run_group(name, n, argv_of, timeout_s=180, extra_env=None, torchrun=True, codes_of=None):
    """Start n processes (argv_of(rank)), torchrun-style environment; wait;
    assert all exit 0 (or codes_of[rank], e.g. -9 for a rank that SIGKILLs
    itself); return their outputs."""
    d = tmpdir(name)
    mport = free_ports(1)[0]
    procs = []
    for r in range(n):
        e = env(**(extra_env or {}))
        if torchrun:
            e.update(RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                     LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(mport))
        procs.append(Proc(argv_of(r), e, os.path.join(d, "rank%d.log" % r), "%s rank %d" % (name, r)))
    codes = wait_all(procs, timeout_s)
    outs = [p.output() for p in procs]
    for r, (c, o) in enumerate(zip(codes, outs)):
        want = (codes_of or {}).get(r, 0)
        assert c == want, "%s rank %d exited %d (not %d):\n%s" % (name, r, c, want, o[-3000:])
    return outs


# ---- the coordinator (command jobs) -----------------------------------------
sys.path.insert(0, os.path.join(REPO, "tests", "api"))
from rmserver import Server  # noqa: E402  (the project's `ringmaster serve` fixture)


class Coordinator(Server):
    """A real `ringmaster serve` (tests/api/rmserver.py) with the local
    launcher starting worker_bin and its logs under self.logs."""

    def __init__(self, rm_bin, worker_bin, extra_env=None):
        self.bin = rm_bin
        self.dir = tmpdir("coord")
        self.logs = os.path.join(self.dir, "logs")
        self.env = env(**(extra_env or {}))
        super().__init__(rm_bin, token="py-test-%d" % os.getpid(), env=self.env,
                         extra=("--log-dir", self.logs, "--worker", worker_bin))
        self.url = "http://" + self.http

    def get(self, path):
        st, _, body = self.request("GET", path)
        assert st == 200, (path, st, body)
        return body

    def cli(self, args, timeout_s, name="ringmaster run"):
        """Start the CLI (e.g. run -n 4 -- prog); a Proc to wait for."""
        e = dict(self.env, RINGMASTER_SERVER=self.url, RINGMASTER_API_TOKEN=self.token)
        return Proc([self.bin] + args, e,
                    os.path.join(self.dir, "cli-%d.log" % len(_started)), name)

    def events(self, job):
        return self.get("/api/v1/jobs/%d/events" % job)["events"]

    def wait_job(self, job, timeout_s, poll_s=0.2):
        """The job once it is terminal (succeeded, failed, cancelled);
        AssertionError after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            j = self.get("/api/v1/jobs/%d" % job)
            if j["state"] in ("succeeded", "failed", "cancelled"):
                return j
            if time.monotonic() >= deadline:
                raise AssertionError("job %d not finished in %d s: %s" % (job, timeout_s, j))
            time.sleep(poll_s)


def descendants(pid):
    """PIDs of every descendant of pid (from /proc)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        todo += kids
    return out


def main(fn):
    try:
        fn()
    except AssertionError as e:
        print("FAIL: %s" % e, flush=True)
        sys.exit(1)
    print("PASS", flush=True)
