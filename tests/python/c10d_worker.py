"""One rank of tests/python/test_c10d.py: the "ringmaster" torch.distributed
backend with real torch, torchrun-style environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), no coordinator.

  c10d_worker.py MODE

Prints RESULT {...} lines (json) that the test reads; exits non-zero on a
failed check. References are computed here from every rank's input, which
each rank can rebuild (inputs are functions of the rank), with plain Python
integers and complex128 arithmetic, not through any collective.
"""
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ringmaster.torch as rmt

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
STALL = 1  # the rank that stalls in the timeout modes


def result(**kw):
    kw.setdefault("rank", RANK)
    print("RESULT " + json.dumps(kw), flush=True)


def check(cond, what):
    if not cond:
        print("CHECK FAILED rank %d: %s" % (RANK, what), flush=True)
        sys.exit(3)


# ---- timeouts -----------------------------------------------------------------
def stall_test(group, timeout_s, allreduce=None):
    """One good all-reduce, then every rank but STALL all-reduces again
    while STALL sleeps past the timeout."""
    allreduce = allreduce or (lambda t: dist.all_reduce(t, group=group))
    t = torch.ones(1000)
    allreduce(t)
    check(t[0].item() == WORLD, "first all_reduce %s" % t[0].item())
    if RANK == STALL:
        time.sleep(timeout_s + 8)
        try:
            allreduce(t)
            result(raised=False)
        except Exception as e:  # the others are gone: any failure is right
            result(raised=True, message=str(e), late=True)
        os._exit(0)
    t0 = time.monotonic()
    try:
        allreduce(t)
        result(raised=False)
    except Exception as e:
        # elastic recovery finds a failure that torch wrapped (DDP's
        # reducer) by the words of ringmaster's last exception: this one
        result(raised=True, message=str(e), type=type(e).__name__,
               elapsed=time.monotonic() - t0, peer=getattr(e, "peer", None),
               sequence=getattr(e, "sequence", None),
               found=rmt._rm.last_exception is e)
    os._exit(0)  # no clean destroy of a failed group


def mode_timeout():
    dist.init_process_group("ringmaster", timeout=timedelta(seconds=5))
    stall_test(None, 5)


def mode_timeout_group():
    # the default group keeps torch's default (30 min); the sub-group's
    # own timeout bounds its calls
    dist.init_process_group("ringmaster")
    check(dist.distributed_c10d._get_default_group()._timeout_ms == 30 * 60 * 1000,
          "default group timeout is not torch's default")
    g = dist.new_group(list(range(WORLD)), timeout=timedelta(seconds=5))
    stall_test(g, 5)


def mode_timeout_set():
    # a communicator built with one deadline takes another later
    # (rm_comm_set_timeout: what a session's communicator gets from the
    # default group's timeout)
    dist.init_process_group("ringmaster")
    dist.distributed_c10d._get_default_group()._comm.set_timeout(5000)
    stall_test(None, 5)


def mode_timeout_opt():
    # the group keeps torch's default; the call's own option bounds it
    dist.init_process_group("ringmaster")
    pg = dist.distributed_c10d._get_default_group()

    def allreduce(t):
        opts = dist.AllreduceOptions()
        opts.timeout = timedelta(seconds=5)
        pg.allreduce([t], opts).wait()
    stall_test(None, 5, allreduce)


# ---- destroy, then init again -------------------------------------------------
def allreduce_check(group, ranks, k, me=None):
    """me: this rank in ranks' numbering (default RANK, the launch's)."""
    t = torch.full((257,), float((RANK if me is None else me) + k))
    dist.all_reduce(t, group=group)
    want = sum(r + k for r in ranks)
    check(torch.all(t == want).item(), "round %d: all_reduce over %s gave %s, want %s"
          % (k, ranks, t[0].item(), want))


def mode_job_reinit():
    mode_reinit(True, job=True)


