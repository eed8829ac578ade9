"""Barrier payloads and a secure job's re-formations, seen from gRPC clients
standing in for four workers of one job (secure aggregation, threshold 3,
on_failure shrink; coordinator/core/barrier.c PAYLOADS, core/recovery.c
SECURE AGGREGATION):

  release    every waiter of a released barrier gets all members' payloads
             in rank order, the same bytes each; a barrier without payloads
             answers none
  replay     a second arrival of one worker at an open barrier with other
             bytes is INVALID_ARGUMENT "replayed arrival with a different
             payload" and leaves the first payload in place; the same bytes
             again (a retry after a reconnect) is one arrival, answered too
  length     another length at one barrier: INVALID_ARGUMENT naming both;
             over 1024 bytes: refused
  re-form    a member lost: generation 2 forms with 3, a secure_recovered
             event "generation 2: step 1 redone with fresh masks over 3
             members after 1 dropout", the job's secure_recovered_steps 1
             and secure_dropouts 1 (REST); generation 1 is refused
             (FAILED_PRECONDITION) and generation 2 exchanges 3 payloads
  threshold  one more loss: 2 members left, below threshold 3: the job
             fails, its reason "secure aggregation: 2 members left,
             threshold 3: no sum over fewer inputs is revealed", a
             secure_threshold event; the open barrier breaks with no
             payloads
  at rest    after a SIGKILL, no payload is in the SQLite file, its -wal or
             -shm, or the coordinator's log (raw or hex)
"""
import json
import os
import secrets
import sys
import threading
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../integration"))
import rmtest  # noqa: E402

WORLD, THRESHOLD = 4, 3


def rest_job(http, job_id):
    return rmtest.get_json("http://%s/api/v1/jobs/%d" % (http, job_id))


