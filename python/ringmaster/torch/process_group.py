"""process_group.py - ProcessGroupRingmaster, the "ringmaster" torch.distributed
process group in Python: the backend where the native extension is not used,
and each native group's twin where it is (THE NATIVE BACKEND, _native_load.py).

THE PROCESS GROUP. Asynchronous, as gloo's and NCCL's: every group has ONE
worker thread (_work.py: started at its first collective, a daemon named
"ringmaster-pg <label>") that owns the group's communicator (libringmaster
takes one thread at a time per communicator) and a FIFO queue of closures.

A collective, in the caller's thread: checks its arguments (a ValueError
raises there, at once, on every rank alike, before anything moves: bad
ops, dtypes, roots, splits), checks the group is alive (Reconfigured,
Aborted), takes its sequence number and enqueues, under one lock, so that
numbers follow the queue; it returns a Work at once (WHICH WORK, _work.py,
says which). The worker runs the closures in call order (so every rank runs
the same collectives in the same order, as the C library needs) and
completes each Work's Future with its tensors (set_result) or fails it
(set_exception). ctypes drops the GIL during the C calls, so the caller
(DDP's backward, autograd) runs on meanwhile. TENSOR OWNERSHIP: the queued
closure holds the caller's tensors (and any staging copies) until it has
run; the caller must not touch them before the Work completes (torch's rule
for async_op=True). What a collective does with the communicator (the
dtype plans, the all-to-all with splits) is in _ops.py.

Failures: the worker re-raises a libringmaster failure as the same
ringmaster error class (elastic code catches MembershipError) with words
naming the call, its number, the group, the peer the library names and the
status, sets ringmaster.last_exception to it if it is the group's first
failure since its last success (elastic finds a failure that DDP's reducer
wrapped by its words; DDP raises its first bucket's) and fails the Work's
Future with it.
A failure is sticky in the C library and closes the links with ABORT
frames: the calls queued behind it fail at once too, never hang, and the
other ranks fail at once (RM_ERR_ABORTED / RM_ERR_PEER_LOST) or on their
own deadline.

Timeouts: the timeout of init_process_group / new_group (torch's default,
30 min, when none is given) is the communicator's deadline: a wait that
sees no progress from the peer it needs for that long fails with
RM_ERR_TIMEOUT. An option's own timeout (torch passes one in opts.timeout
where the caller gave one) bounds that call only (set and restored by the
worker around it). Every call has a sequence number in its group (1, 2,
...: the same on every rank, since all call the same collectives in the
same order). So every wait on a Work ends: the worker's C calls have these
deadlines.

Stopping: dist.destroy_process_group (patched in _groups.py; also what
elastic.TorchState calls before it re-creates the groups) and the group's
__del__ stop its worker: calls queued and not started fail with
RM_ERR_ABORTED, the running one is given the group's timeout to end, then
the communicator is aborted (rm_comm_abort, which ends its waits) and the
thread joined with a deadline; a sub-group's communicator is destroyed
after. At interpreter exit the live workers are stopped too (5 s for a
running call), before ringmaster's own exit hook closes the communicator
(_work.py, STOPPING).

RINGMASTER_TORCH_SYNC=1 (read when a group is made) keeps the former
synchronous path for that group: each call runs in the caller under a
lock and returns a completed Work (bench/torch/bench_torch.py compares the
two; tests/python show that DDP then does not overlap).

Point-to-point (send, recv) is p2p.py's: its own communicator, no queue
behind the collectives.
Beside their code: SUB-GROUPS IN A JOB (a group's communicators tied to
the session, in __init__) and ROOTED STAGING (gather and scatter's
buffer at the root).
"""
import os
import sys
import threading

import torch
import torch.distributed as dist

import ringmaster as _rm
from ringmaster import errors as _errors

from . import p2p as _p2p
from ._ops import (_alltoallv_rows, _as_list, _done, _gathered, _op_of, _plan,
                   _reduce_one, _reduce_scatter_flat, _timeout_ms)
from ._work import _Work, _Worker


def _sync_env():
    return os.environ.get("RINGMASTER_TORCH_SYNC", "").strip() not in ("", "0")


# callers whose Work comes back to Python (WHICH WORK)
_ASYNC_CALLERS = ("torch.distributed.distributed_c10d", "ringmaster.torch.ddp")


