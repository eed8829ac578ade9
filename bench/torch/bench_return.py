#!/usr/bin/python3
"""bench_return.py - what an asynchronous all-reduce costs its caller alone,
without the rest of the collective competing for the CPU (a benchmark, not a
test: no thresholds).

    /usr/bin/python3 bench/torch/bench_return.py [--calls 300]

One process, world 1 (every backend's all-reduce then has nothing to move,
so what is measured is the call's own path: argument checks, the Work, the
hand-off to the backend's thread). Groups: the native backend (where it was
built), the Python backend asynchronous (RINGMASTER_TORCH_NATIVE=0 when the
group is made) and torch's gloo; float32 4 KiB and 64 MiB; each call's
wall time until it returns and the calling thread's CPU time in it
(time.thread_time), back to back (each waited before the next) and with a
1 ms sleep between calls (cold caches); medians after 10 warm-up calls.
bench_torch.py --async measures the same return times with the other ranks
and the backend's own thread reducing 64 MiB at the same time.
"""
import argparse
import os
import socket
import statistics
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0",
                      WORLD_SIZE="1")
    import torch
    import torch.distributed as dist
    import ringmaster.torch as rmt
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    groups = {}
    if rmt.active_backend()[0] == "native":
        groups["native"] = dist.new_group(backend="ringmaster")
    os.environ["RINGMASTER_TORCH_NATIVE"] = "0"
    groups["py async"] = dist.new_group(backend="ringmaster")
    del os.environ["RINGMASTER_TORCH_NATIVE"]
    groups["gloo"] = None
    print("# bench_return: world 1, dist.all_reduce(t, async_op=True), float32; median us "
          "of %d calls; load %s" % (args.calls, os.getloadavg()))
    print("# %-9s %-12s %10s | %s" % ("size(B)", "spacing", "what",
                                       " ".join("%10s" % b for b in groups)))
    for size in (4 << 10, 64 << 20):
        t = torch.ones(size // 4)
        for gap in (0.0, 0.001):
            wall = {b: [] for b in groups}
            cpu = {b: [] for b in groups}
            for i in range(args.calls + 10):
                for b, g in groups.items():
                    if gap:
                        time.sleep(gap)
                    c0 = time.thread_time()
                    t0 = time.perf_counter()
                    w = dist.all_reduce(t, group=g, async_op=True)
                    t1 = time.perf_counter()
                    c1 = time.thread_time()
                    w.wait()
                    if i >= 10:
                        wall[b].append((t1 - t0) * 1e6)
                        cpu[b].append((c1 - c0) * 1e6)
            for what, v in (("return", wall), ("cpu", cpu)):
                print("  %-9d %-12s %10s | %s" % (
                    size, "back to back" if not gap else "1 ms apart", what,
                    " ".join("%10.1f" % statistics.median(v[b]) for b in groups)))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
