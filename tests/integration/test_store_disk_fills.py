"""A running 4-worker job while the coordinator's disk fills and is then
grown (docs/storage.md): the database sits on a tmpfs this test mounts
(skipped, 77, where mounting is not allowed); once the job trains, a filler
file takes every free byte, so the coordinator's writes fail with
SQLITE_FULL; after a few seconds the tmpfs is grown (mount -o remount).
Checked:
  * the coordinator said so (its log: "store: writes are failing" and
    "writes succeed again"), and no job was torn down by it: the job
    finishes SUCCEEDED with every step;
  * after a coordinator restart the job is SUCCEEDED at the same step in
    the database (nothing acknowledged is missing)."""
import os
import subprocess
import tempfile
import time

import rmtest


def sh(*args):
    return subprocess.run(args, capture_output=True, text=True)


def test(env):
    mnt = tempfile.mkdtemp(prefix="rm-fills-")
    r = sh("mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", mnt)
    if r.returncode != 0:
        os.rmdir(mnt)
        print("SKIP: cannot mount a tmpfs here:", r.stderr.strip())
        raise SystemExit(77)
    try:
        env.db = os.path.join(mnt, "ringmaster.db")
        env.start_coordinator()
        job = env.submit(name="fills", world_size=4, steps=400, heartbeat_timeout_ms=6000,
                         workload="synthetic", workload_options="bytes=4096,compute_ms=10")
        ws = [env.start_worker(job, i) for i in range(4)]
        env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 20, 60)
        filler = os.path.join(mnt, "filler")
        rmtest.fill_disk(filler)
        time.sleep(3)
        r = sh("mount", "-o", "remount,size=64m", mnt)
        assert r.returncode == 0, r.stderr
        j = env.wait_job(job.id, lambda j: j.state in (env.m.JOB_STATE_SUCCEEDED, env.m.JOB_STATE_FAILED,
                                                        env.m.JOB_STATE_CANCELLED), 180)
        assert j.state == env.m.JOB_STATE_SUCCEEDED, j
        for w in ws:
            rmtest.wait_exit(w, 30)
        with open(os.path.join(env.dir, "coord.log"), "rb") as f:
            log = f.read().decode(errors="replace")
        assert "store: writes are failing" in log, "the disk never filled under the job"
        assert "store: writes succeed again" in log, "the store never recovered"
        env.kill_coordinator()
        env.start_coordinator()
        again = env.get(job.id)
        assert again.state == env.m.JOB_STATE_SUCCEEDED and again.step == j.step, (again, j)
        env.kill_coordinator()
        print("4-worker job through a full disk: SUCCEEDED at step", j.step,
              "; failing-store log lines", log.count("store: writes are failing"))
    finally:
        env.close()
        sh("umount", mnt)
        os.rmdir(mnt)


rmtest.main(test)
