"""From Python: a command job of 3 workers whose program
(secure_prog.py) sums numpy vectors with ringmaster.secure_allreduce and
trains a step with ringmaster.torch.DistributedOptimizer, both through the
real coordinator's relay; every rank checks its sums, all ranks end with the
same parameters, and the job succeeds."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "recovery"))
import rc  # noqa: E402

PYDIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "secure_prog.py")


def test(env):
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print("SKIP: numpy / torch missing:", e)
        sys.exit(77)
    # the programs the agents start inherit the coordinator's environment;
    # this process keeps its own path (its `ringmaster` is the gRPC stubs)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = PYDIR
    try:
        rc.start_local_coordinator(env)
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    job = env.submit(name="secure-python", world_size=3, steps=4, workload="command",
                     launcher="local", command=["/usr/bin/python3", PROG],
                     heartbeat_timeout_ms=10000, secagg_bits=32, secagg_clip=1.0,
                     secagg_threshold=2, secagg_neighbours="all")
    j = rc.wait_final(env, job, 120)
    logs = "\n".join(rc.launcher_log(env, job, i)[-2000:] for i in range(3))
    assert j.state == env.m.JOB_STATE_SUCCEEDED, (j, logs)
    for i in range(3):
        assert re.search(r"secure-python: ok .*\"opt_members\": 3", rc.launcher_log(env, job, i)), logs


rc.main_local(test)
