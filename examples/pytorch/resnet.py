#!/usr/bin/python3
"""Data-parallel training of torchvision's ResNet-18 on CIFAR-size (32x32)
colour images with ringmaster: an ordinary DDP program.

    # as a ringmaster command job (the agent sets the environment)
    ringmaster run -n 4 -- /usr/bin/python3 examples/pytorch/resnet.py
    ringmaster run -n 4 -- /usr/bin/python3 examples/pytorch/resnet.py --data ~/pictures

    # without a coordinator, torchrun-style
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
        /usr/bin/python3 examples/pytorch/resnet.py &
    RANK=1 ...

The model is torchvision.models.resnet18 (Debian's python3-torchvision), built
with random weights (nothing is downloaded), with the usual CIFAR stem by
default (a 3x3 stride-1 first convolution and no max-pool: 32x32 images would
otherwise shrink to 8x8 before the first block); --stem imagenet keeps
torchvision's 7x7 stride-2 stem and max-pool (16 times less compute).

Data: --data DIR is an image folder (torchvision ImageFolder: DIR/CLASS/*.png
or .jpg, one folder per class), resized and centre-cropped to --image-size.
Without it, --samples random images of --classes classes: each class has a
fixed random template (seeded) and an image is its class's template plus
unit Gaussian noise, so the labels are a learnable function of the
pixels and the loss falls within a few dozen steps (pure noise labels would
not). Every tenth image is held out for the final accuracy.

Modes:
  ddp      dist.init_process_group("ringmaster") + DistributedDataParallel,
           the program's steps reported with ringmaster.step() (loss) and
           its total with ringmaster.set_total_steps
  elastic  the same DDP model held by ringmaster.torch.elastic.TorchState
           (elastic DDP in one line), the steps inside elastic.run: under
           on_failure shrink or replace a lost worker rolls the survivors
           back to the last commit (every --commit-every steps), the state
           rebuilds the process group and DDP for the new world, and they
           train on in the same processes
  single   plain torch in one process, no ringmaster (the reference)

Every step takes the same global batch of --batch images (a seeded
permutation per epoch); rank r of n takes images [r*B/n, (r+1)*B/n) of it.
BatchNorm normalizes over each rank's own images (as DDP does without
SyncBatchNorm), so N ranks are not bitwise 1-process training.
"""
import argparse
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
from example_common import param_hash, run_steps  # noqa: E402  (beside this file)


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["ddp", "elastic", "single"], default="ddp")
    p.add_argument("--data", help="an image folder (ImageFolder layout); default: random images")
    p.add_argument("--samples", type=int, default=2048, help="random images (with no --data)")
    p.add_argument("--classes", type=int, default=10, help="random images' classes")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--stem", choices=["cifar", "imagenet"], default="cifar")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=32, help="global batch (all ranks)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--log-every", type=int, default=5, help="print the loss every K steps")
    p.add_argument("--commit-every", type=int, default=5, help="elastic: steps per commit")
    p.add_argument("--step-sleep-ms", type=float, default=0.0,
                   help="sleep per step (to give a fault test time)")
    a = p.parse_args()
    for name in ("samples", "classes", "image_size", "steps", "batch", "threads",
                 "log_every", "commit_every"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if a.classes < 2:
        p.error("--classes must be at least 2")
    return a


class RandomImages:
    """Images of a learnable random task, made from the seed: the same on
    every rank, nothing read or downloaded."""

    def __init__(self, n, classes, size, seed):
        g = torch.Generator().manual_seed(seed)
        templates = torch.randn(classes, 3, size, size, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.x = templates[self.y] + torch.randn(n, 3, size, size, generator=g)
        self.classes = classes

    def __len__(self):
        return len(self.y)

    def batch(self, idx):
        idx = torch.as_tensor(idx, dtype=torch.long)
        return self.x[idx], self.y[idx]


class FolderImages:
    """torchvision's ImageFolder, decoded on demand."""

    def __init__(self, root, size):
        import torchvision.datasets as tvd
        import torchvision.transforms as T
        if not os.path.isdir(root):
            sys.exit("resnet: --data %s is not a directory" % root)
        tf = T.Compose([T.Resize(size), T.CenterCrop(size), T.ToTensor(),
                        T.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))])
        try:
            self.ds = tvd.ImageFolder(root, transform=tf)
        except (FileNotFoundError, RuntimeError) as e:
            sys.exit("resnet: --data %s: %s (expected DIR/CLASS/IMAGE files)" % (root, e))
        self.classes = len(self.ds.classes)
        if self.classes < 2:
            sys.exit("resnet: --data %s has %d class folder(s); at least 2 are needed"
                     % (root, self.classes))

    def __len__(self):
        return len(self.ds)

    def batch(self, idx):
        items = [self.ds[int(i)] for i in idx]
        return torch.stack([x for x, _ in items]), torch.tensor([y for _, y in items])


def split(n, seed):
    """Every tenth image of a seeded permutation is held out."""
    perm = np.random.RandomState(seed).permutation(n)
    held = perm[::10]
    return np.setdiff1d(perm, held, assume_unique=True), held


