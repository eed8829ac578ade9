#!/usr/bin/python3
"""Data-parallel training of a small GPT-style transformer language model
(character level) with ringmaster: an ordinary DDP program that reports its
loss, next-character accuracy and perplexity per step (the dashboard plots
them), and perplexity in its log and result.

    # as a ringmaster command job (the agent sets the environment)
    ringmaster run -n 4 -- /usr/bin/python3 examples/pytorch/lm.py
    ringmaster run -n 4 -- /usr/bin/python3 examples/pytorch/lm.py --text my_corpus.txt

    # without a coordinator, torchrun-style
    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
        /usr/bin/python3 examples/pytorch/lm.py &
    RANK=1 ...

Corpus: --text FILE (UTF-8), by default /usr/share/common-licenses/GPL-3,
the GNU GPL version 3 (35 KB of English) that Debian's base-files package
ships on every Debian system: nothing is downloaded. The last 10% of the
characters are held out; the vocabulary is the corpus's characters.

Model: a decoder-only transformer as in GPT-2, written out here in plain
torch (torch 1.13 has no fused attention): token and learned position
embeddings, --layers pre-norm blocks of causal multi-head self-attention
(--heads) and a 4x GELU MLP, a final LayerNorm and an output layer tied to
the token embedding. --dim is the model width, --context the characters it
sees. Loss: mean cross entropy per character (nats); perplexity = e^loss.

Modes:
  ddp      dist.init_process_group("ringmaster") + DistributedDataParallel;
           each step is reported with ringmaster.step() (loss, the
           next-character accuracy and the perplexity as a named metric),
           the total with ringmaster.set_total_steps
  elastic  the same DDP model held by ringmaster.torch.elastic.TorchState
           (elastic DDP in one line), the steps inside elastic.run: under
           on_failure shrink or replace a lost worker rolls the survivors
           back to the last commit (every --commit-every steps), the state
           rebuilds the process group and DDP for the new world, and they
           train on in the same processes
  single   plain torch in one process, no ringmaster (the reference)

Every step takes the same global batch of --batch windows of the training
text (offsets drawn from a generator seeded with the step number: the same
on every rank and after a re-formation); rank r of n takes windows
[r*B/n, (r+1)*B/n), and its loss is scaled so that the averaged gradient is
the gradient of the global batch's mean loss: with dropout off (the default)
N ranks take the steps one process takes on the same global batch, up to
floating-point summation order (which Adam's normalisation carries on).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
if os.path.isdir(os.path.join(REPO, "python", "ringmaster")):
    sys.path.insert(0, os.path.join(REPO, "python"))
import ringmaster  # noqa: E402
from example_common import param_hash, run_steps  # noqa: E402  (beside this file)

CORPUS = "/usr/share/common-licenses/GPL-3"


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["ddp", "elastic", "single"], default="ddp")
    p.add_argument("--text", default=CORPUS, help="UTF-8 text to train on (default %(default)s)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16, help="global batch of windows (all ranks)")
    p.add_argument("--context", type=int, default=64, help="characters per window")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dim", type=int, default=64, help="model width")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--log-every", type=int, default=20, help="print the loss every K steps")
    p.add_argument("--eval-windows", type=int, default=64, help="held-out windows at the end")
    p.add_argument("--sample", type=int, default=160, help="characters rank 0 generates at the end")
    p.add_argument("--commit-every", type=int, default=10, help="elastic: steps per commit")
    p.add_argument("--step-sleep-ms", type=float, default=0.0,
                   help="sleep per step (to give a fault test time)")
    a = p.parse_args()
    for name in ("steps", "batch", "context", "layers", "heads", "dim", "threads",
                 "log_every", "eval_windows", "commit_every"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if a.dim % a.heads:
        p.error("--dim (%d) must be a multiple of --heads (%d)" % (a.dim, a.heads))
    if not 0.0 <= a.dropout < 1.0:
        p.error("--dropout must be in [0, 1)")
    return a


def load(path, context):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        sys.exit("lm: cannot read the corpus %s: %s (give a UTF-8 text with --text)" % (path, e))
    chars = sorted(set(text))
    code = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([code[c] for c in text], dtype=torch.long)
    cut = len(ids) * 9 // 10
    if cut <= context + 1 or len(ids) - cut <= context + 1:
        sys.exit("lm: %s has %d characters: too short for --context %d (it needs more than "
                 "%d)" % (path, len(ids), context, 10 * (context + 2)))
    return ids[:cut], ids[cut:], chars


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = self.drop(F.softmax(att.masked_fill(mask[:t, :t], float("-inf")), dim=-1))
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    def __init__(self, vocab, context, dim, layers, heads, dropout):
        super().__init__()
        self.context = context
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, dropout) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as in GPT-2
        self.drop = nn.Dropout(dropout)
        # True above the diagonal: a position does not see the ones after it
        self.register_buffer("mask", torch.triu(torch.ones(context, context, dtype=torch.bool), 1),
                             persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.drop(self.tok(idx) + self.pos(torch.arange(t)))
        for blk in self.blocks:
            x = blk(x, self.mask)
        return self.head(self.ln(x))


def windows(ids, offsets, context):
    x = torch.stack([ids[o:o + context] for o in offsets])
    y = torch.stack([ids[o + 1:o + 1 + context] for o in offsets])
    return x, y


def evaluate(model, held, context, n):
    """Mean loss per character over n evenly spaced held-out windows."""
    model.eval()
    offsets = np.linspace(0, len(held) - context - 1, n).astype(np.int64)
    with torch.no_grad():
        x, y = windows(held, offsets, context)
        out = model(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).item()
        acc = (out.argmax(-1) == y).double().mean().item()
    model.train()
    return loss, acc


def sample(model, prompt, chars, n, seed):
    code = {c: i for i, c in enumerate(chars)}
    idx = torch.tensor([[code[c] for c in prompt if c in code]], dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    model.eval()
    with torch.no_grad():
        for _ in range(n):
            logits = model(idx[:, -model.context:])[0, -1] / 0.8
            nxt = torch.multinomial(F.softmax(logits, -1), 1, generator=g)
            idx = torch.cat([idx, nxt.view(1, 1)], dim=1)
    model.train()
    return "".join(chars[i] for i in idx[0].tolist())


def main():
    args = parse()
    torch.set_num_threads(args.threads)
    train, held, chars = load(args.text, args.context)
    torch.manual_seed(args.seed)
    model = GPT(len(chars), args.context, args.dim, args.layers, args.heads, args.dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    dist_mode = args.mode != "single"
    if args.mode in ("ddp", "elastic"):
        # elastic: the same DDP model; run_steps hands it to
        # elastic.TorchState, which rebuilds the group and DDP after a loss
        import torch.distributed as dist
        import ringmaster.torch as _rmt  # noqa: F401  (registers the backend)
        dist.init_process_group("ringmaster")
        model = nn.parallel.DistributedDataParallel(model)
    if dist_mode:
        if args.batch < ringmaster.size():
            sys.exit("lm: --batch %d is smaller than the world (%d ranks)"
                     % (args.batch, ringmaster.size()))
        ringmaster.set_total_steps(args.steps)
    net = model.module if args.mode in ("ddp", "elastic") else model

    def where():
        return (ringmaster.rank(), ringmaster.size()) if dist_mode else (0, 1)

    def banner():
        rank, world = where()
        print("lm: pid %d generation %d rank %d of %d: GPT %d layers x %d heads, width %d, "
              "context %d (%.2fM parameters); %s: %d training characters, vocabulary %d; "
              "global batch %d" % (os.getpid(), ringmaster.generation() if dist_mode else 0,
                                   rank, world, args.layers, args.heads, args.dim, args.context,
                                   sum(p.numel() for p in net.parameters()) / 1e6, args.text,
                                   len(train), len(chars), args.batch), flush=True)
    banner()

    def one_step(s):
        rank, world = where()
        g = np.random.RandomState((args.seed * 1000003 + s) % (1 << 32))
        offsets = g.randint(0, len(train) - args.context - 1, size=args.batch)
        lo, hi = rank * args.batch // world, (rank + 1) * args.batch // world
        x, y = windows(train, offsets[lo:hi], args.context)
        with ringmaster.step() as st:
            out = model(x)
            # this rank's share of the global batch's mean loss (times n: DDP
            # averages the ranks' gradients), so N ranks train what one does
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1),
                                   reduction="sum") * (world / (args.batch * args.context))
            opt.zero_grad()
            loss.backward()
            opt.step()
            st.loss = loss.item() * args.batch / (world * (hi - lo))  # mean over its windows
            st.accuracy = (out.argmax(-1) == y).double().mean().item()
            st.metrics["perplexity"] = math.exp(st.loss)  # plotted per step beside the loss
        if args.step_sleep_ms:
            time.sleep(args.step_sleep_ms / 1000.0)
        if (s + 1) % args.log_every == 0 or s + 1 == args.steps:
            print("lm: step %d loss %.4f perplexity %.2f" % (s + 1, st.loss, math.exp(st.loss)),
                  flush=True)

    t0 = time.time()
    run_steps("lm", args, model, opt, one_step, banner)
    elapsed = time.time() - t0
    rank, world = where()
    loss, acc = evaluate(net, held, args.context, args.eval_windows)
    res = {"rank": rank, "world": world, "mode": args.mode, "steps": args.steps,
           "test_loss": round(loss, 6), "perplexity": round(math.exp(loss), 4),
           "accuracy": round(acc, 6), "param_sha256": param_hash(net),
           "seconds": round(elapsed, 3), "step_ms": round(elapsed * 1000.0 / args.steps, 1)}
    print("lm: held-out loss %.4f, perplexity %.2f, next-character accuracy %.4f; %.0f ms a step"
          % (loss, math.exp(loss), acc, res["step_ms"]), flush=True)
    if rank == 0 and args.sample > 0:
        print("lm: sample: %r" % sample(net, "This License ", chars, args.sample, args.seed),
              flush=True)
    print("RESULT " + json.dumps(res), flush=True)
    if dist_mode:
        ringmaster.finalize(summary={"test_loss": loss, "perplexity": math.exp(loss),
                                     "accuracy": acc})


if __name__ == "__main__":
    main()
