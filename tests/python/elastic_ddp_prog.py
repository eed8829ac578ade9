"""An ordinary DDP program (init_process_group("ringmaster") +
DistributedDataParallel) made elastic by one line,
``state = ringmaster.torch.elastic.TorchState(ddp, opt, step=0)``, run as a
command job by test_elastic_ddp.py. No on_reset hook: after a re-formation
the state rebuilds the process group and the DDP wrapper itself.

A small float64 (--f32: float32) regression (16 -> 32 -> tanh -> 1, SGD with momentum, so
the optimizer's state matters) on a fixed data set. Step s trains on the
global batch of rows (12 s .. 12 s + 11) mod 240, split evenly over the
ranks read from torch.distributed inside train() (12 divides by 1, 2, 3,
4): DDP's average of the ranks' mean losses is the global batch's mean, so
every run, whatever its world and wherever it re-formed, follows the
1-process run (--single) up to rounding, provided each step is applied
exactly once from the last commit on.

Each (re)entry of train() prints a banner with the pid, the generation and
the rank; every rank prints "step N" every 10 steps; the end prints one
RESULT line (pid, ranks, worlds, resets, the parameters and their hash)."""
import hashlib
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def opt_arg(name, default, conv):
    return conv(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


STEPS = opt_arg("--steps", 120, int)
COMMIT = opt_arg("--commit-every", 10, int)  # 0: never (PER-STEP recovery)
DIE = opt_arg("--die", None, str)  # rank 0 of generation 1 SIGKILLs itself at step DIE_STEP
DIE_STEP = 41
SLEEP_S = opt_arg("--step-sleep-ms", 0.0, float) / 1e3
SINGLE = "--single" in sys.argv
DT = torch.float32 if "--f32" in sys.argv else torch.float64  # f32: secure aggregation
BATCH, ROWS = 12, 240

torch.manual_seed(0)
X = torch.randn(ROWS, 16, dtype=torch.float64)
Y = torch.sin(X @ torch.randn(16, 1, dtype=torch.float64))
X, Y = X.to(DT), Y.to(DT)
net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                          torch.nn.Linear(32, 1)).to(DT)


def rows(step, rank, world):
    idx = (torch.arange(BATCH) + BATCH * step) % ROWS
    per = BATCH // world
    return idx[rank * per:(rank + 1) * per]


def result(extra):
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    extra.update(pid=os.getpid(), params=flat.tolist(),
                 param_sha256=hashlib.sha256(flat.numpy().tobytes()).hexdigest())
    print("RESULT " + json.dumps(extra), flush=True)


if SINGLE:
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS):
        i = rows(step, 0, 1)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(X[i]), Y[i]).backward()
        opt.step()
    result({"world": 1})
    sys.exit(0)

import torch.distributed as dist  # noqa: E402
import ringmaster  # noqa: E402
import ringmaster.torch  # noqa: E402,F401  (registers the backend)
import ringmaster.torch.elastic as elastic  # noqa: E402

dist.init_process_group("ringmaster")
ddp = torch.nn.parallel.DistributedDataParallel(net)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
state = elastic.TorchState(ddp, opt, step=0)  # the one line that makes it elastic
worlds, contributors = [], []
started = [0]  # steps this process began (redone ones included)


def victim(phase):
    """--die PHASE: this is the process to lose, and now is the moment"""
    return (DIE == phase and state.step == DIE_STEP and ringmaster.generation() == 1
            and dist.get_rank() == 0)


def die():
    import signal
    print("elastic_ddp_prog: dying at step %d (%s)" % (state.step, DIE), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if DIE == "backward":  # while backward runs: before this rank's gradient is all-reduced
    net[0].weight.register_hook(lambda g: die() if victim("backward") else None)
if DIE == "allreduce" and dist.get_rank() == 0:  # a random moment inside the all-reduce
    import random
    import threading

    def hook(_, bucket):
        if victim("allreduce"):
            threading.Timer(random.uniform(0.0, 0.0003), die).start()
        fut = dist.all_reduce(bucket.buffer() / dist.get_world_size(), async_op=True)
        return fut.get_future().then(lambda f: f.value()[0])
    ddp.register_comm_hook(None, hook)


@elastic.run
def train(state):
    rank, world = dist.get_rank(), dist.get_world_size()
    worlds.append(world)
    print("elastic_ddp_prog: pid %d generation %d rank %d of %d"
          % (os.getpid(), ringmaster.generation(), rank, world), flush=True)
    while state.step < STEPS:
        i = rows(state.step, rank, world)
        opt.zero_grad()
        started[0] += 1
        if victim("forward"):
            die()
        torch.nn.functional.mse_loss(ddp(X[i]), Y[i]).backward()
        if victim("optimizer"):  # the all-reduce done here, the step not applied
            die()
        opt.step()
        if victim("after"):  # applied here, the step's counter not advanced
            die()
        contributors.append(getattr(ddp, "rm_contributors", None))
        time.sleep(SLEEP_S)
        state.step += 1
        if COMMIT and state.step % COMMIT == 0:
            state.commit()
        if state.step % 10 == 0:
            print("elastic_ddp_prog: step %d" % state.step, flush=True)


train(state)
result({"rank": dist.get_rank(), "world": dist.get_world_size(), "rm_world": ringmaster.size(),
        "worlds": worlds, "resets": state.resets, "started": started[0], "contributors": contributors, "generation": ringmaster.generation(),
        "ddp_group_is_default": ddp.process_group is dist.distributed_c10d._get_default_group()})
ringmaster.finalize()
