"""communicator.py - ``Communicator``: one group of processes, a plain
communicator (``rm_comm_init``) or the current generation of a session; the
package's module-level functions use the default one that ``init()`` builds.
Every collective works in place on the caller's buffer (``_buffers``).
"""
import ctypes
import sys
import threading
import weakref

from . import _lib
from . import errors
from ._buffers import *  # noqa: F401,F403  (the codes and buffer helpers)
from ._buffers import (_buf, _buf4, _nbytes, _dtype_err, _np, _ndarray, _resolve_torch,  # noqa: F401
                       _c_allreduce, _c_allreduce_ex, _c_broadcast, _c_allgather,
                       _c_reduce_scatter, _c_alltoall, _c_reduce, _c_barrier)

class Communicator:
    """One group of processes: a plain communicator (rm_comm_init) or the
    current generation of a session. The module-level functions use the
    default one that init() builds."""

    def __init__(self):
        # process groups over this communicator, told when ptr changes
        # (torch/process_group.py: a native group stops using a replaced one)
        self._watchers = weakref.WeakSet()
        self.ptr = None       # rm_comm_t*
        self.session = None   # rm_session_t* (int) or None
        self.endpoint = None  # rm_endpoint_t* we own
        self.rank = -1
        self.world = 0
        self.generation = 0
        self.job_id = 0
        self.start_step = 0
        self.step = 0
        self._barrier_seq = 0
        self._stream = None   # the cudaStream_t last set on ptr
        self.lock = threading.Lock()

    @property
    def ptr(self):
        return self._ptr

    @ptr.setter
    def ptr(self, value):
        old, self._ptr = getattr(self, "_ptr", None), value
        if value != old:
            for g in list(self._watchers):
                g._comm_changed()

    # -- errors
    def error(self, st, call):
        msg, peer = "", None
        if self.ptr:
            msg = (_lib.rm_comm_last_error(self.ptr) or b"").decode(errors="replace")
            p = _lib.rm_comm_failed_peer(self.ptr)
            peer = p if p >= 0 else None
        if self.session:
            f = _lib.session_fn("rm_session_last_error")
            smsg = (f(self.session) or b"").decode(errors="replace") if f else ""
            if smsg and smsg not in msg:
                msg = smsg if not msg else msg + "; " + smsg
        e = errors.make(st, msg, peer, call)
        # ringmaster.last_exception: what the package exports (torch's
        # wrapped errors are matched against it)
        sys.modules[__package__].last_exception = e
        return e

    def _need(self):
        if not self.ptr:
            raise errors.make(errors.CODES.get("RM_ERR_INVALID_ARG", 1),
                              "ringmaster is not initialized: call ringmaster.init()")

    def refresh(self):
        s = self.session
        f = _lib.session_fn
        self.ptr = f("rm_session_comm")(s)
        self.rank = f("rm_session_rank")(s)
        self.world = f("rm_session_world")(s)
        self.generation = f("rm_session_generation")(s)
        self.job_id = f("rm_session_job_id")(s)
        self.start_step = f("rm_session_start_step")(s)
        self.step = f("rm_session_step")(s)

    def transport(self, peer):
        """The data-plane transport of the pair (this rank, peer): "shm"
        (one host), "rdma" or "tcp"; None for this rank itself."""
        t = _lib.rm_comm_transport(self.ptr, int(peer))
        return t.decode() if t else None

    def comm_info(self):
        self.rank = _lib.rm_comm_rank(self.ptr)
        self.world = _lib.rm_comm_world(self.ptr)
        self.generation = _lib.rm_comm_generation(self.ptr)

    # -- buffers
    def _dbuf(self, x, writable=True):
        """_buf4 for a collective: a device buffer's stream becomes the one the
        communicator's next collective waits for (rm_comm_set_stream)."""
        p, n, dt, stream = _buf4(x, writable)
        if stream is not None and stream != self._stream and self.ptr:
            f = _lib.session_fn("rm_comm_set_stream")
            if f is None:
                raise TypeError("ringmaster: this libringmaster takes no device buffers")
            f(self.ptr, stream or None)
            self._stream = stream
        return p, n, dt

    # -- collectives
    def allreduce(self, x, op="sum", algorithm=None):
        p, n, dt = self._dbuf(x)
        if dt is None:
            raise _dtype_err(x)
        o = OPS.get(op)
        if o is None:
            raise ValueError("ringmaster: unknown op %r (sum prod min max avg)" % (op,))
        if n:
            if algorithm is None:
                st = _c_allreduce(self.ptr, p, p, n, dt, o)
            else:
                st = _c_allreduce_ex(self.ptr, p, p, n, dt, o, ALGORITHMS[algorithm], None)
            if st:
                raise self.error(st, "rm_allreduce")
        return x

    def aggregate(self, x, cfg, want_info=False):
        """rm_aggregate in place on x with the AggConfig cfg (see the
        module-level aggregate). Returns the excluded ranks (a list) when
        want_info, else None."""
        p, n, dt = _buf(x)
        if dt not in (F32, F64, F16, BF16):
            raise TypeError("ringmaster: aggregate needs a float dtype (f32 f64 f16 bf16), "
                            "got %s" % (x.dtype,))
        self._need()
        check = _lib.session_fn("rm_agg_check")
        why = ctypes.create_string_buffer(256)
        if check(ctypes.byref(cfg), self.world, why, 256):
            raise errors.make(errors.CODES.get("RM_ERR_INVALID_ARG", 1),
                              why.value.decode(errors="replace"), None, "rm_aggregate")
        info = _lib.AggInfo()
        info.struct_size = ctypes.sizeof(info)
        ex = (ctypes.c_uint8 * max(self.world, 1))()
        info.excluded = ctypes.cast(ex, ctypes.POINTER(ctypes.c_uint8))
        if n:
            st = _lib.session_fn("rm_aggregate")(self.ptr, p, p, n, dt, ctypes.byref(cfg),
                                                 ctypes.byref(info))
            if st:
                raise self.error(st, "rm_aggregate")
        return [r for r in range(self.world) if ex[r]] if want_info else None

    def broadcast(self, x, root=0):
        p, n, dt = self._dbuf(x)
        if dt is None:  # any element type: move bytes
            n, dt = _nbytes(x), U8
        if n:
            st = _c_broadcast(self.ptr, p, n, dt, root)
            if st:
                raise self.error(st, "rm_broadcast")
        return x

    def allgather_into(self, out, x):
        p, n, dt = self._dbuf(x, writable=False)
        q, m, dt2 = self._dbuf(out)
        if dt is None or dt2 != dt:
            n, dt = _nbytes(x), U8
            if _nbytes(out) != n * self.world:
                raise ValueError("ringmaster: allgather output must hold world x input")
        elif m != n * self.world:
            raise ValueError("ringmaster: allgather output must hold world x input")
        if n:
            st = _c_allgather(self.ptr, p, q, n, dt)
            if st:
                raise self.error(st, "rm_allgather")
        return out

    def allgather(self, x):
        if type(x) is _ndarray:
            out = _np.empty((self.world,) + x.shape, x.dtype)
        else:
            _resolve_torch()
            out = x.new_empty((self.world,) + tuple(x.shape))
        return self.allgather_into(out, x)

    def reduce_scatter_into(self, out, x, op="sum"):
        p, n, dt = self._dbuf(x, writable=False)
        q, m, dt2 = self._dbuf(out)
        if dt is None or dt2 != dt:
            raise _dtype_err(x)
        if n != m * self.world:
            raise ValueError("ringmaster: reduce_scatter input must hold world x output")
        if m:
            st = _c_reduce_scatter(self.ptr, p, q, m, dt, OPS[op])
            if st:
                raise self.error(st, "rm_reduce_scatter")
        return out

    def reduce_scatter(self, x, op="sum"):
        if x.shape[0] % self.world:
            raise ValueError("ringmaster: reduce_scatter: first dimension %d is not a "
                             "multiple of the world %d" % (x.shape[0], self.world))
        shape = (x.shape[0] // self.world,) + tuple(x.shape[1:])
        if type(x) is _ndarray:
            out = _np.empty(shape, x.dtype)
        else:
            out = x.new_empty(shape)
        return self.reduce_scatter_into(out, x, op)

    def alltoall_into(self, out, x):
        p, n, dt = self._dbuf(x, writable=False)
        q, m, _ = self._dbuf(out)
        nb = _nbytes(x)
        if _nbytes(out) != nb or nb % self.world:
            raise ValueError("ringmaster: alltoall: output must be the input's size, "
                             "a multiple of the world")
        if nb:
            st = _c_alltoall(self.ptr, p, q, nb // self.world, U8)
            if st:
                raise self.error(st, "rm_alltoall")
        return out

    def has_rooted(self):
        """The library has rm_gather, rm_scatter and rm_alltoallv."""
        return _lib.session_fn("rm_alltoallv") is not None

    def gather_into(self, out, x, root=0):
        """Root's out (world x input bytes) gets every rank's x in rank
        order; out is ignored elsewhere (may be None). Only root receives."""
        p, n, _ = self._dbuf(x, writable=False)
        nb = _nbytes(x)
        q = None
        if self.rank == root:
            q, _, _ = self._dbuf(out)
            if _nbytes(out) != nb * self.world:
                raise ValueError("ringmaster: gather: the root's output must hold world x "
                                 "input bytes")
        if nb:
            st = _lib.session_fn("rm_gather")(self.ptr, p, q, nb, U8, root)
            if st:
                raise self.error(st, "rm_gather")
        return out

    def scatter_into(self, out, x, root=0):
        """Rank r's out gets block r of root's x (world x output bytes); x is
        ignored elsewhere (may be None)."""
        q, m, _ = self._dbuf(out)
        nb = _nbytes(out)
        p = None
        if self.rank == root:
            p, _, _ = self._dbuf(x, writable=False)
            if _nbytes(x) != nb * self.world:
                raise ValueError("ringmaster: scatter: the root's input must hold world x "
                                 "output bytes")
        if nb:
            st = _lib.session_fn("rm_scatter")(self.ptr, p, q, nb, U8, root)
            if st:
                raise self.error(st, "rm_scatter")
        return out

    def alltoallv_into(self, out, x, out_bytes, in_bytes):
        """Counted all-to-all in bytes: in_bytes[j] bytes of x (consecutive,
        in rank order) go to rank j; out_bytes[i] bytes from rank i land in
        out, consecutive in rank order. Every pair must agree."""
        w = self.world
        if len(out_bytes) != w or len(in_bytes) != w:
            raise ValueError("ringmaster: alltoallv: %d counts per side expected" % w)
        if sum(in_bytes) > _nbytes(x) or sum(out_bytes) > _nbytes(out):
            raise ValueError("ringmaster: alltoallv: the counts exceed the buffers")
        p, _, _ = self._dbuf(x, writable=False)
        q, _, _ = self._dbuf(out)
        arr = ctypes.c_size_t * w

        def displs(c):
            d, off = [], 0
            for k in c:
                d.append(off)
                off += k
            return arr(*d)
        st = _lib.session_fn("rm_alltoallv")(self.ptr, p, arr(*in_bytes), displs(in_bytes), q,
                                             arr(*out_bytes), displs(out_bytes), U8)
        if st:
            raise self.error(st, "rm_alltoallv")
        return out

    def dup(self):
        """A new Communicator over the same ranks (rm_comm_dup; collective):
        the one point-to-point messages run on. Destroy it separately."""
        self._need()
        f = _lib.session_fn("rm_comm_dup")
        if f is None:
            raise errors.unsupported("%s has no rm_comm_dup" % _lib.path)
        out = ctypes.c_void_p()
        st = f(self.ptr, ctypes.byref(out))
        if st:
            raise self.error(st, "rm_comm_dup")
        d = Communicator()
        d.ptr = out.value
        d.comm_info()
        return d

    def reduce(self, x, op="sum", root=0):
        p, n, dt = self._dbuf(x)
        if dt is None:
            raise _dtype_err(x)
        if n:
            st = _c_reduce(self.ptr, p, p, n, dt, OPS[op], root)
            if st:
                raise self.error(st, "rm_reduce")
        return x

    def barrier(self, name=None, deadline_ms=0):
        if self.session:
            f = _lib.session_fn("rm_session_barrier")
            if name is None:
                self._barrier_seq += 1
                name = "py-barrier-%d" % self._barrier_seq
            st = f(self.session, name.encode(), int(deadline_ms))
            if st:
                raise self.error(st, "rm_session_barrier")
            return
        self._need()
        st = _c_barrier(self.ptr)
        if st:
            raise self.error(st, "rm_barrier")

    def set_timeout(self, timeout_ms):
        """The deadline of every later blocking wait on this communicator
        (rm_comm_set_timeout): the timeout of a torch.distributed group."""
        self._need()
        f = _lib.session_fn("rm_comm_set_timeout")
        if f is None:
            raise errors.unsupported("%s has no rm_comm_set_timeout" % _lib.path)
        st = f(self.ptr, int(timeout_ms))
        if st:
            raise self.error(st, "rm_comm_set_timeout")

    def status(self):
        return _lib.rm_comm_status(self.ptr) if self.ptr else 0

    def abort(self):
        if self.ptr:
            _lib.rm_comm_abort(self.ptr)

    def destroy(self):
        if self.session:
            _lib.session_fn("rm_session_close")(self.session)
        elif self.ptr:
            _lib.rm_comm_destroy(self.ptr)
        if self.endpoint:
            _lib.rm_endpoint_close(self.endpoint)
        self.ptr = self.session = self.endpoint = None
