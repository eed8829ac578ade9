"""rmtestutil.py - small helpers the Python tests share (tests/lib/).

free_port: a TCP port on 127.0.0.1 that was free a moment ago (bound to
port 0 and closed), for a process the test starts and tells where to
listen; another process may take it in between, which the tests accept.

poll / wait_until: a condition's first true value, asked every `every`
seconds until a deadline (every wait in a test has one); poll answers None
at the deadline, wait_until raises an AssertionError naming what it waited
for.
"""
import socket
import time


def free_port():
    """A TCP port on 127.0.0.1 that was free when asked."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def poll(fn, timeout, every=0.2):
    """fn()'s first true value within timeout seconds, else None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(every)
    return None


def wait_until(fn, what, timeout, every=0.2):
    """fn()'s first true value within timeout seconds, else an
    AssertionError naming what was waited for."""
    v = poll(fn, timeout, every)
    if not v:
        raise AssertionError("timed out waiting for " + what)
    return v
