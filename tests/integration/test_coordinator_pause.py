"""A paused coordinator does not blame the workers for its own absence
(coordinator/core/liveness.c).

For each on_failure policy (fail, shrink, replace): a 3-worker synthetic job
with a 1 s heartbeat timeout; the coordinator is SIGSTOPped for 3x the
timeout and then SIGCONTinued. Checked: no worker is declared lost, the
job keeps its generation and its 3 members and finishes (SUCCEEDED), the
event "coordinator was unavailable for ... s; heartbeat deadlines extended
by 1 s" is recorded, and the workers trained on during the pause: each
queued the reports of the steps it trained while the coordinator did not
answer (at least 20 of them) and delivered them after the resume.

Then once more under `shrink` with a real worker SIGKILLed during the pause:
after the resume exactly that worker is declared lost, and the job goes on
at the next generation with the 2 others."""
import os
import re
import signal
import time

import rmtest

HB_MS = 1000
PAUSE_S = 3 * HB_MS / 1000.0


def run(env, policy, kill=False):
    st = env.m
    job = env.submit(name="pause-" + policy + ("-kill" if kill else ""), world_size=3,
                     steps=1500, heartbeat_timeout_ms=HB_MS, on_failure=policy,
                     workload="synthetic", workload_options="bytes=4096,compute_ms=5")
    env.dir_logs = [os.path.join(env.dir, "worker%d.log" % i) for i in range(3)]
    for f in env.dir_logs:  # each run's workers write worker0..2.log afresh
        if os.path.exists(f):
            os.remove(f)
    ws = [env.start_worker(job, i, ["--data-timeout-ms", "60000"]) for i in range(3)]
    j0 = env.wait_job(job.id, lambda j: j.state == st.JOB_STATE_RUNNING and j.step >= 20, 60)
    env.coord.send_signal(signal.SIGSTOP)
    try:
        if kill:
            time.sleep(PAUSE_S / 3)
            ws[1].send_signal(signal.SIGKILL)
            ws[1].wait(timeout=10)
            time.sleep(2 * PAUSE_S / 3)
        else:
            time.sleep(PAUSE_S)
    finally:
        env.coord.send_signal(signal.SIGCONT)
    if kill:
        j = env.wait_job(job.id, lambda j: j.generation > j0.generation
                         and j.state == st.JOB_STATE_RUNNING, 60)
        assert j.world == 2, j
        ev = env.events(job.id, job.token)
        lost = [e for e in ev if e.kind == "worker_lost"]
        assert len(lost) == 1, lost
        assert ("rank %d of 3" % lost[0].rank) in env.worker_log(1), (lost, env.worker_log(1))
        env.jobs.CancelJob(st.CancelJobRequest(job_id=job.id, reason="test over"), timeout=10)
        for w in ws:
            w.kill()
            w.wait(timeout=20)
        return
    # training went on: every worker queued the reports of the steps it
    # trained while the coordinator did not answer, and delivered them after
    got = rmtest.wait_until(lambda: delivered(env), "queued step reports delivered", 30)
    assert min(got) >= 20, got
    print(policy, ": reports of steps trained during the pause, per worker:", got)
    j = env.get(job.id)
    assert j.generation == j0.generation and j.world == 3, (j0, j)
    j = env.wait_job(job.id, lambda j: rmtest_terminal(st, j), 120)
    assert j.state == st.JOB_STATE_SUCCEEDED, j
    assert j.generation == j0.generation and j.world == 3, (j0, j)
    ev = env.events(job.id, job.token)
    assert not [e for e in ev if e.kind == "worker_lost"], [e for e in ev if e.kind == "worker_lost"]
    un = [e for e in ev if e.kind == "coordinator_unavailable"]
    assert len(un) == 1 and "heartbeat deadlines extended by 1 s" in un[0].message, un
    for i, w in enumerate(ws):
        assert rmtest.wait_exit(w, 60) == 0, env.worker_log(i)


DELIVERED = re.compile(r"(\d+) queued step reports delivered")


def delivered(env):
    """Per worker, the reports it delivered after the coordinator answered
    again (worker/session/session_step.c REPORTER), or None until each said."""
    got = []
    for i in range(3):
        m = DELIVERED.findall(env.worker_log(i))
        if not m:
            return None
        got.append(int(m[-1]))
    return got


def rmtest_terminal(st, j):
    return j.state in (st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, st.JOB_STATE_CANCELLED)


def test(env):
    env.start_coordinator()
    for policy in ("fail", "shrink", "replace"):
        run(env, policy)
        print("pause under", policy, ": no worker lost, generation and members kept")
    run(env, "shrink", kill=True)
    print("pause with a worker SIGKILLed: exactly that worker lost")


rmtest.main(test)
