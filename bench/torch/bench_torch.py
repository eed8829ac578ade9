#!/usr/bin/python3
"""bench_torch.py - ringmaster's torch backend against torch's gloo, same
machine, same run (a benchmark, not a test: no thresholds).

    /usr/bin/python3 bench/torch/bench_torch.py [--worlds 2,4] [--quick]

For each world N it starts N processes (torchrun-style environment on
127.0.0.1). Each initialises the default group with "gloo" and a second group
over the same ranks with backend "ringmaster" (dist.new_group: the data-plane
addresses travel through torch's store), then measures, rank 0 reporting:

1. all-reduce (float32, sum, in place) 4 KiB .. 64 MiB: per size and repeat,
   a gloo batch and a ringmaster batch back to back (order alternating), each
   batch = a gloo barrier then k calls of dist.all_reduce(t, group=g) timed
   together (k from 50 at 4 KiB down to 1 at 64 MiB); the median over the
   repeats of the per-call time. algbw = bytes / time, busbw = algbw * 2(N-1)/N
   (nccl-tests' definitions), GB/s = 1e9 B/s.
2. DDP step time (forward + backward + SGD step; DDP's gradient buckets, 25 MB
   cap) of the digits MLP (64-64-10, 4,810 parameters, global batch 64) and of
   a larger MLP (1024-2048-1536-512, 6.0 M parameters = 24 MiB, global batch
   32): two DDP copies of the same model, one per group, steps interleaved in
   batches of S; median per-step time over the repeats.
3. Python overhead of one all-reduce at 4 KiB: N processes run 2,000
   back-to-back ringmaster.allreduce(np.float32[1024]) calls on a plain
   communicator, and N processes of c_loop.c (the same loop in C, calling
   rm_allreduce directly, built here with cc against the library) - three
   interleaved repeats each, medians; overhead = Python - C per call. The same
   for N = 1 (the call returns without communicating: the bare binding cost).

    /usr/bin/python3 bench/torch/bench_torch.py --async [--worlds 2] [--reps 7] [--quick]

4. (only this section) the asynchronous backend against its synchronous path
   (RINGMASTER_TORCH_SYNC=1, read when a group is made: two ringmaster
   groups over the same ranks, one of each) and gloo:
   a. the time dist.all_reduce(t, group=g, async_op=True) takes to RETURN
      (the caller's cost; the sync path returns when the call is done) and
      the calling thread's CPU time in the call (time.thread_time: what
      the call costs the caller, whatever the scheduler does meanwhile),
      and the time until wait() returns, float32 4 KiB (k = 200 calls a batch)
      and 64 MiB (k = 3), each call timed alone and waited before the next;
      batches interleaved over the repeats; medians over all the calls;
   b. DDP step time (forward + backward + SGD step, DDP's 25 MB buckets) of
      section 2's two MLPs and of torchvision's ResNet-18 on CIFAR-size
      random inputs (3x32x32, 10 classes, global batch 32), one DDP copy per
      group (gloo, ringmaster async, ringmaster sync), steps interleaved in
      batches of S, the order of the three rotating; median per-step time.
   --reps sets the number of repeats (one more warms up); --resnet-batch
   the ResNet-18's global batch (default 32: a larger one computes longer
   per step, which is what overlap can hide behind a slow wire).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
PY = "/usr/bin/python3"


def free_ports(n):
    ss = [socket.socket() for _ in range(n)]
    for s in ss:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in ss]
    for s in ss:
        s.close()
    return ports


def env_for(extra=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.path.join(REPO, "python")
    e.setdefault("OMP_NUM_THREADS", "1")
    e.update(extra or {})
    return e


def launch(n, argv_of, extra=None, timeout=900):
    port = free_ports(1)[0]
    procs = []
    for r in range(n):
        e = env_for(extra)
        e.update(RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen(argv_of(r), env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            o, er = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    q.kill()
            raise SystemExit("bench: a rank did not finish in %d s" % timeout)
        if p.returncode:
            raise SystemExit("bench: rank exited %d:\n%s" % (p.returncode, er[-3000:]))
        outs.append(o)
    return outs


# ---- worker side --------------------------------------------------------------
def worker(args):
    import numpy as np
    import torch
    import torch.distributed as dist
    import ringmaster.torch  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    rmg = dist.new_group(backend="ringmaster")
    groups = {"gloo": None, "ringmaster": rmg}
    out = {"allreduce": [], "ddp": []}

    sizes = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
    if args.quick:
        sizes = sizes[::2]
    reps = 3 if args.quick else 7
    for size in sizes:
        t = torch.ones(size // 4)
        k = max(1, min(50, (8 << 20) // size))
        times = {"gloo": [], "ringmaster": []}
        for rep in range(reps + 1):
            order = ["gloo", "ringmaster"] if rep % 2 else ["ringmaster", "gloo"]
            for b in order:
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(k):
                    dist.all_reduce(t, group=groups[b])
                dt = (time.perf_counter() - t0) / k
                if rep:  # the first repeat warms up
                    times[b].append(dt)
            t.fill_(1.0)
        out["allreduce"].append({"bytes": size, "gloo": statistics.median(times["gloo"]),
                                 "ringmaster": statistics.median(times["ringmaster"])})

    def mlp(sizes_):
        layers = []
        for a, b in zip(sizes_, sizes_[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers[:-1])

    for name, shape, batch, steps in (("digits MLP", [64, 64, 10], 64, 20),
                                      ("24 MiB MLP", [1024, 2048, 1536, 512], 32, 3)):
        torch.manual_seed(0)
        base = mlp(shape)
        nparam = sum(p.numel() for p in base.parameters())
        models, opts = {}, {}
        for b in ("gloo", "ringmaster"):
            m = mlp(shape)
            m.load_state_dict(base.state_dict())
            models[b] = torch.nn.parallel.DistributedDataParallel(m, process_group=groups[b])
            opts[b] = torch.optim.SGD(models[b].parameters(), lr=0.01)
        x = torch.randn(max(1, batch // n), shape[0])
        y = torch.randn(max(1, batch // n), shape[-1])
        times = {"gloo": [], "ringmaster": []}
        for rep in range((3 if args.quick else 7) + 1):
            order = ["gloo", "ringmaster"] if rep % 2 else ["ringmaster", "gloo"]
            for b in order:
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(steps):
                    loss = torch.nn.functional.mse_loss(models[b](x), y)
                    opts[b].zero_grad()
                    loss.backward()
                    opts[b].step()
                dt = (time.perf_counter() - t0) / steps
                if rep:
                    times[b].append(dt)
        out["ddp"].append({"model": name, "params": nparam, "batch": batch,
                           "gloo": statistics.median(times["gloo"]),
                           "ringmaster": statistics.median(times["ringmaster"])})
    if rank == 0:
        print("BENCH " + json.dumps(out), flush=True)
    dist.barrier()
    ringmaster.finalize()


def async_worker(args):
    import torch
    import torch.distributed as dist
    import ringmaster
    import ringmaster.torch  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    groups = {"gloo": None}
    names = []
    if ringmaster.torch.active_backend()[0] == "native":
        groups["rm-native"] = dist.new_group(backend="ringmaster")
        names.append("rm-native")
    # RINGMASTER_TORCH_NATIVE=0 / RINGMASTER_TORCH_SYNC=1 are read when a
    # group is made: the Python backend, asynchronous and synchronous
    os.environ["RINGMASTER_TORCH_NATIVE"] = "0"
    groups["rm-async"] = dist.new_group(backend="ringmaster")
    os.environ["RINGMASTER_TORCH_SYNC"] = "1"
    groups["rm-sync"] = dist.new_group(backend="ringmaster")
    del os.environ["RINGMASTER_TORCH_SYNC"], os.environ["RINGMASTER_TORCH_NATIVE"]
    names += ["rm-async", "rm-sync", "gloo"]
    out = {"ret": [], "ddp": []}
    reps = 3 if args.quick else args.reps
    for size, k in ((4 << 10, 200), (64 << 20, 3)):
        t = torch.ones(size // 4)
        ret = {b: [] for b in names}
        cpu = {b: [] for b in names}
        tot = {b: [] for b in names}
        for rep in range(reps + 1):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for b in order:
                dist.barrier()
                for _ in range(k):
                    c0 = time.thread_time()
                    t0 = time.perf_counter()
                    w = dist.all_reduce(t, group=groups[b], async_op=True)
                    t1 = time.perf_counter()
                    c1 = time.thread_time()
                    w.wait()
                    t2 = time.perf_counter()
                    if rep:  # the first repeat warms up
                        ret[b].append(t1 - t0)
                        cpu[b].append(c1 - c0)
                        tot[b].append(t2 - t0)
            t.fill_(1.0)
        out["ret"].append({"bytes": size, "calls": len(ret["gloo"]),
                           "ret": {b: statistics.median(ret[b]) for b in names},
                           "cpu": {b: statistics.median(cpu[b]) for b in names},
                           "total": {b: statistics.median(tot[b]) for b in names}})

    def mlp(sizes_):
        layers = []
        for a, b in zip(sizes_, sizes_[1:]):
            layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
        return torch.nn.Sequential(*layers[:-1])

    def resnet():
        import torchvision
        return torchvision.models.resnet18(num_classes=10)
    models_ = [("digits MLP", lambda: mlp([64, 64, 10]), (64,), 10, 64, 20),
               ("24 MiB MLP", lambda: mlp([1024, 2048, 1536, 512]), (1024,), 512, 32, 3),
               ("ResNet-18", resnet, (3, 32, 32), 10, args.resnet_batch, 2)]
    for name, make, shape, nout, batch, steps in models_:
        torch.manual_seed(0)
        base = make()
        nparam = sum(p.numel() for p in base.parameters())
        models, opts = {}, {}
        for b in names:
            m = make()
            m.load_state_dict(base.state_dict())
            models[b] = torch.nn.parallel.DistributedDataParallel(m, process_group=groups[b])
            opts[b] = torch.optim.SGD(models[b].parameters(), lr=0.01)
        x = torch.randn((max(1, batch // n),) + shape)
        y = torch.randn(max(1, batch // n), nout)
        times = {b: [] for b in names}
        for rep in range(reps + 1):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for b in order:
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(steps):
                    loss = torch.nn.functional.mse_loss(models[b](x), y)
                    opts[b].zero_grad()
                    loss.backward()
                    opts[b].step()
                dt = (time.perf_counter() - t0) / steps
                if rep:
                    times[b].append(dt)
        out["ddp"].append({"model": name, "params": nparam, "batch": batch,
                           "t": {b: statistics.median(times[b]) for b in names}})
    if rank == 0:
        print("BENCH " + json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    ringmaster.finalize()


def async_table(n, res):
    if "rm-native" in res["ddp"][0]["t"]:
        return async_table4(n, res)
    async_table3(n, res)


def async_table4(n, res):
    """The table with the native backend: native, Python async, Python sync,
    gloo."""
    bs = ("rm-native", "rm-async", "rm-sync", "gloo")
    print("\n# world %d: dist.all_reduce(t, async_op=True), float32 sum; median us over "
          "all calls" % n)
    print("# ret: wall time until the call returns; cpu: the calling thread's CPU time in "
          "it (time.thread_time); done: until wait() returns. native: the C++ backend; "
          "py async / py sync: the Python backend (RINGMASTER_TORCH_NATIVE=0, "
          "RINGMASTER_TORCH_SYNC=1)")
    for what in ("ret", "cpu", "total"):
        print("# %-5s %10s %6s | %10s %10s %10s %10s" % (
            what if what != "total" else "done", "size(B)", "calls", "native", "py async",
            "py sync", "gloo"))
        for r in res["ret"]:
            v = r[what]
            print("        %10d %6d | %10.1f %10.1f %10.1f %10.1f" % (
                r["bytes"], r["calls"], *(v[b] * 1e6 for b in bs)))
    print("\n# world %d, DDP step time (forward+backward+SGD), median ms" % n)
    print("# %-12s %10s %6s | %10s %10s %10s %10s | %12s %12s" % (
        "model", "params", "batch", "native", "py async", "py sync", "gloo",
        "native/sync", "native/gloo"))
    for r in res["ddp"]:
        t = r["t"]
        print("  %-12s %10d %6d | %10.2f %10.2f %10.2f %10.2f | %11.2fx %11.2fx" % (
            r["model"], r["params"], r["batch"], *(t[b] * 1e3 for b in bs),
            t["rm-native"] / t["rm-sync"], t["rm-native"] / t["gloo"]))


def async_table3(n, res):
    print("\n# world %d: dist.all_reduce(t, async_op=True), float32 sum; median us over "
          "all calls" % n)
    print("# ret: wall time until the call returns; cpu: the calling thread's CPU time in "
          "it (time.thread_time); done: until wait() returns")
    print("# %10s %6s | %10s %10s %10s | %10s %10s %10s | %10s %10s %10s" % (
        "size(B)", "calls", "ret async", "ret sync", "ret gloo", "cpu async", "cpu sync",
        "cpu gloo", "done async", "done sync", "done gloo"))
    for r in res["ret"]:
        a, c, t = r["ret"], r["cpu"], r["total"]
        print("  %10d %6d | %10.1f %10.1f %10.1f | %10.1f %10.1f %10.1f | %10.1f %10.1f %10.1f"
              % (r["bytes"], r["calls"], a["rm-async"] * 1e6, a["rm-sync"] * 1e6,
                 a["gloo"] * 1e6, c["rm-async"] * 1e6, c["rm-sync"] * 1e6, c["gloo"] * 1e6,
                 t["rm-async"] * 1e6, t["rm-sync"] * 1e6, t["gloo"] * 1e6))
    print("\n# world %d, DDP step time (forward+backward+SGD), median ms" % n)
    print("# %-12s %10s %6s | %10s %10s %10s | %10s" % (
        "model", "params", "batch", "rm async", "rm sync", "gloo", "sync/async"))
    for r in res["ddp"]:
        t = r["t"]
        print("  %-12s %10d %6d | %10.2f %10.2f %10.2f | %9.2fx" % (
            r["model"], r["params"], r["batch"], t["rm-async"] * 1e3, t["rm-sync"] * 1e3,
            t["gloo"] * 1e3, t["rm-sync"] / t["rm-async"]))


def py_loop(args):
    import numpy as np
    import ringmaster as rm
    peers = args.peers.split(",")
    rm.init(rank=args.rank, world=len(peers), peers=peers)
    x = np.zeros(1024, np.float32)
    allreduce = rm.allreduce
    for _ in range(50):
        allreduce(x)
    rm.barrier()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        allreduce(x)
    t1 = time.perf_counter()
    rm.barrier()
    if args.rank == 0:
        print("us_per_call %.3f" % ((t1 - t0) / args.iters * 1e6))
    rm.finalize()


# ---- parent side ----------------------------------------------------------------
def build_c_loop(d):
    import ringmaster._lib as L
    lib = os.path.realpath(L.path)
    exe = os.path.join(d, "c_loop")
    cmd = ["cc", "-O2", "-I", os.path.join(REPO, "include"), os.path.join(HERE, "c_loop.c"),
           lib, "-Wl,-rpath," + os.path.dirname(lib), "-o", exe]
    subprocess.run(cmd, check=True)
    return exe


def overhead(n, exe, iters=2000):
    def run(kind):
        peers = ",".join("127.0.0.1:%d" % p for p in free_ports(n))
        if kind == "c":
            argv = lambda r: [exe, str(r), peers, "1024", str(iters)]  # noqa: E731
        else:
            argv = lambda r: [PY, __file__, "--py-loop", "--rank", str(r),  # noqa: E731
                              "--peers", peers, "--iters", str(iters)]
        o = launch(n, argv)[0]
        return float(o.split("us_per_call")[1].split()[0])
    c, p = [], []
    for _ in range(3):
        c.append(run("c"))
        p.append(run("py"))
    return statistics.median(c), statistics.median(p)


def table(n, res, ov):
    busf = 2.0 * (n - 1) / n
    print("\n# world %d, float32 sum, in place; median of interleaved repeats" % n)
    print("# %10s %10s | %10s %8s %8s | %10s %8s %8s | %6s" % (
        "size(B)", "count", "gloo(us)", "algbw", "busbw", "rm(us)", "algbw", "busbw", "rm/gloo"))
    for r in res["allreduce"]:
        b = r["bytes"]
        g, m = r["gloo"], r["ringmaster"]
        print("  %10d %10d | %10.1f %8.3f %8.3f | %10.1f %8.3f %8.3f | %5.2fx" % (
            b, b // 4, g * 1e6, b / g / 1e9, b / g / 1e9 * busf,
            m * 1e6, b / m / 1e9, b / m / 1e9 * busf, g / m))
    print("\n# world %d, DDP step time (forward+backward+SGD), median ms" % n)
    print("# %-12s %10s %6s | %10s %10s | %6s" % ("model", "params", "batch", "gloo(ms)",
                                                 "rm(ms)", "gloo/rm"))
    for r in res["ddp"]:
        print("  %-12s %10d %6d | %10.2f %10.2f | %5.2fx" % (
            r["model"], r["params"], r["batch"], r["gloo"] * 1e3, r["ringmaster"] * 1e3,
            r["gloo"] / r["ringmaster"]))
    for w, (c, p) in ov:
        print("# world %d, one all-reduce of 4 KiB (1024 f32), back-to-back: C %.2f us, "
              "Python %.2f us, Python overhead %.2f us a call" % (w, c, p, p - c))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--async", dest="async_", action="store_true")
    ap.add_argument("--async-worker", action="store_true")
    ap.add_argument("--reps", type=int, default=7, help="section 4's repeats")
    ap.add_argument("--resnet-batch", type=int, default=32,
                    help="section 4's ResNet-18 global batch")
    ap.add_argument("--table", help="print section 4's tables from a rank 0 output file "
                    "(netns_ddp.sh)")
    ap.add_argument("--py-loop", action="store_true")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--peers")
    ap.add_argument("--iters", type=int, default=2000)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.py_loop:
        return py_loop(args)
    if args.async_worker:
        return async_worker(args)
    if args.table:
        with open(args.table) as f:
            res = json.loads(f.read().split("BENCH ", 1)[1].splitlines()[0])
        return async_table(int(args.worlds.split(",")[0]), res)
    import ringmaster
    print("# ringmaster bench_torch: library %s, %d CPUs" % (ringmaster.library_path,
                                                            os.cpu_count()))
    if args.async_:
        for n in [int(x) for x in args.worlds.split(",")]:
            print("# load before world %d: %s" % (n, os.getloadavg()))
            outs = launch(n, lambda r: [PY, __file__, "--async-worker", "--reps",
                                        str(args.reps)] + (["--quick"] if args.quick else []))
            res = json.loads(outs[0].split("BENCH ", 1)[1].splitlines()[0])
            async_table(n, res)
            print("# load after: %s" % (os.getloadavg(),))
            sys.stdout.flush()
        return
    d = tempfile.mkdtemp(prefix="rm-bench-torch-")
    exe = build_c_loop(d)
    ov1 = overhead(1, exe)
    for n in [int(x) for x in args.worlds.split(",")]:
        outs = launch(n, lambda r: [PY, __file__, "--worker"] + (["--quick"] if args.quick else []))
        res = json.loads(outs[0].split("BENCH ", 1)[1].splitlines()[0])
        table(n, res, [(1, ov1), (n, overhead(n, exe))])
        sys.stdout.flush()


if __name__ == "__main__":
    main()
