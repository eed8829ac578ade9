"""test_db_lock.py - one coordinator per database (coordinator/store/store.c
ONE COORDINATOR PER DATABASE), with real `ringmaster serve` processes:
  - a second serve on the database a running one uses exits non-zero at
    once, its error naming the holder's pid and host; it never listens;
  - the lock file is mode 0600 and names the holder;
  - after the holder is SIGKILLed (its lock file left behind), a new serve
    on the same file starts at once and serves the jobs stored before.
"""
import argparse
import os
import signal
import socket
import stat
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from rmserver import Server, check, FAILS  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringmaster", required=True)
    a = ap.parse_args()
    first = Server(a.ringmaster)
    db = os.path.join(first.tmp.name, "rm.db")
    job = first.submit(name="locked")
    lock = db + ".lock"
    st = os.stat(lock)
    check(stat.S_IMODE(st.st_mode) == 0o600, "lock file mode %o" % stat.S_IMODE(st.st_mode))
    with open(lock) as f:
        held = f.read()
    check("pid %d" % first.proc.pid in held and socket.gethostname() in held,
          "lock file names the holder: %r" % held)
    r = subprocess.run([a.ringmaster, "serve", "--db", db, "--grpc", "127.0.0.1:0", "--http",
                        "127.0.0.1:0"], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, RINGMASTER_API_TOKEN="x"))
    out = r.stdout + r.stderr
    check(r.returncode != 0, "second serve exited %d" % r.returncode)
    check("pid %d" % first.proc.pid in out and socket.gethostname() in out,
          "second serve names the holder: %r" % out[-400:])
    check("listening" not in r.stdout, "second serve listened: %r" % r.stdout)

    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(timeout=10)
    check(os.path.exists(lock), "lock file left by the SIGKILLed holder")
    second = Server(a.ringmaster, db=db)
    st, _, j = second.request("GET", "/api/v1/jobs/%d" % job["id"])
    check(st == 200 and j.get("spec", {}).get("name") == "locked", "job after the restart: %s %s" % (st, j))
    with open(lock) as f:
        check("pid %d" % second.proc.pid in f.read(), "lock file names the new holder")
    second.stop()
    first.stop()  # already dead: closes its pipes and removes its temp dir
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
