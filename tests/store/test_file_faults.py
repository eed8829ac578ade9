"""test_file_faults.py - the coordinator's files failing under it, each
answered with a precise status and log line (docs/storage.md).

  1. The database's writes failing at the system call (test hook
     RINGMASTER_TEST_STORE_FAIL=N:eio|erofs:K, test builds only: write(2)
     and pwrite(2) fail with EIO / EROFS under SQLite, as on a failing
     device or a file system the kernel remounted read-only), and SQLite
     refusing writes (N:readonly:K, SQLITE_READONLY): each refusal is 503
     storage_error with the system's words; /readyz is 503 with them while
     writes fail; the log says so once; every 201 id is unique and present
     after a restart, and the job count equals the 201s.
  2. A database this process may not write (mode 0444, run as a user
     other than root, since root writes it anyway): `serve` exits
     non-zero naming the file and "read-only" instead of serving a
     coordinator that refuses every write.
  3. A database on a file system mounted read-only (a tmpfs this test
     mounts; skipped with a message where mounting is not allowed):
     `serve` exits non-zero with "Read-only file system".
  4. The worker log folder on a read-only file system: a `local` job fails
     with a reason naming the folder and "Read-only file system".
  5. The worker log folder's file system full while a `local` job runs:
     an event `worker_logs_failing` (and one log line) says the output is
     being lost; after space returns, `worker_logs_ok`.
Exit 77 when neither the hooks nor mounting are available.
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from rmserver import Server, check, FAILS  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from rmtestutil import poll  # noqa: E402

RAN = []


def sh(*args):
    return subprocess.run(args, capture_output=True, text=True)


def mount_tmpfs(size, ro=False):
    mnt = tempfile.mkdtemp(prefix="rm-ff-")
    opts = "size=%s,mode=0755%s" % (size, ",ro" if ro else "")
    r = sh("mount", "-t", "tmpfs", "-o", opts, "tmpfs", mnt)
    if r.returncode != 0:
        os.rmdir(mnt)
        print("SKIP (mounting): cannot mount a tmpfs here:", r.stderr.strip())
        return None
    return mnt


def unmount(mnt):
    sh("umount", mnt)
    os.rmdir(mnt)


def log_of(srv):
    with open(srv.log.name, errors="replace") as f:
        return f.read()


def hook_faults(binary):
    words = {"eio": "disk I/O error: Input/output error",
             "erofs": "disk I/O error: Read-only file system",
             "readonly": "attempt to write a readonly database"}
    for kind, said in words.items():
        srv = Server(binary, env={"RINGMASTER_TEST_STORE_FAIL": "12:%s:20" % kind})
        db = srv.proc.args[srv.proc.args.index("--db") + 1]
        ids, refused, ready, order = [], [], None, ""
        try:
            for i in range(40):
                st, _, j = srv.request("POST", "/api/v1/jobs", {"name": "%s-%d" % (kind, i), "launcher": "none",
                                                              "world_size": 1}, token=srv.token)
                order += "a" if st == 201 else "r"
                if st == 201:
                    ids.append(j["id"])
                    continue
                refused.append((st, j))
                if ready is None:
                    ready = srv.request("GET", "/readyz")
            if not refused:
                print("SKIP (hooks): the coordinator has no test hooks (no write failed)")
                return
            RAN.append(kind)
            check(len(set(ids)) == len(ids), "%s: an id was handed out twice" % kind)
            for st, j in refused:
                err = j.get("error", {}) if isinstance(j, dict) else {}
                check(st == 503 and err.get("code") == "storage_error" and said in err.get("message", ""),
                      "%s: refusal %s %s" % (kind, st, j))
            st, _, j = ready
            check(st == 503 and j.get("error", {}).get("code") == "storage_error"
                  and said in j["error"]["message"], "%s: readyz while failing: %s %s" % (kind, st, j))
            check(order.rstrip("a") != order, "%s: nothing stored after the faults, no restart: %s" % (kind, order))
            log = log_of(srv)
            check(log.count("store: writes are failing (%s)" % said) == 1,
                  "%s: not one log line for the state change" % kind)
            # the file as this coordinator left it, read by a new one
            srv.proc.terminate()
            srv.proc.wait(timeout=15)
            again = Server(binary, db=db)
            try:
                for i in ids:
                    st, _, _ = again.request("GET", "/api/v1/jobs/%d" % i)
                    check(st == 200, "%s: acknowledged job %d lost: %s" % (kind, i, st))
                st, _, j = again.request("GET", "/api/v1/jobs?limit=1")
                check(st == 200 and j.get("total") == len(ids),
                      "%s: jobs stored %s, acknowledged %d" % (kind, j.get("total"), len(ids)))
            finally:
                again.stop()
            print("%s: %d stored, %d refused (503: %s)" % (kind, len(ids), len(refused), said))
        finally:
            srv.stop()


def serve_fails(binary, db, as_user=None):
    """Run serve on db; (exit code, stderr) once it exits (it must, at once)."""
    def drop():
        os.setgid(65534)
        os.setuid(65534)
    p = subprocess.Popen([binary, "serve", "--db", db, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, RINGMASTER_API_TOKEN="t"), preexec_fn=drop if as_user else None)
    try:
        _, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return None, "still serving"
    return p.returncode, err


def readonly_db(binary):
    root = os.geteuid() == 0
    d = tempfile.mkdtemp(prefix="rm-ro-")
    try:
        if root:
            os.chmod(d, 0o755)
            os.chown(d, 65534, 65534)
        db = os.path.join(d, "rm.db")
        # a stored database first, by the same user
        p = subprocess.Popen([binary, "serve", "--db", db, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             env=dict(os.environ, RINGMASTER_API_TOKEN="t"),
                             preexec_fn=(lambda: (os.setgid(65534), os.setuid(65534))) if root else None)
        for line in p.stdout:
            if b"http listening on" in line:
                break
        p.terminate()
        p.wait(timeout=15)
        check(os.path.exists(db), "no database was made")
        os.chmod(db, 0o444)
        code, err = serve_fails(binary, db, as_user=root)
        RAN.append("readonly-file")
        check(code not in (None, 0) and "is read-only" in err and db in err,
              "serve on a 0444 database: exit %s: %s" % (code, err.strip()[-300:]))
        print("0444 database: exit %s: %s" % (code, err.strip().splitlines()[-1] if err.strip() else ""))
    finally:
        subprocess.run(["rm", "-rf", d])


def readonly_mount(binary):
    mnt = mount_tmpfs("4m")
    if not mnt:
        return
    try:
        db = os.path.join(mnt, "rm.db")
        srv = Server(binary, db=db)
        srv.submit(name="before")
        srv.stop()
        r = sh("mount", "-o", "remount,ro", mnt)
        check(r.returncode == 0, "remount ro: " + r.stderr)
        code, err = serve_fails(binary, db)
        RAN.append("readonly-mount")
        check(code not in (None, 0) and "Read-only file system" in err,
              "serve on a read-only file system: exit %s: %s" % (code, err.strip()[-300:]))
        print("database on a read-only mount: exit %s: %s" % (code, err.strip().splitlines()[-1] if err.strip() else ""))
    finally:
        unmount(mnt)


def events(srv, job, kind):
    st, _, j = srv.request("GET", "/api/v1/jobs/%d/events" % job)
    return [e for e in j.get("events", [])] if st == 200 else []


def wait_for(what, fn, timeout):
    """fn()'s first true value within timeout s, else None (what: the
    reader's name for it)."""
    return poll(fn, timeout)


