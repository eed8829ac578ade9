#!/usr/bin/env python3
"""store_soak.py - a coordinator's RSS against the jobs it has finished.

Starts a real `ringmaster serve` on a temp database, then submits and
cancels jobs (launcher none) over REST, N in all (default 100,000), and
prints the coordinator's VmRSS every STEP jobs. With the retention of
coordinator/core/job.c (RINGMASTER_JOB_RETAIN finished jobs loaded, the rest
read from SQLite when asked) the column flattens once that many have
finished; before it, it grew about 11 KB a job.

  bench/store_soak.py --ringmaster build/coordinator/ringmaster [--jobs N] [--step S]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "api"))
from rmserver import Server  # noqa: E402


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringmaster", required=True)
    ap.add_argument("--jobs", type=int, default=100000)
    ap.add_argument("--step", type=int, default=5000)
    a = ap.parse_args()
    srv = Server(a.ringmaster)
    t0 = time.monotonic()
    try:
        print("%10s %10s %8s" % ("jobs", "rss_kb", "s"))
        print("%10d %10d %8.1f" % (0, rss_kb(srv.proc.pid), 0.0))
        for i in range(1, a.jobs + 1):
            j = srv.submit(name="soak-%d" % i)
            st, _, _ = srv.request("POST", "/api/v1/jobs/%d/cancel" % j["id"], {}, token=srv.token)
            if st != 200:
                print("cancel %d: %d" % (j["id"], st), file=sys.stderr)
                return 1
            if i % a.step == 0:
                print("%10d %10d %8.1f" % (i, rss_kb(srv.proc.pid), time.monotonic() - t0), flush=True)
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
