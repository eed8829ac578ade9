"""Bad input gets its status code and the coordinator keeps serving:
malformed protobuf bytes -> INVALID_ARGUMENT, oversized message ->
RESOURCE_EXHAUSTED, wrong token -> UNAUTHENTICATED, unknown job -> NOT_FOUND,
stale generation -> FAILED_PRECONDITION, unknown method -> UNIMPLEMENTED.
The Jobs service's mutations (SubmitJob, CancelJob) need the coordinator's
API token as "authorization: Bearer" metadata: none, a wrong one, a prefix
of it or the REST header's other spelling of the scheme -> UNAUTHENTICATED
and nothing changes; the reads (GetJob, ListJobs) are open."""
import os

import rmtest


def test(env):
    env.start_coordinator(extra=["--max-message-bytes", "65536"])
    g, m, W = env.grpc, env.m, env.worker
    job = env.submit(name="errors", world_size=2, heartbeat_timeout_ms=60000)
    res = env.join_all(job, 2, 30000)
    r = res[0]
    assert r.formed and r.generation == 1
    ok = dict(job_id=job.id, token=job.token, generation=r.generation, worker_id=r.worker_id)

    def code(fn):
        try:
            fn()
        except g.RpcError as e:
            return e.code()
        return g.StatusCode.OK

    raw = env.channel.unary_unary("/ringmaster.v1.Worker/Heartbeat")
    rawjob = env.channel.unary_unary("/ringmaster.v1.Jobs/SubmitJob")
    cases = [
        ("malformed", lambda: raw(b"\xff\xff\xff\xff\xff\xff", timeout=5), g.StatusCode.INVALID_ARGUMENT),
        ("truncated", lambda: raw(b"\x0a\x20abc", timeout=5), g.StatusCode.INVALID_ARGUMENT),
        ("garbage submit", lambda: rawjob(os.urandom(1) and b"\x0a\x05\x0a\x03\xff\xfe", timeout=5), None),
        ("oversized", lambda: raw(b"\x12" + b"\x80" * 70000, timeout=5), g.StatusCode.RESOURCE_EXHAUSTED),
        ("wrong token", lambda: W.Heartbeat(m.HeartbeatRequest(**dict(ok, token="nope")), timeout=5),
         g.StatusCode.UNAUTHENTICATED),
        ("unknown job", lambda: W.Heartbeat(m.HeartbeatRequest(**dict(ok, job_id=999)), timeout=5),
         g.StatusCode.NOT_FOUND),
        ("unknown worker", lambda: W.Heartbeat(m.HeartbeatRequest(**dict(ok, worker_id=999)), timeout=5),
         g.StatusCode.NOT_FOUND),
        ("stale generation", lambda: W.Heartbeat(m.HeartbeatRequest(**dict(ok, generation=0)), timeout=5),
         g.StatusCode.FAILED_PRECONDITION),
        ("stale barrier", lambda: W.Barrier(m.BarrierRequest(name="x", **dict(ok, generation=7)), timeout=5),
         g.StatusCode.FAILED_PRECONDITION),
        ("bad barrier name", lambda: W.Barrier(m.BarrierRequest(name="", **ok), timeout=5),
         g.StatusCode.INVALID_ARGUMENT),
        ("unknown method", lambda: env.channel.unary_unary("/ringmaster.v1.Worker/Nope")(b"", timeout=5),
         g.StatusCode.UNIMPLEMENTED),
        ("bad spec", lambda: env.submit(name="x", world_size=0), g.StatusCode.INVALID_ARGUMENT),
        ("third worker", lambda: W.Join(m.JoinRequest(job_id=job.id, token=job.token, host="h",
                                                      data_addr="127.0.0.1:1"), timeout=5),
         g.StatusCode.FAILED_PRECONDITION),
    ]
    # authentication of the Jobs service (rmtest starts serve --api-token)
    anon = env.s.JobsStub(env.raw_channel)
    wrong = [env.s.JobsStub(env.authed(env.raw_channel, t)) for t in ("nope", env.token[:-1],
                                                                     env.token + "x")]
    spec = m.JobSpec(name="anon", world_size=1, launcher="none")
    for i, J in enumerate([anon] + wrong):
        cases.append(("submit without the token %d" % i,
                      lambda J=J: J.SubmitJob(m.SubmitJobRequest(spec=spec), timeout=5),
                      g.StatusCode.UNAUTHENTICATED))
        cases.append(("cancel without the token %d" % i,
                      lambda J=J: J.CancelJob(m.CancelJobRequest(job_id=job.id), timeout=5),
                      g.StatusCode.UNAUTHENTICATED))
    # reads need a token too: the API token or the read-only one
    reader = env.s.JobsStub(env.authed(env.raw_channel, rmtest.READ_TOKEN))
    cases.append(("get without a token", lambda: anon.GetJob(m.GetJobRequest(job_id=job.id), timeout=5),
                  g.StatusCode.UNAUTHENTICATED))
    cases.append(("list without a token", lambda: anon.ListJobs(m.ListJobsRequest(any_state=True),
                                                                timeout=5), g.StatusCode.UNAUTHENTICATED))
    cases.append(("get with the read token", lambda: reader.GetJob(m.GetJobRequest(job_id=job.id),
                                                                   timeout=5), g.StatusCode.OK))
    cases.append(("list with the read token", lambda: reader.ListJobs(
        m.ListJobsRequest(any_state=True), timeout=5), g.StatusCode.OK))
    cases.append(("cancel with the read token", lambda: reader.CancelJob(
        m.CancelJobRequest(job_id=job.id), timeout=5), g.StatusCode.UNAUTHENTICATED))
    lower = env.s.JobsStub(env.authed(env.raw_channel))
    # the spec rules over gRPC: an alias is stored canonical, a
    # value beyond int range is refused naming the field and its range
    alias = env.submit(name="alias", world_size=1, algorithm="halving_doubling")
    assert alias.spec.algorithm == "hd", alias.spec
    lower.CancelJob(m.CancelJobRequest(job_id=alias.id), timeout=5)
    try:
        env.submit(name="huge", world_size=2**32 - 1)
        raise AssertionError("world_size 2^32-1 accepted over gRPC")
    except g.RpcError as e:
        assert e.code() == g.StatusCode.INVALID_ARGUMENT and "world_size" in e.details() and \
            "65536" in e.details(), e.details()
    try:
        anon.SubmitJob(m.SubmitJobRequest(spec=spec), timeout=5)
    except g.RpcError as e:
        assert "authorization: Bearer" in e.details(), e.details()
    for name, fn, want in cases:
        got = code(fn)
        if want is not None:
            assert got == want, (name, got, want)
        # and the coordinator still serves
        assert code(lambda: W.Heartbeat(m.HeartbeatRequest(**ok), timeout=5)) == g.StatusCode.OK, name
    # nothing above changed a job: one job, still running, no "anon" job
    jobs = lower.ListJobs(m.ListJobsRequest(any_state=True), timeout=5).jobs
    assert [j.spec.name for j in jobs] == ["alias", "errors"], jobs
    assert jobs[1].state == m.JOB_STATE_RUNNING, jobs[1]
    assert env.coord.poll() is None


rmtest.main(test)