def log_folder_readonly(binary, worker):
    mnt = mount_tmpfs("1m", ro=True)
    if not mnt:
        return
    srv = None
    try:
        srv = Server(binary, extra=("--log-dir", mnt, "--worker", worker))
        job = srv.submit(name="ro-logs", launcher="local", world_size=1, steps=50, workload="synthetic")
        j = wait_for("failed", lambda: (lambda r: r[2] if r[2].get("state") == "failed" else None)(
            srv.request("GET", "/api/v1/jobs/%d" % job["id"])), 30)
        RAN.append("log-folder-readonly")
        check(j is not None and "Read-only file system" in j.get("reason", "") and mnt in j.get("reason", ""),
              "a job whose log folder is read-only: %s" % (j,))
        print("log folder read-only: job failed: %s" % (j or {}).get("reason"))
    finally:
        if srv:
            srv.stop()
        unmount(mnt)


def log_folder_full(binary, worker):
    mnt = mount_tmpfs("2m")
    if not mnt:
        return
    srv = None
    try:
        srv = Server(binary, extra=("--log-dir", mnt, "--worker", worker))
        job = srv.submit(name="full-logs", launcher="local", world_size=1, steps=100000, workload="synthetic",
                         workload_options="bytes=1024,compute_ms=20")["id"]
        running = wait_for("running", lambda: srv.request("GET", "/api/v1/jobs/%d" % job)[2].get("state") == "running",
                           30)
        check(running, "the job never ran")
        filler = os.path.join(mnt, "filler")
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:  # every free byte
            while os.write(fd, b"\0" * 4096) > 0:
                pass
        except OSError:
            pass
        os.close(fd)
        failing = wait_for("failing", lambda: [e for e in events(srv, job, None) if e["kind"] == "worker_logs_failing"],
                           15)
        os.unlink(filler)
        ok = wait_for("ok", lambda: [e for e in events(srv, job, None) if e["kind"] == "worker_logs_ok"], 15)
        RAN.append("log-folder-full")
        check(failing and "full" in failing[0]["message"] and "job-%d" % job in failing[0]["message"],
              "no worker_logs_failing event for a full log folder: %s" % (failing,))
        check(ok and "can be written again" in ok[0]["message"], "no worker_logs_ok event: %s" % (ok,))
        check(len(failing or []) == 1, "one event per state change, not %d" % len(failing or []))
        st, _, j = srv.request("GET", "/api/v1/jobs/%d" % job)
        check(j.get("state") == "running", "the job was torn down by its log folder: %s" % j.get("state"))
        log = log_of(srv)
        check(log.count("worker logs in") == 1, "not one log line (warn) for the folder failing")
        srv.request("POST", "/api/v1/jobs/%d/cancel" % job, {}, token=srv.token)
        print("log folder full: %s / %s" % (failing[0]["message"] if failing else None,
                                            ok[0]["message"] if ok else None))
    finally:
        if srv:
            srv.stop()
        unmount(mnt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringmaster", required=True)
    ap.add_argument("--worker", required=True)
    a = ap.parse_args()
    hook_faults(a.ringmaster)
    readonly_db(a.ringmaster)
    readonly_mount(a.ringmaster)
    log_folder_readonly(a.ringmaster, a.worker)
    log_folder_full(a.ringmaster, a.worker)
    if not RAN:
        return 77
    print("ran:", ", ".join(RAN))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
