"""A user's program under secure aggregation (run by test_python.py as a
command job): ringmaster.secure_allreduce on numpy vectors every step, then
ringmaster.torch.DistributedOptimizer, which takes the job's
secure_aggregation by itself. Prints one "secure-python: ok {...}" line."""
import json
import sys

import numpy as np
import torch

import ringmaster
import ringmaster.torch as rmt

ringmaster.init()
r, w = ringmaster.rank(), ringmaster.size()
assert ringmaster.secure(), "the job's spec has secure_aggregation"
info = None
for step in range(3):
    with ringmaster.step():
        x = np.full(1000, 0.001 * (r + 1), dtype=np.float32)
        info = ringmaster.secure_allreduce(x, "sum")
        want = 0.001 * sum(range(1, w + 1))
        err = float(np.abs(x.astype(np.float64) - want).max())
        if info["members"] != w or err > w / info["scale"] + 1e-6:
            print("secure-python: wrong sum at step %d: err %g, %r" % (step, err, info))
            sys.exit(1)
torch.manual_seed(r)  # different gradients per rank
model = torch.nn.Linear(4, 2)
torch.manual_seed(0)
for p in model.parameters():  # the same start everywhere
    torch.nn.init.constant_(p, 0.1)
opt = rmt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
data = torch.full((8, 4), float(r + 1))
with ringmaster.step():
    opt.zero_grad()
    model(data).sum().backward()
    opt.step()
si = opt.secure_info
# every rank applied the same mean: the same parameters everywhere
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().astype(np.float32)
same = flat.copy()
ringmaster.broadcast(same, 0)
if si is None or si["members"] != w or not np.array_equal(flat, same):
    print("secure-python: optimizer: info %r, parameters equal to rank 0's: %s"
          % (si, np.array_equal(flat, same)))
    sys.exit(1)
print("secure-python: ok " + json.dumps({"rank": r, "world": w, "scale": info["scale"],
                                         "neighbours": info["neighbours"],
                                         "opt_members": si["members"]}))
