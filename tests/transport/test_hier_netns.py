"""Hierarchical all-reduce across simulated hosts: 2 network namespaces x 2
ranks (tests/transport/netns_rank.c), 1 Gbit tbf links between them. Each
rank sees the ranks of its namespace through shared memory (same host
identity: the network namespace is part of it) and the other namespace's
through TCP over the bridge; every algorithm, hierarchical included, must
give exact results, and nothing may be left in /dev/shm. Skips (77)
without root or `ip netns`."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "recovery"))
import netns  # noqa: E402


def main():
    prog = sys.argv[1]
    why = netns.missing("rmh")
    if why:
        print("skip: network namespaces unavailable: %s" % why)
        return 77
    net = netns.Net(2, "rmh", 61)
    procs = []
    try:
        net.up()
        for ns in net.ns:
            netns.sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root",
                     "tbf", "rate", "1gbit", "burst", "256kb", "latency", "50ms")
        with tempfile.TemporaryDirectory(prefix="rm-hier-") as d:
            world = 4
            for r in range(world):
                host = r // 2
                procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", net.ns[host], prog, str(r), str(world), d,
                     net.addr(host)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
            outs = []
            for p in procs:
                try:
                    out, _ = p.communicate(timeout=300)
                except subprocess.TimeoutExpired:
                    p.kill()
                    out, _ = p.communicate()
                outs.append(out.decode(errors="replace"))
            nonces = []
            for r in range(world):
                with open(os.path.join(d, str(r))) as f:
                    offer = f.read().splitlines()[1]
                m = re.search(r"shm:[0-9a-f]+/([0-9a-f]{16})", offer)
                if m:
                    nonces.append(m.group(1))
        bad = 0
        for r, (p, out) in enumerate(zip(procs, outs)):
            print("---- rank %d (exit %d)\n%s" % (r, p.returncode, out.strip()))
            if p.returncode != 0:
                bad += 1
            for m in re.finditer(r"^rank (\d+) peer (\d+) (\w+)$", out, re.M):
                a, b, t = int(m.group(1)), int(m.group(2)), m.group(3)
                want = "shm" if a // 2 == b // 2 else "tcp"
                if t != want:
                    print("FAIL: pair %d-%d carried by %s, expected %s" % (a, b, t, want))
                    bad += 1
        if len(nonces) != world:
            print("FAIL: not every rank offered shared memory")
            bad += 1
        if "algo hierarchical ran hierarchical: exact" not in outs[0]:
            print("FAIL: hierarchical did not run as hierarchical")
            bad += 1
        left = [e for e in os.listdir("/dev/shm") if any(e.startswith("rm-" + n) for n in nonces)]
        if left:
            print("FAIL: left in /dev/shm: %s" % left)
            bad += 1
        print("hier_netns: %s" % ("FAIL" if bad else "ok"))
        return 1 if bad else 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        net.down()


if __name__ == "__main__":
    sys.exit(main())
