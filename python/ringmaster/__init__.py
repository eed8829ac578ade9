"""ringmaster: Python binding of libringmaster (ctypes) and PyTorch integration.

Three ways in:

* In a ringmaster job (``ringmaster run -n 4 -- /usr/bin/python3 train.py``, a
  "command" job): ``ringmaster.init()`` joins the job from the environment the
  agent sets (``RINGMASTER_COORDINATOR``, ``RINGMASTER_JOB``,
  ``RINGMASTER_TOKEN``, ...) through ``rm_session_join_env``: the coordinator
  gives the rank and world, takes step reports, barriers and the final summary,
  and re-forms the group when a member is lost.
* Explicitly: ``init(coordinator="10.0.0.1:7070", job=3, token="...")``.
* Without a coordinator: ``init(rank=r, world=n, peers=["127.0.0.1:p0", ...])``
  builds a plain communicator (``rm_comm_init``); or, with torchrun's variables
  set (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and torch
  importable, ``init()`` exchanges the data-plane addresses through torch's
  TCPStore (the same rendezvous ``dist.init_process_group`` uses).

Collectives work IN PLACE on C-contiguous numpy arrays and CPU torch tensors
(the data pointer goes to C; nothing is copied): ``allreduce``, ``broadcast``,
``aggregate`` (Byzantine-robust: median, trimmed mean, Krum, ...);
``allgather`` returns a new array/tensor of shape ``(world,) + x.shape``.
Errors are exceptions (``ringmaster.errors``): ``PeerLost``, ``Timeout``,
``Reconfigured``, ``JobEnded``, ... carrying ``.status``, ``.message`` and
``.peer``.

Why ctypes: see ``ringmaster._lib``. Use Debian's ``/usr/bin/python3`` (it sees
``python3-numpy`` and ``python3-torch``).
"""
import atexit
import ctypes
import json
import math
import os
import socket
import sys
import threading

from . import _lib
from . import errors
from .errors import (RingmasterError, MembershipError, PeerLost, Timeout,  # noqa: F401
                     Reconfigured, Aborted, StaleGeneration, JobEnded,
                     InvalidArgument, Unsupported, Unavailable, NotFound, Denied,
                     ProtocolError, InternalError)

__version__ = "0.1.0"
library_path = _lib.path

SUM, PROD, MIN, MAX, AVG = 0, 1, 2, 3, 4
OPS = {"sum": SUM, "prod": PROD, "product": PROD, "min": MIN, "max": MAX,
       "avg": AVG, "mean": AVG, SUM: SUM, PROD: PROD, MIN: MIN, MAX: MAX, AVG: AVG}
F32, F64, F16, BF16, I32, I64, U8 = 0, 1, 2, 3, 4, 5, 6
ALGORITHMS = {None: 0, "auto": 0, "ring": 1, "hd": 2, "halving_doubling": 2,
              "butterfly": 3, "tree": 4, "hierarchical": 5, "hier": 5, "nccl": 6,
              0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6}

# ---- dtype tables (filled lazily for torch) --------------------------------
try:
    import numpy as _np
    _ndarray = _np.ndarray
    _NP_DT = {_np.dtype(k): v for k, v in (("float32", F32), ("float64", F64),
                                           ("float16", F16), ("int32", I32),
                                           ("int64", I64), ("uint8", U8))}
except ImportError:  # numpy is optional
    _np = None
    _ndarray = type(None)
    _NP_DT = {}

_torch = None
_Tensor = ()  # isinstance(x, ()) is False until torch is seen
_TORCH_DT = {}


def _resolve_torch():
    global _torch, _Tensor, _TORCH_DT
    t = sys.modules.get("torch")
    if t is None or _torch is not None:
        return
    _torch = t
    _Tensor = t.Tensor
    _TORCH_DT = {t.float32: F32, t.float64: F64, t.float16: F16, t.bfloat16: BF16,
                 t.int32: I32, t.int64: I64, t.uint8: U8}


_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof

# hot-path prototypes as module globals
_c_allreduce = _lib.rm_allreduce
_c_allreduce_ex = _lib.rm_allreduce_ex
_c_broadcast = _lib.rm_broadcast
_c_allgather = _lib.rm_allgather
_c_reduce_scatter = _lib.rm_reduce_scatter
_c_alltoall = _lib.rm_alltoall
_c_reduce = _lib.rm_reduce
_c_barrier = _lib.rm_barrier


