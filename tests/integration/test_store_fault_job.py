"""A running job through failing writes (coordinator/core/commit.c): the
coordinator's store fails a window of its write steps (test hook
RINGMASTER_TEST_STORE_FAIL=N:full:K, test builds only; skipped otherwise)
while a 2-worker job forms, trains and ends. For each window:
  * the job still succeeds (the calls refused with the storage failure are
    retried by the agents, as across a coordinator restart);
  * after a restart of the coordinator, without the hook, the job is
    SUCCEEDED in the database with all its steps and its generations;
  * the coordinator logged the failure once per state change."""
import os
import time

import rmtest

WINDOWS = [(5, 3), (12, 6), (20, 10), (30, 10), (45, 20), (60, 20), (90, 40), (150, 60)]  # (first failing write step, how many)


def run(env, n, k):
    os.environ["RINGMASTER_TEST_STORE_FAIL"] = "%d:full:%d" % (n, k)
    try:
        env.start_coordinator()
    finally:
        del os.environ["RINGMASTER_TEST_STORE_FAIL"]
    job = None
    for _ in range(50):  # the submission itself may be refused: retried like any client
        try:
            job = env.submit(name="fault-%d" % n, world_size=2, steps=60, heartbeat_timeout_ms=6000,
                             workload="synthetic", workload_options="bytes=4096,compute_ms=5")
            break
        except env.grpc.RpcError as e:
            assert e.code() == env.grpc.StatusCode.RESOURCE_EXHAUSTED, e
            assert "storage:" in e.details(), e.details()
            time.sleep(0.1)
    assert job is not None, "submission never stored"
    ws = [env.start_worker(job, i) for i in range(2)]
    j = env.wait_job(job.id, lambda j: j.state in (env.m.JOB_STATE_SUCCEEDED, env.m.JOB_STATE_FAILED,
                                                    env.m.JOB_STATE_CANCELLED), 120)
    assert j.state == env.m.JOB_STATE_SUCCEEDED, (n, k, j)
    for w in ws:
        rmtest.wait_exit(w, 30)
    env.kill_coordinator()
    env.start_coordinator()
    again = env.get(job.id)
    assert again.state == env.m.JOB_STATE_SUCCEEDED and again.step == j.step, (n, k, again, j)
    env.kill_coordinator()
    with open(os.path.join(env.dir, "coord.log"), "rb") as f:
        log = f.read().decode(errors="replace")
    return log.count("store: writes are failing"), log.count("sqlite step failed")


def test(env):
    seen = []
    for n, k in WINDOWS:
        seen.append(run(env, n, k))
        os.rename(env.db, env.db + ".%d" % n)  # a fresh database for the next window
        for ext in ("-wal", "-shm", ".key", ".lock"):
            if os.path.exists(env.db + ext):
                os.rename(env.db + ext, env.db + ".%d%s" % (n, ext))
    if seen[-1][1] == 0:
        print("SKIP: the coordinator has no test hooks (no write failed)")
        raise SystemExit(77)
    print("windows", WINDOWS, "log lines (state changes, failed steps) so far", seen)


rmtest.main(test)
