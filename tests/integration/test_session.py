"""The Session stream (service.proto, coordinator/rpc/server.c SESSIONS),
driven raw from Python against a real coordinator:

- heartbeats sent only as Session messages keep a worker alive past its
  heartbeat timeout (3 s here; 5 s of messages), with no answer on the
  stream while all is well; a half-close ends it with OK and the worker
  stays a member;
- barrier arrivals on the stream are answered on it: released with every
  member's payload in rank order, broken by their deadline with the
  missing rank named; a second one while one waits, or one on the opening
  message, is INVALID_ARGUMENT;
- the opening message is checked (wrong token -> UNAUTHENTICATED, unknown
  worker -> NOT_FOUND) and so is every heartbeat after it (stale
  generation -> FAILED_PRECONDITION, another worker -> INVALID_ARGUMENT,
  malformed bytes -> INVALID_ARGUMENT): each ends the stream with that
  status, and the coordinator keeps serving;
- a job that ended is told in the stream's one message (job_state,
  reason), then OK;
- a session cancelled while its worker is live declares the worker lost at
  once ("Session cancelled by its transport"), long before its heartbeat
  timeout."""
import time

import rmtest


def test(env):
    env.start_coordinator()
    g, m, W = env.grpc, env.m, env.worker
    job = env.submit(name="session", world_size=2, heartbeat_timeout_ms=3000,
                     min_workers=2)
    res = env.join_all(job, 2, 31000)
    assert res[0].formed and res[1].formed
    gen = res[0].generation
    ids = [dict(job_id=job.id, token=job.token, generation=gen, worker_id=res[i].worker_id)
           for i in range(2)]
    hb = [lambda step, i=i: m.SessionRequest(step=step, **ids[i]) for i in range(2)]

    # 1. liveness from Session messages alone, past the 3 s heartbeat timeout
    s = [rmtest.SessionStream(env, hb[i](0)) for i in range(2)]
    for k in range(1, 11):
        time.sleep(0.5)
        for i in range(2):
            s[i].send(hb[i](k))
    j = env.get(job.id)
    assert j.state == m.JOB_STATE_RUNNING and j.generation == gen, j
    # events() reads until its deadline, and no heartbeat goes meanwhile: 1 s,
    # not the default 3 s, which is the job's whole heartbeat timeout (a busy
    # machine once declared rank 0 lost before the barrier arrivals below)
    lost = [e.message for e in env.events(job.id, job.token, timeout=1) if "lost" in e.message]
    assert not lost, lost
    for i in range(2):
        assert s[i].code is None and not s[i].got, (s[i].code, s[i].got)

    # 2. barriers on the stream: released for both with their payloads in
    # rank order; broken by its deadline with the missing rank named; one at
    # a time; never on the opening message
    ranks = {res[i].worker_id: res[i].rank for i in range(2)}
    for i in range(2):
        s[i].send(m.SessionRequest(step=11, barrier=m.SessionBarrier(
            name="b1", payload=bytes([65 + ranks[res[i].worker_id]]) * 4), **ids[i]))
    t0 = time.time()
    while time.time() < t0 + 20 and not (s[0].got and s[1].got):
        time.sleep(0.02)
    for i in range(2):
        assert len(s[i].got) == 1 and s[i].code is None, (s[i].got, s[i].code)
        b = s[i].got[0].barrier
        assert s[i].got[0].HasField("barrier") and b.released, s[i].got
        assert b.arrived == 2 and b.expected == 2 and list(b.payloads) == [b"AAAA", b"BBBB"], b
    s[0].send(m.SessionRequest(step=12, barrier=m.SessionBarrier(name="b2", timeout_ms=300),
                               **ids[0]))
    t0 = time.time()
    while time.time() < t0 + 20 and len(s[0].got) < 2:
        time.sleep(0.02)
    b = s[0].got[1].barrier
    assert not b.released and "deadline" in b.reason, b
    assert [x.rank for x in b.missing] == [ranks[res[1].worker_id]], b.missing
    extra = rmtest.SessionStream(env, hb[0](12))
    extra.send(m.SessionRequest(step=12, barrier=m.SessionBarrier(name="b3"), **ids[0]))
    extra.send(m.SessionRequest(step=12, barrier=m.SessionBarrier(name="b4"), **ids[0]))
    assert extra.wait() == g.StatusCode.INVALID_ARGUMENT and "one barrier" in extra.details, \
        (extra.code, extra.details)
    first = rmtest.SessionStream(env, m.SessionRequest(barrier=m.SessionBarrier(name="b5"),
                                                       **ids[0]))
    assert first.wait() == g.StatusCode.INVALID_ARGUMENT and "opening" in first.details, \
        (first.code, first.details)
    for i in range(2):
        s[i].send(hb[i](13))

    # 3. a half-close ends it with OK; the worker is still a member
    assert s[1].end() == g.StatusCode.OK and len(s[1].got) == 1
    j = env.get(job.id)
    assert j.state == m.JOB_STATE_RUNNING and j.generation == gen, j

    # 4. a session cancelled while its worker is live: lost at once (worker
    # 1 stopped its heartbeats just now; its 3 s timeout has not run out)
    s[0].call.cancel()
    s[0].wait()
    why = "Session cancelled by its transport"
    evs, t0 = [], time.time()
    while time.time() < t0 + 20 and not any(why in e.message for e in evs):
        time.sleep(0.05)
        evs = env.events(job.id, job.token, timeout=1)
    assert any(why in e.message for e in evs), [e.message for e in evs]
    assert not any("no heartbeat" in e.message for e in evs), [e.message for e in evs]

    # 5. the checks, on a job that runs on (one worker, 60 s timeout); each
    # failing message ends its stream with the status
    job2 = env.submit(name="session-checks", world_size=1, heartbeat_timeout_ms=60000)
    r = W.Join(m.JoinRequest(job_id=job2.id, token=job2.token, host="h",
                             data_addr="127.0.0.1:31010", wait_ms=10000), timeout=20)
    assert r.formed
    ok = dict(job_id=job2.id, token=job2.token, generation=r.generation, worker_id=r.worker_id)

    def ended(first, later=None, raw=False):
        st = rmtest.SessionStream(env, first, raw=raw)
        if later is not None:
            st.send(later)
        code = st.wait()
        assert not st.got, st.got
        return code, st.details or ""

    hb2 = m.SessionRequest(step=1, **ok)
    code, _ = ended(m.SessionRequest(**dict(ok, token="nope")))
    assert code == g.StatusCode.UNAUTHENTICATED, code
    code, _ = ended(m.SessionRequest(**dict(ok, worker_id=999)))
    assert code == g.StatusCode.NOT_FOUND, code
    code, why = ended(hb2, m.SessionRequest(**dict(ok, generation=r.generation + 5)))
    assert code == g.StatusCode.FAILED_PRECONDITION and "stale generation" in why, (code, why)
    code, why = ended(hb2, hb[1](11))
    assert code == g.StatusCode.INVALID_ARGUMENT and "opened it" in why, (code, why)
    code, why = ended(b"\xff\xff\xff\xff\xff\xff", raw=True)
    assert code == g.StatusCode.INVALID_ARGUMENT and "malformed" in why, (code, why)
    code, why = ended(hb2.SerializeToString(), b"\x0a\x20abc", raw=True)
    assert code == g.StatusCode.INVALID_ARGUMENT and "malformed" in why, (code, why)
    assert env.get(job2.id).state == m.JOB_STATE_RUNNING

    # 6. a job that ended is told in the stream's one message, then OK
    st = rmtest.SessionStream(env, m.SessionRequest(**ok))
    env.jobs.CancelJob(m.CancelJobRequest(job_id=job2.id), timeout=10)
    st.send(m.SessionRequest(step=2, **ok))
    assert st.wait() == g.StatusCode.OK, (st.code, st.details)
    assert len(st.got) == 1 and st.got[0].job_state == m.JOB_STATE_CANCELLED, st.got

    # the coordinator still serves
    assert env.get(job.id).id == job.id


if __name__ == "__main__":
    rmtest.main(test)
