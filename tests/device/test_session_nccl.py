"""test_session_nccl.py - a command job with "algorithm": "nccl" (issue 15).

  nccl   ringmaster run -n 3 --algorithm nccl -- session_nccl, with the stand-in
         GPU and the stand-in NCCL (test doubles) in the workers' environment:
         exit 0; every rank says its all-reduce of a device buffer ran on
         nccl and was exact, and logged that the generation's NCCL unique id
         came from rank 0 through the coordinator (the Barrier relay), not
         the data plane

  --real N  the same on the machine's own GPU runtime and libnccl (no test
            doubles; scripts/gpu-check, N = 1 on a one-GPU machine: NCCL
            refuses two ranks on one GPU)

usage: test_session_nccl.py --ringmaster PATH --worker PATH --program PATH [--real N]
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from rmserver import Server  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringmaster", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("--real", type=int, default=0)
    a = ap.parse_args()
    n = a.real or 3
    doubles = {} if a.real else {"RINGMASTER_TEST_GPU": "standin", "RINGMASTER_TEST_NCCL": "standin"}
    # the local launcher's workers, and so the programs, inherit the
    # coordinator's environment (a job's own env may not set RINGMASTER_*)
    srv = Server(a.ringmaster, extra=("--worker", a.worker, "--log-dir",
                                      tempfile.mkdtemp(prefix="rm-nccl-logs-")),
                 env=doubles)
    try:
        env = dict(os.environ, RINGMASTER_WORKER_BIN=a.worker)
        r = subprocess.run([a.ringmaster, "run", "-n", str(n), "--server", "http://" + srv.http,
                            "--token", srv.token, "--algorithm", "nccl",
                            "--", a.program], capture_output=True, text=True, timeout=180,
                           env=env)
        out = r.stdout + r.stderr
        if r.returncode != 0 and "no device memory" in out:
            print("SKIP: no device memory in the program (no GPU, or a build without test hooks)")
            return 77
        assert r.returncode == 0, (r.returncode, out[-4000:])
        for rank in range(n):
            assert "rank %d: all-reduce of 65536 floats on nccl: ok" % rank in out, out[-4000:]
        job = r.stdout.splitlines()[0].strip()
        st, _, body = srv.request("GET", "/api/v1/jobs/%s/barriers" % job)
        assert st == 200, (st, body)
        print("barriers:", body)
        relay = [b for b in body.get("barriers", []) if b.get("name") == "nccl-id-g1"]
        assert relay and relay[0]["state"] == "released" and relay[0]["arrived"] == n, \
            "no released nccl-id-g1 barrier of %d: %s" % (n, body)
        print("%d ranks: device all-reduce on NCCL, the id relayed by the coordinator "
              "(barrier nccl-id-g1): ok" % n)
        return 0
    finally:
        srv.stop()


if __name__ == "__main__":
    sys.exit(main())
