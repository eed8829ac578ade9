"""p2p.py - point-to-point for the ringmaster torch backend: the process
group's send, recv and recv_anysource, and through them torch's
dist.send/recv/isend/irecv and batch_isend_irecv. A native group
(native/process_group.cpp, POINT-TO-POINT) posts on the same lane in C++,
with this module's words and numbering; what its fast path does not take
comes here.

THE LANE. libringmaster runs tagged point-to-point on a communicator of its
own (worker/comm/p2p.c: its transports match the collectives' messages in
order, so arbitrary sends cannot share them). Each process group makes one
when it is made (rm_comm_dup over the group's communicator, collective like
the group's creation; RINGMASTER_TORCH_P2P=0 skips it, and then the calls
raise saying so). The library's own progress thread moves the messages:
a call posts its request and returns a Work at once, in the caller's thread
(no queue behind the group's collectives: a receive posted before an
all-reduce and a send after it on the peer still meet), and the transfer
runs while the caller computes. Matching is MPI's: by source (or any) and
tag, in order per (source, tag); a message nobody waits for yet is buffered
by the receiver, so two ranks may both send before they receive.

WORK. A _P2PWork holds the library's request. One thread at a time waits in
the library for it (a token); others wait on the Work's completion gate. The
waiter that sees it end settles it: reads the source and the words, frees
the request, completes the Work (and its Future, if asked for) with the
tensor or the error. get_future() hands the wait to the group's point-to-
point waiter thread (one per group, started on first use), so that
then() callbacks run without anyone calling wait().

DEADLINES. Every request carries the group's timeout (init_process_group /
new_group): a receive nothing matched by then raises RM_ERR_TIMEOUT naming
its source and tag; a send not taken by then fails the group's point-to-
point communicator (the library cannot withdraw half a message). Its
collectives are not affected: they run on the group's own communicator.

TENSORS. CPU, dense, contiguous (a send's non-contiguous tensor is sent
from a contiguous copy; a receive needs its own memory: torch's gloo asks
the same). Sizes must match: a message of another size ends the receive
with an InvalidArgument naming both sizes. The Work holds the tensor until
it ended; the caller must not touch it before (torch's rule).
"""
import ctypes
import os
import threading

from ringmaster import _lib
from ringmaster import errors as _errors


def lane(comm):
    """(the point-to-point Communicator of a group over comm, None) or
    (None, why not)."""
    if os.environ.get("RINGMASTER_TORCH_P2P", "1").strip() in ("0", ""):
        return None, "RINGMASTER_TORCH_P2P=0 in this process"
    if _lib.session_fn("rm_comm_dup") is None:
        return None, "%s has no rm_comm_dup (a library older than this package)" % _lib.path
    return comm.dup(), None


class _Settler:
    """What the group's waiter thread completes (_Worker's work protocol):
    the Work settles itself, so nothing is left to finish here."""
    _ran_on = None

    def _finish(self, value, exc):
        pass


