"""Step-gate calls on the Session stream (SessionRequest.gate,
SessionResponse.gate; coordinator/rpc/server.c SESSIONS, rpc/waiters.c
rm__answer_gate), driven raw from grpcio against a real coordinator. A job
of 3 members under straggler_policy backup with one backup worker: the
first 2 ready arrivals decide a step.

- decided: the two first arrivals at step 0 are answered on their streams
  with decided, world 3, `out` = the third member's rank, not dropped; the
  late third is answered decided and dropped; the mask each stream answer
  names equals the unary StepGate's `members` for the same step (the two
  wire forms of one decision), and a stream answer carries no mask bytes;
- not decided: a long poll at step 1 that nobody else joins is answered at
  its wait_ms on the stream, not decided, arrivals_decide (backup has no
  deadline), and the stream stays open;
- one at a time: a barrier arrival while a gate call waits, a second gate
  call, a message with both, or a gate call on the opening message end the
  stream INVALID_ARGUMENT with words that say so;
- pushes: a Session opened with gate_push gets each decided step it is out
  of unasked (gate_pushed, decided, dropped, `out` its own rank); one
  opened without it gets nothing;
- timed deadlines: under straggler_policy deadline a "not decided" answer
  says a long poll will be answered in time (arrivals_decide), and two
  members' long polls on their streams are answered decided, the third
  out, with no other call made (the coordinator's clock decides);
- stale: a gate call waiting when a member is lost (its session cancelled)
  ends its stream FAILED_PRECONDITION, the unary call's status and words
  ("step gate: ...").
"""
import time

import rmtest

N = 3


def mask_of(a):
    return bytes(0 if r in set(a.out) else 1 for r in range(a.world))


