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

from . import _lib
from . import errors
from .errors import (RingmasterError, MembershipError, PeerLost, Timeout,  # noqa: F401
                     Reconfigured, Aborted, StaleGeneration, JobEnded,
                     InvalidArgument, Unsupported, Unavailable, NotFound, Denied,
                     ProtocolError, InternalError)

__version__ = "0.1.0"
library_path = _lib.path

from ._buffers import *  # noqa: F401,F403  (SUM ... AVG, OPS, F32 ... U8, ALGORITHMS)
from ._buffers import (_buf, _buf4, _nbytes, _dtype_err, _np, _ndarray, _resolve_torch,  # noqa: F401
                       _cai, _c_allreduce, _c_allreduce_ex, _c_broadcast, _c_allgather,
                       _c_reduce_scatter, _c_alltoall, _c_reduce, _c_barrier)
from .communicator import Communicator  # noqa: F401

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
    entry, rm_session_step_end_metrics(loss, accuracy, metrics) on a normal
    exit. Set ``.loss``/``.accuracy`` inside the block (or pass them), and
    any named metric in the ``.metrics`` dict (``s.metrics["perplexity"] =
    p``): the dashboard plots each per step. Names: 1..31 characters of
    letters, digits and ``_ . : / -``, starting with a letter, not "loss" or
    "accuracy"; at most 8 a step; values finite (a bad one raises
    InvalidArgument naming it, and the step is not reported). Outside a
    session it only counts steps. An exception inside skips the report."""
    __slots__ = ("loss", "accuracy", "metrics", "number")

    def __init__(self, loss=None, accuracy=None, metrics=None):
        self.loss, self.accuracy, self.number = loss, accuracy, 0
        self.metrics = dict(metrics) if metrics else {}

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
            if self.metrics:
                ms = (_lib.Metric * len(self.metrics))()
                for i, (k, v) in enumerate(self.metrics.items()):
                    if not isinstance(k, str):
                        raise TypeError("metric names are strings, got %r" % (k,))
                    ms[i].name, ms[i].value = k.encode(), float(v)
                st = _sfn("rm_session_step_end_metrics")(d.session, loss, acc, ms, len(ms))
                if st:
                    raise d.error(st, "rm_session_step_end_metrics")
            else:
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


def step(loss=None, accuracy=None, metrics=None):
    """``with ringmaster.step() as s: ...; s.loss = float(loss);
    s.metrics["lr"] = lr`` (or ``metrics={"lr": lr}`` here): see Step."""
    return Step(loss, accuracy, metrics)


def set_total_steps(total):
    """Tell the coordinator this program's number of steps (carried by the
    following step reports): a command job's progress is then "step S of
    total" instead of the step alone. No-op outside a session."""
    d = _default
    if d.session:
        _sfn("rm_session_set_total_steps")(d.session, int(total))


def set_step(done):
    """The program resumes after ``done`` steps (rolled back to a commit, or
    took a peer's state): the next step reported is done + 1
    (rm_session_set_step). ringmaster.torch.elastic calls it after a
    recovery with the state's ``step``. No-op outside a session."""
    d = _default
    d.step = int(done)
    if d.session:
        _sfn("rm_session_set_step")(d.session, int(done))


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
