"""A job that asks for checkpoints gets them or a clear failure:
a ckpt_dir whose parents do not exist is created (the checkpoints
are there after the job); a ckpt_dir that cannot be a folder (its parent is
a regular file) fails the job at the first checkpoint with a reason and a
worker_failed event that name the step, the folder and the system's words,
instead of a warning in a worker log and a job without checkpoints. The
same for a ckpt_dir on a full file system (a tmpfs this test mounts and
fills; that part is skipped with a message where mounting is not allowed):
the reason and the event say "No space left on device"."""
import glob
import os
import subprocess
import tempfile

import rc


def run(env, name, ckpt_dir):
    opts = rc.train_opts(env).replace("ckpt_dir=%s" % os.path.join(env.dir, "ckpt"),
                                      "ckpt_dir=%s" % ckpt_dir)
    job = env.submit(name=name, world_size=2, steps=12, heartbeat_timeout_ms=3000,
                     workload="train", workload_options=opts, checkpoint_every=5)
    ws = rc.start(env, job, 2)
    done = (env.m.JOB_STATE_SUCCEEDED, env.m.JOB_STATE_FAILED)
    j = env.wait_job(job.id, lambda j: j.state in done, 90)
    codes = [rc.wait_exit(w, 60) for w in ws]
    return job, j, codes


def test(env):
    env.start_coordinator()
    deep = os.path.join(env.dir, "not", "there", "yet")
    job, j, codes = run(env, "deep", deep)
    assert j.state == env.m.JOB_STATE_SUCCEEDED, (j, env.worker_log(0))
    assert codes == [0, 0], codes
    files = glob.glob(os.path.join(deep, "*"))
    assert files, "no checkpoint written under %s" % deep

    blocker = os.path.join(env.dir, "a-file")
    with open(blocker, "w") as f:
        f.write("not a folder\n")
    job, j, codes = run(env, "blocked", os.path.join(blocker, "ckpt"))
    assert j.state == env.m.JOB_STATE_FAILED, j
    assert "checkpoint of step 5 not written" in j.reason, j.reason
    assert "a-file" in j.reason and "Not a directory" in j.reason, j.reason
    failed = [e for e in env.events(job.id, job.token) if e.kind == "worker_failed"]
    assert failed and "checkpoint of step 5 not written" in failed[0].message, failed
    assert any(c != 0 for c in codes), codes

    mnt = tempfile.mkdtemp(prefix="rm-ckpt-full-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(mnt)
        print("SKIP (full disk part): cannot mount a tmpfs here:", r.stderr.strip())
        return
    try:
        rc.rmtest.fill_disk(os.path.join(mnt, "filler"))
        job, j, codes = run(env, "full", os.path.join(mnt, "ckpt"))
        assert j.state == env.m.JOB_STATE_FAILED, j
        assert "checkpoint of step 5 not written" in j.reason, j.reason
        assert "No space left on device" in j.reason, j.reason
        failed = [e for e in env.events(job.id, job.token) if e.kind == "worker_failed"]
        assert failed and "No space left on device" in failed[0].message, failed
        print("full checkpoint folder:", j.reason)
    finally:
        subprocess.run(["umount", mnt], capture_output=True)
        os.rmdir(mnt)


rc.main(test)
