"""An unchanged DDP regression (init_process_group("ringmaster") +
DistributedDataParallel, nothing of ringmaster in the training loop) with the
last rank an attacker that flips and scales its gradient (-4 g), run as a
command job by test_job.py ddp_robust. Each rank takes its own shard of
y = X w* + noise; the model is two bias-free linear layers (8 -> 8 -> 1)
and a large parameter under a small L2 term (several DDP buckets).
Prints one RESULT line: the distance of the end-to-end weights to w*, and
whether the gradient DDP applied at step 1 equals ringmaster.aggregate on the
whole flattened gradient (the exactness of per-bucket coordinate-wise
methods; "n/a" without an aggregation in the spec)."""
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import ringmaster  # noqa: E402
import ringmaster.torch  # noqa: E402,F401  (registers the backend)

STEPS = 60
dist.init_process_group("ringmaster")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
w_star = torch.randn(8, 1, dtype=torch.float64)


class Model(torch.nn.Module):
    """Two bias-free linear layers and a 1.6 MB parameter `big` under a
    small L2 term: more than DDP's first bucket (1 MiB), so the gradient
    spans several buckets and the exactness check crosses their borders."""

    def __init__(self):
        super().__init__()
        self.l0 = torch.nn.Linear(8, 8, bias=False)
        self.l1 = torch.nn.Linear(8, 1, bias=False)
        self.big = torch.nn.Parameter(torch.randn(200000))

    def forward(self, x):
        return self.l1(self.l0(x)), 1e-6 * (self.big ** 2).sum()


model = Model().double()
with torch.no_grad():
    model.l0.weight.copy_(torch.eye(8, dtype=torch.float64))
    model.l1.weight.zero_()
g = torch.Generator().manual_seed(100 + rank)
x = torch.randn(256, 8, generator=g, dtype=torch.float64)
y = x @ w_star + 0.01 * torch.randn(256, 1, generator=g, dtype=torch.float64)
attacker = rank == world - 1
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
exact = "n/a"
buckets = []
for step in range(STEPS):
    opt.zero_grad()
    out, reg = ddp(x)
    loss = ((out - y) ** 2).mean() + reg
    loss.backward()
    if step in (0, 2) and agg is not None:  # 2: after DDP rebuilt its buckets
        whole = torch.cat([local[i].reshape(-1) for i in range(len(local))]).contiguous()
        ringmaster.aggregate(whole, agg["method"], agg["f"])
        got = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        exact = bool(torch.equal(got, whole)) and exact in ("n/a", True)
        buckets.append(ddp.rm_buckets)
    opt.step()
with torch.no_grad():
    w = model.l0.weight.t() @ model.l1.weight.t()
err = float((w - w_star).norm() / w_star.norm())
print("RESULT " + json.dumps({"rank": rank, "world": world, "rel_err": err, "exact": exact, "buckets": buckets,
                              "steps": STEPS}), flush=True)
ringmaster.finalize()