def mode_reinit(sub, job=False):
    # one store for the program, a fresh prefix per round: torch's own
    # init_process_group counts arrivals under keys that start over after
    # destroy_process_group, so on one unprefixed store (or env:// with the
    # same port) it hangs with gloo as well
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), WORLD,
                         RANK == 0, timedelta(seconds=60))
    for k in range(3):
        dist.init_process_group("ringmaster", store=dist.PrefixStore("round%d" % k, base),
                                rank=RANK, world_size=WORLD)
        allreduce_check(None, range(WORLD), k)
        if job:
            pg = dist.distributed_c10d._get_default_group()
            check(pg._comm.session and pg._comm is rmt._rm.default_communicator(),
                  "round %d: the default group is not the session's communicator" % k)
        if sub:
            g = dist.new_group([0, 1])
            if RANK in (0, 1):
                allreduce_check(g, [0, 1], k)
            allreduce_check(None, range(WORLD), k + 10)
        dist.barrier()
        dist.destroy_process_group()
    result(ok=True, rounds=3)


def job_with_subgroup():
    """The default group and a sub-group [0, 1] (timeout 60 s) of a job,
    both shown working; returns the sub-group."""
    dist.init_process_group("ringmaster")
    sub = dist.new_group([0, 1], timeout=timedelta(seconds=60))
    if RANK in (0, 1):
        allreduce_check(sub, [0, 1], 0)
    dist.barrier()
    return sub


def mode_job_subgroup():
    """A 3-worker job under on_failure shrink (test_c10d.py job_subgroup):
    rank 2 dies while rank 0 waits in a sub-group all-reduce for rank 1,
    which waits in a default-group all-reduce for rank 2."""
    import signal
    import ringmaster
    sub = job_with_subgroup()
    if RANK == 2:
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    err = None
    try:
        if RANK == 0:
            dist.all_reduce(torch.ones(4), group=sub)
        else:
            dist.all_reduce(torch.ones(4))
    except RuntimeError as e:
        err = e
    elapsed = time.monotonic() - t0
    check(err is not None, "rank %d: the all-reduce returned" % RANK)
    again = None
    if RANK == 0:  # the sub-group stays failed: Reconfigured at once (rank 1
        try:       # calls it no more: its call would pair with this one)
            dist.all_reduce(torch.ones(4), group=sub)
        except RuntimeError as e:
            again = str(e)
        check(again is not None and "RM_ERR_RECONFIGURED" in again, "sub-group after: %s"
              % again)
    dist.destroy_process_group()
    ringmaster.reform()
    dist.init_process_group("ringmaster")
    allreduce_check(None, range(dist.get_world_size()), 5)
    dist.barrier()
    dist.destroy_process_group()
    result(ok=True, error=str(err), elapsed=elapsed, again=again,
           world=ringmaster.size())


def mode_job_subgroup_closed():
    """A 3-worker job under shrink (test_c10d.py job_subgroup_closed): rank
    1 closes the sub-group [0, 1] while rank 0 waits in it, then dies. Rank 0
    sees the closed links (PEER_LOST) before the coordinator decides: the
    order job_subgroup leaves to chance, here made certain."""
    import signal
    import ringmaster
    sub = job_with_subgroup()
    if RANK == 1:
        dist.destroy_process_group(sub)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    err = again = None
    try:
        dist.all_reduce(torch.ones(4), group=sub if RANK == 0 else None)
    except RuntimeError as e:
        err = str(e)
    elapsed = time.monotonic() - t0
    check(err is not None, "rank %d: the all-reduce returned" % RANK)
    if RANK == 0:
        try:
            dist.all_reduce(torch.ones(4), group=sub)
        except RuntimeError as e:
            again = str(e)
    dist.destroy_process_group()
    ringmaster.reform()
    dist.init_process_group("ringmaster")
    allreduce_check(None, range(dist.get_world_size()), 5, me=dist.get_rank())  # new ranks
    dist.destroy_process_group()
    result(ok=True, error=err, elapsed=elapsed, again=again, world=ringmaster.size())


