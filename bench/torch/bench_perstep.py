"""bench_perstep.py - what per-step recovery (ringmaster.torch.elastic,
PER-STEP) costs a step with no failure (a benchmark, not a test).

Per-step recovery adds one thing to a step: the optimizer's step() goes
through the wrapper that counts the steps that returned. This times
optimizer.step() on the same model, plain and wrapped, interleaved in
blocks, one process, no communication (the wrapper does none), and prints
the median per-step difference; then the wrapper alone, around an optimizer
whose step does nothing (the plain step's own time varies by more than the
wrapper costs), against a 20 ms step.

  /usr/bin/python3 bench/torch/bench_perstep.py [--blocks 20] [--steps 500]
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
from ringmaster.torch import elastic  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=20)
    p.add_argument("--steps", type=int, default=500)
    a = p.parse_args()
    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    for q in net.parameters():
        q.grad = torch.zeros_like(q)
    plain = torch.optim.SGD(net.parameters(), lr=1e-6, momentum=0.9)
    wrapped = torch.optim.SGD(net.parameters(), lr=1e-6, momentum=0.9)
    state = elastic.TorchState(None, wrapped, step=0)  # wraps wrapped.step
    times = {"plain": [], "per-step": []}
    for _ in range(a.blocks):
        for name, opt in (("plain", plain), ("per-step", wrapped)):
            t0 = time.perf_counter()
            for _ in range(a.steps):
                opt.step()
            times[name].append((time.perf_counter() - t0) / a.steps * 1e6)
    # the wrapper alone: an optimizer whose step does nothing, plain and
    # wrapped (optimizer.step's own time varies more than the wrapper costs)
    class Noop(torch.optim.Optimizer):
        def step(self, closure=None):
            return None
    n_plain = Noop(net.parameters(), {})
    n_wrapped = Noop(net.parameters(), {})
    elastic.TorchState(None, n_wrapped)
    noop = {"plain": [], "per-step": []}
    for _ in range(a.blocks):
        for name, opt in (("plain", n_plain), ("per-step", n_wrapped)):
            t0 = time.perf_counter()
            for _ in range(a.steps * 20):
                opt.step()
            noop[name].append((time.perf_counter() - t0) / (a.steps * 20) * 1e6)
    wrap = statistics.median(noop["per-step"]) - statistics.median(noop["plain"])
    base, ps = statistics.median(times["plain"]), statistics.median(times["per-step"])
    print("# optimizer.step() on a 4.2k-parameter model, median of %d blocks of %d steps"
          % (a.blocks, a.steps))
    print("# %-10s %12s" % ("", "us / step"))
    print("  %-10s %12.2f" % ("plain", base))
    print("  %-10s %12.2f" % ("per-step", ps))
    print("  difference: %.2f us per step (steps counted: %d)" % (ps - base, state._applied))
    print("# the wrapper alone (a step that does nothing): %.3f us per step = %.4f%% of a "
          "20 ms step" % (wrap, wrap / 20000.0 * 100))


if __name__ == "__main__":
    main()
