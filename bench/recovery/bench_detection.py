"""bench_detection.py - benchmark (not a test): how long the
coordinator takes to declare a worker lost, per detection source
(coordinator/recovery.c), median and max over REPEAT runs. Time = the
"worker_lost" event's wall clock minus the moment the test signalled the
worker (same host, same clock).

  heartbeat   SIGSTOP a member of a 3-worker job (heartbeat_timeout 2000 ms,
              data-plane timeout 60 s): its sockets stay open, so only the
              missing heartbeats tell
  stream      SIGKILL the only worker of a 1-worker job (no data-plane peer):
              its session Watch is cancelled by its transport
  data plane  SIGKILL a member of a 3-worker job whose agents run without
              the session stream (RINGMASTER_SESSION_STREAM=0): the
              survivors' ReportFailure (peer lost) declares it
  launcher    launcher=local, SIGKILL worker 1 of 3: whichever of stream,
              data plane or the launcher's reaping (200 ms poll) comes first

  /usr/bin/python3 bench/recovery/bench_detection.py --coordinator build/coordinator/ringmaster \
      --worker build/worker/agent/ringmaster-worker --proto proto \
      [--repeat N] [--kinds heartbeat,stream,"data plane",launcher]

"data plane" is the shared-memory transport's own detection of a dead
peer (worker/transport/shm/shm_int.h DEATH WATCH) plus one ReportFailure,
unless RINGMASTER_TRANSPORTS=tcp (then a socket's EOF).
"""
import os
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "recovery"))
from benchargs import take_flag  # noqa: E402
import rc  # noqa: E402

REPEAT = int(take_flag("--repeat", "3"))
KINDS = take_flag("--kinds", "heartbeat,stream,data plane,launcher").split(",")


def lost_after(env, job, t0, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        evs = rc.events(env, job)
        lost = [e for e in evs if e.kind == "worker_lost"]
        if lost:
            rep = [e for e in evs if e.kind == "failure_report"]
            src = ("heartbeat" if "no heartbeat" in lost[0].message else
                   "stream" if "control stream" in lost[0].message else
                   "launcher" if "process exited" in lost[0].message else
                   "data plane" if "reported by" in lost[0].message else "other")
            return (lost[0].time_ms - t0, src,
                    rep[0].time_ms - t0 if rep else float("nan"))
        time.sleep(0.05)
    return float("nan"), "none", float("nan")


def submit(env, name, world, hb, launcher="none"):
    return env.submit(name=name, world_size=world, steps=10**6, heartbeat_timeout_ms=hb,
                      workload="train", launcher=launcher,
                      workload_options=rc.train_opts(env, "sim_compute_ms=2"),
                      on_failure="fail")


def one(env, kind, n):
    base = 100 * n
    if kind == "launcher":
        job = submit(env, "d%d" % n, 3, 60000, "local")
        pid = rc.launcher_pid(env, job, 1)
    else:
        world = 1 if kind == "stream" else 3
        hb = 2000 if kind == "heartbeat" else 60000
        job = submit(env, "d%d" % n, world, hb)
        extra = ("--data-timeout-ms", "60000") if kind == "heartbeat" else ()
        if kind == "data plane":
            os.environ["RINGMASTER_SESSION_STREAM"] = "0"
        ws = [env.start_worker(job, base + i, extra) for i in range(world)]
        os.environ.pop("RINGMASTER_SESSION_STREAM", None)
        pid = ws[-1].pid
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 20, 60)
    t0 = time.time() * 1000
    os.kill(pid, signal.SIGSTOP if kind == "heartbeat" else signal.SIGKILL)
    r = lost_after(env, job, t0)
    if kind == "heartbeat":
        os.kill(pid, signal.SIGKILL)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_FAILED, 60)
    return r


def bench(env):
    rc.start_local_coordinator(env)
    print("detection time (SIGKILL/SIGSTOP -> worker_lost event), %d runs each" % REPEAT)
    print("%-10s %10s %10s  %-24s %s" % ("source", "median ms", "max ms", "declared by",
                                         "first failure_report ms"))
    n = 0
    for kind in KINDS:
        rs = []
        for _ in range(REPEAT):
            n += 1
            rs.append(one(env, kind, n))
        ts = [r[0] for r in rs]
        srcs = sorted(set(r[1] for r in rs))
        reps = [r[2] for r in rs if r[2] == r[2]]
        print("%-10s %10.1f %10.1f  %-24s %s" % (
            kind, statistics.median(ts), max(ts), ",".join(srcs),
            "%.1f" % statistics.median(reps) if reps else "-"))


rc.main_local(bench)
