"""_work.py - the worker thread and the Work of a Python "ringmaster"
process group (the group's design: THE PROCESS GROUP in process_group.py).

THREADS. A _Worker is one group's thread and FIFO queue of closures. Its
thread starts at the group's first queued call (a daemon named
"ringmaster-pg <label>") and owns the group's communicator (libringmaster
takes one thread at a time per communicator). It runs the closures in call
order (so every rank runs the same collectives in the same order, as the C
library needs) and completes each Work with the closure's return value, or
fails it with the closure's exception. ctypes drops the GIL during the C
calls, so the caller (DDP's backward, autograd) runs on meanwhile. The
worker holds no reference to the group, so that the group can be collected
(its __del__ stops the worker). TENSOR OWNERSHIP: the queued closure holds
the caller's tensors until it has run; the worker drops it before it takes
the next one. A group's point-to-point waiter (p2p.py) is a _Worker too.

WHICH WORK. torch 1.13 has no trampoline for a Python Work: C++ that waits
on a Work a Python process group returned (DDP's _broadcast_coalesced and
_verify_params_across_processes) calls the C++ base Work::wait, which
never returns for a Python subclass; and the Work _create_work_from_future
builds (FutureWrappingWork) returns from wait() without raising a failed
Future's error, so dist.all_reduce(t) would swallow failures. So:
 * a call from torch.distributed's Python API (distributed_c10d) or from
   this package (DDP's communication hook in ddp.py) gets a _Work, a
   Python subclass of torch's Work: wait() raises the call's own
   exception object, wait(timeout) raises when the timeout passes first,
   is_completed(), is_success(), exception(), result(), get_future();
 * any other caller (C++ through the trampoline, or a program calling the
   group's methods itself) waits for its queued call in place and gets a
   completed FutureWrappingWork or the exception, as before.
Both go through the queue, so the order of calls is the order of calling.
The group tells the callers apart (process_group.py, _python_caller).

ORDERING OF A COMPLETION. The worker completes a _Work once: its value or
exception first, under _fut_lock, then the Future if one was asked for (its
callbacks, a DDP hook's then(), run there, in the worker, before wait()
returns and before the next call runs), then the completion gate. A Future
asked for after that is completed by get_future itself.

STOPPING. stop() fails the calls still queued (RM_ERR_ABORTED), gives the
running one grace_s to end, then aborts the communicator (rm_comm_abort,
which ends its waits: the running call fails and returns) and joins the
thread with a deadline. At interpreter exit the live workers, and the
threads of the live native groups (_native_twins), are stopped too (5 s for
a running call), before ringmaster's own exit hook closes the communicator
(a daemon thread still inside torch's C++ when Python finalizes aborts the
process).
"""
import _thread
import collections
import threading
import weakref

import torch
from torch._C._distributed_c10d import Work as _C_Work

from ringmaster import errors as _errors


_workers = weakref.WeakSet()  # live workers, stopped at exit
_native_twins = weakref.WeakSet()  # the twins of live native groups, likewise
_fut_lock = threading.Lock()  # a _Work's Future against its completion


