"""One rank of test_core.py: `core_worker.py check|kill|device --rank R --peers A,B,...`.

check: in-place all-reduce of numpy arrays and CPU torch tensors (data
pointer unchanged) for every dtype both sides have, every op, every
algorithm and odd sizes; broadcast, allgather, reduce_scatter, alltoall,
barrier; the TypeError/ValueError of bad buffers. Values are small integers so
every expected result is exact. Prints "OK rank R".

device: the same collectives on DEVICE memory, given to ringmaster as objects
with __cuda_array_interface__ (the protocol CuPy, Numba and PyTorch CUDA
tensors speak), allocated through the library's test hooks (the stand-in GPU,
a test double, or CUDA on a GPU machine); with RINGMASTER_NCCL_LIB set (the
stand-in NCCL of tests/doubles, or a real libnccl) also algorithm="nccl". A strided device array is a ValueError, host-only
calls (aggregate) refuse device memory with a TypeError. Prints "OK rank R".

kill: after a barrier prints READY, then all-reduces 256 KiB until the
library raises (the parent SIGKILLs one rank); prints
ERROR {"cls":..., "status":..., "peer":..., "message":..., "seconds":...}.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import ringmaster as rm  # noqa: E402

NP_TYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8]
TORCH_TYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
               torch.int64, torch.uint8]
SIZES = [1, 7, 1000, 65537]


def check_all(cond, what):
    if not cond:
        raise AssertionError(what)


def base(n):
    return (np.arange(n) % 7 + 1).astype(np.float64)


def expected(op, n, world, dtype_is_int):
    b = base(n)
    s = sum(r + 1 for r in range(world))
    if op == "sum":
        return b * s
    if op == "max":
        return b * world
    if op == "min":
        return b
    if op == "avg":
        v = b * s / world
        return np.trunc(v) if dtype_is_int else v
    if op == "prod":  # inputs r+1 (no base)
        return np.full(n, float(np.prod([r + 1 for r in range(world)])))


def value(op, n, rank):
    return np.full(n, rank + 1.0) if op == "prod" else base(n) * (rank + 1)


def check(rank, world):
    ops = ["sum", "max", "min", "avg", "prod"]
    # numpy
    for dt in NP_TYPES:
        isint = np.issubdtype(dt, np.integer)
        for n in SIZES:
            for op in ops:
                x = value(op, n, rank).astype(dt)
                ptr = x.ctypes.data
                out = rm.allreduce(x, op=op)
                check_all(out is x and x.ctypes.data == ptr, "numpy result not in place")
                want = expected(op, n, world, isint)
                check_all(np.array_equal(x.astype(np.float64), want),
                          "numpy %s %s n=%d: got %s want %s" % (np.dtype(dt), op, n, x[:5], want[:5]))
    # torch
    for dt in TORCH_TYPES:
        isint = not dt.is_floating_point
        for n in SIZES:
            for op in ops:
                x = torch.from_numpy(value(op, n, rank)).to(dt)
                ptr = x.data_ptr()
                out = rm.allreduce(x, op=op)
                check_all(out is x and x.data_ptr() == ptr, "torch result not in place")
                want = torch.from_numpy(expected(op, n, world, isint))
                check_all(torch.equal(x.double(), want),
                          "torch %s %s n=%d: got %s want %s" % (dt, op, n, x[:5], want[:5]))
    # every algorithm
    for algo in ["auto", "ring", "hd", "butterfly", "tree"]:
        x = (base(4099) * (rank + 1)).astype(np.float32)
        rm.allreduce(x, "sum", algorithm=algo)
        check_all(np.array_equal(x, expected("sum", 4099, world, False).astype(np.float32)),
                  "algorithm %s wrong" % algo)
    # views (contiguous slices are fine) and 2-D
    big = np.zeros((3, 1000), np.float32)
    big[1] = rank + 1
    rm.allreduce(big[1])
    check_all((big[1] == sum(range(1, world + 1))).all() and (big[0] == 0).all(),
              "row view all-reduce")
    # broadcast
    root = world - 1
    for mk in (lambda: np.full(777, rank, np.int64), lambda: torch.full((5, 9), float(rank))):
        x = mk()
        rm.broadcast(x, root)
        check_all(float(x.max()) == root and float(x.min()) == root, "broadcast")
    xb = torch.full((10,), rank == 1, dtype=torch.bool)  # no rm dtype: moved as bytes
    rm.broadcast(xb, 1)
    check_all(bool(xb.all()), "bool broadcast")
    # allgather
    g = rm.allgather(np.full((2, 3), rank, np.float64))
    check_all(g.shape == (world, 2, 3) and all((g[r] == r).all() for r in range(world)),
              "numpy allgather")
    g = rm.allgather(torch.full((4,), rank, dtype=torch.bfloat16))
    check_all(tuple(g.shape) == (world, 4) and all(bool((g[r] == r).all()) for r in range(world)),
              "torch allgather")
    # reduce_scatter, alltoall
    x = np.arange(world * 5, dtype=np.float32) * (rank + 1)
    y = rm.reduce_scatter(x)
    s = sum(r + 1 for r in range(world))
    check_all(np.array_equal(y, np.arange(rank * 5, rank * 5 + 5, dtype=np.float32) * s),
              "reduce_scatter")
    x = np.array([rank * 100 + j for j in range(world)], np.int32)
    y = rm.alltoall(x)
    check_all(list(y) == [r * 100 + rank for r in range(world)], "alltoall %s" % y)
    rm.barrier()
    # bad buffers
    for bad, exc in ((np.zeros((4, 4), np.float32)[:, 1], ValueError),
                     (torch.zeros(4, 4).t(), ValueError),
                     (np.zeros(4, np.complex64), TypeError),
                     (torch.zeros(4, device="meta"), TypeError),
                     ([1.0, 2.0], TypeError)):
        try:
            rm.allreduce(bad)
        except exc as e:
            check_all("ringmaster" in str(e), "error text %s" % e)
        else:
            raise AssertionError("no %s for %r" % (exc.__name__, type(bad)))
    try:
        rm.allreduce(np.zeros(4, np.float32), op="median")
    except ValueError:
        pass
    else:
        raise AssertionError("no ValueError for op median")
    check_all(rm.rank() == rank and rm.size() == world, "rank/size")
    rm.barrier()
    print("OK rank %d" % rank, flush=True)


class DevArray:
    """Device memory (the library's test hooks, rm_testhook_gpu_*) with
    __cuda_array_interface__ version 3 ("stream": 1, the default stream)."""

    def __init__(self, host):
        from ringmaster import _lib
        self._f = _lib.session_fn
        self.dtype, self.shape, self.nbytes = host.dtype, host.shape, host.nbytes
        self.ptr = self._f("rm_testhook_gpu_alloc")(max(self.nbytes, 1))
        check_all(self.ptr, "no device memory")
        self.put(host)
        self.strides = None

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 3, "strides": self.strides, "stream": 1}

    def put(self, host):
        check_all(self._f("rm_testhook_gpu_copy")(self.ptr, host.ctypes.data, host.nbytes) == 0,
                  "put")

    def get(self):
        out = np.empty(self.shape, self.dtype)
        check_all(self._f("rm_testhook_gpu_copy")(out.ctypes.data, self.ptr, self.nbytes) == 0,
                  "get")
        return out

    def free(self):
        self._f("rm_testhook_gpu_free")(self.ptr)


def device(rank, world):
    ops = ["sum", "max", "min", "avg", "prod"]
    algos = [None, "ring", "hd", "tree"] + (["nccl"] if os.environ.get("RINGMASTER_NCCL_LIB") else [])
    for dt in NP_TYPES:
        isint = np.issubdtype(dt, np.integer)
        for n in (7, 65537):
            for i, op in enumerate(ops):
                algo = algos[i % len(algos)]
                d = DevArray(value(op, n, rank).astype(dt))
                out = rm.allreduce(d, op=op, algorithm=algo)
                check_all(out is d, "device result not the same object")
                want = expected(op, n, world, isint)
                got = d.get()
                check_all(np.array_equal(got.astype(np.float64), want),
                          "device %s %s n=%d algo %s: got %s want %s"
                          % (np.dtype(dt), op, n, algo, got[:5], want[:5]))
                d.free()
    root = world - 1
    d = DevArray(np.full(777, rank, np.int64))
    rm.broadcast(d, root)
    check_all((d.get() == root).all(), "device broadcast")
    d.free()
    src, out = DevArray(np.full(6, rank, np.float64)), DevArray(np.zeros(6 * world))
    rm.default_communicator().allgather_into(out, src)
    g = out.get().reshape(world, 6)
    check_all(all((g[r] == r).all() for r in range(world)), "device allgather_into")
    src.free(), out.free()
    src = DevArray(np.arange(world * 5, dtype=np.float32) * (rank + 1))
    out = DevArray(np.zeros(5, np.float32))
    rm.default_communicator().reduce_scatter_into(out, src)
    s = sum(r + 1 for r in range(world))
    check_all(np.array_equal(out.get(), np.arange(rank * 5, rank * 5 + 5, dtype=np.float32) * s),
              "device reduce_scatter_into")
    src.free(), out.free()
    src = DevArray(np.array([rank * 100 + j for j in range(world)], np.int32))
    out = DevArray(np.zeros(world, np.int32))
    rm.default_communicator().alltoall_into(out, src)
    check_all(list(out.get()) == [r * 100 + rank for r in range(world)], "device alltoall")
    src.free(), out.free()
    d = DevArray(np.ones(8, np.float32))
    d.strides = (8,)  # every other element: not C-contiguous
    try:
        rm.allreduce(d)
    except ValueError as e:
        check_all("contiguous" in str(e), "strided error text %s" % e)
    else:
        raise AssertionError("no ValueError for a strided device array")
    d.strides = None
    try:
        rm.aggregate(d, method="median")
    except TypeError as e:
        check_all("host memory" in str(e), "aggregate error text %s" % e)
    else:
        raise AssertionError("aggregate took device memory")
    d.free()
    h = np.ones(5, np.float32)  # host memory on the same communicator
    rm.allreduce(h)
    check_all((h == world).all(), "host after device")
    rm.barrier()
    print("OK rank %d" % rank, flush=True)


def kill(rank, world):
    x = np.ones(65536, np.float32)
    rm.allreduce(x)
    rm.barrier()
    print("READY", flush=True)
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < 60:
            rm.allreduce(x)
            x.fill(1.0)
    except rm.RingmasterError as e:
        t = time.monotonic()
        print("ERROR " + json.dumps({"cls": type(e).__name__, "status": e.status,
                                     "peer": e.peer, "message": e.message,
                                     "seconds": round(t - t0, 3)}), flush=True)
        return
    print("NO ERROR after 60 s", flush=True)
    sys.exit(2)


def main():
    mode = sys.argv[1]
    rank = int(sys.argv[sys.argv.index("--rank") + 1])
    peers = sys.argv[sys.argv.index("--peers") + 1].split(",")
    rm.init(rank=rank, world=len(peers), peers=peers)
    {"check": check, "kill": kill, "device": device}[mode](rank, len(peers))
    rm.finalize()


if __name__ == "__main__":
    main()