# ---- dtypes -----------------------------------------------------------------------
def make(dtype, rank, n):
    """Rank rank's input: deterministic, covers wrap-around and signs."""
    g = torch.Generator().manual_seed(1000 + 17 * rank + n)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype == torch.int8:
        return torch.randint(-128, 128, (n,), generator=g).to(torch.int8)
    if dtype == torch.uint8:
        return torch.randint(0, 256, (n,), generator=g).to(torch.uint8)
    re = torch.randn(n, generator=g, dtype=torch.float64)
    im = torch.randn(n, generator=g, dtype=torch.float64)
    return torch.complex(re, im).to(dtype)


def ref_reduce(dtype, op, xs):
    """Element-wise reduction of xs (list of tensors) in Python numbers."""
    cols = list(zip(*[x.tolist() for x in xs]))
    out = []
    for col in cols:
        if dtype == torch.bool:
            v = {"SUM": any(col), "MAX": any(col), "BOR": any(col), "PRODUCT": all(col),
                 "MIN": all(col), "BAND": all(col), "BXOR": sum(col) % 2 == 1}[op]
        elif dtype.is_complex:
            v = 0j if op in ("SUM", "AVG") else 1 + 0j
            for z in col:
                v = v + z if op in ("SUM", "AVG") else v * z
            if op == "AVG":
                v = v / len(col)
        else:
            if op in ("SUM", "AVG"):
                v = sum(col)
            elif op == "PRODUCT":
                v = 1
                for a in col:
                    v *= a
            elif op == "MIN":
                v = min(col)
            elif op == "MAX":
                v = max(col)
            else:
                v = col[0]
                for a in col[1:]:
                    v = {"BAND": v & a, "BOR": v | a, "BXOR": v ^ a}[op]
            if op == "AVG":
                v = int(v / len(col))  # truncating, as libringmaster's integer AVG
            if dtype == torch.int8:
                v = (v + 128) % 256 - 128
            elif dtype == torch.uint8:
                v %= 256
        out.append(v)
    return torch.tensor(out, dtype=dtype)


def same(a, b, dtype):
    if dtype.is_complex:
        return torch.allclose(a.to(torch.complex128), b.to(torch.complex128),
                              rtol=1e-4 if dtype == torch.complex64 else 1e-10, atol=1e-5)
    return torch.equal(a, b)


OPS = {torch.int8: ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"],
       torch.uint8: ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"],
       torch.bool: ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"],
       torch.complex64: ["SUM", "AVG"],  # what torch's all_reduce allows on complex
       torch.complex128: ["SUM", "AVG"]}
RED = {"SUM": dist.ReduceOp.SUM, "AVG": dist.ReduceOp.AVG, "PRODUCT": dist.ReduceOp.PRODUCT,
       "MIN": dist.ReduceOp.MIN, "MAX": dist.ReduceOp.MAX, "BAND": dist.ReduceOp.BAND,
       "BOR": dist.ReduceOp.BOR, "BXOR": dist.ReduceOp.BXOR}


