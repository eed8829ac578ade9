"""_native_load.py - finding and loading the native "ringmaster" backend,
the C++ extension (native/process_group.cpp: a c10d::ProcessGroup whose
collectives run in C++ on its worker thread, no GIL on DDP's path), as the
module ringmaster.torch._native, and what active_backend() reports of it.

THE NATIVE BACKEND. Where the extension was built, the "ringmaster"
backend's groups are native ones; process_group.py's ProcessGroupRingmaster
is then each native group's Python twin (it keeps the calls the native path
does not take, the point-to-point lane and the error words: native/module.cpp).
Where it was not built (no compiler or no torch headers), or
RINGMASTER_TORCH_NATIVE=0, process_group.py's process group is the backend,
as before. The extension is looked for at RINGMASTER_TORCH_NATIVE (a path
to it), in this package (pip install), then beside the libringmaster the
package loaded (a CMake build tree). It takes the C calls' addresses from
that library (ctypes), so both use one copy of it. RINGMASTER_TORCH_NATIVE=0
(read at import and when a group is made) and RINGMASTER_TORCH_SYNC=1 give
a group the Python backend (_groups.py's _make_group decides). Once it is
loaded, its ProcessGroup class hands the twin the calls torch makes from
Python only, and any attribute it has not (below).

STATE. _native (the loaded module, or None) and _native_where are set once,
by _load_native at import, and read through this module (never copied by
``from ... import``): _groups.py asks it whether a group is native.
"""
import os

import ringmaster as _rm


_native = None
_native_where = "not looked for"
_NATIVE_FNS = ("rm_allreduce", "rm_broadcast", "rm_allgather", "rm_reduce_scatter",
               "rm_barrier", "rm_comm_set_timeout", "rm_comm_abort")
# point-to-point: where the library lacks them, the twin serves send / recv
_NATIVE_P2P_FNS = ("rm_isend", "rm_irecv", "rm_p2p_wait", "rm_p2p_source", "rm_p2p_error",
                   "rm_p2p_free")
_NATIVE_A2A_FNS = ("rm_alltoall", "rm_alltoallv")  # likewise all_to_all_single


def _native_off():
    """RINGMASTER_TORCH_NATIVE=0 (off, no, false): the Python backend."""
    return os.environ.get("RINGMASTER_TORCH_NATIVE", "").strip().lower() in ("0", "off", "no",
                                                                            "false")


def _load_native():
    global _native, _native_where
    import glob
    import importlib.util
    want = os.environ.get("RINGMASTER_TORCH_NATIVE", "").strip()
    if _native_off():
        _native_where = "RINGMASTER_TORCH_NATIVE=%s turns it off" % want
        return
    if want and want.lower() not in ("1", "on", "yes", "true"):
        paths = [want]
    else:
        paths = []
        for d in (os.path.dirname(os.path.abspath(__file__)),
                  os.path.dirname(os.path.abspath(_rm._lib.path))):
            paths += sorted(glob.glob(os.path.join(d, "_native.*.so")))
    if not paths:
        _native_where = ("no _native extension beside this package or %s (built by CMake "
                         "where torch's headers exist, or by pip install ./python)"
                         % _rm._lib.path)
        return
    try:
        spec = importlib.util.spec_from_file_location("ringmaster.torch._native", paths[0])
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except Exception as e:  # built against another torch, say: the Python backend serves
        _native_where = "%s did not load: %s" % (paths[0], e)
        return
    _native, _native_where = mod, paths[0]


def _native_fns():
    import ctypes
    lib = _rm._lib.lib
    names = list(_NATIVE_FNS)
    for extra in (_NATIVE_P2P_FNS, _NATIVE_A2A_FNS):  # all of a set, or the twin serves
        if all(hasattr(lib, n) for n in extra):
            names += extra
    return {n: ctypes.cast(getattr(lib, n), ctypes.c_void_p).value for n in names}


def active_backend():
    """Which "ringmaster" backend new process groups get: ("native", the
    extension's path) or ("python", why the native one is not used)."""
    return ("native", _native_where) if _native is not None else ("python", _native_where)


_load_native()


if _native is not None:
    # torch calls these from Python only: the twin serves them (they queue
    # on the native group through the twin's _submit). send, recv,
    # recv_anysource and alltoall_base (all_to_all_single) are the native
    # group's own (torch's binding calls them without the GIL). Other
    # attributes a program reads of a group (_comm, _timeout_ms, ...) are
    # the twin's too.
    def _forward(name):
        def f(self, *a, **k):
            return getattr(self._rm_twin, name)(*a, **k)
        f.__name__ = name
        return f
    for _name in ("alltoall", "gather", "scatter", "reduce", "reduce_scatter",
                  "allgather_coalesced", "monitored_barrier"):
        setattr(_native.ProcessGroup, _name, _forward(_name))

    def _twin_attr(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._rm_twin, name)
    _native.ProcessGroup.__getattr__ = _twin_attr
