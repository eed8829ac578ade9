"""ddp.py - what an unchanged DistributedDataParallel model gets on the
``ringmaster`` backend: its steps reported without code, and the job's
aggregation, secure aggregation and straggler policy applied to the step's
whole gradient (the design below). Imported by ``ringmaster.torch``, which it
patches: DistributedDataParallel.__init__ and register_comm_hook.
"""
import torch

import ringmaster as _rm
from ringmaster import errors as _errors

from . import _rm_group, _rm_default_group
from .optimizer import _unflatten

# ---- STEPS WITHOUT CODE: DDP's steps on the ringmaster backend ----------------
# An unchanged DistributedDataParallel model on this backend reports its steps
# to the coordinator by itself: when DDP is built over a ProcessGroupRingmaster
# the backend registers a communication hook that all-reduces each bucket as
# DDP's own default does (divide by the world, then sum: the same numbers) and,
# at the reducer's last bucket of a synchronized backward, ends the step
# (rm_session_step_end: compute = wall time - time in collectives, comm = time
# in collectives) and starts the next one's clock. So ONE STEP = ONE
# SYNCHRONIZED DDP BACKWARD (a no_sync() backward all-reduces nothing and is
# not a step); the first step's clock starts when the DDP model is built. A
# program that reports its own steps (ringmaster.step()) keeps them: the hook
# then only all-reduces. A hook the program registers itself is kept and run
# in ours (DDP takes one hook only); register_builtin_comm_hook is not.
#
# OVERLAP. The plain hook (no aggregation, secure aggregation or straggler
# policy) queues the bucket's all-reduce on the process group's worker
# thread (THE PROCESS GROUP in process_group.py) and returns its Future at once:
# the autograd engine goes on computing the earlier layers' gradients while
# the bucket is on the wire, and the reducer waits for the Futures in
# finalize_backward, as with gloo. The step's end at the last bucket is then
# a then() callback of that bucket's Future: it runs on the worker thread
# when the last all-reduce is done (the calls before it are done too: the
# queue is FIFO), while backward waits in finalize_backward, so no other
# thread calls the session meanwhile.
#
# THE STEP'S WHOLE GRADIENT: aggregation, secure aggregation and straggler
# policies under DDP. In a job whose spec asks for an `aggregation` (any
# method, with or without clip_norm), for `secure_aggregation` or for a
# straggler_policy (backup, deadline, auto), the hook does not reduce bucket by
# bucket: it returns, for each bucket, a torch.futures.Future left pending
# and keeps the bucket; at the reducer's last bucket of the synchronized
# backward (buckets reach the hook in index order, the last one last) the
# step's buckets are gathered into ONE flat vector per dtype, in the
# module's parameter order (the order DistributedOptimizer flattens, so
# both give the same numbers), combined once, by
#   rm_aggregate with the spec's method (ringmaster.aggregate), or
#   rm_session_secure_allreduce, averaged (ringmaster.secure_allreduce:
#   float32 only; masked, so no plaintext bucket ever leaves the worker), or
#   rm_session_allreduce_step (ringmaster.allreduce_gradients): the
#   coordinator's step gate decides ONE member set for the step, the same on
#   every rank and for every bucket; a rank left out contributes zeros and
#   still takes the step's average over the members (ddp.rm_contributors),
# written back into the buckets' gradient views, and every pending future is
# completed with its bucket. torch's reducer waits for the buckets' futures
# only in finalize_backward, which the autograd engine runs after the last
# bucket's hook, so futures completed at the last bucket are in time.
# Why the whole step and not per bucket: Krum's distances, Bulyan's and
# centered clipping's selections and any L2 clip (clip_norm, the secure
# clip) are decisions on the whole vector; a bucket is a part of it, and a
# decision per bucket is another method. For the coordinate-wise median and
# trimmed_mean per bucket would give the same numbers; they go the same way
# because one rm_aggregate per step costs one exchange's latency instead of
# one per bucket, and the suspects it reports (the ranks it excluded, carried
# by the step report as byzantine_suspect evidence: worker/session/
# session_use.c) are judged on the whole gradient, not on a small bucket.
# A straggler policy decides per step, so its gate is asked once per step.
# Cost: one copy of the gradient in and one out per step (into a flat
# vector kept on the model between steps); nothing overlaps with the
# backward pass (the combination waits for the last bucket), where the
# plain hook's bucket all-reduces do (OVERLAP). A
# late rank's backward is not interrupted (it arrives late and contributes
# zeros): the members still wait for it in the step's collective, so under
# DDP the policies give their semantics (member set, average over members)
# but not the time a built-in workload's dropped rank saves.
# SECURE REDO. A member lost before the step's secure sum completed aborts
# the sum on every survivor (nothing of it is revealed); under on_failure
# shrink or replace the hook re-joins the next generation in this process
# (ringmaster.reform) and redoes the sum with fresh masks over the new
# members, from this rank's own gradient of the step, as the C workloads
# redo the step (the coordinator's secure_recovered event). A completed sum
# is final: a loss seen after it is redone at the next step's sum. DDP's
# process group stays the old generation's: the model trains on as long as
# nothing else calls it (a collective on it raises Reconfigured; a module
# with buffers broadcasts them every forward); the data shards are the
# program's, so the lost rank's shard is no longer seen.
# The same REDO holds for the step's aggregation (rm_aggregate over the
# survivors: a robust method decides on the members that are left) and for
# the straggler policy's gated average (the new generation's gate decides the
# member set), so an unchanged DDP program in such a job survives a member
# loss under shrink or replace as a secure one does, with the same limits.
# A DDP model held by elastic.TorchState does not redo in place: the loss
# propagates out of backward() so that elastic.run rolls the state back to
# its commit and rebuilds the process group and DDP for the new world (one
# recovery, not two).
# The result is what the method gives (it takes the average's place: no
# division by the world); the ranks excluded by the last step are in
# ddp.rm_excluded, the last secure sum's figures in ddp.rm_secure_info.
_ddp_init = torch.nn.parallel.DistributedDataParallel.__init__
_ddp_register = torch.nn.parallel.DistributedDataParallel.register_comm_hook


