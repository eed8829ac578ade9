"""Byzantine-robust aggregation in the coordinator, over real
gRPC and REST against a real `ringmaster serve`, with scripted workers
(Python stubs from proto/):

  suspect   5 workers of a krum f=1 job report excluded_ranks=[3] (every
            rank the same set, as rm_aggregate's ranks do) for 12 steps:
            one "byzantine_suspect" event naming exactly rank 3 with the
            evidence in words (default M = 10 of W = 20), REST workers JSON
            suspect only on rank 3, /metrics ringmaster_byzantine_suspects 1;
            then 11 clean steps: "byzantine_cleared", gauge 0
  spec      JoinResponse.spec carries the aggregation to the workers
  clean     4 workers of a median f=1 job, exclusions rotating over the
            ranks (each 3 of 12 steps, below M): nobody is named
  env       RINGMASTER_SUSPECT_M=2 / _W=3 (a second server): flagged after
            2 excluded steps, cleared when 1 of the last 3 remains
  grpc      SubmitJob over gRPC refuses a rule that cannot hold
  shrink    krum f=1, world 6, on_failure shrink: losing one member re-forms
            with 5 (the rule n > 2f + 2 holds), losing another fails the job
            with the rule in the reason (n = 4)
"""
import os
import re
import sys
import threading
import time

import rmtest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
from rmserver import Server  # noqa: E402


