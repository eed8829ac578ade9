"""soak_jobs.py - coordinator memory under many short jobs (benchmark, not a
test; bounded memory).

Starts `ringmaster serve` (temp db, free ports, RINGMASTER_JOB_RETENTION_MS
as given), then submits and at once cancels N jobs over one keep-alive REST
connection, printing the coordinator's resident set (VmRSS) every N/10 jobs.
With a short retention the RSS stays flat; with the retention past the run
(the behaviour before jobs were unloaded) it grows with every job kept.

  /usr/bin/python3 bench/coordinator/soak_jobs.py --ringmaster build/coordinator/ringmaster \
      [--jobs 100000] [--retention-ms 1000]
"""
import http.client
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "api"))
from rmserver import Server  # noqa: E402


def take(flag, default):
    if flag in sys.argv:
        i = sys.argv.index(flag)
        return sys.argv[i + 1]
    return default


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    n = int(take("--jobs", "100000"))
    keep = take("--retention-ms", "1000")
    srv = Server(take("--ringmaster", "build/coordinator/ringmaster"),
                 env={"RINGMASTER_JOB_RETENTION_MS": keep})
    try:
        c = http.client.HTTPConnection(srv.host, srv.port, timeout=30)
        h = {"Authorization": "Bearer " + srv.token, "Content-Type": "application/json"}
        body = json.dumps({"name": "soak", "world_size": 1, "launcher": "none"})
        print("| jobs | coordinator RSS MiB | jobs/s |")
        print("| ---: | ---: | ---: |")
        t0 = time.time()
        for i in range(1, n + 1):
            c.request("POST", "/api/v1/jobs", body, h)
            r = c.getresponse()
            job = json.loads(r.read())
            assert r.status == 201, (r.status, job)
            c.request("POST", "/api/v1/jobs/%d/cancel" % job["id"], "{}", h)
            r = c.getresponse()
            r.read()
            assert r.status == 200, r.status
            if i % max(1, n // 10) == 0:
                print("| %d | %.1f | %.0f |" % (i, rss_kb(srv.proc.pid) / 1024.0,
                                               i / (time.time() - t0)), flush=True)
    finally:
        srv.stop()


main()