# __cuda_array_interface__ typestr -> rm dtype (no standard spelling for bf16)
_CAI_DT = {"<f4": F32, "<f8": F64, "<f2": F16, "<i4": I32, "<i8": I64, "|u1": U8,
           "<u1": U8}


def _cai(x, writable):
    """(pointer, count, dtype, stream) of an object with __cuda_array_interface__
    (version 2 or 3: CuPy, Numba, PyTorch CUDA tensors). The stream is the one
    the producer's work is ordered on (v3 "stream": absent or 1 = the legacy
    default stream, 2 = the per-thread default, else a cudaStream_t)."""
    a = x.__cuda_array_interface__
    shape = tuple(a["shape"])
    n = 1
    for d in shape:
        n *= int(d)
    typestr = a["typestr"]
    itemsize = int(typestr[2:])
    strides = a.get("strides")
    if strides is not None:
        want, acc = [], itemsize
        for d in reversed(shape):
            want.append(acc)
            acc *= int(d)
        if n > 1 and tuple(int(v) for v in strides) != tuple(reversed(want)):
            raise ValueError("ringmaster: device array is not C-contiguous")
    ptr, readonly = a["data"]
    if readonly and writable:
        raise ValueError("ringmaster: device array is read-only")
    st = a.get("stream")
    stream = 0 if st in (None, 1) else int(st)
    return int(ptr or 0), n, _CAI_DT.get(typestr), stream


def _buf4(x, writable=True):
    """(pointer, element count, rm dtype or None, stream) of a contiguous
    buffer: host memory (numpy arrays, CPU tensors; stream None) or device
    memory (CUDA tensors, objects with __cuda_array_interface__; stream: the
    cudaStream_t the collective waits for, 0 = the default stream)."""
    if type(x) is _ndarray:
        if not x.flags.c_contiguous:
            raise ValueError("ringmaster: numpy array is not C-contiguous "
                             "(use numpy.ascontiguousarray and copy back)")
        n = x.size
        if n == 0:
            return 0, 0, _NP_DT.get(x.dtype), None
        if x.flags.writeable:
            p = _addressof(_from_buffer(x))
        elif writable:
            raise ValueError("ringmaster: numpy array is read-only")
        else:
            p = x.ctypes.data
        return p, n, _NP_DT.get(x.dtype), None
    if _torch is None:
        _resolve_torch()
    if isinstance(x, _Tensor):
        if x.layout is not _torch.strided:
            raise TypeError("ringmaster: sparse tensors are not supported")
        if not x.is_contiguous():
            raise ValueError("ringmaster: tensor is not contiguous (use .contiguous() "
                             "and copy back)")
        stream = None
        if x.is_cuda:
            stream = _torch.cuda.current_stream(x.device).cuda_stream
        elif x.device.type != "cpu":
            raise TypeError("ringmaster: tensor on %s; CPU and CUDA tensors are "
                            "supported" % x.device)
        return x.data_ptr(), x.numel(), _TORCH_DT.get(x.dtype), stream
    if _np is not None and isinstance(x, _ndarray):  # subclasses
        return _buf4(x.view(_ndarray), writable)
    if hasattr(x, "__cuda_array_interface__"):
        return _cai(x, writable)
    raise TypeError("ringmaster: expected a numpy.ndarray, a torch.Tensor (CPU or CUDA) "
                    "or a device array (__cuda_array_interface__), got %s" % type(x).__name__)


def _buf(x, writable=True):
    """(pointer, element count, rm dtype or None) of a contiguous HOST buffer
    (the calls that compute on the CPU: aggregation, straggler steps)."""
    p, n, dt, stream = _buf4(x, writable)
    if stream is not None:
        raise TypeError("ringmaster: this call needs host memory (numpy or a CPU "
                        "tensor), not device memory; use .cpu() and copy back")
    return p, n, dt


def _nbytes(x):
    if type(x) is _ndarray or (_np is not None and isinstance(x, _ndarray)):
        return x.nbytes
    if hasattr(x, "numel"):
        return x.numel() * x.element_size()
    p, n, dt, _ = _cai(x, False)
    return n * int(x.__cuda_array_interface__["typestr"][2:])


