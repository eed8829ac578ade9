"""Elastic training in place: survive the loss (or arrival) of a member
without restarting the surviving processes.

    state = ringmaster.torch.elastic.TorchState(model, opt, step=0, epoch=0)

    @ringmaster.torch.elastic.run
    def train(state):
        while state.step < STEPS:
            ...one step on this rank's shard (ringmaster.rank(), ringmaster.size())...
            state.step += 1
            if state.step % 10 == 0:
                state.commit()

    train(state)

``commit()`` keeps a deep copy of the model's and optimizer's state dicts and
of the extras (``step``, ``epoch``, anything passed as a keyword) in memory.
When ``PeerLost``, ``Timeout``, ``Reconfigured`` (or ``Aborted`` /
``StaleGeneration``) is raised anywhere inside ``train`` -- also when torch
wrapped it in a RuntimeError on the way out of DDP's reducer -- the wrapper

1. rolls the state back to the last commit,
2. ``ringmaster.reform()``: joins the next generation in this process (new
   rank and world),
3. broadcasts the state from the rank holding the newest commit (the lowest
   such rank; normally rank 0 of the new generation) -- a replacement that
   just joined starts from it too,
4. calls the ``on_reset`` hooks (``run(on_reset=fn)`` and
   ``state.register_reset_callbacks([fn])``) so the program can re-shard its
   data for the new world size,
5. calls ``train(state)`` again.

At most one commit interval of work is lost. ``JobEnded`` (the coordinator
failed or ended the job) and every other exception end it.
"""
import copy
import functools
import sys

import numpy as np

import ringmaster as _rm
from ringmaster import errors as _errors
from . import broadcast_parameters, broadcast_optimizer_state

__all__ = ["TorchState", "State", "run"]

_RESERVED = {"model", "optimizer", "commits", "resets", "last_reset"}


class State:
    """Extras only (no model): attribute access reads/writes them."""

    def __init__(self, **extra):
        object.__setattr__(self, "_extra", dict(extra))
        object.__setattr__(self, "_saved", None)
        object.__setattr__(self, "_callbacks", [])
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
        """Remember the current state (in memory) as the rollback point."""
        self._saved = self._snapshot()
        self.commits += 1

    def restore(self):
        """Go back to the last commit."""
        if self._saved is not None:
            self._load(self._saved)

    def sync(self):
        """Make every rank's state that of the rank with the newest commit
        (lowest rank among equals); then commit it everywhere."""
        mine = np.array([self.commits], np.int64)
        counts = _rm.allgather(mine).reshape(-1)
        root = int(np.argmax(counts))  # first maximum: lowest rank
        self._broadcast(root)
        n = int(counts[root])
        self.commit()
        self.commits = n
        return root


class TorchState(State):
    """State of a model, an optimizer and extras (``TorchState(model, opt,
    step=0)``; ``state.step += 1``)."""

    def __init__(self, model=None, optimizer=None, **extra):
        super().__init__(**extra)
        self.model = model
        self.optimizer = optimizer

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
                        if verbose:
                            print("ringmaster.elastic: rank %d generation %d: %s; rolling "
                                  "back to commit %d and re-forming"
                                  % (_rm.rank(), _rm.generation(), err, state.commits),
                                  file=sys.stderr, flush=True)
                        state.restore()
                        try:
                            info = _rm.reform()
                            root = state.sync()
                            break
                        except _errors.MembershipError as e2:  # failed again meanwhile
                            err = e2
                    info["root"] = root
                    state.last_reset = info
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
