"""test_session_nccl.py - a command job with "algorithm": "nccl".

  nccl   ringmaster run -n 3 --algorithm nccl -- session_nccl, with the stand-in
         GPU and the stand-in NCCL (test doubles) in the workers' environment:
         exit 0; every rank says its all-reduce of a device buffer ran on
         nccl and was exact, and logged that the generation's NCCL unique id
         came from rank 0 through the coordinator (the Barrier relay), not
         the data plane

  reform  the same with on_failure shrink; the program of launch index 2
         SIGKILLs itself before round 2 of 6: the survivors' NCCL all-reduce is
         aborted (ncclCommAbort), they re-form as generation 2 of 2 members with
         a new NCCL id (barrier nccl-id-g2, 2 arrivals) and finish every round
         on nccl, exact; the job succeeds
  --real N  the "nccl" check on the machine's own GPU runtime and libnccl (no test
            doubles; scripts/gpu-check, N = 1 on a one-GPU machine: NCCL
            refuses two ranks on one GPU)

  --doubles PATH  the tests' doubles (tests/doubles: libringmaster_doubles.so),
            named to the library as its GPU (RINGMASTER_TEST_GPU) and NCCL
            (RINGMASTER_NCCL_LIB); not with --real

usage: test_session_nccl.py --ringmaster PATH --worker PATH --program PATH
       (--doubles PATH | --real N)
"""
import argparse
import os
import shutil
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
    ap.add_argument("--doubles")
    ap.add_argument("mode", nargs="?", default="nccl", choices=["nccl", "reform"])
    a = ap.parse_args()
    n = a.real or 3
    if not a.real and not a.doubles:
        ap.error("--doubles PATH or --real N")
    doubles = {} if a.real else {"RINGMASTER_TEST_GPU": a.doubles, "RINGMASTER_NCCL_LIB": a.doubles}
    # the local launcher's workers, and so the programs, inherit the
    # coordinator's environment (a job's own env may not set RINGMASTER_*)
    logs = tempfile.mkdtemp(prefix="rm-nccl-logs-")
    srv = Server(a.ringmaster, extra=("--worker", a.worker, "--log-dir", logs), env=doubles)
    try:
        env = dict(os.environ, RINGMASTER_WORKER_BIN=a.worker)
        extra, prog = [], []
        if a.mode == "reform":
            extra = ["--on-failure", "shrink"]
            prog = ["--rounds", "6", "--kill-index", "2", "--kill-round", "2"]
        r = subprocess.run([a.ringmaster, "run", "-n", str(n), "--server", "http://" + srv.http,
                            "--token", srv.token, "--algorithm", "nccl", *extra,
                            "--", a.program, *prog], capture_output=True, text=True,
                           timeout=180, env=env)
        out = r.stdout + r.stderr
        if r.returncode != 0 and "no device memory" in out:
            print("SKIP: no device memory in the program (no GPU, or a build without test hooks)")
            return 77
        assert r.returncode == 0, (r.returncode, out[-4000:])
        survivors = n if a.mode == "nccl" else 2
        for rank in range(survivors):
            assert "rank %d: all-reduce of 65536 floats on nccl: ok" % rank in out, out[-4000:]
        if a.mode == "reform":
            for line in out.splitlines():
                if "round" in line or "re-formed" in line:
                    print(line)
            for rank in range(2):
                assert "rank %d: re-formed: generation 2, 2 members" % rank in out, out[-4000:]
        job = r.stdout.splitlines()[0].strip()
        st, _, body = srv.request("GET", "/api/v1/jobs/%s/barriers" % job)
        assert st == 200, (st, body)
        print("barriers:", body)
        relay = [b for b in body.get("barriers", []) if b.get("name") == "nccl-id-g1"]
        assert relay and relay[0]["state"] == "released" and relay[0]["arrived"] == n, \
            "no released nccl-id-g1 barrier of %d: %s" % (n, body)
        if a.mode == "reform":
            relay = [b for b in body.get("barriers", []) if b.get("name") == "nccl-id-g2"]
            assert relay and relay[0]["state"] == "released" and relay[0]["arrived"] == 2, \
                "no released nccl-id-g2 barrier of 2: %s" % body
            print("re-formed: generation 2 of 2 members on NCCL with its own id: ok")
        print("%d ranks: device all-reduce on NCCL, the id relayed by the coordinator "
              "(barrier nccl-id-g1): ok" % n)
        return 0
    finally:
        srv.stop()
        shutil.rmtree(logs, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
