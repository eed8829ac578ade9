"""test_join_transports.py - the data-plane offer of Join (JoinRequest field
12 `transports`) over real gRPC and REST, against a real
coordinator:

  refused     an offer of 256 bytes (and of 10,000), a newline, a tab, ';',
              an upper-case letter, non-ASCII -> INVALID_ARGUMENT whose
              message names `transports`; the job is unchanged (no worker in
              REST, state pending, no worker_joined event; with one good
              worker joining: still one, still forming) and a later good Join
              forms the group
  accepted    255 bytes (the limit), an unknown transport's token (forward
              compatibility, rm_transports.h) -> joined
  round trip  what each worker sent comes back byte for byte in
              Peer.transports of every member's JoinResponse and in the REST
              worker JSON `transports`, also after a coordinator restart on
              the same db (migration 0012)
  old worker  no field 12 -> Peer.transports reads as TCP ("" per the proto's
              "" = TCP, or "tcp"), REST `transports` "tcp", its links all tcp
  links       REST `links` of each member equals the pair rule written out
              below independently of common/rm_transports.c (lower rank's
              list, first token the other offers too; shm by host, rdma by
              fabric, tcp by name; counts "shm a, rdma b, tcp c, none d"):
              4 workers (two on host A, one on B, one TCP only), 8 workers with pinned
              ranks where the order of a list matters, rdma fabrics, a pair
              with nothing in common ("none") and an old worker; 1 member: ""

  logged      every refused Join logs a WARN line naming `transports`
  syntax      malformed tokens (empty ones, "shm:" without <host>/<nonce>
              or with an empty host, an empty fabric, a bare ':') are
              refused; "tcp\\0;x" is refused or stored as "tcp" (protobuf-c's
              strings end at the NUL), never with what follows it
"""
import json
import os
import threading
import time
import urllib.request

import rmtest

# ---- the pair rule, from rm_transports.h, written out independently ----
def tokens(offer):
    """Tokens of an offer; an empty or absent one means "tcp"."""
    t = (offer or "").split(" ")
    t = [x for x in t if x]
    return t or ["tcp"]


def scope(tok):
    """("shm", host) for shm:<host>/<nonce>, ("rdma", fabric) for
    rdma:<fabric>/<boot>, else None."""
    for kind in ("shm", "rdma"):
        head = kind + ":"
        if tok.startswith(head) and "/" in tok[len(head):]:
            return kind, tok[len(head):].split("/", 1)[0]
    return None


def pick(lo, hi):
    """The transport of a pair: the first token of the lower rank's list
    that the higher rank offers too; None when nothing is common."""
    theirs = tokens(hi)
    for t in tokens(lo):
        s = scope(t)
        if s is not None:
            if any(scope(u) == s for u in theirs):
                return s[0]
        elif t == "tcp" and "tcp" in theirs:
            return "tcp"
    return None


def cuda_host(offer):
    """<host> of a cuda:<host>/ipc1 capability token (the protocol this
    build speaks), else None."""
    for t in tokens(offer):
        if t.startswith("cuda:") and "/" in t[5:]:
            host, rest = t[5:].split("/", 1)
            return host if rest == "ipc1" else None
    return None


KINDS = ("shm+cuda-ipc", "shm", "rdma", "tcp", "none")


def expected_links(offers):
    """offers[rank] -> the `links` text of each rank. A shared-memory pair
    whose ranks both offer cuda on the shared-memory host is shm+cuda-ipc."""
    out = []
    for a in range(len(offers)):
        count = dict.fromkeys(KINDS, 0)
        for b in range(len(offers)):
            if a != b:
                lo, hi = (a, b) if a < b else (b, a)
                kind = pick(offers[lo], offers[hi]) or "none"
                if kind == "shm":
                    shm_host = [scope(t) for t in tokens(offers[lo]) if (scope(t) or ("",))[0] == "shm"][0][1]
                    if cuda_host(offers[lo]) == cuda_host(offers[hi]) == shm_host:
                        kind = "shm+cuda-ipc"
                count[kind] += 1
        out.append(", ".join("%s %d" % (k, count[k]) for k in KINDS if count[k]))
    return out


