"""_groups.py - the "ringmaster" groups as torch.distributed sees them: the
backend's creator (which makes the default group and sub-groups),
init_process_group for a late joiner, destroy_process_group that stops the
groups' workers, monitored_barrier, and which object is a ringmaster group.
ringmaster.torch registers _create and installs the two patched functions
(torch.distributed's own stay in _dist_init / _dist_destroy).

CREATING GROUPS. torch calls the creator on the members of a group only
(dist.new_group's non-members return before it), so nothing here may count
per call and expect the same count on every rank. What IS the same on every
rank is the number of default groups made (every rank calls
init_process_group), the epoch: the data-plane addresses go under
ringmaster/e<epoch>/ in the group's store (torch's prefix store already
tells apart the groups of one epoch; the epoch tells apart the epochs when
a store outlives destroy_process_group, whose group names start over). The
creator knows the default group by torch's default group, unset while it
is made. A default group built here from the store owns the module's
communicator: at the next init_process_group (after destroy_process_group)
that one is destroyed and a new one built; a session's communicator
(ringmaster job) or one the program made with ringmaster.init() is used as
it is. A group is native where the extension loaded (THE NATIVE BACKEND,
_native_load.py): its twin, a ProcessGroupRingmaster, is made first.

STATE. _epoch and _built live here and only _create assigns them (torch
calls it in the thread that calls init_process_group / new_group); a new
ProcessGroupRingmaster reads _epoch through this module when it is made.

A LATE JOINER's init_process_group. torch's env:// rendezvous is a TCPStore
on the first generation's rank 0 (MASTER_ADDR/MASTER_PORT) with RANK and
WORLD_SIZE; a program that joins a ringmaster job after a re-formation (a
replacement under on_failure replace, or every program after a restart)
has the agent's launch index as RANK and a store host that may be gone.
The backend needs no store in a session (its group is the session's
communicator), so such a program's init_process_group("ringmaster") joins
the session first and takes the rank and world it was given, with the
store elastic.TorchState uses for the same purpose (_ReformedStore: no
rendezvous, the session formed the group). The first generation keeps
torch's rendezvous unchanged.

DESTROYING GROUPS. destroy_process_group stops the workers of the groups it
destroys (THE PROCESS GROUP in process_group.py, Stopping) before torch
forgets them: all of them for the default group (torch destroys every group
with it), else that one.

MONITORED BARRIER. torch 1.13's dist.monitored_barrier serves gloo only.
This one:
 * the default group of a ringmaster job: the coordinator's named barrier
   (rm_session_barrier, deadline = timeout); its error names the ranks
   that did not arrive, with what each last reported;
 * any other group: over the group's store (torch's TCPStore): each rank
   writes its arrival key, rank 0 waits for them until the deadline, then
   writes a verdict key that every rank waits for (deadline: timeout plus
   a grace for rank 0's own lateness). A verdict naming missing ranks (the
   first, or all of them with wait_all_ranks) is raised on every rank that
   reads it; a rank that never sees one raises naming rank 0.
It runs on the group's worker (in the caller on the synchronous path), in
order with the calls queued before it; its caller waits for it.
"""
import weakref

import torch.distributed as dist

import ringmaster as _rm
from ringmaster import errors as _errors

from . import _native_load
from ._ops import _timeout_ms
from ._work import _Work, _native_twins, _register_exit_stop
from .process_group import ProcessGroupRingmaster, _sync_env


# The default process group, or None before init_process_group.
def _rm_default_group():
    try:
        return dist.distributed_c10d._get_default_group()
    except RuntimeError:
        return None


def _rm_group(pg):
    """The ProcessGroupRingmaster of a ringmaster group (a native group's
    twin), or None for any other object."""
    if isinstance(pg, ProcessGroupRingmaster):
        return pg
    native = _native_load._native
    if native is not None and isinstance(pg, native.ProcessGroup):
        return pg._rm_twin
    return None


