"""Form a 4-worker job, run verified all-reduce steps, leave: job succeeds."""
import rmtest


def test(env):
    env.start_coordinator()
    job = env.submit(name="form4", world_size=4, steps=30, workload="allreduce",
                     workload_options="count=100000,dtype=f32")
    ws = [env.start_worker(job, i) for i in range(4)]
    for i, w in enumerate(ws):
        assert rmtest.wait_exit(w, 60) == 0, env.worker_log(i)
    j = env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_SUCCEEDED, 20)
    assert j.generation == 1 and j.world == 4, j
    kinds = [e.kind for e in env.events(job.id, job.token)]
    assert kinds.count("worker_joined") == 4, kinds
    assert kinds.count("worker_left") == 4, kinds
    assert "generation" in kinds, kinds
    # workers on the same host got adjacent ranks
    gen = [e for e in env.events(job.id, job.token) if e.kind == "generation"][0]
    assert "hosts grouped" in gen.message, gen.message


rmtest.main(test)