def self_check_rule():
    """The rule above on cases worked out by hand from the header."""
    assert pick("shm:a/1 tcp", "shm:a/2 tcp") == "shm"
    assert pick("shm:a/1 tcp", "shm:b/2 tcp") == "tcp"
    assert pick("tcp shm:a/1", "shm:a/2 tcp") == "tcp"        # the lower rank's order
    assert pick("shm:a/2 tcp", "tcp shm:a/1") == "shm"
    assert pick("rdma:f/1.2.3.4:5 tcp", "rdma:f/9.9.9.9:5") == "rdma"
    assert pick("rdma:f/x tcp", "rdma:g/x tcp") == "tcp"
    assert pick("shm:a/1", "tcp") is None
    assert pick("", None) == "tcp" and pick(None, "shm:a/1 tcp") == "tcp"
    assert pick("nvlink:q/1 tcp", "nvlink:q/2 tcp") == "tcp"  # unknown: skipped
    assert expected_links(["shm:a/1 tcp", "shm:a/2 tcp", "tcp"]) == \
        ["shm 1, tcp 1", "shm 1, tcp 1", "tcp 2"]
    assert expected_links(["tcp"]) == [""]
    assert expected_links(["shm:a/1 cuda:a/ipc1 tcp", "shm:a/2 cuda:a/ipc1 tcp",
                           "shm:a/3 tcp", "shm:a/4 cuda:b/ipc1 tcp"]) == \
        ["shm+cuda-ipc 1, shm 2", "shm+cuda-ipc 1, shm 2", "shm 3", "shm 3"]


# ---- gRPC / REST helpers ----
def code_of(g, fn):
    try:
        fn()
    except g.RpcError as e:
        return e.code(), e.details()
    return g.StatusCode.OK, ""


def join_req(env, job, i, offer, wait_ms=15000, world=0):
    """A JoinRequest of worker i; offer None leaves field 12 out (an old
    worker); world > 0 pins rank i through the launcher hints."""
    kw = dict(job_id=job.id, token=job.token, host="h%d" % (i % 3),
              data_addr="127.0.0.1:%d" % (32000 + i), wait_ms=wait_ms)
    if world:
        kw.update(rank_hint=i, world_hint=world)
    if offer is not None:
        kw["transports"] = offer
    return env.m.JoinRequest(**kw)


def join_group(env, job, offers, pin=False):
    """Joins len(offers) workers at once; their JoinResponses by index."""
    res, err = {}, {}

    def join(i):
        try:
            res[i] = env.worker.Join(join_req(env, job, i, offers[i],
                                              world=len(offers) if pin else 0), timeout=30)
        except env.grpc.RpcError as e:
            err[i] = e
    ts = [threading.Thread(target=join, args=(i,)) for i in range(len(offers))]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not err, {i: (e.code(), e.details()) for i, e in err.items()}
    for i, r in res.items():
        assert r.formed and r.world == len(offers), (i, r)
    return res


def rest_workers(http, job_id):
    return rmtest.get_json("http://%s/api/v1/jobs/%d/workers" % (http, job_id))["workers"]


def members(http, job_id):
    """REST workers that are members (rank >= 0), by rank."""
    ws = sorted((w for w in rest_workers(http, job_id) if w["rank"] >= 0), key=lambda w: w["rank"])
    assert [w["rank"] for w in ws] == list(range(len(ws))), ws
    return ws


def offers_by_rank(res, offers):
    """offers[] of join_group re-indexed by the rank each worker got."""
    by = [None] * len(offers)
    for i, r in res.items():
        by[r.rank] = offers[i]
    return by


def coord_log(env):
    with open(os.path.join(env.dir, "coord.log"), "rb") as f:
        return f.read().decode(errors="replace")


def check_peers(env, res, offers):
    """Every member's answer lists every peer with the offer it sent."""
    ids = {r.worker_id: i for i, r in res.items()}
    for i, r in res.items():
        assert len(r.peers) == len(offers), r
        for p in r.peers:
            sent = offers[ids[p.worker_id]]
            if sent is None:  # an old worker: TCP ("" = TCP in Peer, messages.proto)
                assert p.transports in ("", "tcp"), (i, p)
            else:
                assert p.transports == sent, (i, p.transports, sent)
            assert p.rank == res[ids[p.worker_id]].rank, (i, p)


# ---- the cases ----
BAD = [
    ("256 bytes", ("tcp " * 64)[:256]),
    ("10000 bytes", "t" * 10000),
    ("newline", "shm:hosta/n1\ntcp"),
    ("tab", "shm:hosta/n1\ttcp"),
    ("semicolon", "tcp;rm -rf /"),
    ("upper case", "TCP"),
    ("non-ascii", "shm:h\u00f4te/n1 tcp"),
    ("quote", "tcp \"x\""),
]
TOKEN_SYNTAX = [  # malformed per rm_transports.h's token grammar
    ("double space (empty token)", "shm:hosta/n1  tcp"),
    ("leading space", " tcp"),
    ("only spaces", "   "),
    ("shm without /nonce", "shm:hosta tcp"),
    ("shm with an empty host", "shm:/n1 tcp"),
    ("rdma with an empty fabric", "rdma:/1.2.3.4:5 tcp"),
    ("bare colon", ": tcp"),
]


