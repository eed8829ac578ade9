"""Relay streams (service.proto Relay, coordinator/rpc/relay.c RELAYS):
many workers' Sessions as lanes of one stream, driven from Python against a
real coordinator:

- three workers' Sessions opened as three lanes of one RelayRequest; lane
  heartbeats alone keep them alive past their 3 s heartbeat timeout, with
  nothing sent back while all is well;
- a barrier whose arrivals come on the lanes (and one on a worker's own
  Session) is released to the lanes as ONE RelayOut naming all three, with
  every member's payload in rank order, as the Session gets it;
- a lane's opening message is checked like a Session's (a wrong token ends
  that lane UNAUTHENTICATED, the other lanes go on); a lane number is never
  reused (a later message for the ended lane is dropped);
- a lane the relay ends (`end`) gets its end OK and its worker stays a
  member; a job that ended is told on each lane (job_state), then end OK;
- a lane that is `broken` declares its worker lost at once; the lanes of a
  relay whose stream is cancelled or ended for an error end without that;
- lane 0, or a malformed RelayRequest, ends the stream INVALID_ARGUMENT;
- Join calls as lanes: 32 workers form through one relay stream, each
  answer its own bytes + the peer list sent once per RelayResponse
  (shared); a refused one ends alone; a broken one drops its worker;
- 200 lanes that end one after another, then messages for them (dropped)
  and a new lane (opens and ends OK): the lane table's window moves past
  ended lanes without forgetting that they ended."""
import time

import rmtest


def lost_events(env, job, why):
    return [e.message for e in env.events(job.id, job.token, timeout=1) if why in e.message]