# ---- CREATING GROUPS --------------------------------------------------------
_epoch = 0
_built = None  # the rm_comm_t* of the default communicator built here


def _make_group(rank, size, comm, timeout, store, label, owned=False):
    """A "ringmaster" group: native where the extension loaded (its twin
    made first), else the Python one (THE NATIVE BACKEND)."""
    native = _native_load._native
    # (the synchronous path is the Python group's)
    if native is None or _native_load._native_off() or _sync_env():
        return ProcessGroupRingmaster(rank, size, comm, timeout, store, label, owned=owned)
    twin = ProcessGroupRingmaster(rank, size, comm, timeout, store, label, owned=owned,
                                  native=True)
    n = native.ProcessGroup(rank, size, label, twin._timeout_ms, comm.ptr,
                            _native_load._native_fns(), twin)
    twin._native_ref = weakref.ref(n)
    n._set_p2p(twin._p2p.ptr if twin._p2p is not None else 0)
    _native_twins.add(twin)
    _register_exit_stop()
    return n


def _create(store, rank, size, timeout):
    """torch.distributed backend creator (registered as "ringmaster")."""
    global _epoch, _built
    import os
    env = os.environ
    prefix = "ringmaster/e%d" % (_epoch + 1)
    # the default group is the session's communicator; also when it is made
    # again after a re-formation (elastic.TorchState), with the new rank/world
    if _rm_default_group() is None:
        _epoch += 1
        d = _rm.default_communicator()
        if _built is not None and d.ptr == _built and not d.session:
            d.destroy()  # the previous default group's, gone with it
            _built = None
        if not d.ptr:
            if env.get("RINGMASTER_COORDINATOR") and env.get("RINGMASTER_JOB"):
                _rm._initialized = False
                _rm.init()  # join the job: the session's communicator
            else:  # rendezvous through torch's store
                c = _rm.comm_from_store(store, rank, size, env.get("MASTER_ADDR", "127.0.0.1"),
                                        prefix=prefix, timeout_ms=_timeout_ms(timeout))
                _rm._adopt(c)
                _built = c.ptr
                _rm._initialized, _rm._finalized = True, False
                _rm._install_exit_hooks()
        comm = _rm.default_communicator()
        if comm.rank != rank or comm.world != size:
            raise RuntimeError(
                "ringmaster backend: torch.distributed says rank %d of %d but ringmaster "
                "says rank %d of %d: in a ringmaster job let the agent's RANK/WORLD_SIZE "
                "stand (do not pass rank=/world_size= by hand), or call "
                "dist.init_process_group before changing them"
                % (rank, size, comm.rank, comm.world))
        return _make_group(rank, size, comm, timeout, store, "default group")
    # a sub-group (dist.new_group): its own communicator
    comm = _rm.comm_from_store(store, rank, size, env.get("MASTER_ADDR", "127.0.0.1"),
                               prefix=prefix, timeout_ms=_timeout_ms(timeout))
    return _make_group(rank, size, comm, timeout, store, "sub-group of %d ranks" % size,
                       owned=True)


# ---- A LATE JOINER ----------------------------------------------------------
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


# ---- DESTROYING GROUPS ------------------------------------------------------
_dist_destroy = dist.destroy_process_group


def _rm_destroy_process_group(group=None):
    default = _rm_default_group()
    if group is None or group is default:
        groups = list(getattr(dist.distributed_c10d, "_pg_map", {}).keys())
    else:
        groups = [group]
    for pg in groups:
        g = _rm_group(pg)
        if g is not None:
            g._shutdown()
    return _dist_destroy(group)


_rm_destroy_process_group.__doc__ = _dist_destroy.__doc__


