#!/usr/bin/python3
"""test_sse_many.py - many idle event streams do not take the HTTP layer
down ("An HTTP layer that holds"), against a real `ringmaster serve`.

  - N idle streams (2,000, fewer when the descriptor limit is lower) open at
    once, from one non-blocking client (raw sockets, epoll);
  - with them open, /healthz, the job list and an authenticated POST answer;
  - one event (a job submitted) reaches every stream;
  - the clients go away: every stream slot comes back, /healthz answers;
  - RINGMASTER_SSE_MAX_STREAMS=50: the 51st stream gets 503 + Retry-After
    while /healthz answers, and the server stops cleanly (exit 0) with its
    50 streams still open (parked).
Correctness only: no timing thresholds; every wait has a deadline.

usage: test_sse_many.py --ringmaster PATH [--streams N]
"""
import argparse
import errno
import json
import os
import resource
import selectors
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rmserver import Server, check, sse_slots, verdict  # noqa: E402

REQ = b"GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-read-token\r\nAccept: text/event-stream\r\n\r\n"


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class StreamPool:
    """n event streams from one thread: non-blocking sockets on an epoll
    selector. Each stream's received bytes accumulate in buf[i]."""

    def __init__(self, host, port, n, deadline_s=120, req=REQ):
        self.sel = selectors.DefaultSelector()
        self.socks, self.buf, self.sent = [], [], []
        self.req = req
        for i in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            rc = s.connect_ex((host, port))
            if rc not in (0, errno.EINPROGRESS):
                s.close()
                raise OSError(rc, f"connect #{i}: {os.strerror(rc)}")
            self.socks.append(s)
            self.buf.append(b"")
            self.sent.append(False)
            self.sel.register(s, selectors.EVENT_WRITE, i)
            if i % 256 == 255:  # let the listen backlog drain while connecting
                self.pump(0)
        # opened: the head and, for a 200, the first comment, which may come
        # in a later segment than the head
        self.wait(lambda i: self.closed(i) or (b"\r\n\r\n" in self.buf[i] and (
            self.status(i) != 200 or b": connected" in self.buf[i])), deadline_s)

    def closed(self, i):
        return self.socks[i] is None

    def pump(self, timeout):
        for key, ev in self.sel.select(timeout):
            i, s = key.data, key.fileobj
            if not self.sent[i]:
                try:
                    s.send(self.req)
                except OSError:
                    self.drop(i)
                    continue
                self.sent[i] = True
                self.sel.modify(s, selectors.EVENT_READ, i)
                continue
            try:
                d = s.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                d = b""
            if not d:
                self.drop(i)
            else:
                self.buf[i] += d

    def drop(self, i):
        s = self.socks[i]
        if s is not None:
            self.sel.unregister(s)
            s.close()
            self.socks[i] = None

    def wait(self, done, deadline_s):
        """Pump until done(i) holds for every stream (or the deadline);
        returns the indexes for which it does not."""
        end = time.monotonic() + deadline_s
        pending = set(range(len(self.socks)))
        while pending and time.monotonic() < end:
            self.pump(0.05)
            pending = {i for i in pending if not done(i)}
        return pending

    def status(self, i):
        head = self.buf[i].split(b"\r\n", 1)[0]
        parts = head.split(b" ", 2)
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0

    def close(self):
        for i in range(len(self.socks)):
            self.drop(i)
        self.sel.close()


def api_answers(srv, what):
    st, _, b = srv.request("GET", "/healthz")
    check(st == 200 and b == {"status": "ok"}, f"/healthz {what}: {st} {b}")
    st, _, b = srv.request("GET", "/api/v1/jobs")
    check(st == 200 and isinstance(b, dict), f"job list {what}: {st}")


def test_many(binary, n):
    srv = Server(binary)
    pool = None
    try:
        pool = StreamPool(srv.host, srv.port, n)
        ok = [i for i in range(n) if pool.status(i) == 200 and b": connected" in pool.buf[i]]
        if not check(len(ok) == n, f"{n - len(ok)} of {n} streams did not open "
                     f"(statuses {sorted({pool.status(i) for i in range(n)})})"):
            return
        check(sse_slots(srv) == n, f"ringmaster_sse_streams {sse_slots(srv)} != {n}")
        api_answers(srv, f"with {n} idle streams")
        job = srv.submit(name="many-streams")  # POST with the token; publishes events
        mark = f'"job_id":{job["id"]}'.encode()
        missing = pool.wait(lambda i: mark in pool.buf[i] and b"event: event" in pool.buf[i], 60)
        check(not missing, f"{len(missing)} of {n} streams did not get the job's event "
              f"(e.g. #{min(missing) if missing else 0}: "
              f"{pool.buf[min(missing)][-200:] if missing else b''!r})")
        st, _, b = srv.request("GET", f"/api/v1/jobs/{job['id']}")
        check(st == 200, f"GET the job with {n} streams: {st}")
        pool.close()
        pool = None
        end = time.monotonic() + 60  # a deadline, not a threshold
        while sse_slots(srv) != 0 and time.monotonic() < end:
            time.sleep(0.1)
        check(sse_slots(srv) == 0, f"stream slots not given back: {sse_slots(srv)}")
        api_answers(srv, "after the streams left")
    finally:
        if pool:
            pool.close()
        rc = srv.stop()
        check(rc == 0, f"serve exit code {rc}")


def test_limit(binary, env, what):
    limit = 50
    srv = Server(binary, env=dict(env, RINGMASTER_SSE_MAX_STREAMS=str(limit)))
    pool = extra = None
    try:
        pool = StreamPool(srv.host, srv.port, limit)
        opened = sum(pool.status(i) == 200 for i in range(limit))
        check(opened == limit, f"{what}: {opened} of {limit} streams opened")
        extra = StreamPool(srv.host, srv.port, 1)
        extra.wait(lambda i: extra.closed(i), 20)  # 503 comes with Connection: close
        raw = extra.buf[0]
        head, _, body = raw.partition(b"\r\n\r\n")
        hdrs = {}
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.decode().partition(":")
            hdrs[k.strip().lower()] = v.strip()
        check(extra.status(0) == 503, f"{what}: stream #{limit + 1}: {raw[:200]!r}")
        check(hdrs.get("retry-after", "").isdigit(), f"{what}: Retry-After {hdrs.get('retry-after')}")
        try:
            check(json.loads(body)["error"]["code"] == "too_many_streams", f"{what}: {body!r}")
        except (ValueError, KeyError):
            check(False, f"{what}: 503 body {body!r}")
        api_answers(srv, f"{what}, at the stream limit")
    finally:
        rc = srv.stop()  # the streams are left open on purpose: stop with parked streams
        check(rc == 0, f"{what}: serve exit code {rc} with {limit} streams open")
        for p in (pool, extra):
            if p:
                p.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringmaster", required=True)
    ap.add_argument("--streams", type=int, default=2000)
    args = ap.parse_args()
    hard = raise_nofile()
    n = min(args.streams, max(0, (hard - 1200) // 2))  # the server keeps a reserve too
    if n < 100:
        print(f"SKIP: descriptor limit {hard} is too low for many streams")
        return 77
    test_many(args.ringmaster, n)
    test_limit(args.ringmaster, {}, "epoll pool")
    return verdict(f"ok ({n} streams)")


if __name__ == "__main__":
    sys.exit(main())
