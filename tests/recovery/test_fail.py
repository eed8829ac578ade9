"""on_failure fail: a SIGKILLed worker fails the job with a reason naming
its rank; every survivor exits non-zero within its deadlines (no hang); and
the worker states tell the truth afterwards (item 7): the lost one
is lost, the survivors stopped, none still running, in the SQLite file."""
import signal
import sqlite3

import rc


def test(env):
    env.start_coordinator()
    job = env.submit(name="fail", world_size=3, steps=10**6, heartbeat_timeout_ms=3000,
                     workload="train", workload_options=rc.train_opts(env), on_failure="fail")
    ws = rc.start(env, job, 3)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 20, 60)
    ws[2].send_signal(signal.SIGKILL)
    ws[2].wait(timeout=10)
    j = env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_FAILED, 60)
    lost = [e for e in env.events(job.id, job.token) if e.kind == "worker_lost"]
    assert len(lost) == 1, lost
    assert ("rank %d" % lost[0].rank) in j.reason and "lost" in j.reason, j.reason
    assert ("rank %d of 3" % lost[0].rank) in env.worker_log(2), env.worker_log(2)
    for i in (0, 1):
        assert rc.wait_exit(ws[i], 60) == 1, env.worker_log(i)
    db = sqlite3.connect("file:%s?mode=ro" % env.db, uri=True, timeout=10)
    states = sorted(r[0] for r in db.execute("SELECT state FROM workers WHERE job_id=?",
                                             (job.id,)))
    db.close()
    assert states == [2, 5, 5], states  # RM_WORKER_LOST, RM_WORKER_STOPPED x2


rc.main(test)