def mode_dtypes():
    dist.init_process_group("ringmaster")
    n = 6 * WORLD + 1
    checked = 0
    for dtype, ops in OPS.items():
        xs = [make(dtype, r, n) for r in range(WORLD)]
        for op in ops:
            want = ref_reduce(dtype, op, xs)
            t = xs[RANK].clone()
            dist.all_reduce(t, RED[op])
            check(same(t, want, dtype), "all_reduce %s %s: %s vs %s" % (dtype, op, t, want))
            root = (checked + 1) % WORLD
            t = xs[RANK].clone()
            dist.reduce(t, root, RED[op])
            if RANK == root:
                check(same(t, want, dtype), "reduce %s %s" % (dtype, op))
            m = n - 1  # world blocks of m // world
            out = torch.empty(m // WORLD, dtype=dtype)
            dist.reduce_scatter(out, list(xs[RANK][:m].chunk(WORLD)), RED[op])
            wblk = ref_reduce(dtype, op, [x[:m] for x in xs]).chunk(WORLD)[RANK]
            check(same(out, wblk, dtype), "reduce_scatter %s %s" % (dtype, op))
            checked += 3
        # data movement, any dtype
        root = WORLD - 1
        t = xs[RANK].clone()
        dist.broadcast(t, root)
        check(torch.equal(t, xs[root]), "broadcast %s" % dtype)
        outs = [torch.empty(n, dtype=dtype) for _ in range(WORLD)]
        dist.all_gather(outs, xs[RANK])
        check(all(torch.equal(o, x) for o, x in zip(outs, xs)), "all_gather %s" % dtype)
        k = 3
        src = torch.cat([xs[RANK][:k]] * WORLD)
        out = torch.empty(k * WORLD, dtype=dtype)
        dist.all_to_all_single(out, src)
        check(all(torch.equal(out[r * k:(r + 1) * k], xs[r][:k]) for r in range(WORLD)),
              "all_to_all_single %s" % dtype)
        gl = [torch.empty(n, dtype=dtype) for _ in range(WORLD)] if RANK == 0 else None
        dist.gather(xs[RANK], gl, 0)
        if RANK == 0:
            check(all(torch.equal(o, x) for o, x in zip(gl, xs)), "gather %s" % dtype)
        out = torch.empty(n, dtype=dtype)
        dist.scatter(out, [xs[r] for r in range(WORLD)] if RANK == 0 else None, 0)
        check(torch.equal(out, xs[RANK]), "scatter %s" % dtype)
        checked += 5
    # the root stages gather and scatter through one buffer kept between
    # calls: larger, smaller, then larger blocks again, each result whole
    for m in (5000, 3, 4099):
        x = torch.arange(m, dtype=torch.float64) + 1e6 * RANK
        gl = [torch.full((m,), -1.0, dtype=torch.float64) for _ in range(WORLD)] \
            if RANK == 0 else None
        dist.gather(x, gl, 0)
        if RANK == 0:
            check(all(torch.equal(gl[r], torch.arange(m, dtype=torch.float64) + 1e6 * r)
                      for r in range(WORLD)), "gather of %d after other sizes" % m)
        out = torch.full((m,), -1.0, dtype=torch.float64)
        pieces = [torch.arange(m, dtype=torch.float64) * (r + 2) for r in range(WORLD)]
        dist.scatter(out, pieces if RANK == 0 else None, 0)
        check(torch.equal(out, pieces[RANK]), "scatter of %d after other sizes" % m)
        checked += 2
    # what torch does not define is refused on every rank before anything moves
    for dtype, op in ((torch.bool, "AVG"), (torch.float32, "BAND"), (torch.float64, "BXOR")):
        try:
            dist.all_reduce(torch.zeros(4, dtype=dtype), RED[op])
            check(False, "%s %s did not raise" % (dtype, op))
        except ValueError as e:
            check(op in str(e), "refusal names no op: %s" % e)
    allreduce_check(None, range(WORLD), 5)  # still usable
    dist.destroy_process_group()
    result(ok=True, checked=checked)


# ---- uneven all-to-all ----------------------------------------------------------
def rows(src, dst):
    return (3 * src + 2 * dst + 1) % 5  # 0..4, some pairs send nothing


def mode_alltoall():
    dist.init_process_group("ringmaster")
    cols = 3
    ins = [rows(RANK, j) for j in range(WORLD)]
    outs = [rows(i, RANK) for i in range(WORLD)]
    x = torch.cat([torch.tensor([[RANK * 1000 + j * 100 + k * 10 + c for c in range(cols)]
                                 for k in range(ins[j])], dtype=torch.int64).reshape(-1, cols)
                   for j in range(WORLD)])
    y = torch.full((sum(outs), cols), -1, dtype=torch.int64)
    w = dist.all_to_all_single(y, x, outs, ins, async_op=True)
    w.wait()
    # a native group runs it in C++: its Work is torch's, not _work.py's
    import ringmaster.torch as rt
    native = rt.active_backend()[0] == "native"
    check(isinstance(w, rt._work._Work) != native, "%s backend, Work %s"
          % (rt.active_backend()[0], type(w)))
    off = 0
    for i in range(WORLD):
        for k in range(outs[i]):
            want = [i * 1000 + RANK * 100 + k * 10 + c for c in range(cols)]
            check(y[off].tolist() == want, "row %d from rank %d: %s want %s"
                  % (k, i, y[off].tolist(), want))
            off += 1
    # the list form: tensors of any size (and dtype) per destination
    send = [torch.arange(rows(RANK, j) * 2, dtype=torch.float64) + RANK * 100 + j
            for j in range(WORLD)]
    recv = [torch.empty(rows(i, RANK) * 2, dtype=torch.float64) for i in range(WORLD)]
    dist.all_to_all(recv, send)
    for i in range(WORLD):
        want = torch.arange(rows(i, RANK) * 2, dtype=torch.float64) + i * 100 + RANK
        check(torch.equal(recv[i], want), "all_to_all from %d: %s" % (i, recv[i]))
    # disagreeing splits: every rank raises, and the group goes on
    bad_outs = list(outs)
    if RANK == 0:
        bad_outs[WORLD - 1] += 1
    yb = torch.empty((sum(bad_outs), cols), dtype=torch.int64)
    try:
        dist.all_to_all_single(yb, x, bad_outs, ins)
        check(False, "mismatched splits did not raise")
    except ValueError as e:
        check("split" in str(e), "mismatch error: %s" % e)
        msg = str(e)
    allreduce_check(None, range(WORLD), 7)
    # arguments only rank 0 sees are wrong (its splits do not sum to its
    # rows): it raises why, the others raise naming it; none hangs
    bad_ins = list(ins)
    if RANK == 0:
        bad_ins[0] += 1
    try:
        dist.all_to_all_single(y, x, outs, bad_ins)
        check(False, "rank 0's bad splits did not raise")
    except ValueError as e:
        want = "summing to its" if RANK == 0 else "rank 0's arguments are invalid"
        check(want in str(e), "bad-argument error: %s" % e)
    # rows of another size on one rank
    cols2 = cols + (1 if RANK == WORLD - 1 else 0)
    try:
        dist.all_to_all_single(torch.zeros((sum(outs), cols2), dtype=torch.int64),
                               torch.zeros((sum(ins), cols2), dtype=torch.int64), outs, ins)
        check(WORLD == 1, "rows of different sizes did not raise")
    except ValueError as e:
        check("rows differ in size" in str(e), "row-size error: %s" % e)
    allreduce_check(None, range(WORLD), 8)
    dist.destroy_process_group()
    result(ok=True, rows_in=ins, rows_out=outs, mismatch=msg)


# ---- monitored barrier ------------------------------------------------------------
def mode_mbarrier():
    dist.init_process_group("ringmaster")
    rmt.monitored_barrier(timeout=timedelta(seconds=20))
    late = list(range(1, WORLD))[-2:]  # one or two late ranks
    got = {}
    for wait_all in (False, True):
        if RANK in late:
            time.sleep(6)
        try:
            rmt.monitored_barrier(timeout=timedelta(seconds=3), wait_all_ranks=wait_all)
            got[str(wait_all)] = None
        except Exception as e:
            got[str(wait_all)] = str(e)
        dist.barrier()  # everyone caught up
    dist.destroy_process_group()
    result(late=late, errors=got)


def mode_job_mbarrier():
    """In a ringmaster command job: the default group is the session's
    communicator and monitored_barrier is the coordinator's barrier."""
    dist.init_process_group("ringmaster", timeout=timedelta(seconds=40))
    pg = dist.distributed_c10d._get_default_group()
    check(pg._comm.session, "the default group is not the session's communicator")
    rmt.monitored_barrier(timeout=timedelta(seconds=30))
    late = WORLD - 1
    if RANK == late:
        time.sleep(6)
    try:
        rmt.monitored_barrier(timeout=timedelta(seconds=3))
        err = None
    except Exception as e:
        err = str(e)
    rmt.monitored_barrier(timeout=timedelta(seconds=30))  # the group goes on
    allreduce_check(None, range(WORLD), 3)
    dist.destroy_process_group()
    result(late=late, error=err)


# ---- asynchronous collectives ------------------------------------------------------
def ramp(r, k, n):
    """Rank r's input of call k: exact in float64 sums."""
    return torch.arange(n, dtype=torch.float64) * (k + 1) + 1000.0 * r + k


def _thread_name():
    """This thread's name: the kernel's (a C++ thread's pthread name), or
    Python's where Python named it."""
    import threading
    t = threading.current_thread()
    if not t.name.startswith("Dummy"):
        return t.name
    with open("/proc/self/task/%d/comm" % threading.get_native_id()) as f:
        return f.read().strip()


def _thread_names():
    """The names of this process's threads, Python's and the kernel's."""
    import threading
    names = [t.name for t in threading.enumerate()]
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return names


def mode_async():
    """Several async_op=True calls in flight at once, of several kinds and
    sizes; results against references computed here; completion order =
    call order; wait(), get_future().then(), is_completed(), exception();
    argument errors still raise at the call; the synchronous form of a
    call waits for the async ones queued before it; wait(timeout) raises
    when the timeout passes first, and the call completes after."""
    dist.init_process_group("ringmaster")
    sizes = [1, 1000, 1 << 20, 7, 1 << 16, 3]
    done_order, works, tensors = [], [], []
    for k, n in enumerate(sizes):
        t = ramp(RANK, k, n)
        tensors.append(t)
        if k % 3 == 2:  # a broadcast from rank k % WORLD among the reductions
            w = dist.broadcast(t, k % WORLD, async_op=True)
        else:
            w = dist.all_reduce(t, async_op=True)
        w.get_future().add_done_callback(lambda f, k=k: done_order.append(k))
        works.append(w)
    # a then() chain on one more, whose value is the sum of the result
    x = ramp(RANK, 99, 4096)
    wx = dist.all_reduce(x, op=dist.ReduceOp.MAX, async_op=True)
    total = wx.get_future().then(lambda f: float(f.value()[0].sum()))
    # all_gather in flight too
    gl = [torch.empty(5, dtype=torch.int64) for _ in range(WORLD)]
    wg = dist.all_gather(gl, torch.full((5,), RANK * 7, dtype=torch.int64), async_op=True)
    # an argument error raises here, at the call, with work in flight
    try:
        dist.all_reduce(torch.zeros(3), op=dist.ReduceOp.BAND, async_op=True)
        check(False, "BAND on float did not raise at the call")
    except ValueError as e:
        check("BAND" in str(e), str(e))
    for k, w in enumerate(works):
        check(w.wait() is True, "wait %d" % k)
        check(w.is_completed() and w.is_success() and w.exception() is None, "state %d" % k)
        n = sizes[k]
        if k % 3 == 2:
            ref = ramp(k % WORLD, k, n)
        else:
            ref = sum(ramp(r, k, n) for r in range(WORLD))
        check(torch.equal(tensors[k], ref), "call %d (%d elements) differs" % (k, n))
        check(torch.equal(w.get_future().value()[0], ref), "future value %d" % k)
    check(done_order == list(range(len(sizes))), "completion order %s" % done_order)
    ref_max = ramp(WORLD - 1, 99, 4096)
    check(total.wait() == float(ref_max.sum()), "then(): %s" % total.wait())
    wg.wait()
    check(all(torch.equal(gl[r], torch.full((5,), r * 7, dtype=torch.int64))
              for r in range(WORLD)), "all_gather %s" % gl)
    # a synchronous call after async ones: queued behind them
    ts = [ramp(RANK, 200 + k, 5000) for k in range(4)]
    for t in ts[:-1]:
        dist.all_reduce(t, async_op=True)
    dist.all_reduce(ts[-1])  # returns when it, and so the ones before, are done
    for k, t in enumerate(ts):
        check(torch.equal(t, sum(ramp(r, 200 + k, 5000) for r in range(WORLD))),
              "queued call %d" % k)
    # wait(timeout): rank 0's wait ends first, raising, and the call goes on:
    # the other ranks make their call only after rank 0 has seen that
    store = dist.distributed_c10d._get_default_store()
    t = ramp(RANK, 300, 64)
    if RANK == 0:
        w = dist.all_reduce(t, async_op=True)
        try:
            w.wait(timedelta(seconds=0.2))
            check(False, "wait(timeout) returned with the other ranks not called yet")
        except RuntimeError as e:
            check("timed out" in str(e) and "allreduce #" in str(e), str(e))
        check(not w.is_completed(), "completed without the other ranks")
        store.set("async/go", "1")
        check(w.wait(timedelta(seconds=60)) is True, "wait(60 s)")
    else:
        store.get("async/go")
        dist.all_reduce(t)
    check(torch.equal(t, sum(ramp(r, 300, 64) for r in range(WORLD))), "after wait(timeout)")
    # the work ran on the group's own thread: its Future's callback runs
    # there (the Python backend's thread is a Python thread named
    # "ringmaster-pg <group>", the native one's a C++ thread of that name)
    # (the other ranks call only after rank 0 has registered its callback,
    # which would otherwise run at once, here, on a Future already done)
    import threading
    if RANK == 0:
        w = dist.all_reduce(torch.ones(2), async_op=True)
        ran = w.get_future().then(lambda f: (threading.get_ident(), _thread_name()))
        store.set("async/then", "1")
    else:
        store.get("async/then")
        w = dist.all_reduce(torch.ones(2), async_op=True)
    w.wait()
    if RANK == 0:
        ident, name = ran.wait()
        check(ident != threading.get_ident() and name.startswith("ringmaster-pg"),
              "ran on %r" % (name,))
    dist.destroy_process_group()
    alive = [n for n in _thread_names() if n.startswith("ringmaster-pg")]
    check(not alive, "worker threads alive after destroy: %s" % alive)
    result(ok=True, calls=len(sizes) + 7)


def mode_async_fail():
    """Rank 1 is killed (SIGKILL) with calls queued on the others: every
    Work on them fails (wait raises naming its call; exception() is set),
    the ones queued behind the first failure too, none hangs."""
    import signal
    dist.init_process_group("ringmaster", timeout=timedelta(seconds=20))
    t = torch.ones(100)
    dist.all_reduce(t)
    check(t[0].item() == WORLD, "first all_reduce")
    dist.barrier()
    if RANK == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)  # rank 1 is gone (or going)
    works = [dist.all_reduce(torch.ones(1 << 18), async_op=True) for _ in range(4)]
    got = []
    for k, w in enumerate(works):
        t0 = time.monotonic()
        try:
            w.wait()
            got.append({"raised": False})
        except Exception as e:
            got.append({"raised": True, "message": str(e)[:400], "type": type(e).__name__,
                        "sequence": getattr(e, "sequence", None),
                        "exception_set": w.exception() is e, "completed": w.is_completed(),
                        "elapsed": time.monotonic() - t0})
    result(works=got, last=str(rmt._rm.last_exception)[:400])
    os._exit(0)  # no clean destroy of a failed group


