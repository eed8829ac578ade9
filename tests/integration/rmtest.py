"""rmtest.py - shared helpers for the integration tests.

Starts a real `ringmaster serve` on 127.0.0.1:0 (the bound port is read from
its "ringmaster: grpc listening on HOST:PORT" line), real ringmaster-worker
processes, and generates Python gRPC stubs from proto/ at test time into a
temporary folder (Debian's python3-grpcio + grpc_tools). Every wait has a
deadline; every process started is stopped by PID at the end.
"""
import argparse
import shutil
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
import contract  # noqa: E402

SKIP = 77  # CTest SKIP_RETURN_CODE


def args():
    p = argparse.ArgumentParser()
    p.add_argument("--coordinator", required=True)
    p.add_argument("--worker", required=True)
    p.add_argument("--proto", required=True)
    return p.parse_args()


def grpc_call_details(d, metadata):
    """A copy of grpc.ClientCallDetails d with other metadata."""
    import collections
    import grpc
    fields = ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")

    class Details(collections.namedtuple("Details", fields), grpc.ClientCallDetails):
        pass
    return Details(d.method, d.timeout, metadata, d.credentials,
                   getattr(d, "wait_for_ready", None), getattr(d, "compression", None))


class Env:
    def __init__(self, a):
        self.a = a
        # RM_KEEP=1 keeps the folder (logs, db) for a post-mortem.
        self.dir = tempfile.mkdtemp(prefix="rm-it-")
        self.procs = []
        try:
            import grpc  # noqa: F401
            from grpc_tools import protoc
        except ImportError as e:
            print("SKIP: python3-grpcio / grpc_tools missing:", e)
            sys.exit(SKIP)
        out = os.path.join(self.dir, "py")
        os.makedirs(out)
        inc = os.path.join(os.path.dirname(protoc.__file__), "_proto")
        rc = protoc.main(["protoc", "-I" + a.proto, "-I" + inc, "--python_out=" + out,
                          "--grpc_python_out=" + out,
                          os.path.join(a.proto, "ringmaster/v1/messages.proto"),
                          os.path.join(a.proto, "ringmaster/v1/service.proto")])
        assert rc == 0, "protoc failed"
        sys.path.insert(0, out)
        import grpc
        from ringmaster.v1 import messages_pb2, service_pb2_grpc
        self.grpc, self.m, self.s = grpc, messages_pb2, service_pb2_grpc
        self.db = os.path.join(self.dir, "ringmaster.db")
        self.coord = None
        self.addr = None
        # The coordinator's one API token: Jobs.SubmitJob/CancelJob need it
        # as "authorization: Bearer" metadata (self.authed adds it).
        self.token = "it-token-%d" % os.getpid()

    def authed(self, channel, token=None):
        """The channel with the admin token's metadata on every call."""
        grpc, md = self.grpc, (("authorization", "Bearer " + (token or self.token)),)

        class Auth(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
            def _details(self, d):
                return grpc_call_details(d, tuple(d.metadata or ()) + md)

            def intercept_unary_unary(self, cont, d, req):
                return cont(self._details(d), req)

            def intercept_unary_stream(self, cont, d, req):
                return cont(self._details(d), req)

        return grpc.intercept_channel(channel, Auth())

    # ---- coordinator ----
    def start_coordinator(self, addr="127.0.0.1:0", extra=()):
        log = open(os.path.join(self.dir, "coord.log"), "ab")
        p = subprocess.Popen([self.a.coordinator, "serve", "--db", self.db, "--grpc", addr,
                              "--api-token", self.token, "--read-token", READ_TOKEN, *extra],
                             stdout=subprocess.PIPE, stderr=log)
        self.procs.append(p)
        deadline = time.time() + 20
        line = b""
        while time.time() < deadline:
            line = p.stdout.readline()
            if b"grpc listening on" in line or not line:
                break
        assert b"grpc listening on" in line, "coordinator did not start: %r" % line
        self.addr = line.decode().split()[-1]
        self.coord = p
        self.raw_channel = self.grpc.insecure_channel(self.addr)
        self.channel = self.authed(self.raw_channel)
        self.jobs = self.s.JobsStub(self.channel)
        self.worker = self.s.WorkerStub(self.channel)
        return p

    def kill_coordinator(self, sig=signal.SIGKILL):
        self.coord.send_signal(sig)
        self.coord.wait(timeout=20)
        self.raw_channel.close()

    def submit(self, **spec):
        spec.setdefault("launcher", "none")
        r = self.jobs.SubmitJob(self.m.SubmitJobRequest(spec=self.m.JobSpec(**spec)), timeout=10)
        return r.job

    def join_all(self, job, n, port0, **extra):
        """n workers Join job at once (threads: the group forms when all are
        in); their JoinResponses in order. Data addresses 127.0.0.1:port0+i."""
        res = [None] * n

        def join(i):
            res[i] = self.worker.Join(self.m.JoinRequest(
                job_id=job.id, token=job.token, host="h",
                data_addr="127.0.0.1:%d" % (port0 + i), wait_ms=10000, **extra), timeout=20)
        ts = [threading.Thread(target=join, args=(i,)) for i in range(n)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        return res

    def get(self, job_id):
        return self.jobs.GetJob(self.m.GetJobRequest(job_id=job_id), timeout=10).job

    def wait_job(self, job_id, pred, timeout=60):
        deadline = time.time() + timeout
        j = None
        while time.time() < deadline:
            try:
                j = self.get(job_id)
                if pred(j):
                    return j
            except self.grpc.RpcError:
                pass
            time.sleep(0.1)
        raise AssertionError("job %d: condition not met in %d s; last %s" % (job_id, timeout, j))

    def events(self, job_id, token, after=0, timeout=3):
        """Every event of the job so far, through the Watch stream."""
        out = []
        st = self.worker.Watch(self.m.WatchRequest(job_id=job_id, token=token, after_seq=after),
                               timeout=timeout)
        try:
            for ev in st:
                out.append(ev)
        except self.grpc.RpcError as e:
            if e.code() != self.grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        return out

    # ---- workers ----
    def start_worker(self, job, i, extra=(), env=None):
        """env: variables added to this process's environment for it."""
        log = open(os.path.join(self.dir, "worker%d.log" % i), "ab")
        p = subprocess.Popen([self.a.worker, "--coordinator", self.addr, "--job", str(job.id),
                              "--token", job.token, "--host", "host%d" % (i % 2), *extra],
                             stdout=log, stderr=subprocess.STDOUT,
                             env=dict(os.environ, **env) if env else None)
        self.procs.append(p)
        return p

    def start_relay(self, sock, env=None):
        """`ringmaster relay` for this coordinator on unix socket sock (env:
        variables added to its environment); the environment workers need
        to go through it."""
        log = open(os.path.join(self.dir, "relay.log"), "ab")
        p = subprocess.Popen([self.a.coordinator, "relay", "--coordinator", self.addr,
                              "--listen", "unix:" + sock], stdout=subprocess.PIPE, stderr=log,
                             env=dict(os.environ, **env) if env else None)
        self.procs.append(p)
        line = p.stdout.readline()
        assert b"relay listening on" in line, line
        return p, {"RINGMASTER_RELAY": "unix:" + sock}

    def worker_log(self, i):
        with open(os.path.join(self.dir, "worker%d.log" % i), "rb") as f:
            return f.read().decode(errors="replace")

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                except ProcessLookupError:
                    pass
                p.wait(timeout=20)
        if os.environ.get("RM_KEEP"):
            print("kept", self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


class SessionStream:
    """A bidirectional Worker call fed from a queue, its messages read by a
    thread into .got; .code / .details once it ended.

    method: "Session" (the default; SessionRequest in, SessionResponse out)
    or "Relay" (RelayRequest in, RelayResponse out).
    raw: False (the default) sends and reads messages through the generated
    WorkerStub. True sends and reads serialized bytes through a generic
    stream_stream call on the channel, so that a test can send malformed
    bytes, which the stub could not build, and read answers as bytes."""

    def __init__(self, env, first, raw=False, method="Session"):
        self.q = queue.Queue()
        self.q.put(first)
        if raw:
            fn = env.channel.stream_stream("/ringmaster.v1.Worker/" + method)
        else:
            fn = getattr(env.worker, method)
        self.call = fn(iter(self.q.get, None), timeout=60)
        self.got, self.code, self.details = [], None, None
        self.t = threading.Thread(target=self._read)
        self.t.start()

    def _read(self):
        try:
            for r in self.call:
                self.got.append(r)
            self.code = self.call.code()
        except Exception as e:  # grpc.RpcError
            self.code = e.code()
            self.details = e.details()

    def send(self, m):
        self.q.put(m)

    def end(self, timeout=10):
        """Half-close; the status it ended with."""
        self.q.put(None)
        return self.wait(timeout)

    def wait(self, timeout=10):
        self.t.join(timeout)
        assert not self.t.is_alive(), "Session did not end in %d s" % timeout
        return self.code

    def answers(self, n, timeout=20):
        """.got once it holds n messages (or the stream ended)."""
        t0 = time.time()
        while time.time() < t0 + timeout and len(self.got) < n and self.code is None:
            time.sleep(0.02)
        assert len(self.got) >= n, (self.got, self.code, self.details)
        return self.got


# The read-only token every coordinator of these tests accepts: REST reads
# and gRPC Jobs.GetJob/ListJobs need a token (docs/security.md).
READ_TOKEN = "rmtest-read-token"


def get_json(url):
    """GET url (a REST read) with the read token; the decoded JSON."""
    import json
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + READ_TOKEN})
    with urllib.request.urlopen(req, timeout=10) as r:
        raw = r.read()
        # every answer is the document's (tests/api/contract.py)
        contract.check_answer("GET", urllib.parse.urlsplit(url).path, r.status,
                              {k.lower(): v for k, v in r.headers.items()}, raw)
        return json.loads(raw)


def metrics(http):
    """The coordinator's /metrics text (its REST address: http_addr)."""
    with urllib.request.urlopen("http://%s/metrics" % http, timeout=10) as r:
        return r.read().decode()


def metric(http, name):
    """One unlabelled sample of /metrics, as a float."""
    for line in metrics(http).splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no %s in /metrics" % name)


def wait_until(pred, what, timeout=20):
    """pred()'s first true value within timeout s, else an AssertionError
    naming what was waited for."""
    t0 = time.time()
    while time.time() < t0 + timeout:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError("timed out waiting for " + what)


def http_addr(p):
    """The REST address a coordinator started with --http prints after its
    gRPC line (start_coordinator read up to that one)."""
    deadline = time.time() + 20
    while time.time() < deadline:
        line = p.stdout.readline()
        if b"http listening on" in line:
            return line.decode().split()[-1]
        if not line:
            break
    raise AssertionError("the coordinator printed no http line")


def wait_exit(p, timeout):
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("process %d did not exit within %d s" % (p.pid, timeout))


def fill_disk(path):
    """Create path and write zeros to it until the file system refuses: every
    free byte taken (the disk-full tests)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096) > 0:
            pass
    except OSError:
        pass
    os.close(fd)


def main(test):
    env = Env(args())
    ok = False
    try:
        test(env)
        ok = True
    finally:
        if not ok:
            try:
                with open(os.path.join(env.dir, "coord.log"), "rb") as f:
                    sys.stderr.write(f.read().decode(errors="replace")[-6000:])
            except OSError:
                pass
        env.close()
    print("PASS")
