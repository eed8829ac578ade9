#!/usr/bin/python3
"""Data-parallel training of a small MLP on the shipped digits set
(data/digits/digits.csv: 1,797 8x8 images, 64 pixel values 0..16 and a label
0..9 a row) with ringmaster.

    # as a ringmaster command job (the agent sets the environment)
    ringmaster run -n 4 -- /usr/bin/python3 examples/pytorch/digits.py --mode ddp

    # without a coordinator, torchrun-style (what the tests do)
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
        /usr/bin/python3 examples/pytorch/digits.py --mode optimizer &
    RANK=1 ...

Modes:
  ddp        dist.init_process_group("ringmaster") + an unchanged
             DistributedDataParallel (--backend gloo for comparison); the
             backend reports its steps (one per synchronized backward)
  optimizer  ringmaster.torch.DistributedOptimizer (Horovod's manner)
  elastic    DistributedOptimizer inside ringmaster.torch.elastic.run: a lost
             peer rolls back to the last commit, re-forms, goes on
  single     plain torch in one process, no ringmaster (the reference)

Equivalence: every step takes the same global batch of --batch rows (a fixed
permutation per epoch, seeded); rank r of n takes rows [r*B/n, (r+1)*B/n). The
loss on a rank is sum(cross entropy of its rows) * n / B, so averaging the
gradients over the n ranks (DDP; DistributedOptimizer op avg) gives exactly
the gradient of the mean loss over the B rows: N-process training equals
1-process training with the same global batch up to floating-point summation
order. Split: a seeded permutation, the first 20% (359 rows) held out.
"""
import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
if os.path.isdir(os.path.join(REPO, "python", "ringmaster")):
    sys.path.insert(0, os.path.join(REPO, "python"))
import ringmaster  # noqa: E402


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["ddp", "optimizer", "elastic", "single"], default="ddp")
    p.add_argument("--backend", default="ringmaster", help="ddp mode: ringmaster or gloo")
    p.add_argument("--data", default=os.path.join(REPO, "data", "digits", "digits.csv"))
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=64, help="global batch (all ranks)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--verify", type=int, default=0, metavar="K",
                   help="every K steps compare parameter hashes across ranks")
    p.add_argument("--commit-every", type=int, default=10, help="elastic: steps per commit")
    p.add_argument("--step-sleep-ms", type=float, default=0.0,
                   help="sleep per step (to give a fault test time)")
    p.add_argument("--save", help="rank 0 writes the final parameters here (torch.save)")
    p.add_argument("--rank", type=int, help="explicit peers mode: this rank")
    p.add_argument("--peers", help="explicit peers mode: host:port,host:port,...")
    return p.parse_args()


def load(path, seed):
    raw = np.loadtxt(path, delimiter=",", dtype=np.float64)
    x, y = raw[:, :64] / 16.0, raw[:, 64].astype(np.int64)
    perm = np.random.RandomState(seed).permutation(len(y))
    nt = len(y) // 5
    return (x[perm[nt:]], y[perm[nt:]]), (x[perm[:nt]], y[perm[:nt]])


class Batches:
    """Global batch of step s: B consecutive rows of an endless stream of
    per-epoch permutations (seeded), the same on every rank."""

    def __init__(self, n, batch, seed):
        self.n, self.batch, self.seed, self.perms = n, batch, seed, {}

    def _perm(self, e):
        if e not in self.perms:
            self.perms[e] = np.random.RandomState(self.seed + 1000 + e).permutation(self.n)
        return self.perms[e]

    def indices(self, s):
        k = np.arange(s * self.batch, (s + 1) * self.batch)
        e, j = k // self.n, k % self.n
        return np.array([self._perm(int(ei))[ji] for ei, ji in zip(e, j)])


def model_of(args):
    torch.manual_seed(args.seed)
    m = torch.nn.Sequential(torch.nn.Linear(64, args.hidden), torch.nn.ReLU(),
                            torch.nn.Linear(args.hidden, 10))
    return m.to(getattr(torch, args.dtype))