def _dtype_err(x):
    return TypeError("ringmaster: dtype %s is not supported (f32 f64 f16 bf16 i32 i64 u8)"
                     % (x.dtype,))


# ---- the communicator -------------------------------------------------------
class Communicator:
    """One group of processes: a plain communicator (rm_comm_init) or the
    current generation of a session. The module-level functions use the
    default one that init() builds."""

    def __init__(self):
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
        global last_exception
        last_exception = e
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


last_exception = None
_default = Communicator()
_initialized = False
_finalized = False
_exit_error = None


def _check(st, call, comm=None):
    if st:
        raise (comm or _default).error(st, call)


def open_endpoint(bind):
    ep = ctypes.c_void_p()
    st = _lib.rm_endpoint_open(bind.encode(), ctypes.byref(ep))
    if st:
        raise errors.make(st, "cannot listen on %s" % bind, None, "rm_endpoint_open")
    return ep.value, _lib.rm_endpoint_address(ep.value).decode()


def endpoint_transports(ep):
    """What the endpoint's data plane offers ("shm:<host>/<nonce> tcp"):
    hand every rank's string to comm_from_peers(transports=...)."""
    return _lib.rm_endpoint_transports(ep).decode()


def comm_from_peers(rank, world, peers, endpoint=None, job_id=0, generation=1,
                    timeout_ms=0, connect_timeout_ms=0, algorithm=None, transports=None):
    """A new Communicator from an explicit peer list (rm_comm_init).
    transports: per rank, what endpoint_transports() said there (pairs on one
    host then use shared memory); None = TCP for every pair."""
    if len(peers) != world or not 0 <= rank < world:
        raise ValueError("ringmaster: need world=%d peers and 0 <= rank < world, got %d "
                         "peers, rank %r" % (world, len(peers), rank))
    size = _lib.session_fn("rm_comm_config_size")()
    if size != ctypes.sizeof(_lib.CommConfig):
        raise RingmasterError("RM_ERR_INVALID_ARG", "%s has a %d-byte rm_comm_config_t; "
                              "this package mirrors %d bytes: use matching versions"
                              % (_lib.path, size, ctypes.sizeof(_lib.CommConfig)),
                              call="rm_comm_config_size")
    cfg = _lib.CommConfig()
    _lib.rm_comm_config_init(ctypes.byref(cfg))
    enc = [p.encode() for p in peers]
    arr = (ctypes.c_char_p * world)(*enc)
    cfg.job_id, cfg.generation, cfg.rank, cfg.world = job_id, generation, rank, world
    cfg.peers = arr
    if transports is not None:
        if len(transports) != world:
            raise ValueError("ringmaster: need world=%d transports, got %d"
                             % (world, len(transports)))
        tarr = (ctypes.c_char_p * world)(*[t.encode() for t in transports])
        cfg.transports = tarr
    cfg.endpoint = endpoint
    if timeout_ms:
        cfg.timeout_ms = int(timeout_ms)
    if connect_timeout_ms:
        cfg.connect_timeout_ms = int(connect_timeout_ms)
    if algorithm is not None:
        cfg.algorithm = ALGORITHMS[algorithm]
    out = ctypes.c_void_p()
    st = _lib.rm_comm_init(ctypes.byref(cfg), ctypes.byref(out))
    if st:
        raise errors.make(st, "rank %d of %d: cannot connect to the peers %s"
                          % (rank, world, ",".join(peers)), None, "rm_comm_init")
    c = Communicator()
    c.ptr = out.value
    c.endpoint = endpoint
    c.job_id = job_id
    c.comm_info()
    return c


def _data_host(master_addr):
    a = os.environ.get("RINGMASTER_DATA_ADDR")
    if a:
        return a.rsplit(":", 1)[0]
    if master_addr in ("localhost", "127.0.0.1", "::1") or master_addr.startswith("127."):
        return "127.0.0.1"
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect((master_addr, 9))
        h = s.getsockname()[0]
        s.close()
        return h
    except OSError:
        return "127.0.0.1"