def test(env):
    env.start_coordinator()
    g, m, W = env.grpc, env.m, env.worker
    job = env.submit(name="session-gate", world_size=N, heartbeat_timeout_ms=60000,
                     straggler_policy="backup", backup_workers=1)
    res = env.join_all(job, N, 31000)
    assert all(r.formed for r in res), res
    ids = [dict(job_id=job.id, token=job.token, generation=res[i].generation,
                worker_id=res[i].worker_id) for i in range(N)]
    rank = [res[i].rank for i in range(N)]
    s = [rmtest.SessionStream(env, m.SessionRequest(**ids[i])) for i in range(N)]

    def gate(i, step, wait_ms, ready=True):
        return m.SessionRequest(step=step, gate=m.SessionGate(ready=ready, wait_ms=wait_ms),
                                **ids[i])

    # 1. decided at step 0 by members 0 and 1; member 2 is late: dropped
    s[0].send(gate(0, 0, 20000))
    s[1].send(gate(1, 0, 20000))
    a = [s[i].answers(1)[0] for i in range(2)]
    s[2].send(gate(2, 0, 20000))
    a.append(s[2].answers(1)[0])
    unary = W.StepGate(m.StepGateRequest(step=0, ready=True, wait_ms=0, **ids[2]), timeout=20)
    assert unary.decided and len(unary.members) == N, unary
    for i in range(N):
        assert a[i].HasField("gate") and not a[i].HasField("barrier"), a[i]
        x = a[i].gate
        assert x.decided and x.step == 0 and x.world == N and not x.members, x
        assert list(x.out) == [rank[2]], x
        assert mask_of(x) == unary.members, (mask_of(x), unary.members)
        assert x.dropped == (i == 2), (i, x)
        assert s[i].code is None, (s[i].code, s[i].details)

    # 2. not decided: a long poll at step 1 answered at its wait_ms
    s[0].send(gate(0, 1, 300))
    x = s[0].answers(2)[1].gate
    assert not x.decided and x.arrivals_decide and x.step == 1 and not x.dropped, x
    assert s[0].code is None, (s[0].code, s[0].details)

    # 3. one at a time, and never on the opening message
    s[1].send(gate(1, 1, 20000, ready=False))
    time.sleep(0.3)  # it waits: member 0 alone is ready at step 1
    s[1].send(m.SessionRequest(step=1, barrier=m.SessionBarrier(name="b"), **ids[1]))
    assert s[1].wait() == g.StatusCode.INVALID_ARGUMENT, (s[1].code, s[1].details)
    assert "one barrier arrival or step-gate call at a time" in s[1].details, s[1].details
    assert "a step gate" in s[1].details, s[1].details
    assert len(s[1].got) == 1, s[1].got
    two = rmtest.SessionStream(env, m.SessionRequest(**ids[1]))
    two.send(gate(1, 1, 20000, ready=False))
    two.send(gate(1, 1, 20000, ready=False))
    assert two.wait() == g.StatusCode.INVALID_ARGUMENT and "at a time" in two.details, \
        (two.code, two.details)
    both = rmtest.SessionStream(env, m.SessionRequest(**ids[1]))
    both.send(m.SessionRequest(step=1, barrier=m.SessionBarrier(name="b"),
                               gate=m.SessionGate(ready=True), **ids[1]))
    assert both.wait() == g.StatusCode.INVALID_ARGUMENT and "has both" in both.details, \
        (both.code, both.details)
    first = rmtest.SessionStream(env, gate(1, 1, 100))
    assert first.wait() == g.StatusCode.INVALID_ARGUMENT and "opening" in first.details, \
        (first.code, first.details)
    assert env.get(job.id).state == m.JOB_STATE_RUNNING

    # 4. pushes: members 0 and 1 decide step 3 (0 on its stream, 1 unary);
    # member 2 asks nothing: its session opened with gate_push is told
    push = rmtest.SessionStream(env, m.SessionRequest(gate_push=True, **ids[2]))
    time.sleep(0.3)  # opened before the step is decided
    s[0].send(gate(0, 3, 20000))
    u = W.StepGate(m.StepGateRequest(step=3, ready=True, wait_ms=20000, **ids[1]), timeout=30)
    assert u.decided and not u.dropped, u
    x = push.answers(1)[0]
    assert x.gate_pushed and x.HasField("gate"), x
    assert x.gate.decided and x.gate.dropped and x.gate.step == 3, x
    assert x.gate.world == N and list(x.gate.out) == [rank[2]], x
    y = s[0].answers(3)[2]
    assert not y.gate_pushed and y.gate.decided and not y.gate.dropped, y
    assert len(s[2].got) == 1, s[2].got  # opened without gate_push
    assert push.end() == g.StatusCode.OK and len(push.got) == 1, (push.code, push.got)

    # 5. stale: member 2 waits at step 4; member 0's session is cancelled
    # (lost at once): member 2's stream ends with the unary call's status
    s[2].send(gate(2, 4, 20000))
    time.sleep(0.3)
    assert s[2].code is None and len(s[2].got) == 1, (s[2].code, s[2].got)
    s[0].call.cancel()
    s[0].wait()
    assert s[2].wait() == g.StatusCode.FAILED_PRECONDITION, (s[2].code, s[2].details)
    assert s[2].details.startswith("step gate: "), s[2].details
    assert len(s[2].got) == 1, s[2].got

    # the coordinator still serves
    assert env.get(job.id).id == job.id

    # 6. timed deadlines: a deadline job of 3; members 0 and 1 long-poll
    # step 0 on their streams and nothing else is sent
    dj = env.submit(name="session-gate-deadline", world_size=N, heartbeat_timeout_ms=60000,
                    straggler_policy="deadline")
    dres = env.join_all(dj, N, 31100)
    dids = [dict(job_id=dj.id, token=dj.token, generation=dres[i].generation,
                 worker_id=dres[i].worker_id) for i in range(N)]
    a = W.StepGate(m.StepGateRequest(step=0, ready=False, wait_ms=0, **dids[0]), timeout=20)
    assert not a.decided and a.arrivals_decide, a
    ds = [rmtest.SessionStream(env, m.SessionRequest(**dids[i])) for i in range(2)]
    for i in range(2):
        ds[i].send(m.SessionRequest(step=0, gate=m.SessionGate(ready=True, wait_ms=20000),
                                    **dids[i]))
    for i in range(2):
        x = ds[i].answers(1)[0].gate
        assert x.decided and not x.dropped and x.step == 0, x
        assert x.world == N and list(x.out) == [dres[2].rank], x
    for i in range(2):
        assert ds[i].end() == g.StatusCode.OK, (ds[i].code, ds[i].details)


if __name__ == "__main__":
    rmtest.main(test)