class _Work(_C_Work):
    """The Work of a queued collective (WHICH WORK above). Cheap to
    make, as the caller pays for it: a bare lock, held until the worker
    finishes the call, is the completion event, and the Future is made when
    asked for (get_future), completed then if the call is done already."""

    def __init__(self, call, seq, label):
        super().__init__()
        self._call, self._seq, self._label = call, seq, label
        self._fut = None
        self._done = False
        self._ran_on = None  # the worker thread's name (tests read it)
        self._value = self._exc = None
        self._gate = _thread.allocate_lock()
        self._gate.acquire()  # released when done

    def _finish(self, value, exc):
        with _fut_lock:
            self._value, self._exc, self._done = value, exc, True
            fut = self._fut
        try:
            # the Future first: its callbacks (a DDP hook's then()) run here,
            # in the worker, before wait() returns and the next call runs
            if fut is not None:
                self._complete(fut)
        finally:
            self._gate.release()

    def _complete(self, fut):
        if self._exc is None:
            fut.set_result(self._value)
        else:
            fut.set_exception(self._exc)

    def _wait_done(self, timeout_s=None):
        """True when done by timeout_s (None: until done, which the worker's
        own deadlines bound: THE PROCESS GROUP, Timeouts)."""
        if self._done and not self._gate.locked():
            return True
        if not self._gate.acquire(timeout=-1 if timeout_s is None else timeout_s):
            return False
        self._gate.release()  # for the next waiter
        return True

    def wait(self, timeout=None):
        secs = timeout.total_seconds() if timeout is not None else 0
        if not self._wait_done(secs if secs > 0 else None):
            raise RuntimeError("ringmaster backend: wait on %s #%d of the %s timed out after "
                               "%g s; the call is still queued or running"
                               % (self._call, self._seq, self._label, secs))
        if self._exc is not None:
            raise self._exc
        return True

    def is_completed(self):
        return self._done

    def is_success(self):
        return self._done and self._exc is None

    def exception(self):
        return self._exc

    def result(self):
        self.wait()
        return self._value

    def get_future(self):
        with _fut_lock:
            fut, fill = self._fut, False
            if fut is None:
                fut = self._fut = torch.futures.Future()
                fill = self._done  # _finish saw no Future: complete it here
        if fill:
            self._complete(fut)
        return fut

    def synchronize(self):
        pass  # CPU tensors: nothing to order against a stream


class _Worker:
    """One process group's thread and FIFO queue (THE PROCESS GROUP). It
    holds no reference to the group, so that the group can be collected
    (its __del__ stops the worker)."""

    def __init__(self, label):
        self.label = label
        self._q = collections.deque()
        self._cv = threading.Condition()
        self._thread = None
        self._stopping = False

    def submit(self, work, body):
        """Queue body (run in the worker; its return value completes work,
        its exception fails it). Call under the group's lock."""
        with self._cv:
            if self._stopping:
                raise _errors.Aborted("RM_ERR_ABORTED", "this process group was destroyed "
                                      "(dist.destroy_process_group) and its worker stopped")
            self._q.append((work, body))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="ringmaster-pg %s" % self.label)
                self._thread.start()
                _workers.add(self)
                _register_exit_stop()
            self._cv.notify()

    def _loop(self):
        while True:
            with self._cv:
                # idle: woken by submit or stop (a slice, not a deadline:
                # an idle group waits for its next call as long as it lives)
                while not self._q and not self._stopping:
                    self._cv.wait(5.0)
                if not self._q:
                    return
                work, body = self._q.popleft()
            work._ran_on = threading.current_thread().name
            try:
                value, exc = body(), None
            except BaseException as e:  # the Work carries it to the caller
                value, exc = None, e
            work._finish(value, exc)
            del work, body, value, exc  # the tensors go with the call

    def in_worker(self):
        return self._thread is not None and threading.current_thread() is self._thread

    def stop(self, grace_s, comm=None):
        """Stop the thread: queued calls fail, the running one gets grace_s,
        then comm is aborted (its waits end) and the thread joined. True
        when the thread is gone (or never ran)."""
        with self._cv:
            self._stopping = True
            left, self._q = list(self._q), collections.deque()
            self._cv.notify()
        for work, _ in left:
            work._finish(None, _errors.Aborted(
                "RM_ERR_ABORTED", "ringmaster backend: %s #%d of the %s was still queued "
                "when the process group was destroyed" % (work._call, work._seq, self.label)))
        th = self._thread
        if th is None or th is threading.current_thread():
            return True
        th.join(grace_s)
        if th.is_alive() and comm is not None:
            comm.abort()  # the running call fails (sticky) and returns
            th.join(10.0)
        return not th.is_alive()


_exit_stop_registered = False


def _register_exit_stop():
    global _exit_stop_registered
    if _exit_stop_registered:
        return
    _exit_stop_registered = True
    import atexit

    def stop_all():
        for w in list(_workers):
            w.stop(5.0)
        for twin in list(_native_twins):  # the native groups' threads likewise
            n = twin._native_group()
            if n is not None:
                n._shutdown(5000, twin._comm.ptr == twin._ptr)
    # registered at the first worker's start, after ringmaster's exit hook
    # (installed at init): atexit runs it first
    atexit.register(stop_all)

