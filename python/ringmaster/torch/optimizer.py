"""optimizer.py - the Horovod-style API, no torch.distributed needed:
``DistributedOptimizer`` (averages the gradients over the ranks before each
step, or combines them with the job's aggregation), ``broadcast_parameters``,
``broadcast_optimizer_state``, ``broadcast_object`` and
``allreduce_tensors``, all over the default ringmaster communicator.
"""
import torch

import ringmaster as _rm

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


def _flatten_into(flat, tensors):
    """Copy tensors, in order, into the consecutive pieces of flat."""
    off = 0
    for t in tensors:
        k = t.numel()
        flat[off:off + k].copy_(t.reshape(-1))
        off += k


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
        # secure aggregation: the job's spec decides; the whole
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
                _flatten_into(flat, bucket)
                _rm.allreduce(flat, op)
                _unflatten(flat, bucket)
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
            _flatten_into(flat, gs)
            _, ex = _rm.aggregate(flat, info=True, **self._rm_agg)
            excluded.update(ex)
            _unflatten(flat, gs)
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
