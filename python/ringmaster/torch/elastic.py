"""Elastic training in place: survive the loss (or arrival) of a member
without restarting the surviving processes.

    state = ringmaster.torch.elastic.TorchState(model, opt, step=0, epoch=0)

    @ringmaster.torch.elastic.run
    def train(state):
        while state.step < STEPS:
            ...one step on this rank's shard (ringmaster.rank(), ringmaster.size())...
            opt.step()
            state.step += 1

    train(state)

PER-STEP recovery (a program that never calls ``commit()``; the state holds
its optimizer): a failure loses at most the step in flight, and nothing is
copied while training. The state counts the optimizer steps that returned on
this rank (it wraps ``opt.step``). In a synchronous data-parallel program a
rank can begin step s + 1's collective only after every rank began step s's,
so when a member is lost the survivors' counts differ by at most one: those
whose step-s all-reduce completed (they hold the complete sum: a collective
returns only when every contribution arrived) applied step s, the others
did not. After the re-formation every rank takes the state (model,
optimizer, extras such as ``step``) of the rank that applied the most steps
(the lowest such rank): they all applied the same averaged gradients, so
any of them is the group's state, and step s is applied once, not redone.
Cost without a failure: one integer increment per step. The extras must
follow the optimizer step (advance ``state.step`` right after ``opt.step()``
with no collective in between), as above. What is lost: the gradient work of
the step in flight on the ranks that had not finished it.

COMMIT-STYLE recovery, for programs that want checkpoint-like intervals
(or hold no optimizer): ``commit()`` keeps a deep copy of the model's and optimizer's state dicts and
of the extras (``step``, ``epoch``, anything passed as a keyword) in memory.
When ``PeerLost``, ``Timeout``, ``Reconfigured`` (or ``Aborted`` /
``StaleGeneration``) is raised anywhere inside ``train`` -- also when torch
wrapped it in a RuntimeError on the way out of DDP's reducer -- the wrapper

1. rolls the state back to the last commit (COMMIT-STYLE; PER-STEP keeps it),
2. ``ringmaster.reform()``: joins the next generation in this process (new
   rank and world),
3. broadcasts the state from the rank holding the newest commit (PER-STEP:
   the most optimizer steps; the lowest such rank) -- a replacement that
   just joined starts from it too; before that, a ``TorchState`` holding a
   ``DistributedDataParallel`` model on the ``ringmaster`` backend rebuilds
   the process group and DDP for the new world (ELASTIC DDP below),
4. tells the session the state's ``step`` (``ringmaster.set_step``), so
   that the job's progress and step reports count the program's steps,
5. calls the ``on_reset`` hooks (``run(on_reset=fn)`` and
   ``state.register_reset_callbacks([fn])``) so the program can re-shard its
   data for the new world size,
6. calls ``train(state)`` again.

At most one commit interval of work is lost (PER-STEP: the step in flight).
The mode is the group's: PER-STEP until any rank has committed.

ELASTIC DDP, in one line. An ordinary DDP program becomes elastic by
handing its DDP model to the state::

    dist.init_process_group("ringmaster")
    model = DistributedDataParallel(net)
    state = ringmaster.torch.elastic.TorchState(model, opt, step=0)

After a re-formation the state itself (no ``on_reset`` hook) destroys the
default process group, makes it again with the new generation's rank and
world (``init_process_group("ringmaster", rank=, world_size=, store=)``: the
backend's default group is the session's communicator, now the new
generation's) and runs ``DistributedDataParallel.__init__`` again on the
same DDP object with the arguments it was first built with, so the
program's references to the model stay valid, the optimizer keeps its
parameters (the same tensors) and DDP's buckets and reducer are new. Then
the state is broadcast from the newest commit as above (a replacement that
just joined takes it from a survivor). Why in place and not a new wrapper:
the program's closure holds ``model``; a new object would leave it training
the old one. torch's store (the ``MASTER_PORT`` rendezvous of the first
generation, hosted by a process that may be the lost one) is not used
again: the store given to ``init_process_group`` (``_ReformedStore``)
answers torch's store-based barrier at once, since every member already
returned from ``rm_session_reform`` into the same generation and DDP's
first broadcast on the new group is itself a collective of all of them.
Other process groups (``dist.new_group``) are destroyed with the default
one and cannot be made again: a sub-group's communicator rendezvous through
a store shared by its ranks, and after a re-formation there is none (the
store's get() says so). A DDP over a sub-group cannot be rebuilt (a
ValueError when the state is made). A program that joins after a
re-formation (a replacement) builds its group with the same store through
its unchanged ``init_process_group`` (A LATE JOINER in ringmaster/torch).
The data shards are the program's: read ``dist.get_rank()`` and
``dist.get_world_size()`` inside ``train`` (they are the new group's after
a re-formation). While a TorchState holds the DDP model, the backend's step
hook does not redo a step in place after a loss (SECURE REDO in
ringmaster/torch): the loss reaches ``run``, which rolls back and rebuilds.

``JobEnded`` (the coordinator failed or ended the job) and every other
exception end it.
"""
import copy
import functools
import sys

