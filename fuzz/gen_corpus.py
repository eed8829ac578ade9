#!/usr/bin/env python3
"""gen_corpus.py - write the seed corpora of fuzz/ (fuzz/corpus/<target>/).

A handful of valid and near-valid inputs per target, built from the formats
documented at the top of api/target.c, common/rm_opts.h,
worker/checkpoint/checkpoint.c and worker/transport/tcp/tcp_int.h (and the
input layouts of fuzz/fuzz_frame.c and fuzz/fuzz_rpc.c; the rpc seeds are
protobuf encodings of proto/ringmaster/v1/messages.proto requests, written
with the small encoder below, no protobuf package needed). Run it again after a format change:
    python3 fuzz/gen_corpus.py
It replaces the seed files it writes (seed-*) and leaves other files alone.
"""
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, seeds):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("seed-"):
            os.unlink(os.path.join(d, f))
    for i, (name, data) in enumerate(seeds):
        if isinstance(data, str):
            data = data.encode()
        with open(os.path.join(d, "seed-%02d-%s" % (i, name)), "wb") as f:
            f.write(data)


# ---- HTTP request targets (api/target.c) ----
TARGETS = [
    ("root", "/"),
    ("jobs", "/api/v1/jobs"),
    ("query", "/api/v1/jobs?state=running&limit=10"),
    ("plus", "/api/v1/jobs/3/events?since=0&q=a+b%20c"),
    ("utf8", "/api/v1/jobs?name=%C3%A9t%C3%A9&x=%E2%82%AC"),
    ("noval", "/metrics?debug&&x=&=v"),
    ("dup", "/api/v1/jobs?a=1&a=2"),
    ("badpct", "/api/v1/jobs/%zz"),
    ("nul", "/api/v1/jobs?x=%00"),
    ("ctrl", "/api/v1/jobs?x=%1f"),
    ("overlong", "/a?x=%C0%AF"),
    ("surrogate", "/a?x=%ED%A0%80"),
    ("toomany", "/a?" + "&".join("p%d=%d" % (i, i) for i in range(65))),
    ("toolong", "/" + "a" * 8200),
]

# ---- workload options (common/rm_opts.h) ----
OPTS = [
    ("empty", ""),
    ("one", "bytes=4M"),
    ("train", "steps=100, lr=0.05 ,momentum=0.9,seed=42,epochs=2"),
    ("blanks", " ,, batch = 64 ,, "),
    ("suffix", "bytes=1G,compute_ms=2.5e1,slow_factor=1e6"),
    ("noeq", "steps"),
    ("emptykey", "=5"),
    ("longkey", "k" * 70 + "=1"),
    ("longval", "v=" + "9" * 300),
    ("neg", "steps=-1,lr=-0.0,seed=18446744073709551616"),
    ("float", "lr=nan,momentum=inf,x=0x1p3,y=1e400"),
]


# ---- checkpoint files (worker/checkpoint/checkpoint.c) ----
def ckpt(job=1, step=5, gen=2, rank=0, world=2, payload=b"", plen=None, version=1, hlen=64,
         magic=b"RMCKPT\n\x1a", pcrc=None, hcrc=None):
    plen = len(payload) if plen is None else plen
    pcrc = zlib.crc32(payload) if pcrc is None else pcrc
    h = magic + struct.pack("<IIQQQiiQI", version, hlen, job, step, gen, rank, world, plen, pcrc)
    h += struct.pack("<I", zlib.crc32(h) if hcrc is None else hcrc)
    return h + payload


