"""One rank of test_c10d.py's point-to-point modes: the "ringmaster"
torch.distributed backend's send, recv, isend, irecv, batch_isend_irecv,
real torch, torchrun-style environment, no coordinator.

  p2p_worker.py p2p        every dtype the backend takes x send/recv, a ring
                           of isend/irecv and of batch_isend_irecv; tags
                           received out of order; recv from any source (the
                           source torch returns); a non-contiguous send;
                           wait(timeout) / is_completed / get_future().then;
                           a receive posted before an all-reduce and the
                           matching send made after it on the peer (the
                           calls are not queued behind the collectives); a
                           sub-group's ranks; errors: a size mismatch raises
                           naming both sizes, a bad peer raises ValueError,
                           a receive nothing sends raises RM_ERR_TIMEOUT
                           after the group's 3 s, and the group goes on
  p2p_worker.py pipeline   (3 ranks) a 3-stage model, one stage per rank,
                           4 micro-batches a step passed forward and their
                           gradients back with isend/irecv, 5 SGD steps: each
                           stage ends equal (1e-6) to the same model trained
                           in one process, computed here

Every value is a function of (sender, receiver, message), so a rank checks
what it got without another message. Prints RESULT {...} (json).
"""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ringmaster.torch as rt  # (registers the backend)

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from c10d_worker import check, result  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
          torch.uint8, torch.int32, torch.int64, torch.bool, torch.complex64,
          torch.complex128]


def value(src, dst, k, dtype, n=37):
    """Message k from src to dst."""
    x = torch.arange(n, dtype=torch.float64) + 100 * src + 10 * dst + k
    if dtype == torch.bool:
        return (x.long() % 3 == 0)
    if dtype.is_complex:
        return torch.complex(x, -x).to(dtype)
    if dtype in (torch.int8, torch.uint8):
        return (x.long() % 100).to(dtype)
    return x.to(dtype)


def same(a, b):
    return a.dtype == b.dtype and torch.equal(a, b)


