#!/usr/bin/python3
"""test_straggler_spec.py - straggler policies at submit,
against a real `ringmaster serve`:

  table      every straggler_policy x workload cell of the table at the top
             of coordinator/core/spec.c: the refused ones (allreduce and
             command with coded or stale) are a 400 naming straggler_policy
             whose message says why; every other one is accepted (201) and
             shown back with straggler_mitigation "off" at step 0
  params     max_staleness: 1..64 needed by stale (0/omitted and 65
             refused), refused (not 0) with every other policy, a JSON
             integer only; stale with backup_workers refused; auto with
             0 <= backup_workers < world accepted, = world refused
  across     deterministic refuses stale and auto (field deterministic);
             a robust aggregation refuses them (field aggregation.method,
             the message names both)
  document   api/openapi.json lists stale and auto, max_staleness 0..64
             and the job's straggler_mitigation
  restart    a stale job's max_staleness survives a server restart on the
             same database (migration 0009)

Every job uses launcher "none": nothing is started, nothing to cancel.
World size 4 satisfies coded's (s+1) | world with s = 1.

usage: test_straggler_spec.py --ringmaster PATH
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rmserver import Server, check, spec_accepted, spec_main, spec_post, spec_refused  # noqa: E402

WORLD = 4
WORKLOADS = ("allreduce", "synthetic", "train", "command")
POLICIES = ("none", "backup", "deadline", "coded", "stale", "auto")
# (workload, policy) -> words the refusal must contain
REFUSED = {
    ("allreduce", "coded"): ["workload allreduce", "no batch to partition"],
    ("allreduce", "stale"): ["workload allreduce", "nothing would be folded"],
    ("command", "coded"): ["workload command", "cannot make a user's program"],
    ("command", "stale"): ["workload command", "cannot resume", "deadline or auto"],
}
SEQ = [0]


def spec(workload="synthetic", policy="none", **kw):
    SEQ[0] += 1
    s = {"name": "strag-%d" % SEQ[0], "world_size": WORLD, "launcher": "none",
         "workload": workload, "straggler_policy": policy}
    if workload == "command":
        s["command"] = ["true"]
    s.update({"backup": {"backup_workers": 1}, "coded": {"backup_workers": 1},
              "stale": {"max_staleness": 2}}.get(policy, {}))
    s.update(kw)
    return {k: v for k, v in s.items() if v is not None}


post, refused = spec_post, spec_refused


def accepted(srv, body):
    g = spec_accepted(srv, body)
    if g is None:
        return None
    check(g["spec"]["straggler_policy"] == body["straggler_policy"] and
          g["spec"]["max_staleness"] == body.get("max_staleness", 0),
          f"{body}: shown back as {g.get('spec')}")
    check(g.get("straggler_mitigation") == "off" and g.get("straggler_mitigation_step") == 0,
          f"{body}: a new job is not mitigating: {g}")
    return g


def test_table(srv):
    n_ok = n_refused = 0
    for w in WORKLOADS:
        for p in POLICIES:
            if (w, p) in REFUSED:
                n_refused += refused(srv, spec(w, p), "straggler_policy", REFUSED[(w, p)])
            else:
                n_ok += accepted(srv, spec(w, p)) is not None
    check(n_ok == 20 and n_refused == 4, f"table: {n_ok} accepted, {n_refused} refused")
    # auto mitigates with backup when b >= 1: every workload takes it
    for w in WORKLOADS:
        accepted(srv, spec(w, "auto", backup_workers=1))


def test_params(srv):
    refused(srv, spec(policy="stale", max_staleness=None), "max_staleness",
            ["stale needs 1 <= max_staleness <= 64"])
    refused(srv, spec(policy="stale", max_staleness=0), "max_staleness", ["1 <= max_staleness"])
    refused(srv, spec(policy="stale", max_staleness=65), "max_staleness", ["0..64"])
    refused(srv, spec(policy="stale", max_staleness=-1), "max_staleness", ["0..64"])
    refused(srv, spec(policy="stale", max_staleness=2**64), "max_staleness", ["0..64"])
    refused(srv, spec(policy="stale", max_staleness="2"), "max_staleness", code="invalid_type")
    refused(srv, spec(policy="stale", max_staleness=1.5), "max_staleness", code="invalid_type")
    accepted(srv, spec(policy="stale", max_staleness=1))
    accepted(srv, spec("train", "stale", max_staleness=64))
    for p in ("none", "backup", "deadline", "coded", "auto"):
        refused(srv, spec(policy=p, max_staleness=3), "max_staleness",
                ["only for straggler_policy stale"])
    refused(srv, spec(policy="stale", backup_workers=1), "backup_workers",
            ["stale needs backup_workers 0"])
    accepted(srv, spec(policy="auto", backup_workers=WORLD - 1))
    accepted(srv, spec(policy="auto", backup_workers=0))
    refused(srv, spec(policy="auto", backup_workers=WORLD), "backup_workers",
            ["auto needs 0 <= backup_workers < world size"])
    refused(srv, spec(policy="auto", world_size=None, min_workers=2, max_workers=3,
                      backup_workers=3), "backup_workers", ["auto needs"])
    accepted(srv, spec(policy="auto", world_size=None, min_workers=2, max_workers=3,
                       backup_workers=2))
    # the spelling of the new names is exact too
    for bad in ("Stale", "AUTO", "auto "):
        refused(srv, spec(policy=bad), "straggler_policy", ["stale", "auto", "exact spelling"])


def test_across(srv):
    for p in ("stale", "auto"):
        refused(srv, spec("train", p, deterministic=True), "deterministic",
                ["stale or auto", "depends on timing"])
        refused(srv, spec("train", p, aggregation={"method": "median"}), "aggregation.method",
                ["stale and auto"])
        refused(srv, spec("train", p, aggregation={"clip_norm": 1.0}), "aggregation.method")


def test_document(srv):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "../../api/openapi.json")) as f:
        doc = json.load(f)
    sch = doc["components"]["schemas"]
    props = sch["JobSpec"]["properties"]
    check(props["straggler_policy"]["enum"] == list(POLICIES), props["straggler_policy"])
    ms = props.get("max_staleness", {})
    check(ms.get("type") == "integer" and ms.get("minimum") == 0 and ms.get("maximum") == 64,
          f"max_staleness documented 0..64: {ms}")
    for name in ("Job", "JobDetail"):
        m = sch[name]["properties"].get("straggler_mitigation", {})
        check(m.get("enum") == ["off", "backup", "deadline"], f"{name}.straggler_mitigation: {m}")
        check("straggler_mitigation_step" in sch[name]["properties"],
              f"{name}.straggler_mitigation_step documented")
    st, _, lst = srv.request("GET", "/api/v1/jobs?limit=5")
    check(st == 200 and all(j.get("straggler_mitigation") == "off" for j in lst["jobs"]),
          f"the job list shows straggler_mitigation: {lst}")


def test_restart(binary):
    tmp = tempfile.TemporaryDirectory(prefix="rm-strag-")
    db = os.path.join(tmp.name, "rm.db")
    srv = Server(binary, extra=("--db", db))
    try:
        j = srv.submit(**spec("train", "stale", max_staleness=7))
        a = srv.submit(**spec("synthetic", "auto", backup_workers=2))
    finally:
        srv.stop()
    srv = Server(binary, extra=("--db", db))
    try:
        st, _, g = srv.request("GET", "/api/v1/jobs/%d" % j["id"])
        check(st == 200 and g["spec"]["max_staleness"] == 7 and
              g["spec"]["straggler_policy"] == "stale", f"after a restart: {g}")
        st, _, g = srv.request("GET", "/api/v1/jobs/%d" % a["id"])
        check(st == 200 and g["spec"]["straggler_policy"] == "auto" and
              g["spec"]["backup_workers"] == 2 and g["straggler_mitigation"] == "off",
              f"auto after a restart: {g}")
    finally:
        srv.stop()
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(spec_main("straggler_spec", [test_table, test_params, test_across, test_document], test_restart))