class Batches:
    """Global batch of step s: B consecutive entries of an endless stream of
    per-epoch permutations of the training indices (seeded): the same on
    every rank, so re-sharding after a re-formation keeps the global batch."""

    def __init__(self, train_idx, batch, seed):
        self.idx, self.batch, self.seed, self.perms = train_idx, batch, seed, {}

    def _perm(self, e):
        if e not in self.perms:
            self.perms = {e: np.random.RandomState(self.seed + 1000 + e).permutation(len(self.idx))}
        return self.perms[e]

    def indices(self, s):
        n = len(self.idx)
        k = np.arange(s * self.batch, (s + 1) * self.batch)
        return np.array([self.idx[self._perm(int(i // n))[i % n]] for i in k])


def model_of(args, classes):
    import torchvision
    torch.manual_seed(args.seed)
    m = torchvision.models.resnet18(weights=None, num_classes=classes)
    if args.stem == "cifar":
        m.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        m.maxpool = torch.nn.Identity()
    return m


def recalibrate(model, data, train_idx, n, batch):
    """BatchNorm's running statistics, recomputed with the final weights on
    the first n training images (the same on every rank, so every rank
    evaluates the same model). The running averages kept during training mix
    in statistics of older weights, and after a short run they are far off."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    saved = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the batches below
    model.train()
    with torch.no_grad():
        for i in range(0, min(n, len(train_idx)), batch):
            model(data.batch(train_idx[i:min(i + batch, n)])[0])
    for m, mom in zip(bns, saved):
        m.momentum = mom


def evaluate(model, data, held, batch):
    model.eval()
    correct, total, loss = 0, 0, 0.0
    with torch.no_grad():
        for i in range(0, len(held), batch):
            x, y = data.batch(held[i:i + batch])
            out = model(x)
            loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            total += len(y)
    model.train()
    return correct / max(total, 1), loss / max(total, 1)


def main():
    args = parse()
    torch.set_num_threads(args.threads)
    data = (FolderImages(args.data, args.image_size) if args.data else
            RandomImages(args.samples, args.classes, args.image_size, args.seed))
    train_idx, held = split(len(data), args.seed)
    if len(train_idx) < 1:
        sys.exit("resnet: %d images are too few to train on" % len(data))
    batches = Batches(train_idx, args.batch, args.seed)
    model = model_of(args, data.classes)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=5e-4)

    dist_mode = args.mode != "single"
    if args.mode in ("ddp", "elastic"):
        # elastic: the same DDP model; run_steps hands it to
        # elastic.TorchState, which rebuilds the group and DDP after a loss
        import torch.distributed as dist
        import ringmaster.torch as _rmt  # noqa: F401  (registers the backend)
        dist.init_process_group("ringmaster")
        model = torch.nn.parallel.DistributedDataParallel(model)
    world = ringmaster.size() if dist_mode else 1
    if args.batch < 2 * world:
        # BatchNorm needs two values per channel (the last block is 1x1 with
        # the imagenet stem on 32x32 images)
        sys.exit("resnet: --batch %d leaves a rank fewer than 2 images in a world of %d; "
                 "BatchNorm needs at least 2" % (args.batch, world))
    if dist_mode:
        ringmaster.set_total_steps(args.steps)
    net = model.module if args.mode in ("ddp", "elastic") else model

    def where():
        return (ringmaster.rank(), ringmaster.size()) if dist_mode else (0, 1)

    def banner():
        rank, world = where()
        print("resnet: pid %d generation %d rank %d of %d: ResNet-18 (%s stem, %.1fM "
              "parameters), %d %s images of %d classes, global batch %d"
              % (os.getpid(), ringmaster.generation() if dist_mode else 0, rank, world,
                 args.stem, sum(p.numel() for p in net.parameters()) / 1e6, len(data),
                 "folder" if args.data else "random", data.classes, args.batch), flush=True)
    banner()

    def one_step(s):
        rank, world = where()
        idx = batches.indices(s)
        lo, hi = rank * args.batch // world, (rank + 1) * args.batch // world
        x, y = data.batch(idx[lo:hi])
        with ringmaster.step() as st:
            out = model(x)
            # mean over this rank's images; DDP averages the ranks' gradients
            loss = F.cross_entropy(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            st.loss = loss.item()
            st.accuracy = (out.argmax(1) == y).double().mean().item()
        if args.step_sleep_ms:
            time.sleep(args.step_sleep_ms / 1000.0)
        if (s + 1) % args.log_every == 0 or s + 1 == args.steps:
            print("resnet: step %d loss %.4f" % (s + 1, st.loss), flush=True)

    t0 = time.time()
    run_steps("resnet", args, model, opt, one_step, banner)
    elapsed = time.time() - t0
    rank, world = where()
    recalibrate(net, data, train_idx, 256, 64)
    acc, loss = evaluate(net, data, held, 64)
    res = {"rank": rank, "world": world, "mode": args.mode, "steps": args.steps,
           "accuracy": round(acc, 6), "test_loss": round(loss, 6),
           "param_sha256": param_hash(net), "seconds": round(elapsed, 3),
           "step_ms": round(elapsed * 1000.0 / args.steps, 1)}
    print("resnet: held-out accuracy %.4f, loss %.4f (%d images); %.0f ms a step"
          % (acc, loss, len(held), res["step_ms"]), flush=True)
    print("RESULT " + json.dumps(res), flush=True)
    if dist_mode:
        ringmaster.finalize(summary={"accuracy": acc, "test_loss": loss})


if __name__ == "__main__":
    main()