def mode_p2p():
    dist.init_process_group("ringmaster")
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    # 1. blocking send/recv around the ring, every dtype (even ranks send first)
    for k, dt in enumerate(DTYPES):
        got = torch.empty_like(value(0, 0, 0, dt))
        if RANK % 2 == 0:
            dist.send(value(RANK, nxt, k, dt), nxt, tag=k)
            dist.recv(got, prv, tag=k)
        else:
            dist.recv(got, prv, tag=k)
            dist.send(value(RANK, nxt, k, dt), nxt, tag=k)
        check(same(got, value(prv, RANK, k, dt)), "send/recv %s: %s" % (dt, got[:4]))
    # 2. isend/irecv, both sides send first; then batch_isend_irecv both ways
    for k, dt in enumerate(DTYPES):
        a, b = torch.empty_like(value(0, 0, 0, dt)), torch.empty_like(value(0, 0, 0, dt))
        ws = [dist.isend(value(RANK, nxt, k, dt), nxt), dist.isend(value(RANK, prv, k, dt), prv),
              dist.irecv(a, prv), dist.irecv(b, nxt)]
        for w in ws:
            w.wait()
        check(same(a, value(prv, RANK, k, dt)) and same(b, value(nxt, RANK, k, dt)),
              "isend/irecv %s" % dt)
        # a native group posts in C++: its Works are torch's, not p2p.py's
        native = rt.active_backend()[0] == "native"
        check(all(isinstance(w, rt._work._Work) != native for w in ws),
              "%s backend, Works %s" % (rt.active_backend()[0], [type(w) for w in ws]))
        c = torch.empty_like(a)
        ops = [dist.P2POp(dist.irecv, c, prv, tag=50 + k),
               dist.P2POp(dist.isend, value(RANK, nxt, 50 + k, dt), nxt, tag=50 + k)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        check(same(c, value(prv, RANK, 50 + k, dt)), "batch_isend_irecv %s" % dt)
    # 3. tags received in another order than sent; messages of one tag in order
    if RANK == 0:
        for tag, k in [(7, 0), (5, 1), (7, 2)]:
            dist.isend(value(0, 1, k, torch.float32), 1, tag=tag).wait()
    elif RANK == 1:
        got = [torch.empty(37) for _ in range(3)]
        w5 = dist.irecv(got[1], 0, tag=5)
        w7 = [dist.irecv(got[0], 0, tag=7), dist.irecv(got[2], 0, tag=7)]
        for w in [w5] + w7:
            w.wait()
        check(all(same(got[k], value(0, 1, k, torch.float32)) for k in range(3)),
              "tags out of order")
    # 4. any source: rank 0 hears from every other rank; torch returns the source
    if RANK == 0:
        seen = set()
        for _ in range(WORLD - 1):
            t = torch.empty(37)
            src = dist.recv(t, tag=9)
            check(same(t, value(src, 0, 9, torch.float32)), "any source from %d" % src)
            seen.add(src)
        check(seen == set(range(1, WORLD)), "sources %s" % seen)
    else:
        dist.send(value(RANK, 0, 9, torch.float32), 0, tag=9)
    # 5. a non-contiguous send
    if RANK == 0:
        m = value(0, 1, 3, torch.float64, 74).view(37, 2).t()
        dist.send(m, 1, tag=11)
    elif RANK == 1:
        t = torch.empty(2, 37, dtype=torch.float64)
        dist.recv(t, 0, tag=11)
        check(same(t, value(0, 1, 3, torch.float64, 74).view(37, 2).t().contiguous()),
              "non-contiguous send")
    # 6. wait(timeout), is_completed, get_future().then(); posted before an
    #    all-reduce whose peer sends after it
    if RANK in (0, 1):
        t = torch.empty(37)
        peer = 1 - RANK
        w = dist.irecv(t, peer, tag=21)
        check(not w.is_completed(), "completed before anything was sent")
        try:
            w.wait(timeout=timedelta(milliseconds=200))
            check(False, "wait(timeout) returned before the send")
        except RuntimeError as e:
            check("timed out" in str(e), str(e))
        done = []
        fut = w.get_future().then(lambda f: done.append(float(f.value()[0][0])))
    s = torch.ones(3) * RANK
    dist.all_reduce(s)
    check(s[0].item() == sum(range(WORLD)), "all_reduce beside p2p %s" % s)
    if RANK in (0, 1):
        dist.send(value(RANK, peer, 21, torch.float32), peer, tag=21)
        fut.wait()
        check(w.is_completed() and same(t, value(peer, RANK, 21, torch.float32)), "then()")
        check(done == [float(value(peer, RANK, 21, torch.float32)[0])], "then() ran %s" % done)
    # 7. a sub-group: ranks are the group's
    if WORLD >= 3:
        g = dist.new_group([1, 2])
        if RANK in (1, 2):
            t = torch.empty(37)
            if RANK == 1:
                dist.send(value(1, 2, 31, torch.float32), 2, group=g, tag=31)
            else:
                dist.recv(t, 1, group=g, tag=31)
                check(same(t, value(1, 2, 31, torch.float32)), "sub-group recv")
    # 8. errors: size mismatch, bad peer, an unmatched receive's timeout
    if RANK == 0:
        dist.send(torch.zeros(10), 1, tag=41)
    elif RANK == 1:
        try:
            dist.recv(torch.zeros(8), 0, tag=41)
            check(False, "a 10-element message went into 8")
        except ValueError as e:
            check("40 bytes" in str(e) and "32 bytes" in str(e), str(e))
    try:
        dist.send(torch.zeros(2), RANK)
        check(False, "send to self accepted")
    except ValueError as e:
        check("not another rank" in str(e), str(e))
    # a group with a 3 s timeout (the default group keeps torch's 30 min, so
    # that the others' barrier outlasts rank 1's wait)
    g3 = dist.new_group(timeout=timedelta(seconds=3))
    if RANK == 1:
        t0 = time.monotonic()
        try:
            dist.recv(torch.zeros(2), 0, group=g3, tag=77)
            check(False, "a receive nothing matched returned")
        except RuntimeError as e:
            el = time.monotonic() - t0
            check("RM_ERR_TIMEOUT" in str(e) and "from rank 0" in str(e) and el < 8,
                  "after %.1f s: %s" % (el, e))
    dist.barrier()
    # the groups go on after every error
    for g in (None, g3):
        t = torch.empty(37)
        if RANK % 2 == 0:
            dist.send(value(RANK, nxt, 99, torch.float32), nxt, group=g, tag=99)
            dist.recv(t, prv, group=g, tag=99)
        else:
            dist.recv(t, prv, group=g, tag=99)
            dist.send(value(RANK, nxt, 99, torch.float32), nxt, group=g, tag=99)
        check(same(t, value(prv, RANK, 99, torch.float32)), "after the errors")
    dist.barrier()
    dist.destroy_process_group()
    result(ok=True)


# ---- a 3-stage pipeline -------------------------------------------------------------
STEPS, MICRO, MB = 5, 4, 4


def stages():
    torch.manual_seed(0)
    return [torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh()),
            torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh()),
            torch.nn.Linear(16, 1)]


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(STEPS, MICRO, MB, 8, generator=g), torch.randn(STEPS, MICRO, MB, 1,
                                                                        generator=g)


