"""rc.py - helpers of the recovery tests on top of tests/integration/rmtest.py."""
import glob
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import rmtest  # noqa: E402

DATASET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "digits",
                       "digits.csv")


def train_opts(env, extra=""):
    o = "dataset=%s,batch=64,verify=5,ckpt_dir=%s" % (DATASET, os.path.join(env.dir, "ckpt"))
    return o + ("," + extra if extra else "")


def start(env, job, n, first=0, extra=()):
    return [env.start_worker(job, first + i, ["--data-timeout-ms", "10000", *extra])
            for i in range(n)]


def accuracy(env, i):
    m = re.findall(r"test accuracy ([0-9.]+)", env.worker_log(i))
    return float(m[-1]) if m else None


def recovered(env, i):
    return re.findall(r"recovered gen=(\d+) step=(\d+) detect_ms=(\d+) resume_ms=(\d+)",
                      env.worker_log(i))


def kinds(env, job):
    return [e.kind for e in env.events(job.id, job.token, timeout=2)]


main = rmtest.main
wait_exit = rmtest.wait_exit


# ---- jobs whose workers the coordinator starts (launcher=local) ----
def start_local_coordinator(env, crash_at=None):
    """A coordinator with the local launcher logging under env.dir/logs.
    crash_at sets RINGMASTER_TEST_CRASH_AT (the workers inherit it)."""
    if crash_at:
        os.environ["RINGMASTER_TEST_CRASH_AT"] = crash_at
    else:
        os.environ.pop("RINGMASTER_TEST_CRASH_AT", None)
    env.start_coordinator(extra=["--log-dir", os.path.join(env.dir, "logs")])
    os.environ.pop("RINGMASTER_TEST_CRASH_AT", None)


def launcher_log(env, job, i):
    p = os.path.join(env.dir, "logs", "job-%d" % job.id, "worker-%d.log" % i)
    try:
        with open(p, "rb") as f:
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def launcher_pid(env, job, i, timeout=30):
    """PID of the worker the local launcher started with index i (the
    agent's first line, 'ringmaster-worker: pid P')."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(r"ringmaster-worker: pid (\d+)", launcher_log(env, job, i))
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    raise AssertionError("no pid line in worker-%d.log" % i)


def launcher_rank(env, job, i):
    m = re.findall(r"generation \d+: rank (\d+) of \d+", launcher_log(env, job, i))
    return int(m[0]) if m else None


def local_accuracy(env, job, i):
    m = re.findall(r"test accuracy ([0-9.]+)", launcher_log(env, job, i))
    return float(m[-1]) if m else None


def wait_pid_gone(pid, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError("pid %d still there" % pid)


def wait_final(env, job, timeout=120):
    return env.wait_job(job.id, lambda j: j.state in (env.m.JOB_STATE_SUCCEEDED,
                                                      env.m.JOB_STATE_FAILED), timeout)


def events(env, job):
    return env.events(job.id, job.token, timeout=2)


def stop_local(env):
    """SIGTERM the coordinator (it cancels what its launcher still runs),
    then SIGKILL by PID any worker of ours still alive."""
    if env.coord is not None and env.coord.poll() is None:
        env.coord.send_signal(signal.SIGTERM)
        try:
            env.coord.wait(timeout=30)
        except Exception:  # noqa: BLE001 - env.close kills it
            pass
    for log in glob.glob(os.path.join(env.dir, "logs", "job-*", "worker-*.log")):
        with open(log, "rb") as f:
            m = re.search(rb"ringmaster-worker: pid (\d+)", f.read())
        if m:
            try:
                os.kill(int(m.group(1)), signal.SIGKILL)
            except ProcessLookupError:
                pass


def main_local(test):
    """rmtest.main, with every launcher-started worker stopped at the end."""
    def wrapped(env):
        try:
            test(env)
        finally:
            stop_local(env)
    rmtest.main(wrapped)
