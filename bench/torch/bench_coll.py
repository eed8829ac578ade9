#!/usr/bin/python3
"""bench_coll.py - torch.distributed's uneven all-to-all, gather and scatter:
ringmaster's backend against torch's gloo, same machine, same run (a
benchmark, not a test: no thresholds).

    /usr/bin/python3 bench/torch/bench_coll.py [--worlds 2,4] [--reps 7]

For each world N, N processes (torchrun-style environment on 127.0.0.1)
make the default group with "gloo" and a second group over the same ranks
with "ringmaster", then, rank 0 reporting, per size and repeat a gloo batch
and a ringmaster batch back to back (the order alternating; a gloo barrier
before each; the first repeat warms up), median per-call time over the
repeats:

1. all_to_all_single with uneven splits, as a mixture-of-experts layer
   routes tokens: rows of 1 KiB (256 float32); rank s sends rank d
   rows(s, d) = ceil(R * w(s, d) / sum_d w(s, d)) with w(s, d) =
   1 + ((3 s + 5 d) mod 7) (skewed 1..7, some pairs 7x others), R = the
   rows each rank sends in all. Throughput = bytes this rank sends / time.
2. gather and scatter to / from root 0 of one float32 tensor per rank.
3. point-to-point between ranks 0 and 1 (the others wait at the barrier):
   ping-pong (send then recv on rank 0, recv then send on rank 1),
   one-way time = round trip / 2, at 4 B .. 64 MiB; bandwidth = bytes /
   one-way time.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_torch import launch, PY  # noqa: E402

ROW = 256  # float32 per row: 1 KiB


def rows(s, d, n, total):
    w = [1 + ((3 * s + 5 * k) % 7) for k in range(n)]
    return -(-total * w[d] // sum(w))


def timed(fn, k):
    t0 = time.perf_counter()
    for _ in range(k):
        fn()
    return (time.perf_counter() - t0) / k


def worker(args):
    import torch
    import torch.distributed as dist
    import ringmaster.torch  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    r, n = dist.get_rank(), dist.get_world_size()
    groups = {"gloo": None, "ringmaster": dist.new_group(backend="ringmaster")}
    out = {"a2av": [], "gather": [], "scatter": [], "pingpong": []}

    def measure(kind, size, calls, k):
        times = {"gloo": [], "ringmaster": []}
        for rep in range(args.reps + 1):
            for b in (["gloo", "ringmaster"] if rep % 2 else ["ringmaster", "gloo"]):
                dist.barrier()
                dt = timed(lambda: calls[b](), k)
                if rep:
                    times[b].append(dt)
        out[kind].append({"bytes": size, "gloo": statistics.median(times["gloo"]),
                          "ringmaster": statistics.median(times["ringmaster"])})

    for total in [64, 1024, 16384]:  # rows each rank sends: 64 KiB .. 16 MiB
        ins = [rows(r, d, n, total) for d in range(n)]
        outs = [rows(s, r, n, total) for s in range(n)]
        x = torch.randn(sum(ins), ROW)
        y = torch.empty(sum(outs), ROW)
        # calls per batch from what every rank knows alike (each rank sends
        # its own number of rows: k from that would differ between ranks)
        k = max(1, min(20, (4 << 20) // (total * ROW * 4)))
        calls = {b: (lambda g=g: dist.all_to_all_single(y, x, outs, ins, group=g))
                 for b, g in groups.items()}
        measure("a2av", x.numel() * 4, calls, k)
    for size in [4 << 10, 1 << 20, 16 << 20]:
        t = torch.randn(size // 4)
        lst = [torch.empty_like(t) for _ in range(n)] if r == 0 else None
        k = max(1, min(50, (4 << 20) // size))
        measure("gather", size, {b: (lambda g=g: dist.gather(t, lst, dst=0, group=g))
                                 for b, g in groups.items()}, k)
        src = [torch.randn(size // 4) for _ in range(n)] if r == 0 else None
        measure("scatter", size, {b: (lambda g=g: dist.scatter(t, src, src=0, group=g))
                                  for b, g in groups.items()}, k)
    for size in [4, 4 << 10, 1 << 20, 64 << 20]:
        t = torch.zeros(max(1, size // 4))
        k = max(1, min(200, (16 << 20) // size))

        def pp(g):
            if r == 0:
                dist.send(t, 1, group=g)
                dist.recv(t, 1, group=g)
            elif r == 1:
                dist.recv(t, 0, group=g)
                dist.send(t, 0, group=g)
        measure("pingpong", size, {b: (lambda g=g: pp(g)) for b, g in groups.items()}, k)
        e = out["pingpong"][-1]
        e["gloo"] /= 2
        e["ringmaster"] /= 2
    if r == 0:
        print("BENCH " + json.dumps(out))
    dist.destroy_process_group()


def table(n, res):
    for kind, what in [("a2av", "all_to_all_single, uneven splits (1 KiB rows), bytes sent "
                        "per rank"), ("gather", "gather to rank 0, bytes per rank"),
                       ("scatter", "scatter from rank 0, bytes per rank"),
                       ("pingpong", "send/recv ping-pong between ranks 0 and 1, one-way "
                        "time")]:
        print("\n# world %d, %s; median of interleaved repeats" % (n, what))
        print("# %10s | %10s %8s | %10s %8s | %7s" % ("size(B)", "gloo(us)", "GB/s",
                                                     "rm(us)", "GB/s", "gloo/rm"))
        for e in res[kind]:
            b, g, m = e["bytes"], e["gloo"], e["ringmaster"]
            print("  %10d | %10.1f %8.3f | %10.1f %8.3f | %6.2fx" % (
                b, g * 1e6, b / g / 1e9, m * 1e6, b / m / 1e9, g / m))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    import ringmaster
    print("# ringmaster bench_coll: library %s, %d CPUs" % (ringmaster.library_path,
                                                           os.cpu_count()))
    for n in [int(x) for x in args.worlds.split(",")]:
        print("# load before world %d: %s" % (n, os.getloadavg()))
        outs = launch(n, lambda r: [PY, __file__, "--worker", "--reps", str(args.reps)])
        table(n, json.loads(outs[0].split("BENCH ", 1)[1].splitlines()[0]))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