def test(env):
    env.start_coordinator()
    g, m = env.grpc, env.m
    job = env.submit(name="relay", world_size=4, min_workers=4, heartbeat_timeout_ms=3000)
    res = env.join_all(job, 4, 32000)
    assert all(r.formed for r in res), res
    gen = res[0].generation
    ids = [dict(job_id=job.id, token=job.token, generation=gen, worker_id=r.worker_id)
           for r in res]
    rank = [r.rank for r in res]

    def lane_msgs(step, lanes, extra=None):
        return m.RelayRequest(**{"in": [m.RelayIn(lane=ln, message=m.SessionRequest(
            step=step, **ids[ln - 1], **(extra or {}).get(ln, {}))) for ln in lanes]})

    # 1. lanes 1-3 (workers 0-2) open in one message; worker 3 has a Session
    rl = rmtest.SessionStream(env, lane_msgs(0, [1, 2, 3]), method="Relay")
    s3 = rmtest.SessionStream(env, m.SessionRequest(step=0, **ids[3]))
    for k in range(1, 11):  # 5 s of heartbeats, past the 3 s timeout
        time.sleep(0.5)
        rl.send(lane_msgs(k, [1, 2, 3]))
        s3.send(m.SessionRequest(step=k, **ids[3]))
    j = env.get(job.id)
    assert j.state == m.JOB_STATE_RUNNING and j.generation == gen, j
    assert not lost_events(env, job, "lost"), "a worker was lost"
    assert rl.code is None and not rl.got, (rl.code, rl.got)

    # 2. a barrier: three arrivals on the lanes, one on the Session
    pay = {ln: {"barrier": m.SessionBarrier(name="b1", payload=bytes([65 + rank[ln - 1]]) * 3)}
           for ln in (1, 2, 3)}
    rl.send(lane_msgs(11, [1, 2, 3], pay))
    s3.send(m.SessionRequest(step=11, barrier=m.SessionBarrier(
        name="b1", payload=bytes([65 + rank[3]]) * 3), **ids[3]))
    got = rl.answers(1)
    assert len(got) == 1 and len(got[0].out) == 1, got
    o = got[0].out[0]
    assert sorted(o.lanes) == [1, 2, 3] and not o.end, o
    b = o.message.barrier
    assert o.message.HasField("barrier") and b.released and b.arrived == 4, o
    assert list(b.payloads) == [b"AAA", b"BBB", b"CCC", b"DDD"], b.payloads
    assert s3.answers(1)[0].barrier == b, (s3.got, b)

    # 3. a lane whose opening message is refused ends alone; its number is
    # not reused; the other lanes go on
    bad = m.RelayIn(lane=7, message=m.SessionRequest(**dict(ids[0], token="nope")))
    rl.send(m.RelayRequest(**{"in": [bad]}))
    got = rl.answers(2)
    o = got[1].out[0]
    assert list(o.lanes) == [7] and o.end and o.code == g.StatusCode.UNAUTHENTICATED.value[0], o
    assert not o.HasField("message"), o
    rl.send(m.RelayRequest(**{"in": [m.RelayIn(lane=7, message=m.SessionRequest(
        step=12, **ids[0]))]}))  # ended: dropped, as after a Session's end
    rl.send(lane_msgs(12, [1, 2, 3]))
    s3.send(m.SessionRequest(step=12, **ids[3]))
    time.sleep(0.5)
    assert len(rl.got) == 2 and rl.code is None, (rl.got, rl.code)

    # 4. the relay ends lane 3 (its worker half-closed): end OK, still a member
    rl.send(m.RelayRequest(**{"in": [m.RelayIn(lane=3, end=True)]}))
    o = rl.answers(3)[2].out[0]
    assert list(o.lanes) == [3] and o.end and o.code == 0, o
    j = env.get(job.id)
    assert j.state == m.JOB_STATE_RUNNING and j.generation == gen, j

    # 5. the job ends: each lane that sends a heartbeat is told, then ends OK
    env.jobs.CancelJob(m.CancelJobRequest(job_id=job.id), timeout=10)
    rl.send(lane_msgs(13, [1, 2]))
    got = rl.answers(4)
    outs = [o for r in got[3:] for o in r.out]
    assert sorted(ln for o in outs for ln in o.lanes) == [1, 2], outs
    for o in outs:
        assert o.end and o.code == 0 and o.message.job_state == m.JOB_STATE_CANCELLED, o
    assert rl.end() == g.StatusCode.OK, (rl.code, rl.details)
    s3.end()

    # 6. a broken lane declares its worker lost at once; the lanes of a
    # cancelled relay, or of one ended for lane 0, end without that (the
    # relay went away, not the workers). Each worker alone in a job with a
    # 60 s heartbeat timeout.
    def one_worker(name, port):
        jb = env.submit(name=name, world_size=1, heartbeat_timeout_ms=60000)
        r = env.join_all(jb, 1, port)[0]
        assert r.formed, r
        ids = dict(job_id=jb.id, token=jb.token, generation=r.generation, worker_id=r.worker_id)
        return jb, ids

    def opened(ids, lane=1):
        st = rmtest.SessionStream(env, m.RelayRequest(**{"in": [
            m.RelayIn(lane=lane, message=m.SessionRequest(**ids))]}), method="Relay")
        time.sleep(0.3)
        return st

    why = "its relay saw its Session cancelled"
    ja, ida = one_worker("relay-broken", 32100)
    jb, idb = one_worker("relay-cancelled", 32101)
    jc, idc = one_worker("relay-lane-0", 32102)
    ra, rb, rc = opened(ida, 4), opened(idb), opened(idc)
    ra.send(m.RelayRequest(**{"in": [m.RelayIn(lane=4, broken=True)]}))
    rmtest.wait_until(lambda: lost_events(env, ja, why), "the broken lane's worker lost")
    rb.call.cancel()
    rb.wait()

    # 7. lane 0 and a malformed RelayRequest end the stream INVALID_ARGUMENT
    rc.send(m.RelayRequest(**{"in": [m.RelayIn(lane=0, message=m.SessionRequest(**idc))]}))
    assert rc.wait() == g.StatusCode.INVALID_ARGUMENT and "out of range" in rc.details, \
        (rc.code, rc.details)
    time.sleep(1)
    for jx in (jb, jc):  # their relays went away; they did not
        assert not lost_events(env, jx, "lost"), lost_events(env, jx, "lost")
        assert env.get(jx.id).state == m.JOB_STATE_RUNNING
    assert ra.end() == g.StatusCode.OK, (ra.code, ra.details)
    bad = rmtest.SessionStream(env, b"\xff\xff\xff\xff", raw=True, method="Relay")
    assert bad.wait() == g.StatusCode.INVALID_ARGUMENT and "malformed" in bad.details, \
        (bad.code, bad.details)

    # 8. Join calls as lanes: 32 workers join through one relay stream; each
    # formed answer is its join bytes + the shared peer list, sent once
    jj = env.submit(name="relay-join", world_size=32, heartbeat_timeout_ms=60000)
    ins = [m.RelayIn(lane=100 + i, join=m.JoinRequest(
        job_id=jj.id, token=jj.token, host="h%d" % (i // 8), data_addr="127.0.0.1:%d" % (33000 + i),
        wait_ms=20000)) for i in range(32)]
    ins.append(m.RelayIn(lane=200, join=m.JoinRequest(job_id=jj.id, token="nope", host="h",
                                                      data_addr="127.0.0.1:1", wait_ms=1000)))
    rj = rmtest.SessionStream(env, m.RelayRequest(**{"in": ins}), method="Relay")
    answers, refused = {}, None
    t0 = time.time()
    while time.time() < t0 + 30 and (len(answers) < 32 or refused is None):
        for r in rj.got:
            for o in r.out:
                for ln in o.lanes:
                    if ln == 200:
                        refused = o
                        continue
                    if not o.end or ln in answers:
                        continue
                    assert o.code == 0, o
                    b = o.join + (r.shared[o.join_tail - 1] if o.join_tail else b"")
                    answers[ln] = (m.JoinResponse.FromString(b), o.join_tail, len(r.shared))
        time.sleep(0.05)
    assert refused is not None and refused.end, refused
    assert refused.code == g.StatusCode.UNAUTHENTICATED.value[0] and not refused.join, refused
    assert len(answers) == 32, sorted(answers)
    gens = {a.generation for a, _, _ in answers.values()}
    assert len(gens) == 1, gens
    assert sorted(a.rank for a, _, _ in answers.values()) == list(range(32))
    for a, tail, nshared in answers.values():
        assert a.formed and len(a.peers) == 32 and a.peers[a.rank].worker_id == a.worker_id, a
        assert tail >= 1 and nshared >= 1, (tail, nshared)  # the peer list went shared
    sent = sum(len(r.shared) for r in rj.got)
    assert sent < 32, sent  # once a batch, not once an answer
    # a Join lane broken while its group forms: its worker is dropped
    jk = env.submit(name="relay-join-broken", world_size=2, heartbeat_timeout_ms=60000)
    rj.send(m.RelayRequest(**{"in": [m.RelayIn(lane=300, join=m.JoinRequest(
        job_id=jk.id, token=jk.token, host="h", data_addr="127.0.0.1:1", wait_ms=20000))]}))
    time.sleep(0.3)
    rj.send(m.RelayRequest(**{"in": [m.RelayIn(lane=300, broken=True)]}))
    rmtest.wait_until(lambda: [e for e in env.events(jk.id, jk.token, timeout=1)
                      if "cancelled before the group formed" in e.message],
             "the broken Join lane's worker dropped")
    assert rj.end() == g.StatusCode.OK, (rj.code, rj.details)

    # 9. many lanes on one stream (relay.c LANE TABLE: the table is a window
    # that moves past the lanes that ended): 200 refused lanes end one by
    # one; a later message for any of them is still dropped, as after a
    # Session's end; a new lane after them opens, beats and ends OK
    jw, idw = one_worker("relay-window", 32103)
    refused = [m.RelayIn(lane=n, message=m.SessionRequest(**dict(idw, token="nope")))
               for n in range(1, 201)]
    rw = rmtest.SessionStream(env, m.RelayRequest(**{"in": refused[:100]}), method="Relay")
    rw.send(m.RelayRequest(**{"in": refused[100:]}))
    ended = {}
    rmtest.wait_until(lambda: len({ln for r in rw.got for o in r.out for ln in o.lanes}) == 200,
                      "200 refused lanes ended")
    for r in rw.got:
        for o in r.out:
            assert o.end and o.code == g.StatusCode.UNAUTHENTICATED.value[0], o
            for ln in o.lanes:
                ended[ln] = ended.get(ln, 0) + 1
    assert sorted(ended) == list(range(1, 201)) and set(ended.values()) == {1}, ended
    n_got = len(rw.got)
    # ended: dropped (a lane opened afresh would be refused again, and say so)
    rw.send(m.RelayRequest(**{"in": [m.RelayIn(lane=n, message=m.SessionRequest(
        step=1, **dict(idw, token="nope"))) for n in (1, 5, 150, 200)]}))
    rw.send(m.RelayRequest(**{"in": [m.RelayIn(lane=201, message=m.SessionRequest(**idw))]}))
    for k in range(1, 4):
        rw.send(m.RelayRequest(**{"in": [m.RelayIn(lane=201, message=m.SessionRequest(
            step=k, **idw))]}))
    time.sleep(0.5)
    assert len(rw.got) == n_got and rw.code is None, (rw.got[n_got:], rw.code)
    rw.send(m.RelayRequest(**{"in": [m.RelayIn(lane=201, end=True)]}))
    o = rw.answers(n_got + 1)[n_got].out[0]
    assert list(o.lanes) == [201] and o.end and o.code == 0, o
    assert not lost_events(env, jw, "lost") and env.get(jw.id).state == m.JOB_STATE_RUNNING
    assert rw.end() == g.StatusCode.OK, (rw.code, rw.details)

    # the coordinator still serves
    assert env.get(job.id).state == m.JOB_STATE_CANCELLED


if __name__ == "__main__":
    rmtest.main(test)