def _python_caller():
    """Whether the collective was called from torch.distributed's Python
    API or this package's DDP hook (WHICH WORK): the first frame outside
    this module."""
    f = sys._getframe(2)
    while f is not None and f.f_globals.get("__name__") == __name__:
        f = f.f_back
    return f is not None and f.f_globals.get("__name__") in _ASYNC_CALLERS


class ProcessGroupRingmaster(dist.ProcessGroup):
    """torch.distributed process group over one ringmaster Communicator."""
    _P2PWork = _p2p.make_work_class(_Work)

    def __init__(self, rank, size, comm, timeout=None, store=None, label="default group",
                 owned=False, native=False):
        super().__init__(rank, size)
        # native: this object is a native group's twin (THE NATIVE BACKEND);
        # the native group (a weak reference) runs its queued calls
        self._native_ref = None
        self._comm = comm
        self._generation = comm.generation
        self._ptr = comm.ptr
        self._lock = threading.Lock()
        self._timeout_ms = _timeout_ms(timeout if timeout is not None
                                       else dist.default_pg_timeout)
        self._store = store
        self._label = label
        self._owned = owned
        self._seq = 0
        self._mb_seq = 0
        # the epoch of the default groups made so far (CREATING GROUPS):
        # _groups.py makes groups of this class, so it is imported here
        from . import _groups
        self._epoch = _groups._epoch
        comm.set_timeout(self._timeout_ms)
        self._worker = _Worker(label)
        self._failing = None  # the first failure since the last success (_failed)
        self._sync = _sync_env()
        # point-to-point (p2p.py): its own communicator, requests and waiter
        self._p2p_seq = 0
        self._p2p_open = set()
        self._p2p_waiter = _Worker(label + " p2p")
        self._p2p = None
        self._p2p_why = "not made"
        self._closed = False
        self._stage = None  # gather / scatter staging at the root (ROOTED STAGING)
        self._p2p, self._p2p_why = _p2p.lane(comm)
        # SUB-GROUPS IN A JOB: a communicator made here beside the session's
        # (a sub-group's, the point-to-point lane) is tied to the session,
        # which aborts it when the coordinator re-forms the job: its calls
        # then fail with Reconfigured at once, where a wait on a member that
        # left (or is busy recovering) would last the group's whole timeout.
        # A member that failed first closes its links before the coordinator
        # decides: that PEER_LOST waits for the verdict (_verdict), which
        # replaces it on the communicator too
        self._attached = []
        comm._watchers.add(self)
        for c in ([comm] if owned else []) + ([self._p2p] if self._p2p else []):
            s = _attach(c)
            if s:
                self._attached.append((s, c.ptr))

    def __del__(self):
        try:
            self._shutdown()
        except Exception:
            pass

    def _shutdown(self):
        """Stop the worker (THE PROCESS GROUP, Stopping); a sub-group's
        communicator goes with its group (the default group's is the
        module's: the next default group or ringmaster.finalize closes it)."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._stage = None
        f = _rm._lib.session_fn("rm_session_detach")
        for s, ptr in self._attached:
            f(s, ptr)
        self._attached = []
        _p2p.close(self)
        live = self._comm.ptr == self._ptr
        n = self._native_group()
        if n is not None:
            gone = n._shutdown(int(self._timeout_ms), live)
        else:
            gone = self._worker.stop(self._timeout_ms / 1000.0, self._comm if live else None)
        if self._owned and live and gone:
            self._comm.destroy()

    def _native_group(self):
        r = self._native_ref
        return r() if r is not None else None

    # what the native group asks of its twin (native/module.cpp)
    def _comm_changed(self):
        """The communicator was replaced or closed: the native group stops
        using it (its calls then come here, and _c raises)."""
        n = self._native_group()
        if n is not None and (self._comm.ptr != self._ptr
                              or self._comm.generation != self._generation):
            n._invalidate()

    def _native_failed(self, st, call, seq, ms):
        return self._failed(self._comm.error(st, "rm_" + call.lstrip("_")), call, seq, ms)

    def _native_stale(self, call, seq):
        try:
            self._c()
        except _errors.RingmasterError as e:
            return e
        return _errors.Aborted("RM_ERR_ABORTED", "ringmaster backend: %s #%d of the %s: the "
                               "group's communicator was closed" % (call, seq, self._label))

    def _native_p2p_failed(self, st, words, peer, call, what, seq):
        """A native send / recv that failed (words: the request's; None: its
        post failed, the lane's last error): p2p.py's exception."""
        if words is None:
            e = self._p2p.error(st, "rm_" + call)
        else:
            e = _errors.make(st, words, peer if peer >= 0 else None, "rm_" + call)
        return self._failed(e, "%s (%s)" % (call, what), seq, self._timeout_ms)

    def _native_aborted(self, call, seq):
        return _errors.Aborted("RM_ERR_ABORTED", "ringmaster backend: %s #%d of the %s was "
                               "still queued when the process group was destroyed"
                               % (call, seq, self._label))

    # torch 1.13 asks the trampoline for getBackendName
    def getBackendName(self):
        return "ringmaster"

    def name(self):
        return "ringmaster"

    def _c(self):
        c = self._comm
        if c.generation != self._generation or (not c.ptr and c.session):
            raise _errors.Reconfigured(
                "RM_ERR_RECONFIGURED", "this process group was built for generation %d; "
                "the session is at %d: destroy and re-create the process group"
                % (self._generation, c.generation))
        if c.ptr != self._ptr:
            raise _errors.Aborted(
                "RM_ERR_ABORTED", "this process group was destroyed "
                "(dist.destroy_process_group) and its communicator closed")
        return c

    def _exec(self, call, seq, fn, ms):
        """fn(comm) as this group's call #seq, with its own timeout (ms, 0:
        the group's) set around it; a ringmaster failure re-raised naming
        the call (THE PROCESS GROUP)."""
        try:
            c = self._c()
            if ms and ms != self._timeout_ms:
                c.set_timeout(ms)
            try:
                fn(c)
            finally:
                if ms and ms != self._timeout_ms and c.ptr:
                    c.set_timeout(self._timeout_ms)
        except _errors.RingmasterError as e:
            raise self._failed(e, call, seq, ms or self._timeout_ms) from None
        self._failing = None

    def _submit(self, call, fn, opts, result):
        """Queue fn(comm) as the group's next numbered call; its Work (WHICH
        WORK) completes with result. The arguments were checked already."""
        self._c()
        t = getattr(opts, "timeout", None)
        ms = _timeout_ms(t) if t is not None and t.total_seconds() > 0 else 0
        n = self._native_group()
        if n is not None:  # the native group's queue and numbering
            return n._enqueue(call, ms, lambda seq: self._exec(call, seq, fn, ms), result)
        if self._sync or self._worker.in_worker():
            # the synchronous path; or a call made by a Future's callback,
            # which the worker runs: queued, it would wait on itself
            with self._lock:
                self._seq += 1
                self._exec(call, self._seq, fn, ms)
            return _done(result)
        py = _python_caller()
        with self._lock:
            self._seq += 1
            seq = self._seq
            work = _Work(call, seq, self._label)

            def body():
                self._exec(call, seq, fn, ms)
                return result
            self._worker.submit(work, body)
        if py:
            return work
        work._wait_done()
        if work._exc is not None:
            raise work._exc
        return _done(result)

    def _verdict(self, e):
        """A member of a sub-group in a job closed its links (PEER_LOST, or
        ABORTED by a peer's frame): in a job that is most often the
        re-formation seen before the coordinator said so. Wait for its
        verdict (the session's own bound, 8 heartbeat intervals); once it
        came, the communicator carries RM_ERR_RECONFIGURED / JOB_ENDED with
        the first failure in its words (SUB-GROUPS IN A JOB), and that is
        the error. No verdict: the links' own failure stands."""
        if (e.status not in ("RM_ERR_PEER_LOST", "RM_ERR_ABORTED") or self._closed
                or not any(p == self._comm.ptr for _, p in self._attached)):
            return e
        f = _rm._lib.session_fn("rm_session_verdict")
        if f is None:
            return e
        # the first failure waits; the calls queued behind it (sticky) only
        # look, or DDP's buckets would each wait again
        v = f(self._attached[0][0], -1 if self._failing is None else 0)
        if v == 0 or not self._comm.ptr:
            return e
        return self._comm.error(v, e.call)

    def _failed(self, e, call, seq, ms):
        e = self._verdict(e)
        words = e.message or "(no words from the library)"
        if words.startswith(e.status + ": "):
            words = words[len(e.status) + 2:]
        peer = ("waiting for peer rank %d" % e.peer) if e.peer is not None \
            else "peer not known"
        text = ("ringmaster backend: %s #%d of the %s (rank %d of %d, timeout %g s) failed: "
                "%s, %s: %s" % (call, seq, self._label, self.rank(), self.size(), ms / 1000.0,
                                e.status, peer, words))
        err = type(e)(e.status, e.message, e.peer, e.code, e.call)
        err.args = (text,)
        err.operation, err.sequence = call, seq
        # what torch wraps when DDP's reducer (C++) runs the call is this
        # text: ringmaster.torch.elastic finds the failure by the last
        # exception's words in it. The calls queued behind a failure fail
        # too (sticky), but the one a waiter sees first is the first: DDP
        # waits for its buckets in order. So the first failure since the
        # group's last success stays the last exception; its consequences
        # (which the communicator set as the last one) do not replace it.
        if self._failing is None:
            self._failing = err
        _rm.last_exception = self._failing
        return err

    def allreduce(self, tensors, opts=None):
        op, ts = _op_of(opts), _as_list(tensors)
        for t in ts:
            _plan(t.dtype, op, "allreduce")  # refused here, before anything is queued

        def go(c):
            for t in ts:
                _reduce_one(c, t, op, "allreduce")
        return self._submit("allreduce", go, opts, ts)

    def allreduce_coalesced(self, tensors, opts=None):
        tensors = _as_list(tensors)
        op = _op_of(opts)
        if len({t.dtype for t in tensors}) > 1:
            raise ValueError("ringmaster backend: allreduce_coalesced: the tensors must "
                             "have one dtype, got %s" % sorted({str(t.dtype) for t in tensors}))
        if tensors:
            _plan(tensors[0].dtype, op, "allreduce_coalesced")

        def go(c):
            flat = torch._utils._flatten_dense_tensors(tensors)
            _reduce_one(c, flat, op, "allreduce_coalesced")
            for t, s in zip(tensors, torch._utils._unflatten_dense_tensors(flat, tensors)):
                t.copy_(s)
        return self._submit("allreduce_coalesced", go, opts, tensors)

    def _root(self, opts, call):
        root = opts if isinstance(opts, int) else (
            getattr(opts, "rootRank", 0) if opts is not None else 0)
        if not 0 <= root < self.size():
            raise ValueError("ringmaster backend: %s: root rank %d is out of range "
                             "(group of %d)" % (call, root, self.size()))
        return root

    def broadcast(self, tensors, opts=None):
        root, ts = self._root(opts, "broadcast"), _as_list(tensors)

        def go(c):
            for t in ts:
                buf = t if t.is_contiguous() else t.contiguous()
                c.broadcast(buf, root)
                if buf is not t:
                    t.copy_(buf)
        return self._submit("broadcast", go, opts, ts)

    def allgather(self, output_tensors, input_tensors, opts=None):
        outs = [output_tensors] if isinstance(output_tensors[0], torch.Tensor) \
            else output_tensors
        ins = _as_list(input_tensors)

        def go(c):
            for out_list, x in zip(outs, ins):
                buf = _gathered(c, x)
                for r, o in enumerate(out_list):
                    o.copy_(buf[r].view_as(o) if o.shape != buf[r].shape else buf[r])
        return self._submit("allgather", go, opts, outs)

    def _allgather_base(self, output, input, opts=None):
        def go(c):
            if output.is_contiguous():
                c.allgather_into(output, input.contiguous())
            else:
                tmp = torch.empty_like(output, memory_format=torch.contiguous_format)
                c.allgather_into(tmp, input.contiguous())
                output.copy_(tmp)
        return self._submit("allgather", go, opts, [output])

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return self.allgather(output_lists, input_list, opts)

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        op = _op_of(opts)
        outs = _as_list(output_tensors)
        lists = [input_lists] if isinstance(input_lists[0], torch.Tensor) else input_lists
        for out in outs:
            _plan(out.dtype, op, "reduce_scatter")

        def go(c):
            for out, ins in zip(outs, lists):
                flat = torch.cat([t.reshape(-1) for t in ins])
                res = torch.empty(out.numel(), dtype=out.dtype)
                _reduce_scatter_flat(c, res, flat, op, "reduce_scatter")
                out.copy_(res.view_as(out))
        return self._submit("reduce_scatter", go, opts, outs)

    def _reduce_scatter_base(self, output, input, opts=None):
        op = _op_of(opts)
        _plan(output.dtype, op, "reduce_scatter")

        def go(c):
            res = output if output.is_contiguous() else torch.empty_like(
                output, memory_format=torch.contiguous_format)
            _reduce_scatter_flat(c, res.view(-1), input.contiguous().view(-1), op,
                                 "reduce_scatter")
            if res is not output:
                output.copy_(res)
        return self._submit("reduce_scatter", go, opts, [output])

    # ALL-TO-ALL WITH SPLITS: _ops.py
    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        w = self.size()
        even = not output_split_sizes and not input_split_sizes

        def splits(given, t, which):
            if not given:
                if t.dim() == 0 or t.shape[0] % w:
                    raise ValueError("ringmaster backend: all_to_all_single: %s has %s rows, "
                                     "not a multiple of the group's %d ranks; pass %s_split_"
                                     "sizes" % (which, t.shape[0] if t.dim() else 0, w, which))
                return [t.shape[0] // w] * w
            given = [int(s) for s in given]
            if len(given) != w or min(given) < 0 or sum(given) != t.shape[0]:
                raise ValueError("ringmaster backend: all_to_all_single: %s_split_sizes %s "
                                 "must be %d counts >= 0 summing to its %d rows"
                                 % (which, given, w, t.shape[0]))
            return given

        err = None
        try:
            if output.dtype != input.dtype:
                raise ValueError("ringmaster backend: all_to_all_single: output is %s, input %s"
                                 % (output.dtype, input.dtype))
            ins, outs = splits(input_split_sizes, input, "input"), splits(
                output_split_sizes, output, "output")
            if input.dim() and output.dim() and input[0:0].shape[1:] != output[0:0].shape[1:]:
                raise ValueError("ringmaster backend: all_to_all_single: rows differ: input "
                                 "%s, output %s" % (tuple(input.shape), tuple(output.shape)))
        except ValueError as e:
            if even:  # no agreement step to carry it: raised here alone
                raise
            err, ins, outs = e, [0] * w, [0] * w

        def go(c):
            if err is not None:
                _alltoallv_rows(c, None, None, outs, ins, "all_to_all_single", err)
            res = output if output.is_contiguous() else torch.empty_like(
                output, memory_format=torch.contiguous_format)
            x = input.contiguous()
            if even and ins == outs:
                c.alltoall_into(res, x)
            else:
                rows_in = x.reshape(x.shape[0], -1).view(torch.uint8) if x.numel() else \
                    torch.empty((x.shape[0], 0), dtype=torch.uint8)
                rows_out = res.reshape(res.shape[0], -1).view(torch.uint8) if res.numel() \
                    else torch.empty((res.shape[0], 0), dtype=torch.uint8)
                rb = x.element_size() * x.shape[1:].numel() if x.dim() else 0
                _alltoallv_rows(c, rows_out, rows_in, outs, ins, "all_to_all_single",
                                row_bytes=rb)
            if res is not output:
                output.copy_(res)
        return self._submit("all_to_all_single", go, opts, [output])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        w = self.size()
        if len(input_tensors) != w or len(output_tensors) != w:
            raise ValueError("ringmaster backend: all_to_all needs %d input and %d output "
                             "tensors, got %d and %d" % (w, w, len(input_tensors),
                                                         len(output_tensors)))
        ins = [t.contiguous() for t in input_tensors]
        in_b = [t.numel() * t.element_size() for t in ins]
        out_b = [t.numel() * t.element_size() for t in output_tensors]

        def go(c):
            flat = torch.cat([t.reshape(-1).view(torch.uint8) for t in ins])
            res = torch.empty(sum(out_b), dtype=torch.uint8)
            if len(set(in_b)) == 1 and in_b == out_b:
                c.alltoall_into(res, flat)
            else:
                _alltoallv_rows(c, res.view(-1, 1), flat.view(-1, 1), out_b, in_b,
                                "all_to_all", row_bytes=1)
            off = 0
            for o, k in zip(output_tensors, out_b):
                o.copy_(res[off:off + k].view(o.dtype).view_as(o))
                off += k
        return self._submit("all_to_all", go, opts, list(output_tensors))

    def reduce(self, tensors, opts=None):
        op, ts = _op_of(opts), _as_list(tensors)
        root = self._root(opts, "reduce")
        for t in ts:
            _plan(t.dtype, op, "reduce")

        def go(c):
            for t in ts:
                _reduce_one(c, t, op, "reduce", root)
        return self._submit("reduce", go, opts, ts)

    # ROOTED STAGING. rm_gather and rm_scatter take the root's world blocks
    # as one buffer, and torch gives the root a list of tensors: the root
    # stages them through a host buffer of world x block bytes. That buffer
    # is kept between calls (self._stage, grown on demand, dropped when the
    # group stops; only the group's calls, one at a time, touch it). A
    # fresh one per call was a fresh mmap (glibc maps blocks of 32 MiB and
    # more) whose pages faulted in on every call: 8,193 faults for 2 x 16
    # MiB, 85-88 ms on the 2-vCPU VM where the C call itself takes 2.4 ms
    # (bench/results/2026-12-07-gather-scatter.md; gloo's gather, which
    # allocates its flat buffer per call, pays the same).
    def _staged(self, nbytes, dtype, shape):
        """The staging buffer as a (shape) tensor of dtype, nbytes long."""
        if self._stage is None or self._stage.numel() < nbytes:
            self._stage = None  # the old one goes before the new one is made
            self._stage = torch.empty(nbytes, dtype=torch.uint8)
        return self._stage[:nbytes].view(dtype).view(shape)

    def gather(self, output_lists, input_tensors, opts=None):
        root = self._root(opts, "gather")

        def go(c):
            for i, x in enumerate(_as_list(input_tensors)):
                if not c.has_rooted():  # an older library: every rank gets all
                    buf = _gathered(c, x)
                else:  # only the root receives (rm_gather)
                    buf = self._staged(c.world * x.numel() * x.element_size(), x.dtype,
                                       (c.world,) + tuple(x.shape)) \
                        if c.rank == root else None
                    c.gather_into(buf, x.contiguous(), root)
                if c.rank == root:
                    for r, o in enumerate(output_lists[i]):
                        o.copy_(buf[r])
        return self._submit("gather", go, opts, _as_list(input_tensors))

    def scatter(self, output_tensors, input_lists, opts=None):
        root = self._root(opts, "scatter")

        def go(c):
            for i, out in enumerate(_as_list(output_tensors)):
                if c.has_rooted():  # only the root sends (rm_scatter)
                    res = out if out.is_contiguous() else torch.empty_like(
                        out, memory_format=torch.contiguous_format)
                    src = None
                    if c.rank == root:
                        ins = input_lists[i]
                        if len(ins) == c.world and all(
                                t.device.type == "cpu" and t.dtype == out.dtype and
                                t.shape == out.shape for t in ins):
                            src = self._staged(c.world * out.numel() * out.element_size(),
                                               out.dtype, (c.world,) + tuple(out.shape))
                            for r, t in enumerate(ins):
                                src[r].copy_(t)
                        else:  # device memory, or pieces unlike out (scatter_into
                            # refuses those that do not add up): stacked as before
                            src = torch.stack([t.contiguous() for t in ins])
                    c.scatter_into(res, src, root)
                    if res is not out:
                        out.copy_(res)
                    continue
                for r in range(c.world):  # an older library: one broadcast per rank
                    piece = (input_lists[i][r].contiguous().clone() if c.rank == root
                             else torch.empty(out.shape, dtype=out.dtype))
                    c.broadcast(piece, root)
                    if r == c.rank:
                        out.copy_(piece)
        return self._submit("scatter", go, opts, _as_list(output_tensors))

    def barrier(self, opts=None):
        def go(c):
            # the data plane's barrier: torch's barrier is a collective of
            # this group; ringmaster.barrier(name) is the coordinator's.
            st = _rm._c_barrier(c.ptr)
            if st:
                raise c.error(st, "rm_barrier")
        return self._submit("barrier", go, opts, [])

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        t = getattr(opts, "timeout", None) if opts is not None else None
        if t is not None and t.total_seconds() <= 0:  # torch's "unset"
            t = None
        from ._groups import monitored_barrier  # (_groups imports this module)
        monitored_barrier(self, t, wait_all_ranks)
        return _done([])

    # point-to-point: p2p.py (its own communicator; no queue behind the
    # collectives). torch's isend/irecv/batch_isend_irecv come through these.
    def send(self, tensors, dstRank, tag=0):
        return _p2p.post(self, "send", tensors, dstRank, tag)

    def recv(self, tensors, srcRank, tag=0):
        return _p2p.post(self, "recv", tensors, srcRank, tag)

    def recv_anysource(self, tensors, tag=0):
        return _p2p.post(self, "recv_anysource", tensors, -1, tag)


def _attach(comm):
    """Tie comm to this process's session (SUB-GROUPS IN A JOB); the
    session pointer, or None outside a job."""
    d = _rm.default_communicator()
    f = _rm._lib.session_fn("rm_session_attach")
    if not d.session or f is None or comm.ptr == d.ptr:
        return None
    st = f(d.session, comm.ptr)
    if st:
        raise comm.error(st, "rm_session_attach")
    return d.session
