"""An unchanged DDP regression (init_process_group("ringmaster") +
DistributedDataParallel, nothing of ringmaster in the training loop) with the
last K ranks (--attackers K, default 1) attackers that flip and scale their
gradient (-4 g), run as a command job by test_job.py ddp_robust / ddp_krum /
ddp_secure. Each rank takes its own shard of y = X w* + noise; the model is
two bias-free linear layers (8 -> 8 -> 1) and a large parameter under a
small L2 term (several DDP buckets); float64, or float32 with --f32.
Prints one RESULT line: the distance of the end-to-end weights to w*, and
at steps 0 and 2 (after DDP rebuilt its buckets) checks the gradient DDP
applied:
  aggregation in the spec: it equals ringmaster.aggregate with the spec's
    keywords on the whole flattened gradient, bitwise ("exact");
  secure_aggregation: it is within the documented quantization bound
    (1 / scale per coordinate of the mean, plus float32 rounding) of the
    plain mean of the ranks' gradients clipped to the spec's clip
    ("secure_dev": the largest deviation over the bound's; the reference
    gathers every rank's gradient with an all-gather, for this test only).
"n/a" without either in the spec. --slow-rank R --slow-ms T: rank R sleeps
T ms before each backward (a straggler); the RESULT line then also lists
each step's contributors (ddp.rm_contributors: None without a straggler
policy) and a hash of the final parameters' bytes."""
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ringmaster  # noqa: E402
import ringmaster.torch  # noqa: E402,F401  (registers the backend)

STEPS = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 60
# --step-sleep-ms T: every rank sleeps T ms per step (a test can act mid-run)
STEP_S = float(sys.argv[sys.argv.index("--step-sleep-ms") + 1]) / 1e3 \
    if "--step-sleep-ms" in sys.argv else 0.0
SLOW_RANK = int(sys.argv[sys.argv.index("--slow-rank") + 1]) if "--slow-rank" in sys.argv else -1
SLOW_S = float(sys.argv[sys.argv.index("--slow-ms") + 1]) / 1e3 if "--slow-ms" in sys.argv else 0.0
ATTACKERS = int(sys.argv[sys.argv.index("--attackers") + 1]) if "--attackers" in sys.argv else 1
# --clip C: the spec's secure_aggregation clip (the reference clips to it)
DT = torch.float32 if "--f32" in sys.argv else torch.float64
dist.init_process_group("ringmaster")
rank, world = dist.get_rank(), dist.get_world_size()
print("ddp_robust_prog: pid %d rank %d of %d" % (os.getpid(), rank, world), flush=True)
torch.manual_seed(0)
w_star = torch.randn(8, 1, dtype=DT)


class Model(torch.nn.Module):
    """Two bias-free linear layers and a 1.6 MB parameter `big` (either dtype) under a
    small L2 term: more than DDP's first bucket (1 MiB), so the gradient
    spans several buckets and the exactness check crosses their borders."""

    def __init__(self):
        super().__init__()
        self.l0 = torch.nn.Linear(8, 8, bias=False)
        self.l1 = torch.nn.Linear(8, 1, bias=False)
        self.big = torch.nn.Parameter(torch.randn(1600000 // torch.finfo(DT).bits * 8))

    def forward(self, x):
        return self.l1(self.l0(x)), 1e-6 * (self.big ** 2).sum()


model = Model().to(DT)
with torch.no_grad():
    model.l0.weight.copy_(torch.eye(8, dtype=DT))
    model.l1.weight.zero_()
g = torch.Generator().manual_seed(100 + rank)
x = torch.randn(256, 8, generator=g, dtype=DT)
y = x @ w_star + 0.01 * torch.randn(256, 1, generator=g, dtype=DT)
attacker = rank >= world - ATTACKERS
local = {}
for i, p in enumerate(model.parameters()):
    def hook(grad, i=i):
        grad = -4.0 * grad if attacker else grad
        local[i] = grad.detach().clone()
        return grad
    p.register_hook(hook)
ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1e-5)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
agg = ringmaster.aggregation_spec()
secure = ringmaster.secure()
exact, secure_dev = "n/a", "n/a"
buckets, contributors = [], []
for step in range(STEPS):
    opt.zero_grad()
    out, reg = ddp(x)
    loss = ((out - y) ** 2).mean() + reg
    if rank == SLOW_RANK:
        time.sleep(SLOW_S)
    time.sleep(STEP_S)
    loss.backward()
    contributors.append(getattr(ddp, "rm_contributors", None))
    if step in (0, 2) and (agg is not None or secure):  # 2: after DDP rebuilt its buckets
        whole = torch.cat([local[i].reshape(-1) for i in range(len(local))]).contiguous()
        got = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        if agg is not None:
            ringmaster.aggregate(whole, **agg)
            exact = bool(torch.equal(got, whole)) and exact in ("n/a", True)
        else:
            clip = float(sys.argv[sys.argv.index("--clip") + 1])  # the spec's clip
            every = ringmaster.allgather(whole).double()  # [world, n]: a test's reference
            norms = every.norm(dim=1, keepdim=True)
            ref = (every * torch.clamp(clip / norms, max=1.0)).mean(0)
            bound = 1.0 / ddp.rm_secure_info["scale"] + 4 * 6e-8 * ref.abs()
            dev = float(((got.double() - ref).abs() / bound).max())
            secure_dev = max(dev, 0 if secure_dev == "n/a" else secure_dev)
        buckets.append(ddp.rm_buckets)
    opt.step()
    if STEP_S and rank == 0 and step % 10 == 0:
        print("ddp_robust_prog: step %d" % step, flush=True)
with torch.no_grad():
    w = model.l0.weight.t() @ model.l1.weight.t()
err = float((w - w_star).norm() / w_star.norm())
print("RESULT " + json.dumps({"rank": rank, "world": world, "rel_err": err, "exact": exact, "buckets": buckets,
                              "secure_dev": secure_dev, "steps": STEPS,
                              "contributors": contributors, "pid": os.getpid(),
                              "rm_world": ringmaster.size(),
                              "param_sha256": hashlib.sha256(b"".join(
                                  p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()}), flush=True)
ringmaster.finalize()