def _rm_redo_step(ddp, combine, flat, gather):
    """combine(flat) (the step's secure sum, aggregation or gated average),
    redone over the survivors when a member is lost before it completed (see
    SECURE REDO above; not for a model held by elastic.TorchState); JobEnded
    when the job ended instead (on_failure fail, or too few members).
    gather() fills flat again from the step's gradients, which the combine
    does not touch (no copy kept per step for a redo that rarely comes)."""
    while True:
        try:
            return combine(flat)
        except (_errors.PeerLost, _errors.Reconfigured, _errors.Timeout):
            if getattr(ddp, "_rm_elastic", False):
                raise
            _rm.reform()
            gather()


def _rm_step_combine(ddp):
    """Combine the step's pending buckets (see above) and complete their
    futures; on an error the pending buckets are dropped and it propagates
    out of backward()."""
    pend, ddp._rm_pending = ddp._rm_pending, []
    order = ddp._rm_param_order
    pieces, seq = [], 0
    for params, grads, _, _ in pend:
        for p, g in zip(params, grads):
            pieces.append((order.get(id(p), -1), seq, g))
            seq += 1
    if any(o < 0 for o, _, _ in pieces):  # a parameter the module did not list
        pieces = [(s, s, g) for _, s, g in pieces]
    pieces.sort(key=lambda x: (x[0], x[1]))
    by_dt = {}
    for _, _, g in pieces:
        by_dt.setdefault(g.dtype, []).append(g)
    excluded, info = set(), None
    # the flat vector of each dtype is kept on the model between steps: a
    # new one of a large model's size is a fresh mapping whose pages fault
    # in on every step
    bufs = getattr(ddp, "_rm_flat", None)
    if bufs is None:
        bufs = ddp._rm_flat = {}
    for dt, gs in by_dt.items():
        n = sum(g.numel() for g in gs)
        flat = bufs.get(dt)
        if flat is None or flat.numel() != n:
            flat = bufs[dt] = torch.empty(n, dtype=dt)

        def gather(flat=flat, gs=gs):
            torch.cat([g.reshape(-1) for g in gs], out=flat)
        gather()
        if ddp._rm_secure:
            info = _rm_redo_step(ddp, lambda f: _rm.secure_allreduce(f, "avg"), flat, gather)
        elif ddp._rm_agg is None:  # the straggler policy's gated average
            ddp.rm_contributors = _rm_redo_step(ddp, _rm.allreduce_gradients, flat, gather)
        else:
            _, ex = _rm_redo_step(ddp, lambda f: _rm.aggregate(f, info=True, **ddp._rm_agg),
                                  flat, gather)
            excluded.update(ex)
        _unflatten(flat, gs)
    ddp.rm_excluded = sorted(excluded)
    if info is not None:
        ddp.rm_secure_info = info
    for _, _, buf, fut in pend:
        fut.set_result(buf)