def make_work_class(base):
    class _P2PWork(base):
        """The Work of one send or receive (WORK above)."""

        def __init__(self, pg, call, seq, req, tensor, target):
            super().__init__(call, seq, pg._label)
            self._pg, self._req, self._tensor, self._target = pg, req, tensor, target
            self._source = -1
            self._token = threading.Lock()
            self._queued = False

        def _poll(self, ms):
            """Wait up to ms in the library (-1: until it ends; its deadline
            bounds that); settle when it ended. Holder of the token only."""
            req = self._req
            if req is None:
                return True
            done = ctypes.c_int(0)
            st = _lib.session_fn("rm_p2p_wait")(self._pg._p2p.ptr, req, ms, ctypes.byref(done))
            if not done.value:
                return False
            self._settle(req, st)
            return True

        def _settle(self, req, st):
            lib, pc = _lib.session_fn, self._pg._p2p
            self._req = None
            self._source = lib("rm_p2p_source")(req)
            words = (lib("rm_p2p_error")(req) or b"").decode(errors="replace")
            lib("rm_p2p_free")(pc.ptr, req)
            self._pg._p2p_open.discard(self)
            exc = None
            if st:
                peer = self._target if self._target >= 0 else None
                e = _errors.make(st, words, peer, "rm_" + self._call)
                exc = self._pg._failed(e, "%s (%s)" % (self._call, self._what()), self._seq,
                                       self._pg._timeout_ms)
            self._finish([self._tensor], exc)

        def _what(self):
            return ("to rank %d" % self._target if self._call == "send" else
                    "from any rank" if self._target < 0 else "from rank %d" % self._target)

        def _wait_done(self, timeout_s=None):
            if self._done:
                return True
            if self._token.acquire(blocking=False):
                try:
                    ms = -1 if timeout_s is None else max(0, int(timeout_s * 1000))
                    return self._poll(ms)
                finally:
                    self._token.release()
            return super()._wait_done(timeout_s)  # another thread waits in the library

        def is_completed(self):
            return self._wait_done(0)

        def get_future(self):
            fut = super().get_future()
            with self._pg._lock:
                queue, self._queued = not self._queued and not self._done, True
            if queue:
                self._pg._p2p_waiter.submit(_Settler(), lambda: self._wait_done(None))
            return fut

        def _source_rank(self):
            self.wait()
            return self._source

    return _P2PWork


def post(pg, call, tensors, peer, tag):
    """send / recv / recv_anysource of pg: post, return the Work."""
    pg._c()  # the group is alive
    if pg._p2p is None:
        raise RuntimeError("ringmaster backend: %s: point-to-point is off for this group: %s"
                           % (call, pg._p2p_why))
    if len(tensors) != 1:
        raise ValueError("ringmaster backend: %s takes one tensor, got %d"
                         % (call, len(tensors)))
    t = tensors[0]
    if t.device.type != "cpu" or t.is_sparse:
        raise ValueError("ringmaster backend: %s: the tensor must be a dense CPU tensor (got "
                         "%s%s)" % (call, t.device, ", sparse" if t.is_sparse else ""))
    recv = call != "send"
    if recv and not t.is_contiguous():
        raise ValueError("ringmaster backend: %s: the tensor must be contiguous (its memory "
                         "receives the message)" % call)
    lo = -1 if call == "recv_anysource" else 0
    if not lo <= peer < pg.size() or peer == pg.rank():
        raise ValueError("ringmaster backend: %s: rank %d is not another rank of this group "
                         "of %d (this is rank %d)" % (call, peer, pg.size(), pg.rank()))
    if not 0 <= int(tag) < 2 ** 63:
        raise ValueError("ringmaster backend: %s: tag %d is out of range (0 .. 2^63-1)"
                         % (call, tag))
    buf = t if t.is_contiguous() else t.contiguous()
    nbytes = buf.numel() * buf.element_size()
    req = ctypes.c_void_p()
    fn = _lib.session_fn("rm_irecv" if recv else "rm_isend")
    n = pg._native_group()
    with pg._lock:
        if n is not None:  # the native group's numbering (its own sends count)
            seq = n._next_p2p_seq()
        else:
            pg._p2p_seq += 1
            seq = pg._p2p_seq
        st = fn(pg._p2p.ptr, buf.data_ptr() if nbytes else None, nbytes, peer, int(tag),
                pg._timeout_ms, ctypes.byref(req))
        if st:
            e = pg._p2p.error(st, "rm_" + call)
            raise pg._failed(e, call, seq, pg._timeout_ms)
        w = pg._P2PWork(pg, call, seq, req.value, buf, peer)
        pg._p2p_open.add(w)
    return w


def close(pg):
    """Group shutdown: end the open requests (abort), settle their Works,
    destroy the lane."""
    pc = pg._p2p
    if pc is None or not pc.ptr:
        return
    n = pg._native_group()
    if n is not None:  # the native group's open Works end first
        n._p2p_close(10000)
    if pg._p2p_open:
        pc.abort()
        for w in list(pg._p2p_open):
            w._wait_done(10.0)
    pg._p2p_waiter.stop(5.0)
    pc.destroy()
