"""A job that asks for checkpoints gets them or a clear failure (issue 11,
item 10): a ckpt_dir whose parents do not exist is created (the checkpoints
are there after the job); a ckpt_dir that cannot be a folder (its parent is
a regular file) fails the job at the first checkpoint with a reason and a
worker_failed event that name the step, the folder and the system's words,
instead of a warning in a worker log and a job without checkpoints."""
import glob
import os

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


rc.main(test)
