"""test_data_key.py - the data-plane key of a generation (JoinResponse
field 15 `data_key`), against a real coordinator and real workers:

  same        every member's formed Join answer carries the same 32-byte
              key; a repeated Join of a member gets it again
  distinct    another job's generation gets another key
  in use      two real workers over TCP form with it and finish their
              all-reduce steps; neither logs that its communicator has no
              data-plane key (the warning a keyless communicator gives)
"""
import os

import rmtest


def test(env):
    env.start_coordinator()
    a = env.submit(name="key-a", world_size=2)
    ra = env.join_all(a, 2, 41000)
    assert all(r.formed for r in ra), ra
    assert len(ra[0].data_key) == 32, ra[0].data_key
    assert ra[0].data_key == ra[1].data_key
    again = env.worker.Join(env.m.JoinRequest(
        job_id=a.id, token=a.token, worker_id=ra[0].worker_id, host="h",
        data_addr="127.0.0.1:41000", wait_ms=10000), timeout=20)
    assert again.formed and again.data_key == ra[0].data_key, again

    b = env.submit(name="key-b", world_size=2)
    rb = env.join_all(b, 2, 41100)
    assert len(rb[0].data_key) == 32 and rb[0].data_key == rb[1].data_key
    assert rb[0].data_key != ra[0].data_key

    job = env.submit(name="key-run", world_size=2, steps=5, workload="allreduce",
                     workload_options="count=1000,dtype=f32")
    ws = [env.start_worker(job, i, env={"RINGMASTER_TRANSPORTS": "tcp"}) for i in range(2)]
    for i, w in enumerate(ws):
        assert rmtest.wait_exit(w, 60) == 0, env.worker_log(i)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_SUCCEEDED, 20)
    for i in range(2):
        with open(os.path.join(env.dir, "worker%d.log" % i), "rb") as f:
            log = f.read().decode(errors="replace")
        assert "has no data-plane key" not in log, log[-3000:]
        assert "rejected a data-plane connection" not in log, log[-3000:]


rmtest.main(test)
