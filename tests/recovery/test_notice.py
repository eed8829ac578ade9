"""The coordinator's notice (coordinator/core/recovery.c THE NOTICE;
worker/session/session_live.c): when the coordinator knows first that a
member is gone, the survivors abort their collectives on its word, not on
their data plane's. A member of a 3-worker shrink job is SIGSTOPped while
the survivors wait for it inside an all-reduce; its sockets stay open and
its process stays alive, and the data-plane timeout is 60 s, so only the
coordinator (its heartbeat timeout, 1 s) can tell. Then, in each
survivor's log: the notice pushed on its Session stream arrived, and the
generation broke with the communicator aborted as RM_ERR_RECONFIGURED,
not by a data-plane error: for the first survivor to hear it, naming the
notice itself; the other may instead have the first one's ABORT frame
("learned first: the membership changed", the notice relayed on the data
plane) if that came before its own copy. The job re-forms (generation 2,
world 2) and finishes with bitwise-equal ranks (verify=5). No timing is
asserted."""
import re
import signal

import rc


def test(env):
    env.start_coordinator()
    job = env.submit(name="notice", world_size=3, steps=300, heartbeat_timeout_ms=1000,
                     workload="train", workload_options=rc.train_opts(env, "sim_compute_ms=2"),
                     on_failure="shrink")
    ws = rc.start(env, job, 3, extra=("--data-timeout-ms", "60000"))
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 20, 60)
    ranks = {}
    for i in range(3):
        m = re.search(r"generation 1: rank (\d+) of 3", env.worker_log(i))
        assert m, env.worker_log(i)
        ranks[i] = int(m.group(1))
    victim = 1
    ws[victim].send_signal(signal.SIGSTOP)
    try:
        j = env.wait_job(job.id, lambda j: j.state in (env.m.JOB_STATE_SUCCEEDED,
                                                       env.m.JOB_STATE_FAILED), 50)
    finally:
        ws[victim].send_signal(signal.SIGKILL)
        ws[victim].wait(timeout=10)
    assert j.state == env.m.JOB_STATE_SUCCEEDED and j.generation == 2 and j.world == 2, j
    lost = [e for e in rc.events(env, job) if e.kind == "worker_lost"]
    assert len(lost) == 1 and lost[0].rank == ranks[victim], lost
    direct = 0
    for i in (0, 2):
        assert rc.wait_exit(ws[i], 30) == 0, env.worker_log(i)
        log = env.worker_log(i)
        told = re.search(r"coordinator moved on: notice on the session stream: generation 1 "
                         r"is over: rank %d \([^)]*\) lost: no heartbeat" % ranks[victim], log)
        assert told, log
        broke = re.search(r"generation 1 broke: (.*)", log)
        assert broke, log
        cause = broke.group(1)
        assert cause.startswith("RM_ERR_RECONFIGURED: "), cause
        if "notice on the session stream: generation 1 is over" in cause:
            direct += 1
            assert told.start() < broke.start(), log
        else:
            assert "learned first: the membership changed" in cause, cause
        assert re.search(r"generation 2: rank \d of 2", log), log
    assert direct >= 1, "no survivor aborted on the notice itself"


rc.main(test)