def reference():
    model = torch.nn.Sequential(*stages()).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    xs, ys = data()
    for s in range(STEPS):
        opt.zero_grad()
        for m in range(MICRO):
            loss = torch.nn.functional.mse_loss(model(xs[s, m].double()), ys[s, m].double())
            (loss / MICRO).backward()
        opt.step()
    return model


def mode_pipeline():
    check(WORLD == 3, "pipeline needs 3 ranks")
    dist.init_process_group("ringmaster")
    stage = stages()[RANK].double()
    opt = torch.optim.SGD(stage.parameters(), lr=0.1)
    xs, ys = data()
    width = [8, 16, 16, 1]
    for s in range(STEPS):
        opt.zero_grad()
        outs, ins, sends = [], [], []
        for m in range(MICRO):  # forward: every micro-batch goes on at once
            if RANK == 0:
                x = xs[s, m].double()
            else:
                x = torch.empty(MB, width[RANK], dtype=torch.float64)
                dist.irecv(x, RANK - 1, tag=m).wait()
                x.requires_grad_()
            y = stage(x)
            ins.append(x)
            outs.append(y)
            if RANK < 2:
                sends.append(dist.isend(y.detach().contiguous(), RANK + 1, tag=m))
        for m in reversed(range(MICRO)):  # backward, last micro-batch first
            if RANK == 2:
                loss = torch.nn.functional.mse_loss(outs[m], ys[s, m].double()) / MICRO
                loss.backward()
            else:
                g = torch.empty(MB, width[RANK + 1], dtype=torch.float64)
                dist.irecv(g, RANK + 1, tag=100 + m).wait()
                outs[m].backward(g)
            if RANK > 0:
                sends.append(dist.isend(ins[m].grad, RANK - 1, tag=100 + m))
        for w in sends:
            w.wait()
        opt.step()
    ref = list(reference().children())[RANK]
    diff = max((a - b).abs().max().item() for a, b in zip(stage.parameters(),
                                                            ref.parameters()))
    check(diff < 1e-6, "stage %d differs from the one-process model by %g" % (RANK, diff))
    moved = max((a - b).abs().max().item() for a, b in zip(stage.parameters(),
                                                             stages()[RANK].double().parameters()))
    check(moved > 1e-3, "stage %d did not train (moved %g)" % (RANK, moved))
    dist.barrier()
    dist.destroy_process_group()
    result(ok=True, diff=diff, moved=moved)


if __name__ == "__main__":
    {"p2p": mode_p2p, "pipeline": mode_pipeline}[sys.argv[1]]()