def refused_cases(env, http):
    g, m = env.grpc, env.m
    job = env.submit(name="refused", world_size=2, heartbeat_timeout_ms=60000)

    def unchanged(state, nworkers, name):
        j = env.get(job.id)
        assert j.state == state, (name, j)
        ws = rest_workers(http, job.id)
        assert len(ws) == nworkers, (name, ws)
        joined = [e for e in env.events(job.id, job.token, timeout=1) if e.kind == "worker_joined"]
        assert len(joined) == nworkers, (name, joined)

    def refuse(name, offer, i):
        got, details = code_of(g, lambda: env.worker.Join(join_req(env, job, i, offer, wait_ms=0),
                                                          timeout=10))
        assert got == g.StatusCode.INVALID_ARGUMENT, (name, got, details)
        assert "transports" in details, (name, details)
        return details

    mark = len(coord_log(env))
    for k, (name, offer) in enumerate(BAD):
        d = refuse(name, offer, 10 + k)
        if "bytes" in name:
            assert "255" in d, (name, d)
        unchanged(m.JOB_STATE_PENDING, 0, name)
    log = coord_log(env)[mark:]  # what the refused Joins logged
    logged = [ln for ln in log.splitlines() if "refused: transports" in ln]
    assert len(logged) >= len(BAD), ("a refused Join logs a line naming transports",
                                     len(logged), len(BAD), log[-300:])

    # one good worker waits in Join; bad offers beside it change nothing
    res = {}
    t0 = threading.Thread(target=lambda: res.setdefault(0, env.worker.Join(
        join_req(env, job, 0, "shm:hosta/n1 tcp", wait_ms=20000), timeout=30)))
    t0.start()
    deadline = time.time() + 10
    while len(rest_workers(http, job.id)) < 1:
        assert time.time() < deadline, "the first good Join did not show in REST"
        time.sleep(0.05)
    for k, (name, offer) in enumerate(BAD):
        refuse(name, offer, 20 + k)
        unchanged(m.JOB_STATE_FORMING, 1, name + " (forming)")
    res[1] = env.worker.Join(join_req(env, job, 1, "tcp"), timeout=30)
    t0.join()
    assert res[0].formed and res[1].formed and res[0].world == 2, res
    check_peers(env, res, ["shm:hosta/n1 tcp", "tcp"])


def accepted_cases(env, http):
    """Offers at the limit or with a token of a newer transport join."""
    g = env.grpc
    limit = "tcp" + " x" * 126
    assert len(limit) == 255
    newer = "nvlink:q/1 shm:hosta/n1 tcp"
    job = env.submit(name="accepted", world_size=2, heartbeat_timeout_ms=60000)
    res = join_group(env, job, [limit, newer])
    check_peers(env, res, [limit, newer])
    assert sorted(w["transports"] for w in members(http, job.id)) == sorted([limit, newer])

    # the token grammar: each on a job of its own, as it may be accepted
    for name, offer in TOKEN_SYNTAX:
        j = env.submit(name="syntax", world_size=2, heartbeat_timeout_ms=60000)
        got, details = code_of(g, lambda: env.worker.Join(join_req(env, j, 0, offer, wait_ms=0),
                                                          timeout=10))
        assert got == g.StatusCode.INVALID_ARGUMENT and "transports" in details, \
            "%s %r answered %s %r" % (name, offer, got, details)
    j = env.submit(name="nul", world_size=2, heartbeat_timeout_ms=60000)
    got, details = code_of(g, lambda: env.worker.Join(join_req(env, j, 0, "tcp\x00;x", wait_ms=0),
                                                      timeout=10))
    stored = [w["transports"] for w in rest_workers(http, j.id)]
    # protobuf-c's strings end at the first NUL, so the coordinator sees
    # "tcp": refused or stored as that valid prefix, never with ";x"
    assert (got == g.StatusCode.INVALID_ARGUMENT and "transports" in details) or \
        (got == g.StatusCode.OK and stored == ["tcp"]), \
        "'tcp\\x00;x' answered %s, stored %r" % (got, stored)