PAY = bytes(range(256)) * 2
CKPTS = [
    ("empty-payload", ckpt()),
    ("small", ckpt(payload=b"\x00\x00\x80\x3f" * 16)),
    ("512", ckpt(job=9, step=1 << 40, gen=7, rank=3, world=4, payload=PAY)),
    ("truncated", ckpt(payload=PAY)[:-1]),
    ("trailing", ckpt(payload=PAY) + b"x"),
    ("bad-pcrc", ckpt(payload=PAY, pcrc=1)),
    ("bad-hcrc", ckpt(payload=b"abc", hcrc=0)),
    ("bad-magic", ckpt(payload=b"abc", magic=b"RMCKPT\r\n")),
    ("version2", ckpt(payload=b"abc", version=2)),
    ("huge-len", ckpt(payload=b"abc", plen=1 << 62)),
    ("header-only", ckpt()[:63]),
    ("neg-rank", ckpt(rank=-1, world=0, payload=b"z")),
]

# ---- data-plane frames (worker/transport/tcp/tcp_int.h, fuzz_frame.c) ----
JOB, GEN = 7, 3


def frame(ftype, seq=0, tag=0, length=0, job=JOB, gen=GEN, magic=b"RMFR", version=2):
    return magic + struct.pack("<HHQQQQQ", version, ftype, job, gen, seq, tag, length)


def recvs(*specs):  # (len, seq, tag) -> the 4-byte receive descriptions
    return b"".join(struct.pack("<HBB", n, s, t) for n, s, t in specs)


def flags(nrecv, lazy=0, no_eof=0, peer2=0):
    return bytes([nrecv | lazy << 2 | no_eof << 3 | peer2 << 4])


D = lambda seq, tag, data: frame(1, seq, tag, len(data)) + data
P100 = bytes((i * 7) & 0xff for i in range(100))
FRAMES = [
    ("one-data", flags(1) + recvs((100, 1, 0)) + D(1, 0, P100)),
    ("three-data", flags(3, no_eof=1) + recvs((8, 1, 0), (0, 1, 8), (300, 2, 5)) +
     D(1, 0, b"a" * 8) + D(1, 8, b"") + D(2, 5, bytes(300))),
    ("wait-before", flags(1, peer2=1) + recvs((100, 4, 2)) + frame(5, 4, 2) + D(4, 2, P100)),
    ("wait-between", flags(2) + recvs((60, 1, 0), (60, 1, 60)) + D(1, 0, P100[:60]) +
     frame(5, 1, 3) + frame(5, 1, 1) + D(1, 60, P100[40:])),
    ("bye", flags(1) + recvs((10, 1, 0)) + D(1, 0, b"0123456789") + frame(3)),
    ("held", flags(2, lazy=1) + recvs((20, 1, 0), (20, 2, 0)) + D(1, 0, bytes(20)) +
     frame(5, 2, 1) + D(2, 0, bytes(range(20)))),
    ("abort", flags(1, peer2=2) + recvs((10, 1, 0)) + frame(4, 6, 3)),
    ("hello", flags(1) + recvs((10, 1, 0)) + frame(2, 1, 2)),
    ("stale-gen", flags(1) + recvs((10, 1, 0)) + frame(1, 1, 0, 10, gen=2) + bytes(10)),
    ("mismatch", flags(1) + recvs((10, 1, 0)) + D(1, 0, bytes(11))),
    ("bad-magic", flags(1) + recvs((4, 1, 0)) + frame(1, 1, 0, 4, magic=b"RMFX") + b"abcd"),
    ("truncated", flags(1) + recvs((100, 1, 0)) + D(1, 0, P100)[:120]),
    ("ctl-payload", flags(0) + frame(5, 0, 0, 5) + b"hello"),
]


# ---- gRPC requests (fuzz/fuzz_rpc.c: selector byte + protobuf bytes) ----
def varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        b = v & 0x7f
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb(*fields):
    """fields: (number, value); int -> varint, float -> double, bytes/str ->
    length-delimited, list of int -> packed varints."""
    out = b""
    for num, v in fields:
        if isinstance(v, bool) or isinstance(v, int):
            out += varint(num << 3) + varint(int(v))
        elif isinstance(v, float):
            out += varint(num << 3 | 1) + struct.pack("<d", v)
        elif isinstance(v, list):
            body = b"".join(varint(x) for x in v)
            out += varint(num << 3 | 2) + varint(len(body)) + body
        else:
            v = v.encode() if isinstance(v, str) else v
            out += varint(num << 3 | 2) + varint(len(v)) + v
    return out


