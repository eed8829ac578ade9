"""A worker slowed on purpose (slow_rank=2, slow_factor=4 over a simulated
compute) is flagged as a straggler (event + worker mark); under backup,
deadline and coded the job still converges, with bitwise-equal parameters
on every rank (verify=5), and the slow rank is dropped from some steps."""
import re

import rc


def run(env, name, policy, backup, world):
    opts = rc.train_opts(env, "sim_compute_ms=4,slow_rank=2,slow_factor=4")
    job = env.submit(name=name, world_size=world, steps=150, heartbeat_timeout_ms=5000,
                     workload="train", workload_options=opts, straggler_policy=policy,
                     backup_workers=backup)
    base = 100 * (1 + ["none", "backup", "deadline", "coded"].index(policy))
    ws = rc.start(env, job, world, first=base)
    j = env.wait_job(job.id, lambda j: j.state in (env.m.JOB_STATE_SUCCEEDED,
                                                   env.m.JOB_STATE_FAILED), 100)
    assert j.state == env.m.JOB_STATE_SUCCEEDED, (policy, j)
    for i, w in enumerate(ws):
        assert rc.wait_exit(w, 30) == 0, env.worker_log(base + i)
        acc = rc.accuracy(env, base + i)
        assert acc is not None and acc >= 0.8, (policy, i, acc)
    return job


def test(env):
    env.start_coordinator()
    job = run(env, "strag-none", "none", 0, 4)
    ev = [e for e in env.events(job.id, job.token) if e.kind == "straggler"]
    # rank 2 is flagged; on a loaded machine another rank's steps may also
    # run 1.5x slower than its peers' for a while (real timing), but not by
    # as much as rank 2's 4x: the event's score ("x3.91") says by how much
    score = {}
    for e in ev:
        x = float(re.search(r"\(x([0-9.]+),", e.message).group(1))
        score[e.rank] = max(score.get(e.rank, 0.0), x)
    assert 2 in score and all(x < score[2] for r, x in score.items() if r != 2), ev
    run(env, "strag-backup", "backup", 1, 4)
    run(env, "strag-deadline", "deadline", 0, 4)
    run(env, "strag-coded", "coded", 1, 4)


rc.main(test)