def comm_from_store(store, rank, world, master_addr="127.0.0.1", prefix="ringmaster",
                    timeout_ms=0):
    """Exchange data-plane addresses through a key-value store with set/get
    (torch.distributed's TCPStore / PrefixStore) and build a Communicator."""
    ep, addr = open_endpoint("%s:0" % _data_host(master_addr))
    try:
        store.set("%s/addr/%d" % (prefix, rank), addr)
        store.set("%s/transports/%d" % (prefix, rank), endpoint_transports(ep))
        peers, offers = [], []
        for r in range(world):
            v = store.get("%s/addr/%d" % (prefix, r))
            peers.append(v.decode() if isinstance(v, bytes) else str(v))
            v = store.get("%s/transports/%d" % (prefix, r))
            offers.append(v.decode() if isinstance(v, bytes) else str(v))
        return comm_from_peers(rank, world, peers, endpoint=ep, timeout_ms=timeout_ms,
                               transports=offers)
    except BaseException:
        _lib.rm_endpoint_close(ep)
        raise


def _session_join(coordinator=None, job=None, token=None, **kw):
    if not _lib.has_sessions():
        raise errors.unsupported(
            "%s has no rm_session_join_env: this libringmaster predates the session API"
            % _lib.path)
    f = _lib.session_fn
    out = ctypes.c_void_p()
    err = ctypes.create_string_buffer(1024)
    if coordinator is None and job is None and token is None and not kw:
        st = f("rm_session_join_env")(ctypes.byref(out), err, len(err))
        call = "rm_session_join_env"
    else:
        size = f("rm_session_config_size")()
        cfg = _lib.SessionConfig()
        keep = []

        def s(v):
            if v is None:
                return None
            b = str(v).encode()
            keep.append(b)
            return b
        if size == ctypes.sizeof(cfg):
            f("rm_session_config_init")(ctypes.byref(cfg))
            ok = cfg.version == _lib.SESSION_CONFIG_VERSION
        else:
            ok = False
        if ok:
            # defaults from the environment, then the explicit arguments
            f("rm_session_config_from_env")(ctypes.byref(cfg))
            if coordinator is not None:
                cfg.coordinator = s(coordinator)
            if job is not None:
                cfg.job_id = int(job)
            if token is not None:
                cfg.token = s(token)
            for k in ("host", "data_addr", "tls_ca", "tls_cert", "tls_key", "devices"):
                if kw.get(k) is not None:
                    setattr(cfg, k, s(kw[k]))
            for k in ("rank_hint", "world_hint", "connect_timeout_ms", "data_timeout_ms"):
                if kw.get(k) is not None:
                    setattr(cfg, k, int(kw[k]))
            st = f("rm_session_join")(ctypes.byref(cfg), ctypes.byref(out), err, len(err))
            call = "rm_session_join"
        else:  # layout differs from ours: go through the environment
            env = {"RINGMASTER_COORDINATOR": coordinator, "RINGMASTER_JOB": job,
                   "RINGMASTER_TOKEN": token, "RINGMASTER_HOST": kw.get("host"),
                   "RINGMASTER_DATA_ADDR": kw.get("data_addr"),
                   "RINGMASTER_LAUNCH_INDEX": kw.get("rank_hint"),
                   "RINGMASTER_LAUNCH_WORLD": kw.get("world_hint"),
                   "RINGMASTER_CONNECT_TIMEOUT_MS": kw.get("connect_timeout_ms"),
                   "RINGMASTER_DATA_TIMEOUT_MS": kw.get("data_timeout_ms")}
            for k, v in env.items():
                if v is not None:
                    os.environ[k] = str(v)
            st = f("rm_session_join_env")(ctypes.byref(out), err, len(err))
            call = "rm_session_join_env"
    if st:
        raise errors.make(st, err.value.decode(errors="replace"), None, call)
    c = _default
    c.session = out.value
    c.refresh()
    return c


