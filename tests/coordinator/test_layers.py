#!/usr/bin/python3
"""The coordinator's layers, read from its objects: model <- store <- core <-
rpc <- wiring (coord.c). No object of a layer refers to a symbol that only a
higher layer's objects define (the core reaches the answer side through the
table it holds, core/waiters.h), and rpc/ does not skip the core to call
store/ (core/records.c). Reads `nm` of the rm_coord archive; each member is
placed in its layer by the source file of the same name.

usage: test_layers.py --archive librm_coord.a --source coordinator/
"""
import argparse
import os
import subprocess
import sys

ORDER = ["model", "store", "core", "rpc", "wiring"]


def layer_of(src_root):
    """object basename -> layer, from the source tree."""
    where = {"model.c.o": "model", "coord.c.o": "wiring",
             "migrations.c.o": "store"}  # generated from migrations/*.sql, read by store/
    for layer in ("store", "core", "rpc"):
        for f in os.listdir(os.path.join(src_root, layer)):
            if f.endswith(".c"):
                if f + ".o" in where:
                    sys.exit("FAIL: two sources named %s: members cannot be told apart" % f)
                where[f + ".o"] = layer
    return where


def symbols(archive):
    """member -> (defined, undefined) external symbols."""
    out = subprocess.run(["nm", "-A", archive], capture_output=True, text=True, check=True).stdout
    per = {}
    for line in out.splitlines():
        head, _, rest = line.rpartition(":")
        member = head.rsplit(":", 1)[-1]
        parts = rest.split()
        if len(parts) == 2 and parts[0] == "U":
            per.setdefault(member, (set(), set()))[1].add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRCGSV":
            per.setdefault(member, (set(), set()))[0].add(parts[2])
    return per


def violations(per, where):
    """(from_layer, to_layer, symbol, members) for every reference that goes
    up, or from rpc straight to store."""
    defined = {l: set() for l in ORDER}
    for m, (d, _) in per.items():
        if m not in where:
            sys.exit("FAIL: archive member %s has no source in a known layer" % m)
        defined[where[m]] |= d
    bad = {}
    for m, (_, u) in per.items():
        li = ORDER.index(where[m])
        below = set().union(*(defined[l] for l in ORDER[:li + 1]))
        for s in u:
            for hl in ORDER[li + 1:]:
                if s in defined[hl] and s not in below:
                    bad.setdefault((where[m], hl, s), set()).add(m)
            if where[m] == "rpc" and s in defined["store"] and s not in defined["core"]:
                bad.setdefault(("rpc", "store (past the core)", s), set()).add(m)
    return defined, bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--archive", required=True)
    ap.add_argument("--source", required=True)
    a = ap.parse_args()
    where = layer_of(a.source)
    per = symbols(a.archive)
    defined, bad = violations(per, where)
    # The reading itself is checked: every layer has objects, and references
    # that must exist downwards are seen (else an empty nm would pass).
    for l in ORDER:
        if not defined[l]:
            sys.exit("FAIL: no symbol defined by layer %s: nm read nothing?" % l)
    seen_down = any("rm__store_commit" in u for m, (_, u) in per.items() if where[m] == "core")
    if not seen_down:
        sys.exit("FAIL: core's call of rm__store_commit not seen: the reading is broken")
    for (lo, hi, s), ms in sorted(bad.items()):
        print("%s -> %s: %s (%s)" % (lo, hi, s, ", ".join(sorted(ms))))
    if bad:
        print("FAIL: %d references against the layering" % len(bad))
        return 1
    print("layers: %s; %d objects, 0 upward references, rpc reaches store only through core"
          % (" <- ".join(ORDER), len(per)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
