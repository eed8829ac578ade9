"""Loading libringmaster and declaring its C prototypes (ctypes).

Why ctypes and not a C extension: the package must run on Debian's
``/usr/bin/python3`` (3.11, with ``python3-numpy`` 1.24 and ``python3-torch``
1.13) and, unchanged, on whatever interpreter a user brings; ctypes needs no
compiler, no Python headers and no build step, so ``pip install ./python`` is a
pure-Python install and the same files work from the build tree. The public C
API was designed for this (opaque handles, getters, ``struct_size``/``version``
in config structs, ``rm_status_name`` for the codes), so nothing but
``rm_comm_config_t`` (which has no size function) is mirrored by hand. The cost
is ctypes' call overhead (a few hundred ns a call); the hot paths keep the
prototypes in module globals so an all-reduce costs one dictionary lookup and
one foreign call more than C (see ``bench/torch``).

Where the library comes from, first match wins:

1. ``RINGMASTER_LIBRARY``: a path to ``libringmaster.so`` (or its folder);
2. the build tree around this package: ``<repo>/build*/worker/libringmaster.so*``
   (``build/`` first), when the package runs from ``<repo>/python``;
3. an installed prefix next to the package (``<prefix>/lib/libringmaster.so*``),
   then ``ctypes.util.find_library("ringmaster")`` (the loader's path).

Session functions (``rm_session_*``) and the aggregation entry points
(``rm_aggregate``, ``rm_agg_*``) are looked up lazily: the package imports and
runs plain communicators with a library that lacks them, and such a call then
raises ``Unsupported`` naming the missing symbol.
"""
import ctypes
import ctypes.util
import glob
import os

c_void_p = ctypes.c_void_p
c_int = ctypes.c_int
c_size_t = ctypes.c_size_t
c_uint64 = ctypes.c_uint64
c_char_p = ctypes.c_char_p
c_double = ctypes.c_double
c_uint = ctypes.c_uint


class CommConfig(ctypes.Structure):
    """Mirror of rm_comm_config_t (include/ringmaster/ringmaster.h)."""
    _fields_ = [
        ("job_id", c_uint64),
        ("generation", c_uint64),
        ("rank", c_int),
        ("world", c_int),
        ("peers", ctypes.POINTER(c_char_p)),
        ("endpoint", c_void_p),
        ("timeout_ms", c_int),
        ("connect_timeout_ms", c_int),
        ("algorithm", c_int),
        ("transports", ctypes.POINTER(c_char_p)),  # NULL = TCP only
        ("data_key", c_void_p),  # NULL = no data-plane key (warned once)
    ]


class SessionConfig(ctypes.Structure):
    """Mirror of rm_session_config_t, version 1. Used only when the
    library's rm_session_config_size() and version agree with it; otherwise
    explicit arguments go through the environment and rm_session_join_env."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("version", c_uint),
        ("coordinator", c_char_p),
        ("job_id", c_uint64),
        ("token", c_char_p),
        ("host", c_char_p),
        ("data_addr", c_char_p),
        ("rank_hint", c_int),
        ("world_hint", c_int),
        ("connect_timeout_ms", c_int),
        ("data_timeout_ms", c_int),
        ("tls_ca", c_char_p),
        ("tls_cert", c_char_p),
        ("tls_key", c_char_p),
        ("devices", c_char_p),
    ]


SESSION_CONFIG_VERSION = 1


class AllreduceInfo(ctypes.Structure):
    _fields_ = [
        ("algorithm", c_int),
        ("predicted_us", c_double),
        ("elapsed_us", c_double),
        ("bytes_sent", c_size_t),
    ]


class AggConfig(ctypes.Structure):
    """Mirror of rm_agg_config_t, version 1 (include/ringmaster/aggregation.h);
    used only when the library's rm_agg_config_size() agrees."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("version", c_uint),
        ("method", c_int),
        ("f", c_int),
        ("m", c_int),
        ("clip_norm", c_double),
        ("tau", c_double),
        ("iterations", c_int),
    ]


AGG_CONFIG_VERSION = 1


