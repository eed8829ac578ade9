#!/usr/bin/python3
"""sse_idle.py - a measurement, not a test: what 10,000 idle event
streams cost the HTTP layer.

For each mode asked (--threads: RINGMASTER_HTTP_THREADS values; 8 = the
default epoll pool; the thread-per-connection mode was dropped, see api/http.c), against a real
`ringmaster serve`:
  - /healthz latency, median and p99 over --requests sequential requests
    (a new connection each), with no stream open;
  - the time to open --streams idle streams (one non-blocking client);
  - the same /healthz latency with them open, and GET /api/v1/jobs once;
  - the coordinator's RSS and thread count (/proc/PID/status) with them open;
  - the time from POST /api/v1/jobs to the job's event on every stream.
Prints one block of figures per mode (and JSON with --json).

usage: sse_idle.py --ringmaster PATH [--streams 10000] [--requests 200]
                   [--threads 8,0] [--json]
"""
import argparse
import http.client
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "api"))
from rmserver import Server  # noqa: E402
from test_sse_many import StreamPool, raise_nofile  # noqa: E402


def latency(srv, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        c = http.client.HTTPConnection(srv.host, srv.port, timeout=30)
        c.request("GET", "/healthz")
        r = c.getresponse()
        r.read()
        c.close()
        assert r.status == 200, r.status
        out.append((time.perf_counter() - t) * 1000)
    out.sort()
    return {"median_ms": round(statistics.median(out), 3),
            "p99_ms": round(out[min(len(out) - 1, int(len(out) * 0.99))], 3)}


def proc_status(pid):
    st = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            st[k] = v.strip()
    return {"rss_mib": round(int(st["VmRSS"].split()[0]) / 1024, 1), "threads": int(st["Threads"])}


def one_mode(binary, threads, n, requests):
    env = {"RINGMASTER_HTTP_THREADS": str(threads), "RINGMASTER_SSE_MAX_STREAMS": str(n),
           "RINGMASTER_HTTP_MAX_CONNECTIONS": str(n + n // 5 + 16)}
    srv = Server(binary, env=env)
    res = {"mode": f"epoll pool, {threads} threads" if threads else "thread per connection",
           "streams": n}
    pool = None
    try:
        res["idle"] = proc_status(srv.proc.pid)
        res["healthz_no_streams"] = latency(srv, requests)
        t = time.perf_counter()
        pool = StreamPool(srv.host, srv.port, n, deadline_s=300)
        res["open_s"] = round(time.perf_counter() - t, 2)
        res["opened"] = sum(pool.status(i) == 200 for i in range(n))
        time.sleep(2)  # let every stream park
        res["with_streams"] = proc_status(srv.proc.pid)
        res["healthz_with_streams"] = latency(srv, requests)
        t = time.perf_counter()
        st, _, _ = srv.request("GET", "/api/v1/jobs")
        res["jobs_list_ms"] = round((time.perf_counter() - t) * 1000, 2)
        for i in range(n):
            pool.buf[i] = b""
        t = time.perf_counter()
        job = srv.submit(name="bench")
        mark = f'"job_id":{job["id"]}'.encode()
        missing = pool.wait(lambda i: mark in pool.buf[i], 120)
        res["event_to_all_ms"] = round((time.perf_counter() - t) * 1000, 1)
        res["event_missing"] = len(missing)
    finally:
        if pool:
            pool.close()
        t = time.perf_counter()
        res["stop_rc"] = srv.stop()
        res["stop_s"] = round(time.perf_counter() - t, 2)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringmaster", required=True)
    ap.add_argument("--streams", type=int, default=10000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--threads", default="8")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    hard = raise_nofile()
    if hard < args.streams + 1200:
        print(f"descriptor limit {hard} is too low for {args.streams} streams", file=sys.stderr)
        return 2
    out = [one_mode(args.ringmaster, int(t), args.streams, args.requests)
           for t in args.threads.split(",")]
    for r in out:
        print(json.dumps(r) if args.json else "\n".join(f"  {k}: {v}" for k, v in r.items()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
