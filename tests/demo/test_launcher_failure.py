"""A launcher failure marks the job failed with the launcher's message.

1. sbatch refuses: the coordinator runs with a PATH whose first folder holds a
   stand-in `sbatch` that prints Slurm's refusal on stderr and exits 1 (what a
   real sbatch does when the partition is unknown or no controller answers;
   the real one retries for up to a minute first, hence the stand-in). A job
   with launcher "slurm" -> state failed, reason containing sbatch's message,
   a launcher event in the history, no worker started.
2. sbatch missing: PATH with no sbatch at all -> failed, and the reason names
   sbatch.
The coordinator keeps serving afterwards: a local job on it still succeeds.
"""
import os
import shutil
import stat
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rmdemo  # noqa: E402

MSG = "sbatch: error: Batch job submission failed: Invalid partition name specified"
SPEC = {"name": "slurm-refused", "world_size": 2, "launcher": "slurm",
        "workload": "train", "steps": 10}


def fake_bin(root):
    d = os.path.join(root, "fakebin")
    os.makedirs(d)
    p = os.path.join(d, "sbatch")
    with open(p, "w") as f:
        f.write("#!/bin/sh\necho '%s' >&2\nexit 1\n" % MSG)
    os.chmod(p, stat.S_IRWXU)
    return d


def failed_with(c, needle):
    job = c.submit(SPEC)
    info = c.wait_state(job["id"], 60)
    print("job %d: %s: %s" % (info["id"], info["state"], info["reason"]))
    assert info["state"] == "failed", info
    assert needle in info["reason"], "reason %r lacks %r" % (info["reason"], needle)
    assert info["workers_joined"] == 0, info
    return info


def test(opts):
    tmp = tempfile.mkdtemp(prefix="rm-fake-sbatch-")
    c = rmdemo.Coordinator(opts["coordinator"], opts["worker"],
                           env={"PATH": fake_bin(tmp) + ":/usr/bin:/bin"})
    try:
        info = failed_with(c, "Invalid partition name specified")
        ev = c.get("/api/v1/jobs/%d/events" % info["id"])["events"]
        assert any("Invalid partition name" in e["message"] for e in ev), ev
        assert c.children() == [], c.children()
        job = c.submit({"name": "after", "world_size": 2, "workload": "train", "steps": 10})
        assert c.wait_state(job["id"], 120)["state"] == "succeeded"
    finally:
        c.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    c = rmdemo.Coordinator(opts["coordinator"], opts["worker"],
                           env={"PATH": "/nonexistent-ringmaster-test"})
    try:
        failed_with(c, "sbatch")
    finally:
        c.cleanup()


if __name__ == "__main__":
    sys.exit(rmdemo.run(test, sys.argv))