def param_hash(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.digest()


def verify(model, step, rank, world):
    d = np.frombuffer(param_hash(model), np.uint8).copy()
    allh = ringmaster.allgather(d)
    same = all((allh[r] == allh[0]).all() for r in range(world))
    if rank == 0:
        print("verify step %d: %s %s" % (step, allh[0].tobytes().hex()[:16],
                                         "identical on %d ranks" % world if same
                                         else "MISMATCH"), flush=True)
    if not same:
        print("digits: parameters differ across ranks at step %d" % step, file=sys.stderr)
        sys.exit(3)


def evaluate(model, test, dt):
    with torch.no_grad():
        out = model(torch.from_numpy(test[0]).to(dt))
        y = torch.from_numpy(test[1])
        loss = F.cross_entropy(out, y).item()
        acc = (out.argmax(1) == y).double().mean().item()
    return acc, loss


def main():
    args = parse()
    torch.set_num_threads(args.threads)
    dt = getattr(torch, args.dtype)
    train, test = load(args.data, args.seed)
    xs, ys = torch.from_numpy(train[0]).to(dt), torch.from_numpy(train[1])
    batches = Batches(len(ys), args.batch, args.seed)
    model = model_of(args)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    if args.mode == "single":
        rank, world = 0, 1
    elif args.peers:
        ringmaster.init(rank=args.rank, world=len(args.peers.split(",")),
                        peers=args.peers.split(","))
    if args.mode == "ddp":
        import torch.distributed as dist
        import ringmaster.torch as _rmt  # noqa: F401  (registers the backend)
        dist.init_process_group(args.backend)
        if args.backend != "ringmaster" and not ringmaster.is_initialized():
            ringmaster.init()  # for verify's allgather only
        rank, world = dist.get_rank(), dist.get_world_size()
        model = torch.nn.parallel.DistributedDataParallel(model)
    elif args.mode in ("optimizer", "elastic"):
        import ringmaster.torch as rmt
        ringmaster.init()
        opt = rmt.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        rmt.broadcast_parameters(model.state_dict(), root_rank=0)
        rmt.broadcast_optimizer_state(opt, root_rank=0)
    dist_mode = args.mode != "single"
    if dist_mode:
        ringmaster.set_total_steps(args.steps)  # the job's progress: step s of args.steps
    net = model.module if args.mode == "ddp" else model

    def banner():
        if dist_mode:
            print("digits: pid %d generation %d rank %d of %d"
                  % (os.getpid(), ringmaster.generation(), ringmaster.rank(), ringmaster.size()),
                  flush=True)
    banner()

    def one_step(s, rank, world):
        idx = batches.indices(s)
        lo, hi = rank * args.batch // world, (rank + 1) * args.batch // world
        sel = torch.from_numpy(idx[lo:hi])
        out = model(xs[sel])
        loss = F.cross_entropy(out, ys[sel], reduction="sum") * (world / args.batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.step_sleep_ms:
            time.sleep(args.step_sleep_ms / 1000.0)
        if (s + 1) % 50 == 0:
            print("digits: step %d loss %.4f" % (s + 1, loss.item() * args.batch / world /
                                                max(hi - lo, 1)), flush=True)
        return loss.item()

    t0 = time.time()
    if args.mode == "elastic":
        import ringmaster.torch.elastic as elastic
        state = elastic.TorchState(model, opt, step=0)

        def on_reset(st):
            banner()
            print("digits: rank %d: re-formed with %d ranks at step %d"
                  % (ringmaster.rank(), ringmaster.size(), st.step), flush=True)

        @elastic.run(on_reset=on_reset)
        def run(state):
            while state.step < args.steps:
                with ringmaster.step() as st:
                    st.loss = one_step(state.step, ringmaster.rank(), ringmaster.size())
                state.step += 1
                if state.step % args.commit_every == 0:
                    state.commit()
                if args.verify and state.step % args.verify == 0:
                    verify(net, state.step, ringmaster.rank(), ringmaster.size())
        run(state)
        rank, world = ringmaster.rank(), ringmaster.size()
    else:
        if dist_mode:
            rank, world = ringmaster.rank(), ringmaster.size()
        for s in range(args.steps):
            if dist_mode and args.mode != "ddp":
                with ringmaster.step() as st:
                    st.loss = one_step(s, rank, world)
            else:  # ddp: the backend reports each synchronized backward as a step
                one_step(s, rank, world)
            if dist_mode and args.verify and (s + 1) % args.verify == 0:
                verify(net, s + 1, rank, world)
    elapsed = time.time() - t0
    acc, loss = evaluate(net, test, dt)
    res = {"rank": rank, "world": world, "mode": args.mode, "steps": args.steps,
           "accuracy": round(acc, 6), "test_loss": round(loss, 6),
           "param_sha256": param_hash(net).hex(), "seconds": round(elapsed, 3)}
    print("test accuracy %.4f, test loss %.4f" % (acc, loss), flush=True)
    print("RESULT " + json.dumps(res), flush=True)
    if args.save and rank == 0:
        torch.save({k: v.detach().clone() for k, v in net.state_dict().items()}, args.save)
    if dist_mode:
        ringmaster.finalize(summary={"accuracy": acc, "test_loss": loss})


if __name__ == "__main__":
    main()