class Group:
    def __init__(self, env, job):
        self.env, self.job, self.m, self.W = env, job, env.m, env.worker
        self.ids = {}  # rank -> worker id
        self.gen = 0

    def join_all(self):
        res = {}

        def join(i):
            res[i] = self.W.Join(self.m.JoinRequest(
                job_id=self.job.id, token=self.job.token, host="fake%d" % i,
                data_addr="127.0.0.1:%d" % (32000 + i), wait_ms=10000, rank_hint=i,
                world_hint=WORLD), timeout=20)
        ts = [threading.Thread(target=join, args=(i,)) for i in range(WORLD)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        assert all(res[i].formed and res[i].rank == i for i in range(WORLD)), res
        self.ids = {i: res[i].worker_id for i in range(WORLD)}
        self.gen = res[0].generation

    def req(self, rank, name, payload=b"", gen=None, timeout_ms=10000):
        return self.m.BarrierRequest(job_id=self.job.id, token=self.job.token,
                                     generation=self.gen if gen is None else gen,
                                     worker_id=self.ids[rank], name=name,
                                     timeout_ms=timeout_ms, payload=payload)

    def arrive_async(self, rank, name, payload=b"", out=None, key=None):
        out = {} if out is None else out

        def run():
            try:
                out[key if key is not None else rank] = self.W.Barrier(
                    self.req(rank, name, payload), timeout=30)
            except self.env.grpc.RpcError as e:
                out[key if key is not None else rank] = e
        t = threading.Thread(target=run)
        t.start()
        return t, out

    def refused(self, rank, name, payload, code, *words, gen=None):
        g = self.env.grpc
        try:
            self.W.Barrier(self.req(rank, name, payload, gen=gen), timeout=10)
        except g.RpcError as e:
            assert e.code() == code, (e.code(), e.details())
            for w in words:
                assert w in e.details(), (w, e.details())
            return e.details()
        raise AssertionError("barrier %s rank %d: accepted, wanted %s" % (name, rank, code))

    def leave_failed(self, rank, why):
        self.W.Leave(self.m.LeaveRequest(job_id=self.job.id, token=self.job.token,
                                         generation=self.gen, worker_id=self.ids[rank], ok=False,
                                         error=why), timeout=10)


def wait_parked(env, job, name, arrived, timeout=10):
    """Until the coordinator shows `arrived` arrivals at open barrier name."""
    import time
    deadline = time.time() + timeout
    while time.time() < deadline:
        bs = rmtest.get_json("http://%s/api/v1/jobs/%d/barriers" % (env.http, job.id))
        bs = bs.get("barriers", bs) if isinstance(bs, dict) else bs
        for b in bs:
            if b.get("name") == name and b.get("state") == "open" and b.get("arrived") == arrived:
                return
        time.sleep(0.02)
    raise AssertionError("barrier %s never had %d arrivals" % (name, arrived))


def test_release_replay_length(env, grp, payloads):
    g = env.grpc
    out = {}
    t0, _ = grp.arrive_async(0, "keys", payloads[0], out, "r0")
    wait_parked(env, grp.job, "keys", 1)
    grp.refused(0, "keys", secrets.token_bytes(32), g.StatusCode.INVALID_ARGUMENT,
                "replayed arrival with a different payload")
    t0b, _ = grp.arrive_async(0, "keys", payloads[0], out, "r0-again")  # a retry: fine
    grp.refused(1, "keys", b"s" * 16, g.StatusCode.INVALID_ARGUMENT, "16 bytes", "32 bytes")
    grp.refused(1, "big", b"b" * 1025, g.StatusCode.INVALID_ARGUMENT, "1025 bytes", "1024")
    wait_parked(env, grp.job, "keys", 1)  # neither refusal counted, the retry neither
    ts = [grp.arrive_async(r, "keys", payloads[r], out, "r%d" % r)[0] for r in range(1, WORLD)]
    for t in [t0, t0b] + ts:
        t.join(timeout=30)
    for k in ["r0", "r0-again"] + ["r%d" % r for r in range(1, WORLD)]:
        a = out[k]
        assert not isinstance(a, Exception), (k, a)
        assert a.released and a.expected == WORLD and a.arrived == WORLD, (k, a)
        assert list(a.payloads) == payloads, (k, [p.hex() for p in a.payloads])
    # no payloads: none answered
    out = {}
    ts = [grp.arrive_async(r, "plain", b"", out)[0] for r in range(WORLD)]
    [t.join(timeout=30) for t in ts]
    assert all(out[r].released and len(out[r].payloads) == 0 for r in range(WORLD)), out
    # a payload at a barrier the others reach without: refused naming both lengths
    out = {}
    t, _ = grp.arrive_async(0, "mixed", b"", out)
    wait_parked(env, grp.job, "mixed", 1)
    grp.refused(1, "mixed", b"x" * 8, g.StatusCode.INVALID_ARGUMENT, "8 bytes", "0 bytes")
    ts = [grp.arrive_async(r, "mixed", b"", out)[0] for r in range(1, WORLD)]
    [x.join(timeout=30) for x in [t] + ts]
    assert all(out[r].released for r in range(WORLD)), out


def test_reform(env, grp, payloads):
    g, m = env.grpc, env.m
    grp.leave_failed(3, "injected: rank 3 gone")
    j = env.wait_job(grp.job.id, lambda j: j.generation == 2 and j.state == m.JOB_STATE_RUNNING)
    assert j.world == WORLD - 1, j
    evs = env.events(grp.job.id, grp.job.token)
    rec = [e for e in evs if e.kind == "secure_recovered"]
    assert len(rec) == 1, [(e.kind, e.message) for e in evs]
    assert rec[0].message == ("generation 2: step 1 redone with fresh masks over 3 members "
                              "after 1 dropout"), rec[0].message
    rj = rest_job(env.http, grp.job.id)
    assert rj["secure_recovered_steps"] == 1 and rj["secure_dropouts"] == 1, rj
    assert rj["spec"]["secure_aggregation"]["threshold"] == THRESHOLD, rj["spec"]
    # the old generation is refused, the new one exchanges 3 payloads
    grp.refused(0, "keys-g1", payloads[0], g.StatusCode.FAILED_PRECONDITION, gen=1)
    grp.gen = 2
    fresh = [secrets.token_bytes(32) for _ in range(WORLD - 1)]
    payloads.extend(fresh)
    out = {}
    ts = [grp.arrive_async(r, "keys-g2", fresh[r], out)[0] for r in range(WORLD - 1)]
    [t.join(timeout=30) for t in ts]
    for r in range(WORLD - 1):
        assert out[r].released and list(out[r].payloads) == fresh, out[r]


def test_threshold(env, grp, payloads):
    m = env.m
    out = {}
    t, _ = grp.arrive_async(0, "keys-open", payloads[0], out)
    wait_parked(env, grp.job, "keys-open", 1)
    grp.leave_failed(2, "injected: rank 2 gone")
    j = env.wait_job(grp.job.id, lambda j: j.state == m.JOB_STATE_FAILED)
    want = "secure aggregation: 2 members left, threshold 3: no sum over fewer inputs is revealed"
    assert want in j.reason, j.reason
    t.join(timeout=30)
    a = out[0]
    assert not isinstance(a, Exception) and not a.released and len(a.payloads) == 0, a
    evs = env.events(grp.job.id, grp.job.token)
    th = [e for e in evs if e.kind == "secure_threshold"]
    assert len(th) == 1 and want in th[0].message, [(e.kind, e.message) for e in evs]
    assert len([e for e in evs if e.kind == "secure_recovered"]) == 1
    rj = rest_job(env.http, grp.job.id)
    assert rj["state"] == "failed" and want in rj["reason"], rj


def test_at_rest(env, payloads):
    env.kill_coordinator()
    blobs = []
    for suffix in ("", "-wal", "-shm"):
        p = env.db + suffix
        if os.path.exists(p):
            with open(p, "rb") as f:
                blobs.append((p, f.read()))
    assert blobs and len(blobs[0][1]) > 0, "no database file"
    with open(os.path.join(env.dir, "coord.log"), "rb") as f:
        blobs.append(("coord.log", f.read()))
    for p in payloads:
        for name, data in blobs:
            assert p not in data and p.hex().encode() not in data, \
                "payload %s found in %s" % (p.hex(), name)


def test(env):
    p = env.start_coordinator(extra=["--http", "127.0.0.1:0"])
    env.http = rmtest.http_addr(p)
    job = env.submit(name="secure-barriers", world_size=WORLD, workload="train",
                     on_failure="shrink", heartbeat_timeout_ms=120000,
                     barrier_timeout_ms=60000, secagg_bits=32, secagg_threshold=THRESHOLD)
    assert job.spec.secagg_bits == 32 and job.spec.secagg_threshold == THRESHOLD, job.spec
    assert job.spec.secagg_neighbours == "all" and job.spec.secagg_clip == 1.0, job.spec
    grp = Group(env, job)
    grp.join_all()
    payloads = [secrets.token_bytes(32) for _ in range(WORLD)]
    test_release_replay_length(env, grp, payloads)
    test_reform(env, grp, payloads)
    test_threshold(env, grp, payloads)
    test_at_rest(env, payloads)


rmtest.main(test)
