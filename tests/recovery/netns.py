"""netns.py - network namespaces on one bridge, for the link-cut test
(tests/recovery/test_link_cut.py) and the fault campaign's linkcut trials
(bench/recovery/fault_campaign.py). Needs root and `ip netns`.

    root namespace: bridge <tag>-br, 10.<net>.S.1/24 (the coordinator on it)
    <tag>-w0..wN-1: eth0 10.<net>.S.(i+2)/24, a veth to the bridge

Nothing leaves the /24 (no route is added; the bridge forwards nowhere).
Everything made is removed by down(), in reverse order."""
import os
import random
import subprocess


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=20)


class Net:
    def __init__(self, n, prefix, net_octet):
        tag = "%s%d" % (prefix, os.getpid() % 100000)
        self.br = tag + "-br"
        self.ns = ["%s-w%d" % (tag, i) for i in range(n)]
        self.subnet = "10.%d.%d" % (net_octet, random.SystemRandom().randint(1, 254))
        self.made = []

    def up(self):
        sh("ip", "link", "add", self.br, "type", "bridge")
        self.made.append(("link", self.br))
        sh("ip", "addr", "add", self.subnet + ".1/24", "dev", self.br)
        sh("ip", "link", "set", self.br, "up")
        for i, ns in enumerate(self.ns):
            sh("ip", "netns", "add", ns)
            self.made.append(("netns", ns))
            host_end = "%s-v%d" % (self.br[:-3], i)
            sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0",
               "netns", ns)
            self.made.append(("link", host_end))
            sh("ip", "link", "set", host_end, "master", self.br, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", self.addr(i) + "/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")

    def addr(self, i):
        return "%s.%d" % (self.subnet, i + 2)

    def cut(self, a, b, on=True):
        """Cut (on) or restore the link between slots a and b only: a
        blackhole route to the other's address in each of the two."""
        verb = "add" if on else "del"
        for x, y in ((a, b), (b, a)):
            sh("ip", "-n", self.ns[x], "route", verb, "blackhole", self.addr(y) + "/32",
               check=on)

    def down(self):
        for kind, name in reversed(self.made):
            if kind == "netns":
                sh("ip", "netns", "del", name, check=False)
            else:
                sh("ip", "link", "del", name, check=False)


def missing(prefix):
    """Why namespaces cannot be built here, or None."""
    if os.geteuid() != 0:
        return "not root"
    probe = "%sprobe%d" % (prefix, os.getpid() % 100000)
    r = sh("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return "ip netns add failed: " + r.stdout.decode(errors="replace").strip()
    sh("ip", "netns", "del", probe, check=False)
    return None
