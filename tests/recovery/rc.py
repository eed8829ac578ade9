"""rc.py - helpers of the recovery tests on top of tests/integration/rmtest.py."""
import os
import re
import sys

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
