"""bench_pause.py - a paused or cut-off coordinator against healthy jobs
(coordinator/core/liveness.c; docs/liveness.md). A benchmark, not a test.

Trials of two kinds, at a random moment of a running 3-worker synthetic job
(compute_ms per step, heartbeat timeout HB ms, on_failure cycling fail,
shrink, replace), each followed by the job to its end:
  pause      the coordinator SIGSTOPped for 3x HB, then SIGCONT;
  partition  the coordinator (in its own network namespace, joined by a
             veth pair) cut from every worker for 3x HB: both veth ends
             down, then up (needs root; skipped otherwise).
Per trial: did the job end as without the pause (SUCCEEDED, generation
unchanged, 3 members, no worker_lost event)? And the step rate during the
pause: per worker, the queued reports it delivered afterwards (the steps it
trained while its reports did not go through; worker/session/session_step.c
REPORTER) / the time from its first unanswered report to its queue emptied
(both from its log line), the slowest worker's (no rate when a worker logged
no such line), against the rate without a pause: GetJob's
step delta over a window of the same length in the same job before it.

  python3 bench/recovery/bench_pause.py --coordinator build/coordinator/ringmaster \
      --worker build/worker/agent/ringmaster-worker --proto proto \
      [--trials 100] [--budget-s 1200] [--hb-ms 500] [--compute-ms 5] [--steps 800]
      [--diag DIR]
"""
import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
import rmtest  # noqa: E402

DELIVERED = re.compile(r"(\d+) queued step reports delivered \(\d+ queued when it "
                       r"stopped answering, (\d+) ms ago\)")


def sh(*cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)


class Net:
    """A namespace for the coordinator and a veth pair to this one."""

    def __init__(self):
        n = os.getpid() % 200 + 20
        self.ns, self.a, self.b = "rmbp%d" % os.getpid(), "rmbp%da" % os.getpid(), "rmbp%db" % os.getpid()
        self.ip_a, self.ip_b = "10.214.%d.1" % n, "10.214.%d.2" % n

    def up(self):
        ex = ["ip", "netns", "exec", self.ns]
        for s in (["ip", "netns", "add", self.ns],
                  ["ip", "link", "add", self.a, "type", "veth", "peer", "name", self.b],
                  ["ip", "link", "set", self.b, "netns", self.ns],
                  ["ip", "addr", "add", self.ip_a + "/30", "dev", self.a],
                  ["ip", "link", "set", self.a, "up"],
                  ex + ["ip", "addr", "add", self.ip_b + "/30", "dev", self.b],
                  ex + ["ip", "link", "set", self.b, "up"],
                  ex + ["ip", "link", "set", "lo", "up"]):
            r = sh(*s)
            if r.returncode:
                return "%s: %s" % (" ".join(s), r.stdout.decode().strip())
        return None

    def cut(self, on):
        for pre, dev in (([], self.a), (["ip", "netns", "exec", self.ns], self.b)):
            sh(*pre, "ip", "link", "set", dev, "down" if on else "up")

    def down(self):
        sh("ip", "link", "del", self.a)
        sh("ip", "netns", "del", self.ns)


