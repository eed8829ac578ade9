"""test_gate_gzip.py - gzip StepGate answers (StepGateRequest field 8
`accept_gzip`, coordinator/rpc/waiters.c rm__answer_gate, the
shared blob deflated once per step by server.c) against a real coordinator,
with Python's grpcio as the standard client. A job of 4 members under
straggler_policy backup with one backup worker: the first 3 ready arrivals
decide a step.

  encoding    a member that asks gets its decided answer as one gzip member:
              read raw (a channel with per-message decompression off) it
              starts 1f 8b and Python's gzip module inflates it; a member
              that does not ask gets plain protobuf bytes; grpcio's default
              channel decodes a gzip answer by itself
  same        every decided answer, gzip or plain, is step s with the same
              4-byte mask of 3 ones, and `dropped` exactly when the member's
              own rank is 0 in it; inflated gzip bytes equal the plain bytes
              of an answer with the same `dropped`
  per step    step 1's answers carry step 1's mask (the shared blob is one
              per step, so step 0's compressed bytes are not reused)
  undecided   an answer that is not decided (wait_ms 0 before the step is
              decided) is plain even when gzip was asked
"""
import gzip
import threading

import rmtest

N = 4


def test(env):
    env.start_coordinator()
    g, m = env.grpc, env.m
    job = env.submit(name="gate-gzip", world_size=N, heartbeat_timeout_ms=60000,
                     straggler_policy="backup", backup_workers=1)
    raw = g.insecure_channel(env.addr, options=[("grpc.per_message_decompression", 0)])
    raw_gate = raw.unary_unary("/ringmaster.v1.Worker/StepGate")
    W = env.worker

    # N members join at once
    joined = {}

    def join(i):
        joined[i] = W.Join(m.JoinRequest(job_id=job.id, token=job.token, host="h%d" % i,
                                         data_addr="10.2.0.%d:5000" % i, wait_ms=20000),
                           timeout=30)
    ts = [threading.Thread(target=join, args=(i,)) for i in range(N)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    for i, r in joined.items():
        assert r.formed and r.world == N, (i, r)
    assert sorted(r.rank for r in joined.values()) == list(range(N))

    def gate(i, how, step, wait_ms):
        """how: 'raw' (asks gzip, reads the bytes), 'plain' (does not ask,
        reads the bytes), 'auto' (asks gzip, grpcio decodes).
        Returns (response, bytes or None, was_gzip)."""
        r = joined[i]
        q = m.StepGateRequest(job_id=job.id, token=job.token, generation=r.generation,
                              worker_id=r.worker_id, step=step, ready=True, wait_ms=wait_ms,
                              accept_gzip=how != "plain")
        if how == "auto":
            return W.StepGate(q, timeout=30), None, None
        b = raw_gate(q.SerializeToString(), timeout=30)
        z = b[:2] == b"\x1f\x8b"
        body = gzip.decompress(b) if z else b
        return m.StepGateResponse.FromString(body), body, z

    # undecided: step 0 with nobody else there yet, wait_ms 0, gzip asked
    a, _, z = gate(0, "raw", 0, 0)
    assert not a.decided and not z, (a, z)

    hows = ["raw", "plain", "auto", "raw"]
    for step in (0, 1):
        res = {}

        def run(i):
            res[i] = gate(i, hows[i], step, 20000)
        ts = [threading.Thread(target=run, args=(i,)) for i in range(N)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        mask = res[0][0].members
        assert len(mask) == N and sum(1 for x in mask if x) == N - 1, (step, mask)
        for i, (r, body, z) in res.items():
            assert r.decided and r.step == step and r.members == mask, (step, i, r)
            assert r.dropped == (mask[joined[i].rank] == 0), (step, i, r, joined[i].rank)
            if hows[i] == "raw":
                assert z, (step, i, "asked for gzip, got plain")
            elif hows[i] == "plain":
                assert not z, (step, i, "did not ask, got gzip")
        assert sum(1 for r, _, _ in res.values() if r.dropped) == 1, res
        # the inflated bytes are the plain answer's bytes for the same `dropped`
        plain = res[1]
        for i in (0, 3):
            r, body, _ = res[i]
            if r.dropped == plain[0].dropped:
                assert body == plain[1], (step, i, body, plain[1])
            else:
                assert m.StepGateResponse.FromString(body).members == plain[0].members
    raw.close()


if __name__ == "__main__":
    rmtest.main(test)
