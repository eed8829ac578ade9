#!/usr/bin/python3
"""test_prometheus.py - /metrics is valid for Prometheus, for real.

1. `promtool check metrics` accepts /metrics of a live coordinator.
2. A real Prometheus (Debian's package) is started on a free port with a
   temporary config and storage dir, scrapes the coordinator every 500 ms,
   and its HTTP API answers a query about it: ringmaster_jobs{state="pending"}
   equals the number of jobs the test submitted. Stopped by PID.
Skips (exit 0 with a message) when promtool/prometheus are not installed.

usage: test_prometheus.py --ringmaster PATH
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rmserver import args as rmserver_args  # noqa: E402
from rmserver import Server, terminate  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from rmtestutil import free_port  # noqa: E402


def query(port, q):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def main():
    a = rmserver_args()
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    if not promtool or not prometheus:
        print("SKIP: Debian's prometheus package (promtool, prometheus) is not installed")
        return 0
    srv = Server(a.ringmaster)
    prom = None
    tmp = tempfile.TemporaryDirectory(prefix="rm-prom-")
    ok = False
    try:
        for i in range(3):
            srv.submit(name=f"prom-{i}", world_size=2)
        st, _, text = srv.request("GET", "/metrics")
        assert st == 200, st
        chk = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                             text=True, timeout=30)
        if chk.returncode != 0:
            print("FAIL: promtool check metrics:", chk.stdout, chk.stderr, file=sys.stderr)
            return 1
        for fam in ("ringmaster_jobs", "ringmaster_workers", "ringmaster_step_seconds",
                    "ringmaster_barrier_wait_seconds", "ringmaster_allreduce_bytes_total",
                    "ringmaster_allreduce_seconds_total", "ringmaster_stragglers"):
            if f"# TYPE {fam} " not in text:
                print(f"FAIL: family {fam} missing from /metrics", file=sys.stderr)
                return 1
        port = free_port()
        cfg = os.path.join(tmp.name, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 500ms\n  evaluation_interval: 500ms\n"
                    "scrape_configs:\n  - job_name: ringmaster\n    scrape_interval: 500ms\n"
                    f"    static_configs:\n      - targets: ['{srv.http}']\n")
        log = open(os.path.join(tmp.name, "prometheus.log"), "w")
        prom = subprocess.Popen([prometheus, f"--config.file={cfg}",
                                 f"--storage.tsdb.path={tmp.name}/data",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        last = None
        while time.monotonic() < deadline and not ok:
            time.sleep(0.5)
            if prom.poll() is not None:
                break
            try:
                r = query(port, 'ringmaster_jobs{state="pending",job="ringmaster"}')
                up = query(port, 'up{job="ringmaster"}')
            except OSError as e:
                last = str(e)
                continue
            res = r.get("data", {}).get("result", [])
            last = (res, up.get("data", {}).get("result"))
            ok = len(res) == 1 and res[0]["value"][1] == "3"
        if not ok:
            log.flush()
            with open(os.path.join(tmp.name, "prometheus.log")) as f:
                tail = f.read()[-2000:]
            print(f"FAIL: Prometheus never answered 3 pending jobs; last {last}\n{tail}",
                  file=sys.stderr)
    finally:
        if prom is not None:
            terminate(prom, 20)
        srv.stop()
        tmp.cleanup()
    if ok:
        print("api prometheus: promtool ok; Prometheus scraped and answered the query")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
