"""Relays' lanes never acknowledge a rolled-back write (coordinator/rpc/
relay.c ROLLED BACK, docs/storage.md). Test hook RINGMASTER_TEST_STORE_FAIL
(test builds only; skipped otherwise).

1. A Join as a lane of a Relay stream while every write fails (a job
   stored first, the coordinator restarted with N=1:full:0): the lane ends
   RESOURCE_EXHAUSTED with details "storage: ...", never a formed Join
   answer (before, the answer queued in the relay's pending batch went
   out although its section rolled back: a worker was told a rank in a
   generation no database held). The job is still pending at generation
   0 after a restart without the hook.
2. The fault walk of test_store_fault_walk with the workers behind
   `ringmaster relay` (their Joins and Sessions are lanes): every write
   step of the job's life failed once; the job succeeds and what the
   coordinator showed is what a restart shows."""
import os

import rmtest
import test_store_fault_walk as fw


def join_lane(env):
    g, m = env.grpc, env.m
    job = None
    env.start_coordinator()
    job = env.submit(name="relay-join", world_size=1, heartbeat_timeout_ms=60000)
    env.kill_coordinator()
    os.environ["RINGMASTER_TEST_STORE_FAIL"] = "1:full:0"
    try:
        env.start_coordinator()
    finally:
        del os.environ["RINGMASTER_TEST_STORE_FAIL"]
    rl = rmtest.SessionStream(env, m.RelayRequest(**{"in": [m.RelayIn(lane=1, join=m.JoinRequest(
        job_id=job.id, token=job.token, host="h", data_addr="127.0.0.1:34999", wait_ms=5000))]}),
        method="Relay")
    outs = []
    for r in rl.answers(1):
        outs += [o for o in r.out if 1 in o.lanes]
    rl.end()
    if outs and outs[0].end and outs[0].code == 0:
        a = m.JoinResponse.FromString(outs[0].join)
        if a.formed and "test hook" not in open(os.path.join(env.dir, "coord.log"), errors="replace").read():
            print("SKIP: the coordinator has no test hooks (no write failed)")
            raise SystemExit(77)
    assert len(outs) == 1 and outs[0].end, outs
    o = outs[0]
    assert o.code == g.StatusCode.RESOURCE_EXHAUSTED.value[0] and o.details.startswith("storage:"), \
        "a Join lane of a rolled-back section: code %d %r join %r" % (o.code, o.details, o.join[:40])
    assert not o.join, o
    env.kill_coordinator()  # (with every step failing, the hook's BEGIN fails reads too)
    env.start_coordinator()
    j = env.get(job.id)
    assert j.state == m.JOB_STATE_PENDING and j.generation == 0, j
    env.kill_coordinator()
    print("Join lane while writes fail:", o.details)
    for ext in ("", "-wal", "-shm", ".key", ".lock"):
        if os.path.exists(env.db + ext):
            os.unlink(env.db + ext)
    os.unlink(os.path.join(env.dir, "coord.log"))


def test(env):
    join_lane(env)
    fw.walk(env, relay=True)


rmtest.main(test)