# rm__methods[] order (coordinator/rpc/rpc_int.h)
(M_JOIN, M_HEARTBEAT, M_BARRIER, M_REPORT_STEP, M_WATCH, M_LEAVE, M_SUBMIT, M_GET,
 M_LIST, M_CANCEL, M_REPORT_FAILURE, M_STEP_GATE, M_ATTACH, M_REPORT_EXIT,
 M_SESSION) = range(15)
# fixture jobs (PATCH values): 1 train (running; workers 0 and 1 parked in
# Barrier "fz-b", worker 0 ready at gate step 0), 2 command (forming), 3 pending
TRAIN, CMD, PENDING = 1, 2, 3


def call(method, body, job=0, noadmin=0, tick=0):
    return bytes([method | job << 4 | noadmin << 6 | tick << 7]) + body


def spec(**kw):
    order = ["name", "world_size", "min_workers", "max_workers", "algorithm", "dtype",
             "workload", "workload_options", "steps", "launcher", "heartbeat_timeout_ms",
             "barrier_timeout_ms", "on_failure", "max_restarts", "straggler_policy",
             "backup_workers", "checkpoint_every", "command", "env", "workdir",
             "aggregation", "aggregation_f", "aggregation_m", "clip_norm",
             "aggregation_tau", "aggregation_iterations", "deterministic", "max_staleness",
             "secagg_bits", "secagg_clip", "secagg_scale", "secagg_threshold",
             "secagg_neighbours"]
    fields = []
    for k, v in kw.items():
        n = order.index(k) + 1
        for x in (v if k in ("command", "env") else [v]):
            fields.append((n, x))
    return pb(*fields)


# worker calls: 1 job_id, 2 token, 3 generation, 4 worker_id (0 = patched)
JOIN = lambda wid=0, wait=0, gen=0, addr="10.0.0.9:7200", **kw: pb(
    (3, gen), (4, wid), (5, "host-a"), (6, addr), (7, "cuda:0"), (10, wait), *kw.items())
