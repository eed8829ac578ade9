"""robust.python.nN: ringmaster.aggregate on N real processes, no coordinator.

  test_aggregate.py N                     the driver: N ranks of the worker
  test_aggregate.py worker --rank R --peers A,B,...

Every rank builds the same inputs (row r = rank r's vector, the last rank an
outlier of 1e6), aggregates its own row in place and checks the result
against a numpy reference computed from all rows (float64, then the dtype's
rounding: rtol 1e-6 for f32, 1e-12 for f64): median, trimmed_mean (f = 1),
mean with clip_norm (each row scaled to norm <= 2), krum (f = 0: N > 2 holds
for N = 3, 4; the outlier is never chosen, the result is one honest row
bitwise, the outlier is in the excluded ranks), a CPU torch tensor in place
(data pointer unchanged), every result bitwise equal on every rank (an
all-gather of the bytes), and a rule the world cannot hold (bulyan needs
n >= 4f + 3) raising InvalidArgument that names it. Exit 77 when numpy or
torch is missing; a library without rm_aggregate is a failure.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import rmtest  # noqa: E402

COUNT = 1001


def rows(world, dtype):
    import numpy as np
    rng = np.random.default_rng(12)
    x = rng.normal(size=(world, COUNT)).astype(np.float64)
    x[world - 1] = 1e6  # the outlier (a Byzantine rank)
    return x.astype(dtype)


def worker(rank, peers):
    import numpy as np
    import torch
    import ringmaster as rm
    world = len(peers)
    rm.init(rank=rank, world=world, peers=peers)
    fails = []

    def same_everywhere(x, what):
        b = np.frombuffer(np.ascontiguousarray(x).tobytes(), np.uint8).copy()
        allb = rm.allgather(b)
        if not all((allb[r] == allb[0]).all() for r in range(world)):
            fails.append("%s: results differ across ranks" % what)

    for dt, rtol in ((np.float32, 1e-6), (np.float64, 1e-12)):
        X = rows(world, dt)
        Xd = X.astype(np.float64)
        srt = np.sort(Xd, axis=0)
        refs = {
            "median": np.median(Xd, axis=0),
            "trimmed_mean": srt[1:world - 1].mean(axis=0),
        }
        for meth, ref in refs.items():
            x = X[rank].copy()
            rm.aggregate(x, method=meth, f=1)
            if not np.allclose(x.astype(np.float64), ref, rtol=rtol, atol=1e-7):
                fails.append("%s %s: max abs err %g" % (meth, dt.__name__,
                                                        np.abs(x - ref).max()))
            same_everywhere(x, meth)
        # mean with clipping: every row scaled to L2 norm <= 2
        norms = np.linalg.norm(Xd, axis=1)
        clipped = Xd * np.minimum(1.0, 2.0 / norms)[:, None]
        x = X[rank].copy()
        rm.aggregate(x, method="mean", f=0, clip_norm=2.0)
        if not np.allclose(x, clipped.mean(axis=0), rtol=1e-5, atol=1e-6):
            fails.append("mean clip_norm=2 %s: max abs err %g"
                         % (dt.__name__, np.abs(x - clipped.mean(axis=0)).max()))
        if np.linalg.norm(x.astype(np.float64)) > 2.0 * (1 + 1e-5):
            fails.append("mean clip_norm=2: result norm %g > 2" % np.linalg.norm(x))
        same_everywhere(x, "clip")
        # krum, f = 0: one honest row, bitwise; the outlier excluded
        x = X[rank].copy()
        _, ex = rm.aggregate(x, method="krum", f=0, info=True)
        hit = [r for r in range(world - 1) if (X[r] == x).all()]
        if not hit:
            fails.append("krum %s: the result is no honest row" % dt.__name__)
        if world - 1 not in ex:
            fails.append("krum: excluded %s lacks the outlier rank %d" % (ex, world - 1))
        same_everywhere(x, "krum")

    # torch, in place: same pointer, median of the rows
    X = rows(world, np.float32)
    t = torch.from_numpy(X[rank].copy())
    ptr = t.data_ptr()
    out = rm.aggregate(t, method="median", f=1)
    if out is not t or t.data_ptr() != ptr:
        fails.append("torch: not in place")
    if not np.allclose(t.numpy(), np.median(X.astype(np.float64), axis=0), rtol=1e-6):
        fails.append("torch median: wrong values")

    # a rule the world cannot hold
    try:
        rm.aggregate(np.zeros(8, np.float32), method="bulyan", f=1)
        fails.append("bulyan f=1 on %d ranks did not raise" % world)
    except rm.InvalidArgument as e:
        if "bulyan" not in str(e):
            fails.append("bulyan error does not name the method: %s" % e)
    try:
        rm.aggregate(np.zeros(8, np.int32), method="median", f=1)
        fails.append("int32 did not raise TypeError")
    except TypeError:
        pass
    try:
        rm.aggregate(np.zeros(8, np.float32), method="nope")
        fails.append("an unknown method did not raise ValueError")
    except ValueError:
        pass
    rm.barrier()
    if fails:
        print("FAIL rank %d: %s" % (rank, "; ".join(fails)), flush=True)
        return 1
    print("OK rank %d" % rank, flush=True)
    return 0


def driver(n):
    rmtest.require(torch=True)
    import ringmaster
    from ringmaster import _lib
    assert _lib.has_aggregate(), "%s lacks rm_aggregate" % ringmaster.library_path
    d = rmtest.tmpdir("aggregate")
    peers = ",".join("127.0.0.1:%d" % p for p in rmtest.free_ports(n))
    procs = [rmtest.Proc([rmtest.PY, os.path.abspath(__file__), "worker", "--rank", str(r),
                          "--peers", peers], rmtest.env(),
                         os.path.join(d, "rank%d.log" % r), "rank %d" % r) for r in range(n)]
    codes = rmtest.wait_all(procs, 90)
    for r, (p, c) in enumerate(zip(procs, codes)):
        out = p.output()
        assert c == 0 and ("OK rank %d" % r) in out, "rank %d exit %s:\n%s" % (r, c, out[-3000:])
    print("%d ranks: aggregate checks passed" % n)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "worker":
        a = sys.argv[2:]
        rank = int(a[a.index("--rank") + 1])
        peers = a[a.index("--peers") + 1].split(",")
        sys.exit(worker(rank, peers))
    n = int(sys.argv[1])
    rmtest.main(lambda: driver(n))


if __name__ == "__main__":
    main()
