"""rm_session_join refusals, seen from a program (examples/c/
session_allreduce run by hand with the RINGMASTER_* variables an agent
would set): each fails at once or within its deadline with the status and
words that say why, and exits 1 without hanging.
  no variables        -> says which ones must be set
  wrong token         -> RM_ERR_DENIED
  unknown job         -> RM_ERR_NOT_FOUND
  nobody listening    -> RM_ERR_UNAVAILABLE after RINGMASTER_COORDINATOR_TIMEOUT_MS
  a job already over  -> RM_ERR_JOB_ENDED naming its state"""
import os
import socket
import subprocess

import sess


def run(extra, timeout=30):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGMASTER_")}
    env.update(extra)
    p = subprocess.run([sess.EXAMPLE, "--steps", "1"], env=env, capture_output=True,
                       timeout=timeout)
    return p.returncode, p.stderr.decode(errors="replace")


def test(env):
    sess.start(env)
    job = env.submit(name="refusals", world_size=2, workload="command", command=["/bin/true"])
    base = {"RINGMASTER_COORDINATOR": env.addr, "RINGMASTER_JOB": str(job.id),
            "RINGMASTER_TOKEN": job.token, "RINGMASTER_COORDINATOR_TIMEOUT_MS": "1500"}
    rc, err = run({})
    assert rc == 1 and "RINGMASTER_COORDINATOR, RINGMASTER_JOB and RINGMASTER_TOKEN" in err, err
    rc, err = run({**base, "RINGMASTER_TOKEN": "wrong"})
    assert rc == 1 and "RM_ERR_DENIED" in err, err
    rc, err = run({**base, "RINGMASTER_JOB": "999999"})
    assert rc == 1 and "RM_ERR_NOT_FOUND" in err, err
    with socket.socket() as idle:  # bound, never listening: connections are refused
        idle.bind(("127.0.0.1", 0))
        rc, err = run({**base, "RINGMASTER_COORDINATOR": "127.0.0.1:%d" % idle.getsockname()[1]})
    assert rc == 1 and "RM_ERR_UNAVAILABLE" in err and "1500 ms" in err, err
    env.jobs.CancelJob(env.m.CancelJobRequest(job_id=job.id, reason="test"), timeout=10)
    rc, err = run(base)
    assert rc == 1 and "RM_ERR_JOB_ENDED" in err and "cancelled" in err, err


sess.main(test)
