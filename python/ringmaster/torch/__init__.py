"""PyTorch integration.

* ``import ringmaster.torch`` registers the ``torch.distributed`` backend
  ``"ringmaster"``: ``dist.init_process_group("ringmaster")`` (env://: the
  ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE`` the agent or torchrun
  sets) and an unchanged ``DistributedDataParallel(model)`` train on it. It is
  a Python subclass of ``torch.distributed.ProcessGroup`` (torch 1.13's
  ``c10d::PyProcessGroup`` trampoline dispatches the C++ calls DDP's reducer
  makes to the Python methods); every collective runs synchronously in
  libringmaster and returns a Work made from a completed Future
  (``_create_work_from_future``). In a ringmaster job the process group IS the
  session's communicator (its rank must equal ringmaster's rank); elsewhere the
  data-plane addresses are exchanged through the process group's store. A
  program that joins a job after a re-formation gets the session's rank and
  world without torch's store (A LATE JOINER below).
* ``DistributedOptimizer(optimizer, named_parameters=...)``: Horovod's manner,
  no ``torch.distributed`` needed: ``step()`` first averages the gradients
  over the ranks (flattened into few large buckets), then steps;
  ``aggregation=`` combines them by rm_aggregate (median, Krum, ...) instead.
* ``broadcast_parameters``, ``broadcast_optimizer_state``, ``broadcast_object``.
* ``ringmaster.torch.elastic``: in-place recovery (``run``, ``TorchState``; a
  DDP model held by a ``TorchState`` is rebuilt by it after a re-formation).
"""
import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

import ringmaster as _rm
from ringmaster import errors as _errors

__all__ = ["ProcessGroupRingmaster", "DistributedOptimizer", "broadcast_parameters",
           "broadcast_optimizer_state", "broadcast_object", "allreduce_tensors"]

_RED = dist.ReduceOp.RedOpType
_OPMAP = {_RED.SUM: _rm.SUM, _RED.AVG: _rm.AVG, _RED.PRODUCT: _rm.PROD,
          _RED.MIN: _rm.MIN, _RED.MAX: _rm.MAX}


def _op_of(opts):
    op = getattr(opts, "reduceOp", opts)
    if op is None:
        return _rm.SUM
    if isinstance(op, dist.ReduceOp):
        op = op.op
    o = _OPMAP.get(op)
    if o is None:
        raise ValueError("ringmaster backend: reduce op %s is not supported "
                         "(SUM, AVG, PRODUCT, MIN, MAX)" % (op,))
    return o


def _done(result):
    f = torch.futures.Future()
    f.set_result(result)
    return _create_work_from_future(f)


def _as_list(t):
    return [t] if isinstance(t, torch.Tensor) else list(t)


def _inplace(comm, t, fn):
    """Run fn(buffer) on t in place; a non-contiguous t goes through a copy."""
    if t.is_contiguous():
        fn(t)
    else:
        c = t.contiguous()
        fn(c)
        t.copy_(c)


