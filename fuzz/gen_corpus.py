#!/usr/bin/env python3
"""gen_corpus.py - write the seed corpora of fuzz/ (fuzz/corpus/<target>/).

A handful of valid and near-valid inputs per target, built from the formats
documented at the top of api/target.c, common/rm_opts.h,
worker/checkpoint/checkpoint.c and worker/transport/tcp/tcp_int.h (and the
input layout of fuzz/fuzz_frame.c). Run it again after a format change:
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

if __name__ == "__main__":
    write("target", TARGETS)
    write("opts", OPTS)
    write("checkpoint", CKPTS)
    write("frame", FRAMES)