def mode_overlap():
    """DDP over the ringmaster backend: the first bucket's all-reduce starts,
    on another thread than backward's, before backward has ended. The end
    of backward is the gradient hook of the model's input (the first layer
    computes it last); it waits (deadline 30 s) for the first all-reduce to
    start, so that the order is decided without timing. With
    RINGMASTER_TORCH_SYNC=1 the all-reduce runs inside the hook, on
    backward's own thread, and the check says so (overlap False)."""
    import threading
    dist.init_process_group("ringmaster")
    torch.manual_seed(0)
    # 1 MiB layers: DDP's first backward all-reduces one bucket (torch 1.13
    # buckets by the real order of the gradients from the second on); then
    # the first bucket holds 1 MiB (torch's _DEFAULT_FIRST_BUCKET_BYTES),
    # the others bucket_cap_mb: the last layer's gradient is a bucket of
    # its own, all-reduced while the layers before it compute theirs
    layers = [torch.nn.Linear(512, 512) for _ in range(4)]
    model = torch.nn.Sequential(*layers)
    ref_model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
    ref_model.load_state_dict(model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.02)
    pg = dist.distributed_c10d._get_default_group()

    def data(r):
        g = torch.Generator().manual_seed(100 + r)
        return torch.randn(8, 512, generator=g)
    ddp(data(RANK)).pow(2).sum().backward()  # the first backward: one bucket
    model.zero_grad()
    events, lock = [], threading.Lock()
    first_start = threading.Event()
    # the all-reduce as it runs: the Python backend's communicator call, or
    # (native backend: no Python runs it) the completion of the bucket's
    # Work, which implies its start; either is recorded with its thread
    native = rmt.active_backend()[0] == "native" and not os.environ.get("RINGMASTER_TORCH_SYNC")
    owner = pg if native else pg._comm
    orig = owner.allreduce

    def record(thread):
        with lock:
            events.append(("allreduce", thread))
        first_start.set()

    def traced(x, op="sum", algorithm=None):
        record(threading.current_thread().name)
        return orig(x, op, algorithm)

    def traced_native(tensors, opts=None):
        # the Work names the thread that ran it; its callback may run here
        # (the call done already) or on that thread
        w = orig(tensors, opts) if opts is not None else orig(tensors)
        w.get_future().add_done_callback(lambda f: record(w.ran_on))
        return w
    owner.allreduce = traced_native if native else traced

    def end_of_backward(g):
        first_start.wait(30.0)
        with lock:
            events.append(("backward_end", threading.current_thread().name))
        return g

    x = data(RANK).requires_grad_()
    x.register_hook(end_of_backward)
    backward_thread = threading.current_thread().name
    ddp(x).pow(2).sum().backward()
    with lock:
        ev = list(events)
    if native:
        del pg.allreduce  # the instance's tracer: the class's method again
    else:
        pg._comm.allreduce = orig
    # the reference: the mean over the ranks of each rank's own gradient
    ref = [torch.zeros_like(p) for p in ref_model.parameters()]
    for r in range(WORLD):
        ref_model.zero_grad()
        ref_model(data(r)).pow(2).sum().backward()
        for a, p in zip(ref, ref_model.parameters()):
            a.add_(p.grad / WORLD)
    close = all(torch.allclose(p.grad, a, rtol=1e-5, atol=1e-6)
                for p, a in zip(model.parameters(), ref))
    check(close, "DDP gradients differ from the reference")
    kinds = [k for k, _ in ev]
    check("allreduce" in kinds and "backward_end" in kinds, "events %s" % ev)
    first = kinds.index("allreduce")
    overlap = first < kinds.index("backward_end") and ev[first][1] != backward_thread
    dist.barrier()
    dist.destroy_process_group()
    result(ok=True, overlap=overlap, events=ev, buckets=kinds.count("allreduce"),
           backward_thread=backward_thread)


if __name__ == "__main__":
    m = sys.argv[1]
    {"timeout": mode_timeout, "timeout_group": mode_timeout_group,
     "timeout_set": mode_timeout_set, "timeout_opt": mode_timeout_opt,
     "reinit": lambda: mode_reinit(False), "reinit_sub": lambda: mode_reinit(True),
     "dtypes": mode_dtypes, "alltoall": mode_alltoall, "mbarrier": mode_mbarrier,
     "job_mbarrier": mode_job_mbarrier, "job_subgroup": mode_job_subgroup,
     "job_subgroup_closed": mode_job_subgroup_closed,
     "job_reinit": mode_job_reinit, "async": mode_async, "async_fail": mode_async_fail,
     "overlap": mode_overlap}[m]()
