"""test_join_gzip.py - gzip Join answers (JoinRequest field 13 `accept_gzip`,
coordinator/rpc/gz_answer.c) against a real coordinator, with
Python's grpcio as the standard client:

  encoding    a worker that asks gets its formed answer as one gzip member:
              read raw (a channel with per-message decompression off) it
              starts 1f 8b and Python's gzip module inflates it; a worker
              that does not ask gets plain protobuf bytes; grpcio's default
              channel decodes a gzip answer by itself
  same        every answer, gzip or plain, parses to a JoinResponse with the
              same generation, world, peers and spec; the peers are every
              member once in rank order with what each sent (host, data_addr,
              transports, its worker id); the ranks are a permutation
  per call    each gzip answer carries its own worker id and rank beside the
              shared peer list (the per-call head)
  re-join     a repeated Join in the same generation gets the group again,
              gzip when asked
  not formed  a long-poll that ends before the group forms (formed = false)
              is plain
  restart     after a coordinator SIGKILL and a restart on the same db, the
              re-joins' answers (gzip and plain) carry generation 2, the same
              ranks and members
  new gen     after a member fails (on_failure shrink) the survivors' gzip
              answers carry generation 3's peers, not generation 2's (the
              shared tail is one per generation)
"""
import gzip
import threading
import time

import rmtest

N = 6


def members(r):
    """(rank, worker_id, host, data_addr, transports) of each peer."""
    return [(p.rank, p.worker_id, p.host, p.data_addr, p.transports) for p in r.peers]


def test(env):
    env.start_coordinator()
    g, m = env.grpc, env.m
    job = env.submit(name="gzip", world_size=N, heartbeat_timeout_ms=60000, on_failure="shrink")
    raw = g.insecure_channel(env.addr, options=[("grpc.per_message_decompression", 0)])
    raw_join = raw.unary_unary("/ringmaster.v1.Worker/Join")
    W = env.worker

    def join(i, how, **kw):
        """how: 'raw' (asks gzip, reads the bytes), 'plain' (does not ask),
        'auto' (asks gzip, grpcio decodes). Returns (response, was_gzip)."""
        q = m.JoinRequest(job_id=job.id, token=job.token, host="host%d" % (i % 3),
                          data_addr="10.1.0.%d:5000" % i, transports="tcp" if i % 2 else "",
                          accept_gzip=how != "plain", **kw)
        if how == "auto":
            return W.Join(q, timeout=30), None
        b = raw_join(q.SerializeToString(), timeout=30)
        z = b[:2] == b"\x1f\x8b"
        return m.JoinResponse.FromString(gzip.decompress(b) if z else b), z

    # not formed: one worker alone, a short long-poll, asking for gzip
    r, z = join(0, "raw", wait_ms=200)
    assert not r.formed and not z, (r, z)
    first_id = r.worker_id

    hows = ["raw", "plain", "auto", "raw", "plain", "raw"]
    res = {}

    def run(i):
        kw = dict(worker_id=first_id) if i == 0 else {}
        res[i] = join(i, hows[i], wait_ms=20000, **kw)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(N)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    for i, (r, z) in res.items():
        assert r.formed and r.world == N and r.generation == 1, (i, r)
        assert z == (hows[i] == "raw") or hows[i] == "auto", (i, hows[i], z)
    ref = res[1][0]
    assert sorted(p.rank for p in ref.peers) == list(range(N)), ref
    assert [p.rank for p in ref.peers] == list(range(N)), "peers not in rank order"
    by_addr = {p.data_addr: p for p in ref.peers}
    for i in range(N):
        p = by_addr["10.1.0.%d:5000" % i]
        assert p.host == "host%d" % (i % 3) and p.transports in (("tcp",) if i % 2 else ("", "tcp")), p
    for i, (r, _) in res.items():
        assert members(r) == members(ref) and r.spec == ref.spec, (i, r)
        me = ref.peers[r.rank]
        assert me.worker_id == r.worker_id and me.data_addr == "10.1.0.%d:5000" % i, (i, r.rank)
    assert sorted(r.rank for r, _ in res.values()) == list(range(N))

    # re-join in the same generation: the group again, gzip
    r0 = res[0][0]
    r, z = join(0, "raw", worker_id=r0.worker_id, generation=0, wait_ms=5000)
    assert z and r.formed and r.generation == 1 and r.rank == r0.rank, (r, z)
    assert members(r) == members(ref)

    # coordinator SIGKILL, restart on the same db: every member re-joins
    env.kill_coordinator()
    env.start_coordinator()
    W = env.worker
    raw = g.insecure_channel(env.addr, options=[("grpc.per_message_decompression", 0)])
    raw_join = raw.unary_unary("/ringmaster.v1.Worker/Join")
    res2 = {}

    def rerun(i):
        res2[i] = join(i, hows[i], worker_id=res[i][0].worker_id, generation=1, wait_ms=20000)
    ts = [threading.Thread(target=rerun, args=(i,)) for i in range(N)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    for i, (r, z) in res2.items():
        assert r.formed and r.generation == 2 and r.world == N, (i, r)
        assert z == (hows[i] == "raw") or hows[i] == "auto", (i, z)
        assert members(r) == members(res2[0][0]), i
        assert r.worker_id == res[i][0].worker_id and r.rank == res[i][0].rank, i
    assert sorted(p.worker_id for p in res2[0][0].peers) == sorted(p.worker_id for p in ref.peers)

    # a member fails (on_failure shrink): generation 3 with the 5 survivors
    gone = res2[5][0]
    W.Leave(m.LeaveRequest(job_id=job.id, token=job.token, generation=2, worker_id=gone.worker_id,
                           ok=False, error="boom"), timeout=10)
    deadline = time.time() + 10
    while time.time() < deadline and env.get(job.id).generation < 3:
        time.sleep(0.05)
    assert env.get(job.id).generation == 3
    gen3 = {}
    for i in range(N - 1):
        r, z = join(i, hows[i], worker_id=res[i][0].worker_id, generation=2, wait_ms=5000)
        assert r.formed and r.generation == 3 and r.world == N - 1, (i, r)
        assert z == (hows[i] == "raw") or hows[i] == "auto", (i, z)
        gen3[i] = r
    ids3 = sorted(p.worker_id for p in gen3[0].peers)
    assert ids3 == sorted(res[i][0].worker_id for i in range(N - 1)), ids3
    assert all(members(r) == members(gen3[0]) for r in gen3.values())
    raw.close()


if __name__ == "__main__":
    rmtest.main(test)