RPCS = [
    ("join-pending", call(M_JOIN, JOIN(), PENDING)),
    ("join-pending-wait", call(M_JOIN, JOIN(wait=500), PENDING)),
    ("join-pending-wait-tick", call(M_JOIN, JOIN(wait=500), PENDING, tick=1)),
    ("join-hints", call(M_JOIN, pb((5, "h"), (6, "h:1"), (8, 1), (9, 2), (11, 40)), PENDING)),
    ("join-repeat", call(M_JOIN, JOIN(wid=1), TRAIN)),
    ("join-full", call(M_JOIN, JOIN(), TRAIN)),
    ("join-command", call(M_JOIN, pb((5, "h"), (6, "h:2"), (8, 1), (9, 2)), CMD)),
    ("join-bad-addr", call(M_JOIN, pb((5, "h"), (6, "noport")), PENDING)),
    ("join-unknown-job", call(M_JOIN, pb((1, 999), (2, "t"), (5, "h"), (6, "h:1")))),
    ("heartbeat", call(M_HEARTBEAT, pb((4, 0), (5, 7)), TRAIN)),
    ("heartbeat-stale", call(M_HEARTBEAT, pb((3, 9), (4, 1)), TRAIN)),
    ("heartbeat-bad-token", call(M_HEARTBEAT, pb((1, 1), (2, "nope"), (4, 1)))),
    ("session", call(M_SESSION, pb((4, 0), (5, 7)), TRAIN)),
    ("session-stale", call(M_SESSION, pb((3, 9), (4, 1)), TRAIN)),
    ("session-released", call(M_SESSION, pb((4, 1), (5, 3)), TRAIN, tick=1)),
    ("session-barrier", call(M_SESSION, pb((4, 2), (5, 4), (6, pb((1, "fz-b")))), TRAIN)),
    ("session-barrier-new", call(M_SESSION, pb((4, 0), (6, pb((1, "sb"), (2, 5)))), TRAIN, tick=1)),
    ("session-gate", call(M_SESSION, pb((4, 1), (5, 0), (7, pb((1, True), (2, 100)))), TRAIN)),
    ("session-gate-wait", call(M_SESSION, pb((4, 2), (5, 0), (7, pb((2, 500)))), TRAIN, tick=1)),
    ("session-gate-next", call(M_SESSION, pb((4, 0), (5, 1), (7, pb((1, True)))), TRAIN)),
    ("session-gate-both", call(M_SESSION, pb((4, 2), (6, pb((1, "fz-b"))), (7, pb((1, True)))),
                               TRAIN)),
    ("barrier", call(M_BARRIER, pb((4, 0), (5, "epoch-1"), (6, 100), (7, 3)), TRAIN)),
    ("barrier-tick", call(M_BARRIER, pb((4, 2), (5, "b"), (6, 50)), TRAIN, tick=1)),
    ("barrier-release", call(M_BARRIER, pb((4, 2), (5, "fz-b"), (7, 1)), TRAIN)),
    ("barrier-same-worker", call(M_BARRIER, pb((4, 1), (5, "fz-b")), TRAIN)),
    ("barrier-noname", call(M_BARRIER, pb((4, 0)), TRAIN)),
    ("step", call(M_REPORT_STEP, pb((4, 0), (5, 1), (6, 2.5), (7, 1.0), (8, 0.25), (9, 0.7),
                                   (10, 0.5), (11, 4096), (13, 1), (14, [2])), TRAIN)),
    ("step-nan", call(M_REPORT_STEP, pb((4, 1), (5, 2), (6, float("nan")), (7, -1.0),
                                       (8, float("inf"))), TRAIN)),
    ("watch", call(M_WATCH, pb((5, 0)), TRAIN)),
    ("watch-session", call(M_WATCH, pb((4, 1), (5, 2)), TRAIN)),
    ("watch-pending", call(M_WATCH, pb(), PENDING, tick=1)),
    ("leave-ok", call(M_LEAVE, pb((4, 0), (5, True), (7, 100), (8, '{"loss":0.1}')), TRAIN)),
    ("leave-error", call(M_LEAVE, pb((4, 2), (6, "boom"), (7, 3)), TRAIN)),
    ("leave-bad-summary", call(M_LEAVE, pb((4, 1), (5, True), (8, '{"a":')), TRAIN)),
    ("submit", call(M_SUBMIT, pb((1, spec(name="s", world_size=2, workload="allreduce",
                                          launcher="none", steps=10))))),
    ("submit-command", call(M_SUBMIT, pb((1, spec(name="c", world_size=1, workload="command",
                                                  launcher="none", command=["/bin/echo", "hi"],
                                                  env=["A=1"], workdir="/tmp"))))),
    ("submit-train", call(M_SUBMIT, pb((1, spec(
        name="t", world_size=4, workload="train", launcher="none", algorithm="ring",
        dtype="f32", workload_options="steps=5,lr=0.1", on_failure="shrink",
        straggler_policy="coded", backup_workers=1, checkpoint_every=2))))),
    ("submit-robust", call(M_SUBMIT, pb((1, spec(
        name="r", world_size=4, workload="train", launcher="none", aggregation="trimmed_mean",
        aggregation_f=1, clip_norm=1.0, deterministic=True))))),
    ("submit-bad", call(M_SUBMIT, pb((1, spec(workload="nope", world_size=0))))),
    ("submit-nospec", call(M_SUBMIT, b"")),
    ("submit-noadmin", call(M_SUBMIT, pb((1, spec(name="s"))), noadmin=1)),
    ("get", call(M_GET, pb(), TRAIN)),
    ("get-unknown", call(M_GET, pb((1, 12345)))),
    ("list-all", call(M_LIST, pb((1, True)))),
    ("list-state", call(M_LIST, pb((2, 2), (3, 1), (4, 1)))),
    ("list-bad-state", call(M_LIST, pb((2, 99)))),
    ("cancel", call(M_CANCEL, pb((2, "enough")), PENDING)),
    ("cancel-running", call(M_CANCEL, pb(), TRAIN)),
    ("cancel-noadmin", call(M_CANCEL, pb(), TRAIN, noadmin=1)),
    ("failure", call(M_REPORT_FAILURE, pb((4, 0), (5, 2), (6, "RM_ERR_PEER_LOST"),
                                          (7, "recv from rank 2: EOF"), (8, 4)), TRAIN)),
    ("failure-self", call(M_REPORT_FAILURE, pb((4, 0), (5, 0)), TRAIN)),
    ("failure-bad-rank", call(M_REPORT_FAILURE, pb((4, 1), (5, 0x7fffffff)), TRAIN)),
    ("gate", call(M_STEP_GATE, pb((4, 0), (5, 0), (6, True), (7, 100)), TRAIN)),
    ("gate-decide", call(M_STEP_GATE, pb((4, 1), (5, 0), (6, True), (7, 100)), TRAIN)),
    ("gate-now", call(M_STEP_GATE, pb((4, 1), (5, 0), (6, True)), TRAIN)),
    ("gate-tick", call(M_STEP_GATE, pb((4, 2), (5, 3), (7, 200)), TRAIN, tick=1)),
    ("attach", call(M_ATTACH, pb((3, 0), (4, "host-0"), (5, 29500)), CMD)),
    ("attach-other", call(M_ATTACH, pb((3, 1), (4, "host-1")), CMD)),
    ("attach-bad", call(M_ATTACH, pb((3, -2), (5, 70000)), CMD)),
    ("attach-train", call(M_ATTACH, pb((3, -1)), TRAIN)),
    ("exit-ok", call(M_REPORT_EXIT, pb((3, 0), (4, 0), (8, True)), CMD)),
    ("exit-fail", call(M_REPORT_EXIT, pb((3, 1), (4, 1), (5, 9), (6, "Killed\n"),
                                         (7, "signal 9")), CMD)),
    ("exit-train", call(M_REPORT_EXIT, pb((3, 0)), TRAIN)),
    ("malformed-varint", call(M_JOIN, b"\x08\xff\xff")),
    ("malformed-wiretype", call(M_HEARTBEAT, b"\x0f\x01")),
    ("malformed-len", call(M_SUBMIT, b"\x0a\x7f\x0a")),
    # secure aggregation: the spec's secagg_* fields and barrier
    # payloads (8 in BarrierRequest): one arrival, a replay with other
    # bytes, another length, one over the 1024-byte limit
    ("submit-secure", call(M_SUBMIT, pb((1, spec(
        name="sa", world_size=3, workload="train", launcher="none", on_failure="shrink",
        secagg_bits=64, secagg_clip=1.5, secagg_scale=1024.0, secagg_threshold=2,
        secagg_neighbours="log"))))),
    ("barrier-payload", call(M_BARRIER, pb((4, 0), (5, "secagg-keys"), (8, b"k" * 32)), TRAIN)),
    ("barrier-payload-replay", call(M_BARRIER, pb((4, 0), (5, "secagg-keys"), (8, b"x" * 32)),
                                    TRAIN)),
    ("barrier-payload-len", call(M_BARRIER, pb((4, 1), (5, "secagg-keys"), (8, b"k" * 16)),
                                 TRAIN)),
    ("barrier-payload-big", call(M_BARRIER, pb((4, 2), (5, "big"), (8, b"\0" * 1025)), TRAIN)),
]

if __name__ == "__main__":
    write("target", TARGETS)
    write("opts", OPTS)
    write("checkpoint", CKPTS)
    write("frame", FRAMES)
    write("rpc", RPCS)