class ProcessGroupRingmaster(dist.ProcessGroup):
    """torch.distributed process group over one ringmaster Communicator."""

    def __init__(self, rank, size, comm):
        super().__init__(rank, size)
        self._comm = comm
        self._generation = comm.generation
        self._lock = threading.Lock()

    # torch 1.13 asks the trampoline for getBackendName
    def getBackendName(self):
        return "ringmaster"

    def name(self):
        return "ringmaster"

    def _c(self):
        c = self._comm
        if c.generation != self._generation or not c.ptr:
            raise _errors.Reconfigured(
                "RM_ERR_RECONFIGURED", "this process group was built for generation %d; "
                "the session is at %d: destroy and re-create the process group"
                % (self._generation, c.generation))
        return c

    def allreduce(self, tensors, opts=None):
        c, o = self._c(), _op_of(opts)
        with self._lock:
            for t in _as_list(tensors):
                _inplace(c, t, lambda b: c.allreduce(b, o))
        return _done(_as_list(tensors))

    def allreduce_coalesced(self, tensors, opts=None):
        tensors = _as_list(tensors)
        c, o = self._c(), _op_of(opts)
        flat = torch._utils._flatten_dense_tensors(tensors)
        with self._lock:
            c.allreduce(flat, o)
        for t, s in zip(tensors, torch._utils._unflatten_dense_tensors(flat, tensors)):
            t.copy_(s)
        return _done(tensors)

    def broadcast(self, tensors, opts=None):
        c = self._c()
        root = getattr(opts, "rootRank", 0) if opts is not None else 0
        if isinstance(opts, int):
            root = opts
        with self._lock:
            for t in _as_list(tensors):
                _inplace(c, t, lambda b: c.broadcast(b, root))
        return _done(_as_list(tensors))

    def allgather(self, output_tensors, input_tensors, opts=None):
        c = self._c()
        outs = [output_tensors] if isinstance(output_tensors[0], torch.Tensor) \
            else output_tensors
        ins = _as_list(input_tensors)
        with self._lock:
            for out_list, x in zip(outs, ins):
                x = x.contiguous()
                buf = torch.empty((c.world,) + tuple(x.shape), dtype=x.dtype)
                c.allgather_into(buf, x)
                for r, o in enumerate(out_list):
                    o.copy_(buf[r].view_as(o) if o.shape != buf[r].shape else buf[r])
        return _done(outs)

    def _allgather_base(self, output, input, opts=None):
        c = self._c()
        with self._lock:
            if output.is_contiguous():
                c.allgather_into(output, input.contiguous())
            else:
                tmp = torch.empty_like(output, memory_format=torch.contiguous_format)
                c.allgather_into(tmp, input.contiguous())
                output.copy_(tmp)
        return _done([output])

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self.allgather(output_lists, input_list, opts)

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        c, o = self._c(), _op_of(opts)
        outs = _as_list(output_tensors)
        lists = [input_lists] if isinstance(input_lists[0], torch.Tensor) else input_lists
        with self._lock:
            for out, ins in zip(outs, lists):
                flat = torch.cat([t.reshape(-1) for t in ins])
                res = torch.empty(out.numel(), dtype=out.dtype)
                c.reduce_scatter_into(res, flat, o)
                out.copy_(res.view_as(out))
        return _done(outs)

    def _reduce_scatter_base(self, output, input, opts=None):
        c, o = self._c(), _op_of(opts)
        with self._lock:
            res = output if output.is_contiguous() else torch.empty_like(
                output, memory_format=torch.contiguous_format)
            c.reduce_scatter_into(res, input.contiguous(), o)
            if res is not output:
                output.copy_(res)
        return _done([output])

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        c = self._c()
        if output_split_sizes or input_split_sizes:
            n = input.shape[0]
            even = [n // c.world] * c.world
            if list(output_split_sizes or even) != even or list(input_split_sizes or even) != even:
                raise ValueError("ringmaster backend: alltoall supports equal splits only")
        with self._lock:
            res = output if output.is_contiguous() else torch.empty_like(
                output, memory_format=torch.contiguous_format)
            c.alltoall_into(res, input.contiguous())
            if res is not output:
                output.copy_(res)
        return _done([output])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        c = self._c()
        ins = [t.contiguous() for t in input_tensors]
        if len({t.numel() * t.element_size() for t in ins}) != 1 or len(ins) != c.world:
            raise ValueError("ringmaster backend: alltoall needs world tensors of one size")
        with self._lock:
            flat = torch.cat([t.reshape(-1).view(torch.uint8) for t in ins])
            res = torch.empty_like(flat)
            c.alltoall_into(res, flat)
        for r, o in enumerate(output_tensors):
            piece = res.view(c.world, -1)[r]
            o.copy_(piece.view(o.dtype).view_as(o))
        return _done(list(output_tensors))

    def reduce(self, tensors, opts=None):
        c, o = self._c(), _op_of(opts)
        root = getattr(opts, "rootRank", 0)
        with self._lock:
            for t in _as_list(tensors):
                _inplace(c, t, lambda b: c.reduce(b, o, root))
        return _done(_as_list(tensors))

    def gather(self, output_lists, input_tensors, opts=None):
        c = self._c()
        root = getattr(opts, "rootRank", 0)
        with self._lock:
            for i, x in enumerate(_as_list(input_tensors)):
                x = x.contiguous()
                buf = torch.empty((c.world,) + tuple(x.shape), dtype=x.dtype)
                c.allgather_into(buf, x)
                if c.rank == root:
                    for r, o in enumerate(output_lists[i]):
                        o.copy_(buf[r])
        return _done(_as_list(input_tensors))

    def scatter(self, output_tensors, input_lists, opts=None):
        c = self._c()
        root = getattr(opts, "rootRank", 0)
        with self._lock:
            for i, out in enumerate(_as_list(output_tensors)):
                for r in range(c.world):
                    piece = (input_lists[i][r].contiguous().clone() if c.rank == root
                             else torch.empty(out.shape, dtype=out.dtype))
                    c.broadcast(piece, root)
                    if r == c.rank:
                        out.copy_(piece)
        return _done(_as_list(output_tensors))

    def barrier(self, opts=None):
        c = self._c()
        with self._lock:
            # the data plane's barrier: torch's barrier is a collective of
            # this group; ringmaster.barrier(name) is the coordinator's.
            st = _rm._c_barrier(c.ptr)
            if st:
                raise c.error(st, "rm_barrier")
        return _done([])

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        return self.barrier(opts)

    def send(self, *a, **k):
        raise RuntimeError("ringmaster backend: point-to-point send is not supported")

    def recv(self, *a, **k):
        raise RuntimeError("ringmaster backend: point-to-point recv is not supported")

    def recv_anysource(self, *a, **k):
        raise RuntimeError("ringmaster backend: point-to-point recv is not supported")


_groups = 0


def _create(store, rank, size, timeout):
    """torch.distributed backend creator (registered as "ringmaster")."""
    global _groups
    import os
    _groups += 1
    # the default group is the session's communicator; also when it is made
    # again after a re-formation (elastic.TorchState), with the new rank/world
    first = _rm_default_group() is None
    if first and not _rm.is_initialized():
        env = os.environ
        if env.get("RINGMASTER_COORDINATOR") and env.get("RINGMASTER_JOB"):
            _rm.init()  # join the job: the session's communicator
        else:  # rendezvous through torch's store
            c = _rm.comm_from_store(store, rank, size, env.get("MASTER_ADDR", "127.0.0.1"))
            _rm._adopt(c)
            _rm._initialized, _rm._finalized = True, False
            _rm._install_exit_hooks()
    if first:
        comm = _rm.default_communicator()
        if comm.rank != rank or comm.world != size:
            raise RuntimeError(
                "ringmaster backend: torch.distributed says rank %d of %d but ringmaster "
                "says rank %d of %d: in a ringmaster job let the agent's RANK/WORLD_SIZE "
                "stand (do not pass rank=/world_size= by hand), or call "
                "dist.init_process_group before changing them"
                % (rank, size, comm.rank, comm.world))
    else:  # a sub-group (dist.new_group): its own communicator
        comm = _rm.comm_from_store(store, rank, size, os.environ.get("MASTER_ADDR", "127.0.0.1"),
                                   prefix="ringmaster-%d" % _groups)
    return ProcessGroupRingmaster(rank, size, comm)


if "RINGMASTER" not in dist.Backend._plugins:
    dist.Backend.register_backend("ringmaster", _create)


# A LATE JOINER's init_process_group. torch's env:// rendezvous is a TCPStore
# on the first generation's rank 0 (MASTER_ADDR/MASTER_PORT) with RANK and
# WORLD_SIZE; a program that joins a ringmaster job after a re-formation (a
# replacement under on_failure replace, or every program after a restart)
# has the agent's launch index as RANK and a store host that may be gone.
# The backend needs no store in a session (its group is the session's
# communicator), so such a program's init_process_group("ringmaster") joins
# the session first and takes the rank and world it was given, with the
# store elastic.TorchState uses for the same purpose (_ReformedStore: no
# rendezvous, the session formed the group). The first generation keeps
# torch's rendezvous unchanged.
_dist_init = dist.init_process_group


def _rm_init_process_group(*a, **k):
    import inspect
    import os
    b = inspect.signature(_dist_init).bind(*a, **k).arguments
    if (str(b.get("backend") or "").lower() == "ringmaster" and b.get("store") is None
            and b.get("init_method") is None and os.environ.get("RINGMASTER_COORDINATOR")
            and os.environ.get("RINGMASTER_JOB")):
        if not _rm.is_initialized():
            _rm.init()
        if _rm.in_session() and _rm.generation() > 1:
            from .elastic import _ReformedStore
            b.update(store=_ReformedStore(_rm.size()), rank=_rm.rank(),
                     world_size=_rm.size())
            return _dist_init(**b)
    return _dist_init(*a, **k)


_rm_init_process_group.__doc__ = _dist_init.__doc__
dist.init_process_group = _rm_init_process_group
dist.distributed_c10d.init_process_group = _rm_init_process_group


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
# Cost: one copy of the gradient in and one out per step; nothing overlaps
# with the backward pass, as nothing does on this synchronous backend. A
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


def _rm_redo_step(ddp, combine, flat):
    """combine(flat) (the step's secure sum, aggregation or gated average),
    redone over the survivors when a member is lost before it completed (see
    SECURE REDO above; not for a model held by elastic.TorchState); JobEnded
    when the job ended instead (on_failure fail, or too few members)."""
    keep = flat.clone()
    while True:
        try:
            return combine(flat)
        except (_errors.PeerLost, _errors.Reconfigured, _errors.Timeout):
            if getattr(ddp, "_rm_elastic", False):
                raise
            _rm.reform()
            flat.copy_(keep)


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
    for dt, gs in by_dt.items():
        flat = torch.cat([g.reshape(-1) for g in gs]) if len(gs) > 1 else gs[0].reshape(-1).clone()
        if ddp._rm_secure:
            info = _rm_redo_step(ddp, lambda f: _rm.secure_allreduce(f, "avg"), flat)
        elif ddp._rm_agg is None:  # the straggler policy's gated average
            ddp.rm_contributors = _rm_redo_step(ddp, _rm.allreduce_gradients, flat)
        else:
            _, ex = _rm_redo_step(ddp, lambda f: _rm.aggregate(f, info=True, **ddp._rm_agg),
                                  flat)
            excluded.update(ex)
        off = 0
        for g in gs:
            k = g.numel()
            g.copy_(flat[off:off + k].view_as(g))
            off += k
    ddp.rm_excluded = sorted(excluded)
    if info is not None:
        ddp.rm_secure_info = info
    for _, _, buf, fut in pend:
        fut.set_result(buf)


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
        ddp.process_group.allreduce([t])  # synchronous: the Work is already done
        fut = torch.futures.Future()
        fut.set_result(t)
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


def _rm_default_group():
    try:
        return dist.distributed_c10d._get_default_group()
    except RuntimeError:
        return None


def _rm_ddp_init(self, module, *a, **k):
    _ddp_init(self, module, *a, **k)
    self._rm_ddp_args = (a, dict(k))  # elastic.TorchState builds it again with them
    if isinstance(getattr(self, "process_group", None), ProcessGroupRingmaster):
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


# ---- Horovod-style helpers ---------------------------------------------------
def _tensors_of(params):
    if isinstance(params, dict):
        return [params[k] for k in sorted(params)]
    out = []
    for p in params:
        out.append(p[1] if isinstance(p, tuple) else p)
    return out


def _grouped(tensors, bucket_bytes):
    """Buckets of same-dtype tensors, each up to bucket_bytes, in order."""
    buckets, cur, cur_dt, cur_b = [], [], None, 0
    for t in tensors:
        b = t.numel() * t.element_size()
        if cur and (t.dtype != cur_dt or cur_b + b > bucket_bytes):
            buckets.append(cur)
            cur, cur_b = [], 0
        cur.append(t)
        cur_dt = t.dtype
        cur_b += b
    if cur:
        buckets.append(cur)
    return buckets


def _unflatten(flat, tensors):
    """Copy the consecutive pieces of flat back into tensors."""
    off = 0
    for t in tensors:
        k = t.numel()
        t.copy_(flat[off:off + k].view_as(t))
        off += k


def _bucketed(tensors, bucket_bytes, fn):
    """fn(buffer) in place on each bucket: the tensor itself when alone and
    contiguous, else a flat copy written back after."""
    for bucket in _grouped(tensors, bucket_bytes):
        if len(bucket) == 1 and bucket[0].is_contiguous():
            fn(bucket[0])
            continue
        flat = torch.cat([t.reshape(-1) for t in bucket])
        fn(flat)
        _unflatten(flat, bucket)


@torch.no_grad()
def broadcast_parameters(params, root_rank=0, bucket_bytes=64 << 20):
    """Broadcast a state_dict, named_parameters() or a list of tensors in
    place from root_rank (coalesced into few large broadcasts)."""
    ts = [t.data if isinstance(t, torch.nn.Parameter) else t for t in _tensors_of(params)]
    ts = [t for t in ts if t.numel()]
    _bucketed(ts, bucket_bytes, lambda b: _rm.broadcast(b, root_rank))


def broadcast_object(obj, root_rank=0):
    return _rm.broadcast_object(obj, root_rank)


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Make every rank's optimizer state (and hyper-parameters) root_rank's.
    The state dict travels pickled (tensors included); ranks then
    load_state_dict it."""
    sd = optimizer.state_dict() if _rm.rank() == root_rank else None
    sd = _rm.broadcast_object(sd, root_rank)
    if _rm.rank() != root_rank:
        optimizer.load_state_dict(sd)


@torch.no_grad()
def allreduce_tensors(tensors, op="avg", bucket_bytes=16 << 20, straggler_step=False):
    """All-reduce a list of tensors in place, flattened into buckets."""
    tensors = list(tensors)
    if straggler_step:
        flat = torch.cat([t.reshape(-1) for t in tensors]) if len(tensors) > 1 else None
        buf = flat if flat is not None else tensors[0]
        n = _rm.allreduce_gradients(buf)
        if flat is not None:
            _unflatten(flat, tensors)
        return n
    _bucketed(tensors, bucket_bytes, lambda b: _rm.allreduce(b, op))
    return _rm.size()


class _DistributedOptimizer:
    """Methods mixed into a dynamic subclass of the user's optimizer class."""

    def _rm_setup(self, named_parameters, op, bucket_bytes, straggler_policy,
                  aggregation=None):
        params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            names = [n for n, _ in named]
            dup = {n for n in names if names.count(n) > 1}
            if dup:
                raise ValueError("DistributedOptimizer: duplicate parameter names %s"
                                 % sorted(dup))
            by_id = {id(p): n for n, p in named}
            missing = [i for i, p in enumerate(params) if id(p) not in by_id]
            if missing:
                raise ValueError("DistributedOptimizer: named_parameters lacks %d of the "
                                 "optimizer's parameters" % len(missing))
            self._rm_names = [by_id[id(p)] for p in params]
        self._rm_params = [p for p in params if p.requires_grad]
        self._rm_op = op
        self._rm_bucket_bytes = bucket_bytes
        if straggler_policy is None:
            pol = _rm.spec("straggler_policy") if _rm.in_session() else None
            straggler_policy = pol not in (None, "", "none")
        self._rm_straggler = straggler_policy
        if aggregation is None:
            aggregation = _rm.aggregation_spec() if _rm.in_session() else None
        elif isinstance(aggregation, str):
            aggregation = {"method": aggregation}
        elif aggregation is False:
            aggregation = None
        if aggregation is not None:
            aggregation = dict(aggregation)
            known = {"method", "f", "m", "clip_norm", "tau", "iterations"}
            bad = sorted(set(aggregation) - known)
            if bad:
                raise ValueError("DistributedOptimizer: unknown aggregation keys %s (%s)"
                                 % (bad, " ".join(sorted(known))))
            aggregation.setdefault("method", "mean")
            aggregation.setdefault("f", 0)
            if straggler_policy:
                raise ValueError("DistributedOptimizer: aggregation %r cannot be combined "
                                 "with a straggler policy (it leaves gradients out, which "
                                 "a robust method cannot tell from attacks)"
                                 % aggregation["method"])
            if op != "avg":
                raise ValueError("DistributedOptimizer: aggregation needs op 'avg'")
            _rm._agg_config(aggregation["method"], aggregation.get("f", 0),
                            aggregation.get("m", 0), aggregation.get("clip_norm", 0.0),
                            aggregation.get("tau", 0.0), aggregation.get("iterations", 0))
        self._rm_agg = aggregation
        # secure aggregation (issue 13): the job's spec decides; the whole
        # flattened gradient is one secure sum (its clip sees all of it)
        self._rm_secure = _rm.secure()
        if self._rm_secure and (aggregation is not None or straggler_policy or op != "avg"):
            raise ValueError("DistributedOptimizer: the job's secure_aggregation needs "
                             "op 'avg', no aggregation method and no straggler policy")
        self.secure_info = None
        self.excluded_ranks = []
        self._rm_synced = False
        self._rm_plan = None

    @torch.no_grad()
    def synchronize(self):
        """Average the gradients over the ranks now (in place)."""
        ps = self._rm_params
        for p in ps:  # a rank without a gradient contributes zeros
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in ps]
        if self._rm_secure:
            if any(g.dtype != torch.float32 for g in grads):
                raise TypeError("DistributedOptimizer: secure aggregation sums float32 "
                                "gradients")
            flat = torch.cat([g.reshape(-1) for g in grads]).contiguous()
            self.secure_info = _rm.secure_allreduce(flat, "avg")
            _unflatten(flat, grads)
        elif self._rm_agg is not None:
            self._rm_aggregate(grads)
        elif self._rm_straggler:
            allreduce_tensors(grads, "avg", straggler_step=True)
        else:
            # persistent flat buffers, one per bucket: no allocation per step
            if self._rm_plan is None or any(
                    g.dtype != d for g, d in zip(grads, self._rm_plan_dtypes)):
                self._rm_plan = []
                i = 0
                for bucket in _grouped(grads, self._rm_bucket_bytes):
                    n = sum(g.numel() for g in bucket)
                    self._rm_plan.append((i, len(bucket),
                                          torch.empty(n, dtype=bucket[0].dtype)))
                    i += len(bucket)
                self._rm_plan_dtypes = [g.dtype for g in grads]
            op = self._rm_op
            for start, count, flat in self._rm_plan:
                bucket = grads[start:start + count]
                if count == 1 and bucket[0].is_contiguous():
                    _rm.allreduce(bucket[0], op)
                    continue
                off = 0
                for g in bucket:
                    k = g.numel()
                    flat[off:off + k].copy_(g.reshape(-1))
                    off += k
                _rm.allreduce(flat, op)
                off = 0
                for g in bucket:
                    k = g.numel()
                    g.copy_(flat[off:off + k].view_as(g))
                    off += k
        self._rm_synced = True

    def _rm_aggregate(self, grads):
        # ONE flat vector per dtype: a robust method (Krum's distances,
        # clip_norm's norm) must see the whole gradient, not buckets of it
        by_dt = {}
        for g in grads:
            by_dt.setdefault(g.dtype, []).append(g)
        flats = getattr(self, "_rm_agg_flat", None) or {}
        excluded = set()
        for dt, gs in by_dt.items():
            n = sum(g.numel() for g in gs)
            flat = flats.get(dt)
            if flat is None or flat.numel() != n:
                flat = flats[dt] = torch.empty(n, dtype=dt)
            off = 0
            for g in gs:
                k = g.numel()
                flat[off:off + k].copy_(g.reshape(-1))
                off += k
            _, ex = _rm.aggregate(flat, info=True, **self._rm_agg)
            excluded.update(ex)
            off = 0
            for g in gs:
                k = g.numel()
                g.copy_(flat[off:off + k].view_as(g))
                off += k
        self._rm_agg_flat = flats
        self.excluded_ranks = sorted(excluded)

    def skip_synchronize(self):
        """``with opt.skip_synchronize(): opt.step()`` after calling
        synchronize() yourself (e.g. to clip the averaged gradients)."""
        opt = self

        class _Skip:
            def __enter__(self):
                opt._rm_skip = True

            def __exit__(self, *a):
                opt._rm_skip = False
        return _Skip()

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not getattr(self, "_rm_skip", False):
            self.synchronize()
        self._rm_synced = False
        self._rm_base.step(self)
        return loss