class AggInfo(ctypes.Structure):
    """Mirror of rm_agg_info_t (include/ringmaster/ringmaster.h)."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("contributors", c_int),
        ("norm", c_double),
        ("clipped", c_int),
        ("bytes_sent", c_size_t),
        ("excluded", ctypes.POINTER(ctypes.c_uint8)),
        ("scores", ctypes.POINTER(c_double)),
    ]


class Metric(ctypes.Structure):
    """Mirror of rm_metric_t (include/ringmaster/ringmaster.h)."""
    _fields_ = [("name", c_char_p), ("value", c_double)]


class SecureInfo(ctypes.Structure):
    """Mirror of rm_secure_info_t (include/ringmaster/secure.h)."""
    _fields_ = [
        ("struct_size", c_size_t),
        ("members", c_int),
        ("norm", c_double),
        ("clipped", c_int),
        ("neighbours", c_int),
        ("guard", c_int),
        ("scale", c_double),
        ("bytes_sent", c_size_t),
        ("ms_keys", c_double),
        ("ms_mask", c_double),
        ("ms_reduce", c_double),
        ("ms_open", c_double),
        ("ms_unmask", c_double),
    ]


# name: (restype, argtypes)
_CORE = {
    "rm_status_name": (c_char_p, [c_int]),
    "rm_status_string": (c_char_p, [c_int]),
    "rm_dtype_size": (c_size_t, [c_int]),
    "rm_dtype_name": (c_char_p, [c_int]),
    "rm_op_name": (c_char_p, [c_int]),
    "rm_algo_name": (c_char_p, [c_int]),
    "rm_algo_parse": (c_int, [c_char_p, ctypes.POINTER(c_int)]),
    "rm_endpoint_open": (c_int, [c_char_p, ctypes.POINTER(c_void_p)]),
    "rm_endpoint_address": (c_char_p, [c_void_p]),
    "rm_endpoint_transports": (c_char_p, [c_void_p]),
    "rm_endpoint_close": (None, [c_void_p]),
    "rm_comm_config_init": (None, [ctypes.POINTER(CommConfig)]),
    "rm_comm_init": (c_int, [ctypes.POINTER(CommConfig), ctypes.POINTER(c_void_p)]),
    "rm_comm_abort": (None, [c_void_p]),
    "rm_comm_destroy": (None, [c_void_p]),
    "rm_comm_rank": (c_int, [c_void_p]),
    "rm_comm_world": (c_int, [c_void_p]),
    "rm_comm_generation": (c_uint64, [c_void_p]),
    "rm_comm_status": (c_int, [c_void_p]),
    "rm_comm_last_error": (c_char_p, [c_void_p]),
    "rm_comm_transport": (c_char_p, [c_void_p, c_int]),
    "rm_comm_failed_peer": (c_int, [c_void_p]),
    "rm_comm_set_algorithm": (c_int, [c_void_p, c_int]),
    "rm_allreduce": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
    "rm_allreduce_ex": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int,
                                c_int, ctypes.POINTER(AllreduceInfo)]),
    "rm_reduce_scatter": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
    "rm_allgather": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int]),
    "rm_broadcast": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int]),
    "rm_reduce": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, c_int]),
    "rm_alltoall": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int]),
    "rm_barrier": (c_int, [c_void_p]),
}

_SESSION = {
    "rm_comm_config_size": (c_size_t, []),
    # device memory
    "rm_comm_set_stream": (c_int, [c_void_p, c_void_p]),
    "rm_comm_set_memory": (c_int, [c_void_p, c_int]),
    "rm_comm_set_timeout": (c_int, [c_void_p, c_int]),
    # rooted and counted collectives (a library without them: the callers
    # fall back to the all-gather / broadcast / padded all-to-all forms)
    "rm_gather": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
    "rm_scatter": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
    "rm_alltoallv": (c_int, [c_void_p, c_void_p, ctypes.POINTER(c_size_t),
                             ctypes.POINTER(c_size_t), c_void_p, ctypes.POINTER(c_size_t),
                             ctypes.POINTER(c_size_t), c_int]),
    # communicators tied to the session (aborted when it re-forms)
    "rm_session_attach": (c_int, [c_void_p, c_void_p]),
    "rm_session_detach": (None, [c_void_p, c_void_p]),
    "rm_session_verdict": (c_int, [c_void_p, c_int]),
    # tagged point-to-point on a communicator of its own (rm_comm_dup)
    "rm_comm_dup": (c_int, [c_void_p, ctypes.POINTER(c_void_p)]),
    "rm_isend": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_uint64, c_int,
                         ctypes.POINTER(c_void_p)]),
    "rm_irecv": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_uint64, c_int,
                         ctypes.POINTER(c_void_p)]),
    "rm_p2p_wait": (c_int, [c_void_p, c_void_p, c_int, ctypes.POINTER(c_int)]),
    "rm_p2p_source": (c_int, [c_void_p]),
    "rm_p2p_bytes": (c_size_t, [c_void_p]),
    "rm_p2p_error": (ctypes.c_char_p, [c_void_p]),
    "rm_p2p_free": (None, [c_void_p, c_void_p]),
    # test machinery of test-hook builds (device buffers for the tests)
    "rm_testhook_gpu_alloc": (c_void_p, [c_size_t]),
    "rm_testhook_gpu_free": (None, [c_void_p]),
    "rm_testhook_gpu_copy": (c_int, [c_void_p, c_void_p, c_size_t]),
    "rm_session_config_init": (None, [c_void_p]),
    "rm_session_config_size": (c_size_t, []),
    "rm_session_config_from_env": (c_int, [c_void_p]),
    "rm_session_join": (c_int, [c_void_p, ctypes.POINTER(c_void_p), c_char_p, c_size_t]),
    "rm_session_join_env": (c_int, [ctypes.POINTER(c_void_p), c_char_p, c_size_t]),
    "rm_session_comm": (c_void_p, [c_void_p]),
    "rm_session_rank": (c_int, [c_void_p]),
    "rm_session_world": (c_int, [c_void_p]),
    "rm_session_generation": (c_uint64, [c_void_p]),
    "rm_session_job_id": (c_uint64, [c_void_p]),
    "rm_session_worker_id": (c_uint64, [c_void_p]),
    "rm_session_start_step": (c_uint64, [c_void_p]),
    "rm_session_step": (c_uint64, [c_void_p]),
    "rm_session_spec_string": (c_char_p, [c_void_p, c_char_p]),
    "rm_session_spec_uint": (c_uint64, [c_void_p, c_char_p]),
    "rm_session_spec_double": (c_double, [c_void_p, c_char_p]),
    # aggregation: looked up lazily too, so an older library
    # still imports; ringmaster.aggregate then raises Unsupported
    "rm_aggregate": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int,
                             ctypes.POINTER(AggConfig), ctypes.POINTER(AggInfo)]),
    "rm_agg_config_init": (None, [ctypes.POINTER(AggConfig)]),
    "rm_agg_config_size": (c_size_t, []),
    "rm_agg_method_parse": (c_int, [c_char_p, ctypes.POINTER(c_int)]),
    "rm_agg_check": (c_int, [ctypes.POINTER(AggConfig), c_int, c_char_p, c_size_t]),
    "rm_session_last_error": (c_char_p, [c_void_p]),
    "rm_session_reform": (c_int, [c_void_p]),
    "rm_session_step_begin": (c_int, [c_void_p]),
    "rm_session_step_end": (c_int, [c_void_p, c_double, c_double]),
    "rm_session_step_end_metrics": (c_int, [c_void_p, c_double, c_double,
                                            ctypes.POINTER(Metric), c_size_t]),
    "rm_session_allreduce_step": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int,
                                          ctypes.POINTER(c_int)]),
    "rm_session_step_dropped": (c_int, [c_void_p]),
    "rm_session_set_total_steps": (None, [c_void_p, ctypes.c_uint64]),
    "rm_session_set_step": (None, [c_void_p, ctypes.c_uint64]),
    # secure aggregation
    "rm_session_secure_allreduce": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int,
                                            ctypes.POINTER(SecureInfo)]),
    "rm_session_secure": (c_int, [c_void_p]),
    "rm_session_barrier": (c_int, [c_void_p, c_char_p, c_int]),
    "rm_session_leave": (c_int, [c_void_p, c_int, c_char_p, c_char_p]),
    "rm_session_close": (None, [c_void_p]),
}


def _candidates():
    env = os.environ.get("RINGMASTER_LIBRARY")
    if env:
        if os.path.isdir(env):
            yield from sorted(glob.glob(os.path.join(env, "libringmaster.so*")))
        else:
            yield env
        return
    try:  # written by `cmake --install` (cmake/ringmaster_installed.py.in)
        from . import _installed
        if os.path.exists(_installed.LIBRARY):
            yield _installed.LIBRARY
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))  # <repo>/python/ringmaster -> <repo>
    builds = [os.path.join(repo, "build")] + sorted(
        d for d in glob.glob(os.path.join(repo, "build*")) if d != os.path.join(repo, "build"))
    for b in builds:
        for name in ("libringmaster.so", "libringmaster.so.0"):
            p = os.path.join(b, "worker", name)
            if os.path.exists(p):
                yield p
    # Installed: <prefix>/lib/pythonX.Y/site-packages/ringmaster -> <prefix>/lib
    for up in (3, 4):
        d = here
        for _ in range(up):
            d = os.path.dirname(d)
        for sub in ("lib", "lib64", os.path.join("lib", "x86_64-linux-gnu")):
            p = os.path.join(d, sub, "libringmaster.so")
            if os.path.exists(p):
                yield p
    found = ctypes.util.find_library("ringmaster")
    if found:
        yield found
    for p in ("/usr/local/lib/libringmaster.so", "/usr/lib/libringmaster.so"):
        if os.path.exists(p):
            yield p


def _load():
    errors = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append("%s: %s" % (path, e))
    raise ImportError(
        "ringmaster: cannot load libringmaster (set RINGMASTER_LIBRARY to the path of "
        "libringmaster.so, or build it: cmake --build build --target ringmaster)"
        + ("; tried " + "; ".join(errors) if errors else ""))


lib, path = _load()


def _declare(name, proto):
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = proto[0], proto[1]
    return fn


for _name, _proto in _CORE.items():
    globals()[_name] = _declare(_name, _proto)

_session_cache = {}


def session_fn(name):
    """The prototype of a session function, declared on first use; None when
    the loaded library lacks it."""
    fn = _session_cache.get(name)
    if fn is None and name not in _session_cache:
        try:
            fn = _declare(name, _SESSION[name])
        except AttributeError:
            fn = None
        _session_cache[name] = fn
    return fn


def has_aggregate():
    return session_fn("rm_aggregate") is not None and \
        session_fn("rm_agg_config_init") is not None


def has_sessions():
    return session_fn("rm_session_join_env") is not None


def status_names():
    """{code: "RM_ERR_..."} for every code the library knows."""
    out = {}
    for code in range(64):
        name = rm_status_name(code).decode()  # noqa: F821 (declared above)
        if name != "RM_UNKNOWN":
            out[code] = name
    return out