import numpy as np
import torch
import torch.distributed as dist

import ringmaster as _rm
from ringmaster import errors as _errors
from . import broadcast_parameters, broadcast_optimizer_state, _rm_group, _rm_default_group

__all__ = ["TorchState", "State", "run"]

_RESERVED = {"model", "optimizer", "commits", "resets", "last_reset"}


class State:
    """Extras only (no model): attribute access reads/writes them."""

    def __init__(self, **extra):
        object.__setattr__(self, "_extra", dict(extra))
        object.__setattr__(self, "_saved", None)
        object.__setattr__(self, "_callbacks", [])
        object.__setattr__(self, "_user_commits", 0)
        object.__setattr__(self, "_applied", 0)
        self.commits = 0
        self.resets = 0
        self.last_reset = None

    def __getattr__(self, name):
        try:
            return self.__dict__["_extra"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        if name.startswith("_") or name in _RESERVED:
            object.__setattr__(self, name, value)
        else:
            self._extra[name] = value

    def register_reset_callbacks(self, callbacks):
        self._callbacks.extend(callbacks)

    # -- to override
    def _snapshot(self):
        return copy.deepcopy(self._extra)

    def _load(self, snap):
        new = copy.deepcopy(snap)  # snap may be self._extra itself
        self._extra.clear()
        self._extra.update(new)

    def _broadcast(self, root):
        State._load(self, _rm.broadcast_object(self._extra, root))

    # -- public
    def commit(self):
        """Remember the current state (in memory) as the rollback point.
        A program that never calls it gets PER-STEP recovery instead (see
        the module doc)."""
        self._user_commits += 1
        self._commit()

    def _commit(self):
        self._saved = self._snapshot()
        self.commits += 1

    def _per_step(self):
        """PER-STEP mode: the program never committed and the state counts
        the optimizer's steps."""
        return self._user_commits == 0 and self._counts_steps()

    def _counts_steps(self):
        return False

    def restore(self):
        """Go back to the last commit."""
        if self._saved is not None:
            self._load(self._saved)

    def _after_reform(self):
        """Called after ringmaster.reform(), before sync(): rebuild what
        belongs to the old generation."""

    def sync(self):
        """Make every rank's state that of the rank with the newest commit
        (lowest rank among equals); then commit it everywhere. In PER-STEP
        mode: that of the rank that applied the most optimizer steps, and
        nothing is copied."""
        # the mode is the group's: a rank that just joined (no commits, no
        # steps) follows the others
        mine = np.array([self._user_commits, self._applied, self.commits], np.int64)
        every = _rm.allgather(mine).reshape(-1, 3)
        per_step = self._counts_steps() and int(every[:, 0].max()) == 0
        root = int(np.argmax(every[:, 1] if per_step else every[:, 2]))  # lowest rank of the max
        self._broadcast(root)
        self._user_commits, self._applied = int(every[root, 0]), int(every[root, 1])
        if not per_step:
            self._commit()
            self.commits = int(every[root, 2])
        return root


class TorchState(State):
    """State of a model, an optimizer and extras (``TorchState(model, opt,
    step=0)``; ``state.step += 1``)."""

    def __init__(self, model=None, optimizer=None, **extra):
        super().__init__(**extra)
        self.model = model
        self.optimizer = optimizer
        if optimizer is not None:
            _count_steps(optimizer, self)
        ddp = _ringmaster_ddp(model)
        if ddp is not None and ddp.process_group is not _rm_default_group():
            raise ValueError("elastic.TorchState: this DistributedDataParallel model is "
                             "built over a sub-group; after a re-formation only the "
                             "default process group can be made again (build DDP over "
                             "the default group)")
        if ddp is not None:
            # a member loss in the step's combination propagates to run()
            # (rolled back and rebuilt) instead of being redone in place
            ddp._rm_elastic = True

    def _counts_steps(self):
        return self.optimizer is not None

    def _after_reform(self):
        ddp = _ringmaster_ddp(self.model)
        if ddp is None:
            return
        a, k = getattr(ddp, "_rm_ddp_args", ((), {}))
        k = {x: v for x, v in k.items() if x != "process_group"}
        if len(a) >= 5:  # process_group given by position (module is not in a)
            a = a[:4] + (None,) + tuple(a[5:])
        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group("ringmaster", store=_ReformedStore(_rm.size()),
                                rank=_rm.rank(), world_size=_rm.size())
        # DDP's constructor broadcasts its rank 0's parameters and buffers
        # (a collective a replacement joins from its own constructor, so it
        # stays first); under PER-STEP rank 0 may not have applied the last
        # step while another rank did: each rank keeps its own until sync()
        # broadcasts the state from the right one (a copy at recovery only)
        keep = [t.detach().clone() for t in ddp.module.state_dict().values()]
        torch.nn.parallel.DistributedDataParallel.__init__(ddp, ddp.module, *a, **k)
        with torch.no_grad():
            for t, v in zip(ddp.module.state_dict().values(), keep):
                t.copy_(v)
        ddp._rm_elastic = True

    def _snapshot(self):
        return (copy.deepcopy(self.model.state_dict()) if self.model is not None else None,
                copy.deepcopy(self.optimizer.state_dict()) if self.optimizer is not None
                else None,
                copy.deepcopy(self._extra))

    def _load(self, snap):
        m, o, e = snap
        if m is not None:
            self.model.load_state_dict(m)
        if o is not None:
            self.optimizer.load_state_dict(copy.deepcopy(o))
        State._load(self, e)

    def _broadcast(self, root):
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root)
        State._broadcast(self, root)