def DistributedOptimizer(optimizer, named_parameters=None, op="avg",
                         bucket_bytes=16 << 20, straggler_policy=None, aggregation=None):
    """Wrap a torch optimizer so that step() first averages the gradients
    over all ranks (op "avg", or "sum"), flattened into buckets of up to
    bucket_bytes. The returned object is an instance of a subclass of the
    optimizer's class sharing its state (isinstance and lr schedulers keep
    working). In a job with a straggler policy ("backup"/"deadline") the
    gradients go in one rm_session_allreduce_step call instead.

    aggregation: combine the gradients by rm_aggregate instead of the
    average: a method name or a dict of ringmaster.aggregate's keywords
    ({"method": "krum", "f": 2, "clip_norm": 5.0, ...}), applied to the
    whole flattened gradient (one vector per dtype). None (the default)
    takes the job spec's "aggregation" in a session (plain average when it
    is mean without clipping), False forces the plain average. Not with a
    straggler policy. After step(), ``.excluded_ranks`` lists the ranks the
    last aggregation excluded or down-weighted.

    In a job with "secure_aggregation" the whole flattened float32 gradient
    is averaged by ringmaster.secure_allreduce instead (clipped, masked; no
    worker sees another's gradient); ``.secure_info`` holds the last call's
    figures. It needs op "avg", no aggregation and no straggler policy."""
    base = optimizer.__class__
    cls = type(base.__name__, (base,), {k: v for k, v in _DistributedOptimizer.__dict__.items()
                                        if not k.startswith("__")})
    cls._rm_base = base
    new = cls.__new__(cls)
    new.__dict__.update(optimizer.__dict__)
    new._rm_setup(named_parameters, op, bucket_bytes, straggler_policy, aggregation)
    return new