def init(coordinator=None, job=None, token=None, *, rank=None, world=None, peers=None,
         timeout_ms=0, connect_timeout_ms=0, algorithm=None, **session_kw):
    """Join a job (session) or build a plain communicator; see the module doc.
    Returns the default Communicator. A second call is a no-op."""
    global _initialized, _finalized
    if _initialized:
        return _default
    env = os.environ
    if peers is None and coordinator is None and job is None and token is None \
            and not session_kw and env.get("RINGMASTER_PEERS"):
        peers = env["RINGMASTER_PEERS"].split(",")
        rank = int(env.get("RINGMASTER_RANK", env.get("RANK", "-1")))
        world = len(peers)
    if peers is not None:
        if world is None:
            world = len(peers)
        c = comm_from_peers(int(rank), int(world), list(peers), timeout_ms=timeout_ms,
                            connect_timeout_ms=connect_timeout_ms, algorithm=algorithm)
        _adopt(c)
    elif coordinator or job or token or session_kw or (
            env.get("RINGMASTER_COORDINATOR") and env.get("RINGMASTER_JOB")):
        _session_join(coordinator, job, token, **session_kw)
    elif all(env.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        from datetime import timedelta
        try:
            import torch.distributed as dist
        except ImportError:
            raise InvalidArgument("RM_ERR_INVALID_ARG", "RANK/WORLD_SIZE/MASTER_ADDR/"
                                  "MASTER_PORT rendezvous needs torch.distributed's TCPStore")
        r, n = int(env["RANK"]), int(env["WORLD_SIZE"])
        # torchrun's rendezvous port; a program that also calls
        # dist.init_process_group on it should call that first (the
        # "ringmaster" backend then builds this communicator) or set
        # RINGMASTER_STORE_PORT to another free port.
        port = int(env.get("RINGMASTER_STORE_PORT", env["MASTER_PORT"]))
        store = dist.TCPStore(env["MASTER_ADDR"], port, n, r == 0, timedelta(seconds=60))
        c = comm_from_store(store, r, n, env["MASTER_ADDR"], timeout_ms=timeout_ms)
        c._store = store  # rank 0 serves it; keep it alive
        _adopt(c)
    else:
        raise InvalidArgument(
            "RM_ERR_INVALID_ARG",
            "ringmaster.init(): no job to join and no peers: run under ringmaster "
            "(RINGMASTER_COORDINATOR/RINGMASTER_JOB/RINGMASTER_TOKEN), pass "
            "coordinator=, job=, token=, or rank=, world=, peers=[...], or set torchrun's "
            "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT")
    _initialized, _finalized = True, False
    _install_exit_hooks()
    return _default


def _adopt(c):
    d = _default
    d.ptr, d.endpoint, d.rank, d.world, d.generation, d.job_id = \
        c.ptr, c.endpoint, c.rank, c.world, c.generation, c.job_id
    d._store = getattr(c, "_store", None)
    d.session = None


def is_initialized():
    return _initialized and not _finalized


def in_session():
    return bool(_default.session)


def rank():
    return _default.rank


def size():
    return _default.world


world = size


def generation():
    return _default.generation


def job_id():
    return _default.job_id


def start_step():
    """Steps every member had completed when this generation formed."""
    return _default.start_step


def default_communicator():
    return _default


def allreduce(x, op="sum", algorithm=None):
    """All-reduce x in place over every rank; returns x."""
    return _default.allreduce(x, op, algorithm)


AGG_METHODS = ("mean", "median", "trimmed_mean", "krum", "multi_krum", "bulyan",
               "centered_clip")
_agg_cache = {}


def _agg_config(method, f, m, clip_norm, tau, iterations):
    key = (method, f, m, clip_norm, tau, iterations)
    c = _agg_cache.get(key)
    if c is not None:
        return c
    if not _lib.has_aggregate():
        raise errors.unsupported("%s lacks rm_aggregate" % _lib.path)
    size = _lib.session_fn("rm_agg_config_size")
    if size is None or size() != ctypes.sizeof(_lib.AggConfig):
        raise errors.unsupported("%s: rm_agg_config_t is not the version this package "
                                 "knows" % _lib.path)
    c = _lib.AggConfig()
    _lib.session_fn("rm_agg_config_init")(ctypes.byref(c))
    if c.version != _lib.AGG_CONFIG_VERSION:
        raise errors.unsupported("%s: rm_agg_config_t version %d (this package knows %d)"
                                 % (_lib.path, c.version, _lib.AGG_CONFIG_VERSION))
    code = ctypes.c_int(0)
    if not isinstance(method, str) or \
            _lib.session_fn("rm_agg_method_parse")(method.encode(), ctypes.byref(code)):
        raise ValueError("ringmaster: unknown aggregation method %r (%s)"
                         % (method, " ".join(AGG_METHODS)))
    for name, v in (("f", f), ("m", m), ("iterations", iterations)):
        if int(v) != v or v < 0:
            raise ValueError("ringmaster: aggregate %s=%r: expected an integer >= 0" % (name, v))
    for name, v in (("clip_norm", clip_norm), ("tau", tau)):
        if not (float(v) >= 0 and math.isfinite(float(v))):
            raise ValueError("ringmaster: aggregate %s=%r: expected a finite number >= 0"
                             % (name, v))
    c.method, c.f, c.m, c.iterations = code.value, int(f), int(m), int(iterations)
    c.clip_norm, c.tau = float(clip_norm), float(tau)
    if len(_agg_cache) < 64:
        _agg_cache[key] = c
    return c


def aggregate(x, method="median", f=1, m=0, clip_norm=0.0, tau=0.0, iterations=0,
              info=False):
    """Byzantine-robust aggregation (rm_aggregate) of x over every rank, in
    place on a C-contiguous float numpy array or CPU tensor (f32 f64 f16
    bf16), the result bitwise identical on every rank; like
    ``allreduce(x, "avg")`` but by ``method``: "mean", "median",
    "trimmed_mean", "krum", "multi_krum", "bulyan", "centered_clip"
    (ringmaster/aggregation.h). f: tolerated Byzantine ranks; m: Multi-Krum
    selections (0 = n - f); clip_norm > 0: each rank's vector is first
    scaled to L2 norm <= clip_norm; tau, iterations: centered clipping.
    A rule the world cannot hold (Krum n > 2f + 2, Bulyan n >= 4f + 3, ...)
    raises InvalidArgument naming it; a library without rm_aggregate raises
    Unsupported. Returns x, or (x, excluded) with info=True: the ranks this
    call excluded or down-weighted (a list)."""
    cfg = _agg_config(method, f, m, clip_norm, tau, iterations)
    ex = _default.aggregate(x, cfg, info)
    return (x, ex) if info else x


def aggregation_spec():
    """The job spec's aggregation in a session, as aggregate()'s keyword
    arguments, or None outside a session or for plain mean without
    clipping."""
    d = _default
    if not d.session:
        return None
    meth = spec("aggregation") or "mean"
    dbl = _lib.session_fn("rm_session_spec_double")
    clip = dbl(d.session, b"clip_norm") if dbl else 0.0
    if meth == "mean" and not clip > 0:
        return None
    return {"method": meth, "f": int(spec("aggregation_f") or 0),
            "m": int(spec("aggregation_m") or 0), "clip_norm": float(clip),
            "tau": float(dbl(d.session, b"aggregation_tau")) if dbl else 0.0,
            "iterations": int(spec("aggregation_iterations") or 0)}


def broadcast(x, root=0):
    """Broadcast x in place from root; returns x."""
    return _default.broadcast(x, root)


def allgather(x):
    """A new array/tensor of shape (world,) + x.shape: row r is rank r's x."""
    return _default.allgather(x)


def reduce_scatter(x, op="sum"):
    return _default.reduce_scatter(x, op)


def alltoall(x):
    out = _np.empty_like(x) if type(x) is _ndarray else x.new_empty(x.shape)
    return _default.alltoall_into(out, x)


def barrier(name=None, deadline_ms=0):
    """In a session: the coordinator's named barrier (a timeout names the
    missing ranks). Otherwise the data plane's rm_barrier."""
    _default.barrier(name, deadline_ms)


def broadcast_object(obj, root=0):
    """Pickle obj on root, broadcast it, return it everywhere."""
    import pickle
    if _np is None:
        raise Unsupported("RM_ERR_UNSUPPORTED", "broadcast_object needs numpy")
    if _default.rank == root:
        data = _np.frombuffer(bytearray(pickle.dumps(obj, protocol=4)), _np.uint8)
        n = _np.array([data.size], _np.int64)
    else:
        n = _np.zeros(1, _np.int64)
    broadcast(n, root)
    if _default.rank != root:
        data = _np.empty(int(n[0]), _np.uint8)
    broadcast(data, root)
    return obj if _default.rank == root else pickle.loads(data.tobytes())


# ---- sessions: steps, straggler-aware all-reduce, re-forming, leaving -------
def _sfn(name):
    f = _lib.session_fn(name)
    if f is None:
        raise errors.unsupported("%s lacks %s" % (_lib.path, name))
    return f


class Step:
    """Context manager for one training step: rm_session_step_begin on
    entry, rm_session_step_end(loss, accuracy) on a normal exit. Set
    ``.loss``/``.accuracy`` inside the block (or pass them). Outside a
    session it only counts steps. An exception inside skips the report."""
    __slots__ = ("loss", "accuracy", "number")

    def __init__(self, loss=None, accuracy=None):
        self.loss, self.accuracy, self.number = loss, accuracy, 0

    def __enter__(self):
        global _explicit_steps
        _explicit_steps = True  # the program times its steps: the DDP hook does not
        d = _default
        if d.session:
            st = _sfn("rm_session_step_begin")(d.session)
            if st:
                raise d.error(st, "rm_session_step_begin")
        d.step += 1
        self.number = d.step
        return self

    def __exit__(self, et, ev, tb):
        if et is not None:
            _default.step -= 1
            return False
        d = _default
        if d.session:
            loss = math.nan if self.loss is None else float(self.loss)
            acc = math.nan if self.accuracy is None else float(self.accuracy)
            st = _sfn("rm_session_step_end")(d.session, loss, acc)
            if st:
                raise d.error(st, "rm_session_step_end")
            d.step = _sfn("rm_session_step")(d.session)
        return False


_explicit_steps = False


def _auto_step_begin():
    """The torch backend's step clock (ringmaster.torch, STEPS WITHOUT CODE):
    rm_session_step_begin, unless the program reports its own steps."""
    d = _default
    if d.session and not _explicit_steps:
        st = _sfn("rm_session_step_begin")(d.session)
        if st:
            raise d.error(st, "rm_session_step_begin")


def _auto_step_end():
    """The end of a step the torch backend saw (the last bucket of a
    synchronized DDP backward): reported as the program's, then the next
    step's clock starts. No-op outside a session or when the program
    reports its own steps with ringmaster.step()."""
    d = _default
    if not d.session or _explicit_steps:
        return
    st = _sfn("rm_session_step_end")(d.session, math.nan, math.nan)
    if st:
        raise d.error(st, "rm_session_step_end")
    d.step = _sfn("rm_session_step")(d.session)
    _auto_step_begin()


def step(loss=None, accuracy=None):
    """``with ringmaster.step() as s: ...; s.loss = float(loss)``"""
    return Step(loss, accuracy)


def set_total_steps(total):
    """Tell the coordinator this program's number of steps (carried by the
    following step reports): a command job's progress is then "step S of
    total" instead of the step alone. No-op outside a session."""
    d = _default
    if d.session:
        _sfn("rm_session_set_total_steps")(d.session, int(total))


def current_step():
    return _default.step


def allreduce_gradients(x):
    """The step's gradient all-reduce, averaged, in place, under the job's
    straggler policy (rm_session_allreduce_step: with "backup"/"deadline" the
    coordinator picks the contributors, everyone gets their average). Returns
    the number of contributors. Outside a session: a plain average."""
    d = _default
    p, n, dt = d._dbuf(x)
    if dt not in (F32, F64, F16, BF16):
        raise TypeError("ringmaster: allreduce_gradients needs a float dtype")
    if not d.session:
        if n:
            st = _c_allreduce(d.ptr, p, p, n, dt, AVG)
            if st:
                raise d.error(st, "rm_allreduce")
        return d.world
    k = ctypes.c_int(0)
    st = _sfn("rm_session_allreduce_step")(d.session, p, p, n, dt, ctypes.byref(k))
    if st:
        raise d.error(st, "rm_session_allreduce_step")
    return k.value


def secure():
    """True in a session whose job spec asks for secure_aggregation."""
    d = _default
    return bool(d.session and _sfn("rm_session_secure")(d.session))


def secure_allreduce(x, op="avg"):
    """Secure aggregation (rm_session_secure_allreduce, ringmaster/secure.h)
    of a C-contiguous float32 numpy array or CPU tensor, in place: the sum
    (op "sum") or mean ("avg") over the members of their vectors clipped to
    the spec's clip, within members / scale per coordinate, without any
    worker or the coordinator seeing another's vector. Only in a session of
    a job with "secure_aggregation". Returns a dict: members, norm (this
    rank's, before clipping), clipped, neighbours, guard, scale, bytes_sent
    and the phase times ms_keys, ms_mask, ms_reduce, ms_open, ms_unmask.
    Raises Reconfigured / PeerLost / Timeout like the other session calls
    (reform(), then call again: the sum is redone with fresh masks)."""
    d = _default
    p, n, dt = _buf(x)
    if dt != F32:
        raise TypeError("ringmaster: secure_allreduce sums float32 vectors, got %s"
                        % (getattr(x, "dtype", type(x)),))
    if op not in ("avg", "sum"):
        raise ValueError("ringmaster: secure_allreduce op is 'avg' or 'sum', not %r" % (op,))
    if not d.session:
        raise RuntimeError("ringmaster: secure_allreduce needs a session (a job's worker)")
    info = _lib.SecureInfo()
    info.struct_size = ctypes.sizeof(info)
    st = _sfn("rm_session_secure_allreduce")(d.session, p, p, n, AVG if op == "avg" else SUM,
                                            ctypes.byref(info))
    if st:
        raise d.error(st, "rm_session_secure_allreduce")
    return {k: getattr(info, k) for k, _ in info._fields_ if k != "struct_size"}


def step_dropped():
    d = _default
    return bool(d.session and _sfn("rm_session_step_dropped")(d.session))


def spec(name):
    """A field of the job spec (string or number) in a session; None outside."""
    d = _default
    if not d.session:
        return None
    v = _sfn("rm_session_spec_string")(d.session, name.encode())
    if v is not None:
        return v.decode()
    return _sfn("rm_session_spec_uint")(d.session, name.encode())


def last_error():
    d = _default
    if d.session:
        return (_sfn("rm_session_last_error")(d.session) or b"").decode(errors="replace")
    if d.ptr:
        return (_lib.rm_comm_last_error(d.ptr) or b"").decode(errors="replace")
    return ""


def reform():
    """After PeerLost / Timeout / Reconfigured: re-join the next generation in
    this process. Returns {"rank", "world", "generation", "start_step"}.
    Raises JobEnded when the coordinator ended the job instead."""
    d = _default
    if not d.session:
        raise errors.unsupported("reform() needs a session (a ringmaster job); this "
                                 "process has a plain communicator")
    st = _sfn("rm_session_reform")(d.session)
    if st:
        d.ptr = _sfn("rm_session_comm")(d.session) or d.ptr
        raise d.error(st, "rm_session_reform")
    d.refresh()
    return {"rank": d.rank, "world": d.world, "generation": d.generation,
            "start_step": d.start_step}


def finalize(summary=None, ok=True, error=None):
    """Leave the job (rm_session_leave with summary, a dict made JSON) and
    close; or destroy the plain communicator. Registered atexit: a program
    that ends normally leaves; one that ends by an exception leaves with
    ok=0 and the exception's words."""
    global _finalized
    if not _initialized or _finalized:
        return
    _finalized = True
    d = _default
    try:
        if d.session:
            js = None if summary is None else json.dumps(summary).encode()
            er = None if error is None else str(error).encode()
            st = _sfn("rm_session_leave")(d.session, 1 if ok else 0, er, js)
            if st:
                e = d.error(st, "rm_session_leave")
                d.destroy()
                raise e
    finally:
        if d.ptr or d.session:
            d.destroy()


def _install_exit_hooks():
    if getattr(_install_exit_hooks, "done", False):
        return
    _install_exit_hooks.done = True
    prev = sys.excepthook

    def hook(et, ev, tb):
        global _exit_error
        _exit_error = "%s: %s" % (et.__name__, ev)
        prev(et, ev, tb)
    sys.excepthook = hook

    def at_exit():
        if is_initialized():
            try:
                if _exit_error:
                    finalize(ok=False, error=_exit_error[-900:])
                else:
                    finalize()
            except RingmasterError as e:
                print("ringmaster: leaving at exit: %s" % e, file=sys.stderr)
    atexit.register(at_exit)
