"""test_disk_full.py - a full disk answered honestly, for real.

The coordinator's database sits on a small tmpfs this test mounts (skipped,
exit 77, with a message where mounting is not allowed). Jobs are submitted
over REST until the refusals begin, then:
  - every 201 carried a different id; every refusal is 507 with the JSON
    error storage_full; /readyz is 503 storage_error (disk full); /healthz stays 200;
  - the tmpfs is grown (mount -o remount,size=...): with no restart,
    /readyz is 200 again and submissions are 201 again;
  - after a restart on the same file, every id that was answered 201 is
    there (GET 200) and the job count equals the 201s.
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from rmserver import Server, check, FAILS  # noqa: E402

SMALL = "600k"
LARGE = "8m"
LIMIT = 4000  # submissions before the test calls the disk never full


def sh(*args):
    return subprocess.run(args, capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringmaster", required=True)
    a = ap.parse_args()
    mnt = tempfile.mkdtemp(prefix="rm-full-")
    r = sh("mount", "-t", "tmpfs", "-o", "size=" + SMALL + ",mode=0700", "tmpfs", mnt)
    if r.returncode != 0:
        print("SKIP: cannot mount a tmpfs here:", r.stderr.strip())
        os.rmdir(mnt)
        return 77
    srv = None
    try:
        db = os.path.join(mnt, "rm.db")
        srv = Server(a.ringmaster, db=db)
        ids, refused = [], []
        for i in range(LIMIT):
            st, _, j = srv.request("POST", "/api/v1/jobs", {"name": "full-%d" % i, "launcher": "none",
                                                          "world_size": 1}, token=srv.token)
            if st == 201:
                ids.append(j["id"])
                continue
            refused.append((st, j))
            if len(refused) >= 20:
                break
        check(len(refused) >= 20, "the disk never filled (%d jobs stored)" % len(ids))
        check(len(set(ids)) == len(ids), "an id was handed out twice")
        for st, j in refused:
            code = j.get("error", {}).get("code") if isinstance(j, dict) else None
            check(st == 507 and code == "storage_full", "refusal: %s %s" % (st, j))
        st, _, j = srv.request("GET", "/readyz")
        check(st == 503 and j.get("error", {}).get("code") == "storage_error"
              and "disk full" in j["error"]["message"],
              "readyz while full: %s %s" % (st, j))
        st, _, _ = srv.request("GET", "/healthz")
        check(st == 200, "healthz while full: %s" % st)
        st, _, text = srv.request("GET", "/metrics")
        check("ringmaster_store_writable 0" in text, "metrics: store not shown failing")

        r = sh("mount", "-o", "remount,size=" + LARGE, mnt)
        check(r.returncode == 0, "remount: " + r.stderr)
        st, _, j = srv.request("GET", "/readyz")
        check(st == 200, "readyz after the disk grew: %s %s" % (st, j))
        for i in range(5):
            st, _, j = srv.request("POST", "/api/v1/jobs", {"name": "after-%d" % i, "launcher": "none",
                                                          "world_size": 1}, token=srv.token)
            if check(st == 201, "submit after the disk grew: %s %s" % (st, j)):
                ids.append(j["id"])
        check(len(set(ids)) == len(ids), "an id was handed out twice (after growing)")
        srv.stop()

        srv = Server(a.ringmaster, db=db)
        for i in ids:
            st, _, j = srv.request("GET", "/api/v1/jobs/%d" % i)
            check(st == 200, "acknowledged job %d lost after the restart: %s" % (i, st))
        st, _, j = srv.request("GET", "/api/v1/jobs?limit=1")
        check(st == 200 and j.get("total") == len(ids),
              "jobs stored %s, acknowledged %d" % (j.get("total") if isinstance(j, dict) else j, len(ids)))
        print("stored %d jobs before the disk filled; %d refusals (507)" % (len(ids) - 5, len(refused)))
    finally:
        if srv:
            srv.stop()
        sh("umount", mnt)
        os.rmdir(mnt)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