def trial(env, o, kind, policy, k):
    st = env.m
    job = env.submit(name="%s-%d" % (kind, k), world_size=3, steps=o.steps,
                     heartbeat_timeout_ms=o.hb_ms, on_failure=policy, workload="synthetic",
                     workload_options="bytes=4096,compute_ms=%g" % o.compute_ms)
    base = 3 * k
    for i in range(3):
        f = os.path.join(env.dir, "worker%d.log" % (base + i))
        if os.path.exists(f):
            os.remove(f)
    ws = [env.start_worker(job, base + i, ["--data-timeout-ms", "60000"]) for i in range(3)]
    pause_s = 3 * o.hb_ms / 1000.0
    j0 = env.wait_job(job.id, lambda j: j.state == st.JOB_STATE_RUNNING and j.step >= 1, 60)
    # the rate without a pause: the step delta over a window as long as it
    t0, s0 = time.time(), j0.step
    time.sleep(pause_s)
    s1, t1 = env.get(job.id).step, time.time()
    free_rate = (s1 - s0) / (t1 - t0)
    # a random moment of what is left (about steps / rate seconds of it)
    left = max(0.0, (o.steps - s1) / max(free_rate, 1.0) - pause_s)
    time.sleep(random.uniform(0, 0.7 * left))
    if kind == "pause":
        env.coord.send_signal(signal.SIGSTOP)
    else:
        env.net.cut(True)
    try:
        time.sleep(pause_s)
    finally:
        if kind == "pause":
            env.coord.send_signal(signal.SIGCONT)
        else:
            env.net.cut(False)
    j = env.wait_job(job.id, lambda j: j.state in (st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED,
                                                   st.JOB_STATE_CANCELLED), 120)
    evs = env.events(job.id, job.token)
    lost = [e for e in evs if e.kind == "worker_lost"]
    ok = (j.state == st.JOB_STATE_SUCCEEDED and j.generation == j0.generation and j.world == 3
          and not lost)
    for w in ws:
        try:
            w.wait(timeout=30)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait(timeout=20)
    if not ok and o.diag:  # what made it different: its events and the workers' words
        os.makedirs(o.diag, exist_ok=True)
        with open(os.path.join(o.diag, "%s-%d.txt" % (kind, k)), "w") as f:
            f.write("job: %s\nj0 generation %d\n\n" % (j, j0.generation))
            for e in evs:
                f.write("event %s rank %d: %s\n" % (e.kind, e.rank, e.message))
            for i in range(3):
                f.write("\n--- worker %d log ---\n" % i)
                f.write(env.worker_log(base + i)[-6000:])
    rates = []
    for i in range(3):
        m = DELIVERED.findall(env.worker_log(base + i))
        rates.append(int(m[-1][0]) / (int(m[-1][1]) / 1000.0) if m and int(m[-1][1]) else None)
    if None in rates and o.diag:  # a worker that never said its reports were held
        os.makedirs(o.diag, exist_ok=True)
        with open(os.path.join(o.diag, "%s-%d-no-rate.txt" % (kind, k)), "w") as f:
            for i in range(3):
                f.write("\n--- worker %d log ---\n" % i)
                f.write(env.worker_log(base + i)[-6000:])
    return ok, None if None in rates else min(rates), free_rate, j


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--budget-s", type=float, default=1200, help="per kind")
    p.add_argument("--hb-ms", type=int, default=500)
    p.add_argument("--compute-ms", type=float, default=5)
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--kinds", default="pause,partition")
    p.add_argument("--diag", default="", help="folder for the events and worker logs of "
                   "each trial that did not end as without the pause")
    o, rest = p.parse_known_args()
    sys.argv = [sys.argv[0]] + rest
    env = rmtest.Env(rmtest.args())
    rows = []
    try:
        for kind in o.kinds.split(","):
            if kind == "partition":
                if os.geteuid() != 0:
                    print("partition: skipped (needs root for ip netns)")
                    continue
                env.net = Net()
                why = env.net.up()
                if why:
                    print("partition: skipped:", why)
                    continue
                wrap = os.path.join(env.dir, "coord-in-ns")
                with open(wrap, "w") as f:
                    f.write('#!/bin/sh\nexec ip netns exec %s %s "$@"\n' % (env.net.ns,
                                                                           env.a.coordinator))
                os.chmod(wrap, 0o755)
                real, env.a.coordinator = env.a.coordinator, wrap
                env.start_coordinator(env.net.ip_b + ":0")
                env.a.coordinator = real
            else:
                env.start_coordinator()
            t_end = time.time() + o.budget_s
            res = []
            for k in range(o.trials):
                if time.time() > t_end:
                    break
                policy = ("fail", "shrink", "replace")[k % 3]
                ok, prate, frate, j = trial(env, o, kind, policy, k)
                res.append((ok, prate, frate))
                print("%s trial %d (%s): %s, %s steps/s during, %.0f without" %
                      (kind, k, policy, "as without" if ok else "DIFFERENT: %s" % j.reason,
                       "%.0f" % prate if prate is not None else "(no rate)", frate), flush=True)
            rows.append((kind, res))
            env.coord.send_signal(signal.SIGCONT)
            env.coord.kill()
            env.coord.wait(timeout=20)
            if kind == "partition":
                env.net.down()
    finally:
        for q in env.procs:
            if q.poll() is None:
                q.send_signal(signal.SIGCONT)
                q.kill()
                q.wait(timeout=20)
        if getattr(env, "net", None):
            env.net.down()
        env.close()
    print()
    print("| trials | ended as without the pause | steps/s during pause (median, min; "
          "trials with a rate) | steps/s without (median) | ratio of medians |")
    print("| --- | --- | --- | --- | --- |")
    for kind, res in rows:
        if not res:
            continue
        during = [r[1] for r in res if r[1] is not None] or [0.0]
        free = [r[2] for r in res]
        print("| %s x%d | %d/%d | %.0f, %.0f; %d | %.0f | %.2f |" %
              (kind, len(res), sum(r[0] for r in res), len(res), statistics.median(during),
               min(during), sum(r[1] is not None for r in res), statistics.median(free),
               statistics.median(during) / max(statistics.median(free), 1e-9)))


if __name__ == "__main__":
    main()
