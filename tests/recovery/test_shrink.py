"""on_failure shrink: a worker SIGKILLed mid-training (compute or all-reduce)
is detected from the survivors' data-plane reports, the job re-forms at the
next generation with the 3 survivors, training resumes from the step every
member completed, parameters stay bitwise equal (verify=5 all-gathers the
checksums every 5 steps and fails the job otherwise), and the model reaches
the accuracy band."""
import signal

import rc


def test(env):
    env.start_coordinator()
    job = env.submit(name="shrink", world_size=4, steps=300, heartbeat_timeout_ms=3000,
                     workload="train", workload_options=rc.train_opts(env, "sim_compute_ms=2"),
                     on_failure="shrink", checkpoint_every=20)
    ws = rc.start(env, job, 4)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 40, 60)
    ws[1].send_signal(signal.SIGKILL)
    ws[1].wait(timeout=10)
    j = env.wait_job(job.id, lambda j: j.state in (env.m.JOB_STATE_SUCCEEDED,
                                                   env.m.JOB_STATE_FAILED), 90)
    assert j.state == env.m.JOB_STATE_SUCCEEDED, j
    assert j.generation == 2 and j.world == 3, j
    for i, w in enumerate(ws):
        if i != 1:
            assert rc.wait_exit(w, 30) == 0, env.worker_log(i)
            acc = rc.accuracy(env, i)
            assert acc is not None and acc >= 0.85, (i, acc)
            assert rc.recovered(env, i), env.worker_log(i)
    k = rc.kinds(env, job)
    assert "worker_lost" in k and "recovery" in k and "checkpoint" in k, k
    assert k.count("generation") == 2, k


rc.main(test)
