"""A named barrier: released when all members arrive; broken at its deadline
when one member is SIGSTOPped, and every waiter is told that rank is missing
(with its state and time since its last heartbeat)."""
import os
import signal
import subprocess
import sys

import rmtest


def start(env, job, i):
    p = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "fake_worker.py"),
                          os.path.join(env.dir, "py"), env.addr, str(job.id), job.token,
                          "host%d" % i], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    env.procs.append(p)
    return p


def test(env):
    env.start_coordinator()
    job = env.submit(name="barrier", world_size=3, heartbeat_timeout_ms=60000)
    ps = [start(env, job, i) for i in range(3)]
    ranks = [int(p.stdout.readline().split()[1]) for p in ps]
    assert sorted(ranks) == [0, 1, 2], ranks
    for p in ps:  # everyone arrives: released
        p.stdin.write("barrier b1 20000\n")
        p.stdin.flush()
    for p in ps:
        assert p.stdout.readline().startswith("released"), "b1 not released"
    stopped = ps[1]
    stopped.send_signal(signal.SIGSTOP)
    for p in (ps[0], ps[2]):
        p.stdin.write("barrier b2 1500\n")
        p.stdin.flush()
    for p in (ps[0], ps[2]):
        line = p.stdout.readline()
        assert line.startswith("broken") and "deadline" in line, line
        missing = line.split("missing", 1)[1].split()
        assert len(missing) == 1 and missing[0].startswith("%d:WORKER_STATE_RUNNING:" % ranks[1]), line
    stopped.send_signal(signal.SIGCONT)
    kinds = [(e.kind, e.message) for e in env.events(job.id, job.token)]
    assert any(k == "barrier_broken" and ("missing ranks %d" % ranks[1]) in msg
               for k, msg in kinds), kinds


rmtest.main(test)