def _count_steps(optimizer, state):
    """Wrap optimizer.step (on this instance) so that each step that
    returned counts as applied (PER-STEP). A step that raised (its
    collective failed) does not count."""
    inner = optimizer.step
    if getattr(inner, "_rm_counted", None) is not None:
        inner = inner._rm_counted

    @functools.wraps(inner)
    def step(*a, **k):
        out = inner(*a, **k)
        state._applied += 1
        return out
    step._rm_counted = inner
    optimizer.step = step


def _ringmaster_ddp(model):
    """model when it is a DDP model on the ringmaster backend, else None."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel) and _rm_group(
            getattr(model, "process_group", None)) is not None:
        return model
    return None


class _ReformedStore(dist.Store):
    """The store of a default process group made again after a re-formation
    (see ELASTIC DDP). The ringmaster backend does not use a store in a
    session; torch's store-based barrier counts the members that reached
    init_process_group under a "store_based_barrier_key" and waits for the
    world: every member of the new generation already came out of
    rm_session_reform into it, so the count is the world at once. Other
    keys are kept in this process (nothing of torch's reads them back from
    another rank for this backend)."""

    def __init__(self, world):
        super().__init__()
        self._world = world
        self._kv = {}

    def add(self, key, value):
        if key.startswith("store_based_barrier_key"):
            return self._world
        n = int(self._kv.get(key, b"0")) + int(value)
        self._kv[key] = str(n).encode()
        return n

    def set(self, key, value):
        self._kv[key] = value if isinstance(value, bytes) else str(value).encode()

    def get(self, key):
        if key not in self._kv:
            raise RuntimeError("ringmaster: no key %r: after a re-formation there is no "
                               "store shared between the ranks (dist.new_group and other "
                               "store rendezvous are not available; the default process "
                               "group is the session's communicator)" % key)
        return self._kv[key]

    def check(self, keys):
        return all(k in self._kv for k in keys)

    def wait(self, keys, timeout=None):
        missing = [k for k in keys if k not in self._kv]
        if missing:
            raise RuntimeError("ringmaster: keys %s were never set: after a re-formation "
                               "there is no store shared between the ranks (dist.new_group "
                               "and other store rendezvous are not available)" % missing)

    def delete_key(self, key):
        return self._kv.pop(key, None) is not None

    def num_keys(self):
        return len(self._kv)

    def set_timeout(self, timeout):
        pass


def _membership_error(e):
    if isinstance(e, _errors.JobEnded):
        return None
    if isinstance(e, _errors.MembershipError):
        return e
    last = _rm.last_exception
    if isinstance(last, _errors.MembershipError):
        # torch wraps an exception raised in the process group (DDP's
        # reducer runs it from C++) into a RuntimeError with its text
        seen, x = set(), e
        while x is not None and id(x) not in seen:
            seen.add(id(x))
            if str(last) in str(x):
                return last
            x = x.__cause__ or x.__context__
    return None


def run(func=None, *, on_reset=None, max_resets=64, verbose=True):
    """Decorator: run ``func(state, ...)`` and recover in place from
    membership changes (see the module doc)."""
    def deco(f):
        @functools.wraps(f)
        def wrapper(state, *args, **kwargs):
            if not _rm.is_initialized():
                _rm.init()
            state.sync()
            while True:
                try:
                    return f(state, *args, **kwargs)
                except Exception as e:  # noqa: BLE001 (filtered below)
                    err = _membership_error(e)
                    if err is None or not _rm.in_session():
                        raise
                    while True:
                        state.resets += 1
                        if state.resets > max_resets:
                            raise
                        per_step = state._per_step()
                        if verbose:
                            print("ringmaster.elastic: rank %d generation %d: %s; %s and "
                                  "re-forming" % (_rm.rank(), _rm.generation(), err,
                                                  "%d optimizer steps applied here"
                                                  % state._applied if per_step else
                                                  "rolling back to commit %d" % state.commits),
                                  file=sys.stderr, flush=True)
                        if not per_step:
                            state.restore()
                        try:
                            info = _rm.reform()
                            state._after_reform()
                            root = state.sync()
                            break
                        except Exception as e2:  # noqa: BLE001 failed again meanwhile?
                            err = _membership_error(e2)
                            if err is None or not _rm.in_session():
                                raise
                    info["root"] = root
                    state.last_reset = info
                    # the step reports count the program's steps: the next
                    # one is the state's, not the attempt's (the session
                    # took the fewest steps any member reported)
                    step = state._extra.get("step")
                    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
                        _rm.set_step(step)
                    if verbose:
                        print("ringmaster.elastic: re-formed: rank %d of %d, generation %d, "
                              "state from rank %d" % (info["rank"], info["world"],
                                                      info["generation"], root),
                              file=sys.stderr, flush=True)
                    for cb in ([on_reset] if on_reset else []) + list(state._callbacks):
                        cb(state) if _takes_arg(cb) else cb()
        return wrapper
    return deco(func) if func is not None else deco


def _takes_arg(fn):
    import inspect
    try:
        return len(inspect.signature(fn).parameters) >= 1
    except (TypeError, ValueError):
        return False