# ---- MONITORED BARRIER ------------------------------------------------------
def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """A barrier whose failure says which ranks did not arrive (see
    MONITORED BARRIER). group: a ringmaster process group, None = the
    default one; timeout: a timedelta (None = torch's default, 30 min)."""
    given = group if group is not None else _rm_default_group()
    pg = _rm_group(given)
    if pg is None:
        raise ValueError("ringmaster.torch.monitored_barrier: %r is not a ringmaster "
                         "process group (dist.init_process_group(\"ringmaster\"))" % (given,))
    ms = _timeout_ms(timeout if timeout is not None else dist.default_pg_timeout)
    c = pg._c()
    if pg._store is None and not (c.session and c is _rm.default_communicator()):
        raise ValueError("ringmaster.torch.monitored_barrier: this process group has no "
                         "store to meet through")
    with pg._lock:
        pg._mb_seq += 1
        seq = pg._mb_seq
    n = pg._native_group()
    if n is not None:  # in order with the group's calls, on its worker
        n._enqueue("monitored_barrier", 0,
                   lambda _: _monitored_barrier(pg, c, seq, ms, wait_all_ranks), []).wait()
        return
    if pg._sync or pg._worker.in_worker():
        return _monitored_barrier(pg, c, seq, ms, wait_all_ranks)
    # in the group's worker, after the calls queued before it (the session's
    # barrier is a call on the communicator, which one thread at a time
    # may make); the caller waits for it: a barrier is synchronous
    with pg._lock:
        work = _Work("monitored_barrier", seq, pg._label)
        pg._worker.submit(work, lambda: _monitored_barrier(pg, c, seq, ms, wait_all_ranks))
    work._wait_done()
    if work._exc is not None:
        raise work._exc


def _monitored_barrier(pg, c, seq, ms, wait_all_ranks):
    import time
    if c.session and c is _rm.default_communicator():
        try:
            c.barrier("torch-monitored-barrier-%d" % seq, ms)
        except _errors.RingmasterError as e:
            raise pg._failed(e, "monitored_barrier", seq, ms) from None
        return
    store = pg._store
    key = "ringmaster/e%d/mb/%d" % (pg._epoch, seq)
    # store.add, not check/get: torch 1.13's PrefixStore has no check, and
    # get blocks for the store's whole timeout
    store.add("%s/arrived/%d" % (key, pg.rank()), 1)
    n = pg.size()
    if pg.rank() == 0:
        deadline = time.monotonic() + ms / 1000.0
        missing = list(range(n))
        while True:
            missing = [r for r in missing if not store.add("%s/arrived/%d" % (key, r), 0)]
            if not missing or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        if missing:
            shown = missing if wait_all_ranks else missing[:1]
            verdict = ("rank%s %s did not reach monitored_barrier #%d of the %s within "
                       "%g s" % ("s" if len(shown) > 1 else "", ", ".join(map(str, shown)), seq,
                                 pg._label, ms / 1000.0))
        else:
            verdict = ""
        store.set(key + "/verdict", verdict or "ok")
        store.add(key + "/verdict-set", 1)
    else:
        deadline = time.monotonic() + ms / 1000.0 + 10.0
        while not store.add(key + "/verdict-set", 0):
            if time.monotonic() >= deadline:
                raise _errors.Timeout(
                    "RM_ERR_TIMEOUT", "rank 0 gave no verdict on monitored_barrier #%d within "
                    "%g s" % (seq, ms / 1000.0 + 10.0), 0,
                    _errors.CODES.get("RM_ERR_TIMEOUT"), "monitored_barrier")
            time.sleep(0.01)
        v = store.get(key + "/verdict")
        verdict = (v.decode() if isinstance(v, bytes) else str(v))
        verdict = "" if verdict == "ok" else verdict
    if verdict:
        err = _errors.Timeout("RM_ERR_TIMEOUT", verdict, None,
                              _errors.CODES.get("RM_ERR_TIMEOUT"), "monitored_barrier")
        err.args = ("ringmaster backend: %s (RM_ERR_TIMEOUT)" % verdict,)
        raise err