class Job:
    def __init__(self, env, srv, **spec):
        self.env, self.srv, self.m = env, srv, env.m
        st, _, j = srv.request("POST", "/api/v1/jobs", dict(spec, launcher="none"), token=srv.token)
        assert st == 201, (st, j)
        self.id, self.token, self.n = j["id"], j["token"], spec["world_size"]
        self.w = {}  # rank -> (worker_id, generation)

    def join_all(self, W):
        res, m = {}, self.m

        def join(i):
            res[i] = W.Join(m.JoinRequest(job_id=self.id, token=self.token, host="host%d" % i,
                                          data_addr="127.0.0.1:%d" % (31000 + i), wait_ms=10000),
                            timeout=20)
        ts = [threading.Thread(target=join, args=(i,)) for i in range(self.n)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        assert all(r.formed for r in res.values()), res
        for r in res.values():
            self.w[r.rank] = (r.worker_id, r.generation)
        return res

    def ids(self, rank):
        wid, gen = self.w[rank]
        return dict(job_id=self.id, token=self.token, generation=gen, worker_id=wid)

    def steps(self, W, first, last, excluded):
        for s in range(first, last + 1):
            ex = excluded(s)
            for r in sorted(self.w):
                W.ReportStep(self.m.ReportStepRequest(step=s, compute_ms=1, comm_ms=1,
                                                      excluded_ranks=ex, **self.ids(r)), timeout=10)

    def events(self, kind=None):
        st, _, ev = self.srv.request("GET", "/api/v1/jobs/%d/events" % self.id)
        assert st == 200, ev
        return [e for e in ev["events"] if kind is None or e["kind"] == kind]

    def workers(self):
        st, _, w = self.srv.request("GET", "/api/v1/jobs/%d/workers" % self.id)
        assert st == 200, w
        return w["workers"]

    def get(self):
        st, _, j = self.srv.request("GET", "/api/v1/jobs/%d" % self.id)
        assert st == 200, j
        return j


def gauge(srv):
    st, _, text = srv.request("GET", "/metrics")
    assert st == 200
    m = re.search(r"^ringmaster_byzantine_suspects (\S+)$", text, re.M)
    assert m and "# TYPE ringmaster_byzantine_suspects gauge" in text, text[-2000:]
    return float(m.group(1))


def suspect(env, srv, W):
    job = Job(env, srv, name="byz", world_size=5, heartbeat_timeout_ms=60000,
              aggregation={"method": "krum", "f": 1, "clip_norm": 5})
    res = job.join_all(W)
    for r in res.values():  # the spec rides on every Join answer (join_tail)
        sp = r.spec
        assert sp.name == "byz" and sp.aggregation == "krum" and sp.aggregation_f == 1 \
            and sp.clip_norm == 5, sp
    assert gauge(srv) == 0
    job.steps(W, 1, 9, lambda s: [3])
    assert not job.events("byzantine_suspect"), "flagged before M = 10 steps"
    job.steps(W, 10, 12, lambda s: [3])
    ev = job.events("byzantine_suspect")
    assert len(ev) == 1, ev
    assert ev[0]["rank"] == 3, ev
    assert re.match(r"rank 3 \(host\d\) excluded by krum in 10 of the last 10 steps", ev[0]["message"]), ev
    ws = {w["rank"]: w for w in job.workers()}
    assert ws[3]["suspect"] is True and not any(ws[r]["suspect"] for r in ws if r != 3), ws
    assert gauge(srv) == 1
    # clean steps: the 10 exclusions leave the 20-step window one by one
    job.steps(W, 13, 22, lambda s: [])
    assert not job.events("byzantine_cleared")
    job.steps(W, 23, 23, lambda s: [])
    cl = job.events("byzantine_cleared")
    assert len(cl) == 1 and cl[0]["rank"] == 3 and "9 of the last 20 steps" in cl[0]["message"], cl
    assert gauge(srv) == 0 and not any(w["suspect"] for w in job.workers())
    for r in job.w:
        W.Leave(env.m.LeaveRequest(ok=True, step=23, **job.ids(r)), timeout=10)
    assert job.get()["state"] == "succeeded"
    return job


def clean(env, srv, W):
    job = Job(env, srv, name="clean", world_size=4, heartbeat_timeout_ms=60000,
              aggregation={"method": "median", "f": 1})
    job.join_all(W)
    job.steps(W, 1, 12, lambda s: [s % 4])
    assert not job.events("byzantine_suspect"), job.events("byzantine_suspect")
    assert not any(w["suspect"] for w in job.workers())
    job.steps(W, 13, 14, lambda s: [])
    assert not job.events("byzantine_suspect")


def shrink(env, srv, W):
    m = env.m
    job = Job(env, srv, name="shrink", world_size=6, heartbeat_timeout_ms=60000,
              on_failure="shrink", aggregation={"method": "krum", "f": 1})
    job.join_all(W)
    job.steps(W, 1, 2, lambda s: [])
    W.Leave(m.LeaveRequest(ok=False, error="boom", step=2, **job.ids(5)), timeout=10)
    deadline = time.time() + 10
    while time.time() < deadline and job.get()["generation"] < 2:
        time.sleep(0.05)
    j = job.get()
    assert j["state"] == "running" and j["generation"] == 2 and j["world"] == 5, j
    # rank 0 learns generation 2 by re-joining, then fails too: 4 < 2f + 3
    wid, gen = job.w[0]
    r = W.Join(m.JoinRequest(job_id=job.id, token=job.token, worker_id=wid, generation=gen,
                             host="host0", data_addr="127.0.0.1:31000", wait_ms=5000, steps_done=2),
               timeout=10)
    assert r.formed and r.generation == 2, r
    W.Leave(m.LeaveRequest(job_id=job.id, token=job.token, generation=2, worker_id=wid,
                           ok=False, error="boom again", step=2), timeout=10)
    j = job.get()
    assert j["state"] == "failed", j
    assert "on_failure shrink: 4 survivors cannot hold aggregation krum with f = 1" in j["reason"], j
    assert "krum needs n > 2f + 2: n = 4, f = 1" in j["reason"], j


def window_env(env, a):
    srv = Server(a, env={"RINGMASTER_SUSPECT_M": "2", "RINGMASTER_SUSPECT_W": "3"})
    try:
        ch = env.grpc.insecure_channel(srv.grpc)
        W = env.s.WorkerStub(ch)
        job = Job(env, srv, name="win", world_size=3, heartbeat_timeout_ms=60000,
                  aggregation={"method": "trimmed_mean", "f": 1})
        job.join_all(W)
        job.steps(W, 1, 1, lambda s: [1])
        assert not job.events("byzantine_suspect")
        job.steps(W, 2, 2, lambda s: [1, 1])  # a repeated rank counts once
        ev = job.events("byzantine_suspect")
        assert len(ev) == 1 and ev[0]["rank"] == 1 and \
            "excluded by trimmed_mean in 2 of the last 2 steps" in ev[0]["message"], ev
        job.steps(W, 3, 3, lambda s: [7])  # not a rank of the group: ignored
        assert not job.events("byzantine_cleared")
        job.steps(W, 4, 4, lambda s: [])
        cl = job.events("byzantine_cleared")
        assert len(cl) == 1 and "1 of the last 3 steps" in cl[0]["message"], cl
        # gRPC submit: the same rule, INVALID_ARGUMENT naming it
        J = env.s.JobsStub(env.authed(ch, srv.token))
        try:
            J.SubmitJob(env.m.SubmitJobRequest(spec=env.m.JobSpec(
                name="g", world_size=6, launcher="none", aggregation="bulyan", aggregation_f=1)),
                timeout=10)
            raise AssertionError("bulyan f=1 n=6 accepted over gRPC")
        except env.grpc.RpcError as e:
            assert e.code() == env.grpc.StatusCode.INVALID_ARGUMENT, e
            assert "bulyan needs n >= 4f + 3" in e.details(), e.details()
        ch.close()
    finally:
        srv.stop()


def test(env):
    srv = Server(env.a.coordinator)
    try:
        ch = env.grpc.insecure_channel(srv.grpc)
        W = env.s.WorkerStub(ch)
        suspect(env, srv, W)
        clean(env, srv, W)
        shrink(env, srv, W)
        ch.close()
    finally:
        srv.stop()
    window_env(env, env.a.coordinator)


rmtest.main(test)
