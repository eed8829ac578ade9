"""sess.py - helpers of the session / command-job tests on top of
tests/recovery/rc.py (a coordinator with the local launcher, logs under
env.dir/logs/job-N/worker-I.log)."""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "recovery"))
import rc  # noqa: E402

EXAMPLE = os.environ.get("RM_EXAMPLE_C", "")
main = rc.main_local
log = rc.launcher_log
wait_final = rc.wait_final
events = rc.events


def start(env, coordinator_timeout_ms=None):
    """The local-launcher coordinator; the agents it starts inherit
    RINGMASTER_COORDINATOR_TIMEOUT_MS (how long a program may take to join)."""
    if coordinator_timeout_ms:
        os.environ["RINGMASTER_COORDINATOR_TIMEOUT_MS"] = str(coordinator_timeout_ms)
    try:
        rc.start_local_coordinator(env)
    finally:
        os.environ.pop("RINGMASTER_COORDINATOR_TIMEOUT_MS", None)


def submit(env, name, command, world=4, **kw):
    kw.setdefault("heartbeat_timeout_ms", 5000)
    return env.submit(name=name, world_size=world, workload="command", launcher="local",
                      command=command, **kw)


def banners(env, job, i):
    """(pid, generation, rank, world, start_step) per generation of the
    example program run by the agent with launch index i."""
    return [tuple(int(x) for x in m) for m in re.findall(
        r"session_allreduce: pid (\d+) generation (\d+) rank (\d+) of (\d+) start_step (\d+)",
        log(env, job, i))]


def wait_log(env, job, i, pattern, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(pattern, log(env, job, i))
        if m:
            return m
        time.sleep(0.05)
    raise AssertionError("worker-%d.log: no %r in %d s:\n%s" % (i, pattern, timeout,
                                                                log(env, job, i)[-3000:]))


def program_pid(env, job, i):
    return int(wait_log(env, job, i, r"session_allreduce: pid (\d+)").group(1))
