"""bench_recovery.py - benchmark (not a test).

1. Step time of a 4-worker `train` job (simulated compute sim_compute_ms per
   step on every rank) with rank 2 made 2x and 4x slower, under each
   straggler policy, divided by the same policy's step time with no
   straggler. backup: N=3 + b=1; coded: s=1; deadline: slack after the
   median arrival = max(RINGMASTER_DEADLINE_SLACK_MIN_MS (1 ms),
   RINGMASTER_DEADLINE_SLACK_PCT (10) % of the median compute), or a fixed
   RINGMASTER_DEADLINE_SLACK_MS (coordinator/core/step_gate.c).
   Step time = (time of the job's "succeeded" event - time of its
   "generation" event) / steps.
2. Time from SIGKILL of one worker (on_failure shrink) to the survivors'
   first completed step at the next generation (their "recovered" log
   line): median and max over several kills.

  python3 bench/recovery/bench_recovery.py --coordinator build/coordinator/ringmaster \
      --worker build/worker/agent/ringmaster-worker --proto proto [--compute-ms 20]
"""
import os
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "recovery"))
sys.argv += [] if "--compute-ms" not in sys.argv else []
COMPUTE = 20.0
if "--compute-ms" in sys.argv:
    i = sys.argv.index("--compute-ms")
    COMPUTE = float(sys.argv[i + 1])
    del sys.argv[i:i + 2]
KILLS = 5
STEPS = 60
import rc  # noqa: E402


def step_ms(env, job):
    evs = env.events(job.id, job.token, timeout=1)
    t0 = [e.time_ms for e in evs if e.kind == "generation"][0]
    t1 = [e.time_ms for e in evs if e.kind == "job_state" and "succeeded" in e.message][0]
    return (t1 - t0) / STEPS


def run(env, n, policy, factor):
    extra = "sim_compute_ms=%g" % COMPUTE
    if factor > 1:
        extra += ",slow_rank=2,slow_factor=%g" % factor
    job = env.submit(name="b%d" % n, world_size=4, steps=STEPS, heartbeat_timeout_ms=5000,
                     workload="train", workload_options=rc.train_opts(env, extra),
                     straggler_policy=policy,
                     backup_workers=1 if policy in ("backup", "coded") else 0)
    ws = rc.start(env, job, 4, first=n * 10)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_SUCCEEDED, 120)
    for w in ws:
        rc.wait_exit(w, 30)
    return step_ms(env, job)


def recovery(env, n):
    job = env.submit(name="k%d" % n, world_size=4, steps=10**6, heartbeat_timeout_ms=3000,
                     workload="train", workload_options=rc.train_opts(env, "sim_compute_ms=2"),
                     on_failure="shrink")
    ws = rc.start(env, job, 4, first=1000 + n * 10)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 20, 60)
    t_kill = time.time() * 1000
    ws[1].send_signal(signal.SIGKILL)
    deadline = time.time() + 30
    resumed = None
    while time.time() < deadline and resumed is None:
        rs = [r for i in (0, 2, 3) for r in rc.recovered(env, 1000 + n * 10 + i)]
        if rs:
            resumed = min(int(r[3]) for r in rs)
        time.sleep(0.05)
    for w in ws:
        if w.poll() is None:
            w.kill()
            w.wait()
    return resumed - t_kill if resumed else float("nan")


def bench(env):
    env.start_coordinator()
    print("step time ratio vs no straggler, 4 workers, sim compute %g ms/step, %d steps"
          % (COMPUTE, STEPS))
    print("%-9s %10s %10s %10s %8s %8s" % ("policy", "base ms", "2x ms", "4x ms", "2x/base",
                                          "4x/base"))
    n = 0
    for pol in ("none", "backup", "deadline", "coded"):
        t = []
        for f in (1, 2, 4):
            n += 1
            t.append(run(env, n, pol, f))
        print("%-9s %10.2f %10.2f %10.2f %8.2f %8.2f" % (pol, t[0], t[1], t[2], t[1] / t[0],
                                                          t[2] / t[0]))
    rec = [recovery(env, k) for k in range(KILLS)]
    print("SIGKILL -> training again at the next generation (shrink 4 -> 3), %d kills: "
          "median %.1f ms, max %.1f ms" % (KILLS, statistics.median(rec), max(rec)))


rc.main(bench)