def round_trip_and_links(env, http):
    # the brief's example: two on host A, one on host B, one TCP only
    four = ["shm:hosta/0123456789abcdef tcp", "shm:hosta/fedcba9876543210 tcp",
            "shm:hostb/00000000000000ff tcp", "tcp"]
    job4 = env.submit(name="links4", world_size=4, heartbeat_timeout_ms=60000)
    res4 = join_group(env, job4, four)
    check_peers(env, res4, four)
    by4 = offers_by_rank(res4, four)
    want4 = expected_links(by4)
    assert sorted(want4) == sorted(["shm 1, tcp 2", "shm 1, tcp 2", "tcp 3", "tcp 3"]), want4
    ws = members(http, job4.id)
    assert [w["transports"] for w in ws] == by4, ws
    assert [w["links"] for w in ws] == want4, ([w["links"] for w in ws], want4)

    # ranks pinned: order within a list, rdma fabrics, "none", an old worker
    eight = [
        "tcp shm:hosta/n4",                                # 0: TCP first
        "shm:hosta/n1 rdma:fab1/10.0.0.1:7000 tcp",        # 1
        "rdma:fab1/10.0.0.2:7000 shm:hosta/n2 tcp",        # 2: rdma before shm
        "rdma:fab1/10.0.0.3:7000 tcp",                     # 3: rdma with 1 and 2
        "shm:hostc/n5",                                    # 4: no tcp
        None,                                              # 5: old worker
        "nvlink:x/y shm:hostc/n6 tcp",                     # 6: unknown token first
        "rdma:fab2/10.0.0.4:7000 tcp",                     # 7: another fabric
    ]
    job8 = env.submit(name="links8", world_size=8, heartbeat_timeout_ms=60000)
    res8 = join_group(env, job8, eight, pin=True)
    assert [res8[i].rank for i in range(8)] == list(range(8)), res8
    check_peers(env, res8, eight)
    want8 = expected_links(eight)
    # worked out by hand: 0-1 tcp (0 is lower, tcp first), 1-2 shm (1 is
    # lower, shm first), 2-3 rdma, 3-7 tcp (fabrics differ), 4-6 shm, 4 and
    # the rest none
    assert want8[:5] == ["tcp 6, none 1", "shm 1, rdma 1, tcp 4, none 1",
                         "shm 1, rdma 1, tcp 4, none 1", "rdma 2, tcp 4, none 1",
                         "shm 1, none 6"], want8
    ws = members(http, job8.id)
    assert [w["transports"] for w in ws] == [o if o is not None else "tcp" for o in eight], ws
    assert ws[5]["transports"] == "tcp" and ws[5]["links"] == "tcp 6, none 1", ws[5]
    assert [w["links"] for w in ws] == want8, ([w["links"] for w in ws], want8)
    old = [p for p in res8[0].peers if p.rank == 5][0]
    print("old worker's Peer.transports: %r" % old.transports)

    # CUDA IPC: 0-1 on host a both offer cuda:a (IPC), 2 offers none, 3's
    # cuda is on another host, 4 is on host b (tcp)
    cuda = ["shm:hosta/c0 cuda:hosta/ipc1 tcp", "shm:hosta/c1 cuda:hosta/ipc1 tcp",
            "shm:hosta/c2 tcp", "shm:hosta/c3 cuda:hostz/ipc1 tcp",
            "shm:hostb/c4 cuda:hostb/ipc1 tcp"]
    job5 = env.submit(name="links-cuda", world_size=5, heartbeat_timeout_ms=60000)
    res5 = join_group(env, job5, cuda, pin=True)
    want5 = expected_links(cuda)
    assert want5 == ["shm+cuda-ipc 1, shm 2, tcp 1", "shm+cuda-ipc 1, shm 2, tcp 1",
                     "shm 3, tcp 1", "shm 3, tcp 1", "tcp 4"], want5
    ws = members(http, job5.id)
    assert [w["links"] for w in ws] == want5, ([w["links"] for w in ws], want5)

    # one member: no pairs, no links
    job1 = env.submit(name="links1", world_size=1, heartbeat_timeout_ms=60000)
    join_group(env, job1, ["shm:hosta/n9 tcp"])
    ws = members(http, job1.id)
    assert ws[0]["links"] == "" and ws[0]["transports"] == "shm:hosta/n9 tcp", ws
    return [(job4, by4), (job8, [o if o is not None else "tcp" for o in eight])]


def test(env):
    self_check_rule()
    p = env.start_coordinator(extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(p)
    refused_cases(env, http)
    accepted_cases(env, http)
    kept = round_trip_and_links(env, http)

    # the offers are stored: a restarted coordinator still shows them
    addr = env.addr
    env.kill_coordinator()
    time.sleep(0.3)
    p = env.start_coordinator(addr, extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(p)
    for job, offers in kept:
        ws = sorted(rest_workers(http, job.id), key=lambda w: w["id"])
        got = sorted(w["transports"] for w in ws)
        assert got == sorted(offers), (job.id, got, offers)


rmtest.main(test)