def _first(f):
    return f.value()[0]


def _rm_bucket_hook(state, bucket):
    ddp = state
    user = getattr(ddp, "_rm_user_hook", None)
    if user is not None:
        fut = user[1](user[0], bucket)
    elif ddp._rm_whole:
        t = bucket.buffer()
        if bucket.index() == 0:  # a backward that raised left buckets behind
            ddp._rm_pending = []
        fut = torch.futures.Future()
        ddp._rm_pending.append((bucket.parameters(), bucket.gradients(), t, fut))
        if bucket.is_last():
            try:
                _rm_step_combine(ddp)
            except BaseException:
                ddp._rm_pending = []
                raise
    else:
        t = bucket.buffer()
        t.div_(ddp.process_group.size())
        # queued on the group's worker thread: the hook returns at once and
        # backward goes on; the reducer waits for the Future in
        # finalize_backward (OVERLAP above)
        fut = ddp.process_group.allreduce([t]).get_future().then(_first)
    ddp._rm_nb = getattr(ddp, "_rm_nb", 0) + 1
    if bucket.is_last():
        # buckets of the last synchronized backward (tests read it)
        ddp.rm_buckets, ddp._rm_nb = ddp._rm_nb, 0
        if fut.done():
            try:
                _rm._auto_step_end()
            except _errors.MembershipError:
                # the report is queued; the job re-formed meanwhile. When
                # the step's whole gradient is combined, the next step's
                # combination sees it and is redone over the new members
                # (SECURE REDO); elsewhere (and under elastic) it propagates.
                if not ddp._rm_whole or getattr(ddp, "_rm_elastic", False):
                    raise
        else:
            def after(f):
                _rm._auto_step_end()
                return f.value()
            fut = fut.then(after)
    return fut


def _rm_ddp_init(self, module, *a, **k):
    _ddp_init(self, module, *a, **k)
    self._rm_ddp_args = (a, dict(k))  # elastic.TorchState builds it again with them
    if _rm_group(getattr(self, "process_group", None)) is not None:
        session = _rm.in_session()
        self._rm_agg = _rm.aggregation_spec() if session else None
        self._rm_secure = session and _rm.secure()
        pol = _rm.spec("straggler_policy") if session else None
        # a straggler policy with an aggregation or secure aggregation: those
        # are applied, and the coordinator says the policy did not act
        self._rm_gated = pol not in (None, "", "none") and not (
            self._rm_agg is not None or self._rm_secure)
        self._rm_whole = self._rm_agg is not None or self._rm_secure or self._rm_gated
        self.rm_contributors = None
        self._rm_pending = []
        self.rm_excluded, self.rm_secure_info = [], None
        self._rm_param_order = {id(p): i for i, p in enumerate(
            p for p in self.module.parameters() if p.requires_grad)}
        if self._rm_whole and self.process_group is not _rm_default_group():
            raise RuntimeError("ringmaster backend: the job's %s applies to DDP over the "
                               "default process group only"
                               % ("secure_aggregation" if self._rm_secure else "aggregation"
                                  if self._rm_agg is not None else "straggler_policy"))
        dts = sorted({str(p.dtype) for p in self.module.parameters() if p.requires_grad})
        if self._rm_secure and dts not in ([], ["torch.float32"]):
            raise TypeError("ringmaster backend: the job's secure_aggregation sums "
                            "float32 gradients; this model has %s parameters"
                            % ", ".join(dts))
        if self._rm_gated and len(dts) > 1:
            # the gate decides once per step: one gated average per step
            raise TypeError("ringmaster backend: the job's straggler_policy %s averages the "
                            "step's gradient in one call, which needs one dtype; this model "
                            "has %s parameters" % (pol, ", ".join(dts)))
        _ddp_register(self, self, _rm_bucket_hook)
        self._rm_hooked = True
        _rm._auto_step_begin()


def _rm_ddp_register(self, state, hook):
    if getattr(self, "_rm_hooked", False):
        if getattr(self, "_rm_user_hook", None) is not None:
            raise RuntimeError("register_comm_hook can only be called once")
        self._rm_user_hook = (state, hook)
        return
    _ddp_register(self, state, hook)


torch.nn.parallel.DistributedDataParallel.__init__ = _rm_ddp_init
torch.nn.parallel.DistributedDataParallel.register_comm_hook = _rm_ddp_register
