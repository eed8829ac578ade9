"""A paused coordinator does not blame the workers for its own absence
(coordinator/core/liveness.c).

For each on_failure policy (fail, shrink, replace): a 3-worker synthetic job
with a 1 s heartbeat timeout; the coordinator is SIGSTOPped for 3x the
timeout and then SIGCONTinued. Checked: no worker is declared lost, the
job keeps its generation and its 3 members and finishes (SUCCEEDED), the
event "coordinator was unavailable for ... s; heartbeat deadlines extended
by 1 s" is recorded, and the workers trained on during the pause (the step
count the coordinator holds after the pause is past the one before by more
than a few steps: reports queued on the workers are delivered after it).

Then once more under `shrink` with a real worker SIGKILLed during the pause:
after the resume exactly that worker is declared lost, and the job goes on
at the next generation with the 2 others."""
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
    # training went on: the backlog of step reports arrives within a few
    # heartbeats of the resume
    rmtest.wait_until(lambda: env.get(job.id).step >= j0.step + 40,
                      "steps trained during the pause to be reported", 20)
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
