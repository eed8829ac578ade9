"""An independent client (Python grpcio, stubs generated from the .proto at
test time) drives the whole contract: Jobs service (submit with field-named
validation errors, get, list with state filter and paging, cancel) and a
complete worker life (join, heartbeat, step reports, barrier, watch, leave)."""
import threading

import rmtest


def test(env):
    env.start_coordinator()
    g, m, J, W = env.grpc, env.m, env.jobs, env.worker
    try:
        env.submit(name="bad", world_size=2, launcher="nope")
        raise AssertionError("bad launcher accepted")
    except g.RpcError as e:
        assert e.code() == g.StatusCode.INVALID_ARGUMENT and "launcher" in e.details(), e.details()
    a = env.submit(name="a", world_size=2, steps=3)
    b = env.submit(name="b", world_size=1)
    assert a.token and a.id != b.id
    assert env.get(a.id).token == "", "token must only come with SubmitJob"
    lst = J.ListJobs(m.ListJobsRequest(any_state=True, limit=1), timeout=5)
    assert lst.total == 2 and len(lst.jobs) == 1 and lst.jobs[0].id == b.id
    c = J.CancelJob(m.CancelJobRequest(job_id=b.id, reason="test"), timeout=5).job
    assert c.state == m.JOB_STATE_CANCELLED and c.reason == "test"
    try:
        J.CancelJob(m.CancelJobRequest(job_id=b.id), timeout=5)
        raise AssertionError("cancel twice")
    except g.RpcError as e:
        assert e.code() == g.StatusCode.FAILED_PRECONDITION
    lst = J.ListJobs(m.ListJobsRequest(state=m.JOB_STATE_CANCELLED), timeout=5)
    assert [j.id for j in lst.jobs] == [b.id]

    res = {}

    def join(i):
        res[i] = W.Join(m.JoinRequest(job_id=a.id, token=a.token, host="py%d" % i,
                                      data_addr="127.0.0.1:%d" % (31000 + i), wait_ms=10000,
                                      rank_hint=1 - i, world_hint=2), timeout=20)
    ts = [threading.Thread(target=join, args=(i,)) for i in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert res[0].rank == 1 and res[1].rank == 0, "launcher rank hints honoured"
    assert [p.data_addr for p in res[0].peers] == ["127.0.0.1:31001", "127.0.0.1:31000"]
    ids = [dict(job_id=a.id, token=a.token, generation=res[i].generation,
                worker_id=res[i].worker_id) for i in range(2)]
    hb = W.Heartbeat(m.HeartbeatRequest(**ids[0]), timeout=5)
    assert hb.job_state == m.JOB_STATE_RUNNING and hb.generation == 1
    for step in (1, 2, 3):
        for i in range(2):
            W.ReportStep(m.ReportStepRequest(step=step, compute_ms=1.5, comm_ms=2.0,
                                             allreduce_bytes=4096, **ids[i]), timeout=5)
    out = {}

    def barrier(i):
        out[i] = W.Barrier(m.BarrierRequest(name="end", timeout_ms=10000, **ids[i]), timeout=20)
    ts = [threading.Thread(target=barrier, args=(i,)) for i in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert out[0].released and out[1].released and out[0].expected == 2
    assert env.get(a.id).step == 3
    for i in range(2):
        W.Leave(m.LeaveRequest(ok=True, step=3, **ids[i]), timeout=5)
    assert env.get(a.id).state == m.JOB_STATE_SUCCEEDED
    evs = env.events(a.id, a.token)  # the stream ends by itself: job finished
    kinds = [e.kind for e in evs]
    assert kinds[0] == "job_submitted" and kinds[-1] == "job_state", kinds
    assert [e.seq for e in evs] == sorted(e.seq for e in evs)


rmtest.main(test)
