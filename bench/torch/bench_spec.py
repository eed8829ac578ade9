"""bench_spec.py - what the job spec costs an unchanged DDP program (a
benchmark, not a test).

Per spec, one command job of a real-model example (examples/pytorch), the
same program and arguments each time, submitted to a real coordinator
(`ringmaster serve`, SQLite, local launcher) as a user would:

  plain         no aggregation: DDP's all-reduce bucket by bucket
  median        aggregation median, f = 1 (0 where the world is under 3)
  trimmed_mean  aggregation trimmed_mean, f = 1 (likewise)
  krum          aggregation krum, f = 1 (f = 0 where the world is under 5)
  secure        secure_aggregation (clip 10: it does not bind)

Step time: the step reports the backend sends without code (GET
/api/v1/jobs/{id}/steps: compute_ms + comm_ms + wait_ms per rank and step:
the step's wall time, split), per step the slowest
rank's (a synchronous step ends when the slowest does), the median over the
steps after the first `--warmup`. Repeats are interleaved (plain, median, ...,
plain, median, ...) and each spec's figure is the median of its repeats;
the ratio is to plain's. With N processes on fewer cores the ranks compete
for them: the ratio is what the spec adds to the step's work, not what an
N-node cluster would see (there the compute runs in parallel and the ratio
is smaller, since the model's compute is the same in every column).

  /usr/bin/python3 bench/torch/bench_spec.py --coordinator build/coordinator/ringmaster \\
      --worker build/worker/agent/ringmaster-worker [--model resnet|lm] [-n 4]
      [--steps 30] [--warmup 5] [--repeats 2] [--specs plain,median,...] [-- EXAMPLE ARGS]

Default example arguments: resnet: --stem imagenet --batch 16 --samples 512;
lm: --batch 16.
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import rmtest  # noqa: E402  (the `ringmaster serve` fixture the Python tests use)

SPECS = {
    "plain": lambda n: {},
    "median": lambda n: {"aggregation": {"method": "median", "f": 1 if n >= 3 else 0}},
    "trimmed_mean": lambda n: {"aggregation": {"method": "trimmed_mean",
                                               "f": 1 if n >= 3 else 0}},
    "krum": lambda n: {"aggregation": {"method": "krum", "f": 1 if n >= 5 else 0}},
    "secure": lambda n: {"secure_aggregation": {"clip": 10.0}},
}
DEFAULT_ARGS = {"resnet": ["--stem", "imagenet", "--batch", "16", "--samples", "512"],
                "lm": ["--batch", "16"]}


def run_job(c, model, n, steps, spec, extra):
    env = {k: os.environ[k] for k in ("PYTHONPATH", "OMP_NUM_THREADS") if os.environ.get(k)}
    body = {"name": "bench-spec", "world_size": n, "workload": "command", "launcher": "local",
            "env": env, "command": [rmtest.PY, os.path.join(ROOT, "examples", "pytorch",
                                                            model + ".py"),
                                    "--steps", str(steps), "--log-every", "1000"] + extra}
    body.update(spec)
    st, _, job = c.request("POST", "/api/v1/jobs", body, token=c.token)
    if st != 201:
        raise SystemExit("submit: %s %s" % (st, job))
    j = c.wait_job(job["id"], 1800, 0.5)
    if j["state"] != "succeeded":
        raise SystemExit("job %d: %s" % (job["id"], j))
    return c.get("/api/v1/jobs/%d/steps?limit=100000" % job["id"])["steps"]


def step_time(steps, warmup):
    slowest = {}
    for s in steps:
        if s["step"] > warmup:
            ms = sum(s.get(k) or 0.0 for k in ("compute_ms", "comm_ms", "wait_ms"))
            slowest[s["step"]] = max(slowest.get(s["step"], 0.0), ms)
    return statistics.median(slowest.values())


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra, argv = argv[argv.index("--") + 1:], argv[:argv.index("--")]
    p = argparse.ArgumentParser()
    p.add_argument("--coordinator", required=True)
    p.add_argument("--worker", required=True)
    p.add_argument("--model", choices=sorted(DEFAULT_ARGS), default="resnet")
    p.add_argument("-n", type=int, default=4)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--specs", default="plain,median,trimmed_mean,krum,secure")
    a = p.parse_args(argv)
    specs = a.specs.split(",")
    extra = extra or DEFAULT_ARGS[a.model]
    c = rmtest.Coordinator(a.coordinator, a.worker)
    times = {s: [] for s in specs}
    try:
        for r in range(a.repeats):
            for s in specs:
                t = step_time(run_job(c, a.model, a.n, a.steps, SPECS[s](a.n), extra), a.warmup)
                times[s].append(t)
                print("# repeat %d %-12s %8.1f ms  (load %s)" % (
                    r + 1, s, t, " ".join(open("/proc/loadavg").read().split()[:3])),
                    flush=True)
    finally:
        c.stop()
    base = statistics.median(times["plain"]) if "plain" in times else None
    print("\n# %s, N = %d, %s; step time = median over steps %d..%d of the slowest rank's "
          "step time; median of %d interleaved repeats" % (a.model, a.n, " ".join(extra),
                                                          a.warmup + 1, a.steps, a.repeats))
    print("# %-14s %10s %8s   %s" % ("spec", "step(ms)", "x plain", "repeats (ms)"))
    for s in specs:
        m = statistics.median(times[s])
        print("  %-14s %10.1f %8s   %s" % (s, m, "%.2f" % (m / base) if base else "-",
                                          " ".join("%.1f" % x for x in times[s])))


if __name__ == "__main__":
    main()
