#!/usr/bin/python3
"""test_secagg_spec.py - the job spec's "secure_aggregation" object at submit
against a real `ringmaster serve`:

  defaults   the object's presence turns it on: {} is shown back as bits 32,
             clip 1 (or aggregation.clip_norm when > 0), scale 0, threshold
             max(2, n/2 + 1) (n = world_size, min_workers when elastic),
             neighbours all; a plain job shows no secure_aggregation and
             secure_recovered_steps = secure_dropouts = 0; given values are
             kept
  members    every rule of coordinator/core/spec.c is a 400 naming
             secure_aggregation.<member> with the numbers: bits (0, 16, 128,
             a real, a string), clip (< 0), scale (< 0, wrapping for N =
             max(world_size, max_workers)), threshold (1, > world, min_workers
             below it), neighbours (not all/log, "", a case change); an
             unknown member is refused by name (secure_aggregation.bitz); a
             non-object is invalid_type
  across     a robust aggregation method (field aggregation.method, the
             message names secure_aggregation), every straggler policy but
             none (field straggler_policy), workload synthetic (field
             workload); train, allreduce and command are accepted
  document   api/openapi.json documents the object, its members and the
             job's counters
  restart    a secure job's fields survive a server restart on the same
             database (migration 0011)

Every job uses launcher "none": nothing is started.

usage: test_secagg_spec.py --ringmaster PATH
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rmserver import Server, check, spec_accepted, spec_main, spec_post, spec_refused  # noqa: E402

SEQ = [0]


def spec(secure=None, **kw):
    SEQ[0] += 1
    s = {"name": "secagg-%d" % SEQ[0], "world_size": 4, "launcher": "none",
         "workload": "train"}
    if kw.get("workload") == "command":
        s["command"] = ["true"]
    s.update(kw)
    if secure is not None:
        s["secure_aggregation"] = secure
    return {k: v for k, v in s.items() if v is not None}


post, refused = spec_post, spec_refused


def accepted(srv, body):
    g = spec_accepted(srv, body)
    if g is None:
        return None
    check(g.get("secure_recovered_steps") == 0 and g.get("secure_dropouts") == 0,
          f"{body}: a new job has recovered nothing: {g}")
    return g


def want_secure(g, **want):
    got = g["spec"].get("secure_aggregation") if g else None
    check(got == want, f"secure_aggregation shown back as {got}, wanted {want}")


def test_defaults(srv):
    g = accepted(srv, spec())
    check(g is not None and "secure_aggregation" not in g["spec"],
          f"a plain job shows no secure_aggregation: {g and g['spec']}")
    want_secure(accepted(srv, spec({})), bits=32, clip=1, scale=0, threshold=3,
                neighbours="all")
    want_secure(accepted(srv, spec({}, aggregation={"clip_norm": 2.5})), bits=32, clip=2.5,
                scale=0, threshold=3, neighbours="all")
    want_secure(accepted(srv, spec({}, world_size=2)), bits=32, clip=1, scale=0, threshold=2,
                neighbours="all")
    want_secure(accepted(srv, spec({}, world_size=9)), bits=32, clip=1, scale=0, threshold=5,
                neighbours="all")
    # elastic: the default threshold is for the smallest group it may form
    want_secure(accepted(srv, spec({}, world_size=None, min_workers=4, max_workers=8)),
                bits=32, clip=1, scale=0, threshold=3, neighbours="all")
    given = {"bits": 64, "clip": 0.5, "scale": 4096, "threshold": 4, "neighbours": "log"}
    want_secure(accepted(srv, spec(given)), **given)
    want_secure(accepted(srv, spec({"scale": 0.25, "threshold": 2})), bits=32, clip=1,
                scale=0.25, threshold=2, neighbours="all")
    st, _, lst = srv.request("GET", "/api/v1/jobs?limit=3")
    check(st == 200 and all("secure_recovered_steps" in j and "secure_dropouts" in j
                            for j in lst["jobs"]), f"the job list shows the counters: {lst}")


def test_members(srv):
    sa = "secure_aggregation."
    for bits in (0, 16, 128, -1):
        refused(srv, spec({"bits": bits}), sa + "bits", ["32 or 64"])
    refused(srv, spec({"bits": 0}), sa + "bits", ["omit the secure_aggregation object"])
    refused(srv, spec({"bits": 2**64}), sa + "bits", ["32 or 64"])
    refused(srv, spec({"bits": 32.5}), sa + "bits", code="invalid_type")
    refused(srv, spec({"bits": "32"}), sa + "bits", code="invalid_type")
    refused(srv, spec({"clip": -1}), sa + "clip", ["> 0", "-1"])
    refused(srv, spec({"clip": "1"}), sa + "clip", code="invalid_type")
    refused(srv, spec({"scale": -0.5}), sa + "scale", [">= 0", "-0.5"])
    # N = 4: 4 * (1 * (2^29 - 1) + 1) = 2^31 wraps; 2^29 - 2 does not
    refused(srv, spec({"scale": 2**29 - 1}), sa + "scale",
            ["N*(clip*scale + 1)", "4*(1*536870911 + 1) = 2147483648", "2^31", "cannot wrap"])
    accepted(srv, spec({"scale": 2**29 - 2}))
    accepted(srv, spec({"bits": 64, "scale": 2**29}))
    # N = max(world_size, max_workers): an elastic job's max_workers counts
    refused(srv, spec({"scale": 2**27, "threshold": 2}, world_size=None, min_workers=2,
                      max_workers=16), sa + "scale", ["16*(1*"])
    refused(srv, spec({"threshold": 1}), sa + "threshold", ["2..4", "one member"])
    refused(srv, spec({"threshold": 5}), sa + "threshold", ["2..4", "world_size"])
    refused(srv, spec({}, world_size=1), sa + "threshold", ["2..1"])
    refused(srv, spec({"threshold": 70000}), sa + "threshold", ["65536"])
    refused(srv, spec({"threshold": 3}, world_size=None, min_workers=2, max_workers=6),
            sa + "threshold", ["min_workers 2", "threshold"])
    refused(srv, spec({"threshold": 7}, world_size=None, min_workers=2, max_workers=6),
            sa + "threshold", ["2..6", "max_workers"])
    refused(srv, spec({}, world_size=None, min_workers=1, max_workers=6), sa + "threshold",
            ["min_workers 1"])
    accepted(srv, spec({"threshold": 2}, world_size=None, min_workers=2, max_workers=6))
    for bad in ("ALL", "Log", "some", "x" * 20):
        refused(srv, spec({"neighbours": bad}), sa + "neighbours")
    refused(srv, spec({"neighbours": ""}), sa + "neighbours", ["empty"])
    refused(srv, spec({"neighbours": 1}), sa + "neighbours", code="invalid_type")
    refused(srv, spec({"bitz": 32}), sa + "bitz",
            ["unknown field", "bits, clip, scale, threshold and neighbours"],
            code="unknown_field")
    refused(srv, spec(True), "secure_aggregation", code="invalid_type")
    refused(srv, spec([32]), "secure_aggregation", code="invalid_type")


def test_across(srv):
    for m in ("median", "trimmed_mean", "krum", "centered_clip"):
        refused(srv, spec({}, world_size=7, aggregation={"method": m, "f": 1}),
                "aggregation.method", [m, "secure_aggregation", "plaintext"])
    accepted(srv, spec({}, aggregation={"method": "mean", "clip_norm": 1.0}))
    for p in ("backup", "deadline", "auto"):
        refused(srv, spec({}, straggler_policy=p, backup_workers=1 if p == "backup" else None),
                "straggler_policy", [p, "secure_aggregation", "whole membership",
                                     "re-formed generation"])
    refused(srv, spec({}, workload="synthetic", straggler_policy="coded", backup_workers=1),
            "straggler_policy", ["secure_aggregation"])
    refused(srv, spec({}, workload="synthetic"), "workload", ["synthetic", "secure_aggregation"])
    for w in ("train", "allreduce", "command"):
        accepted(srv, spec({}, workload=w))
    accepted(srv, spec({}, deterministic=True))
    accepted(srv, spec({"threshold": 3}, on_failure="shrink"))
    accepted(srv, spec({}, on_failure="replace", max_restarts=2))


def test_document(srv):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "../../api/openapi.json")) as f:
        doc = json.load(f)
    sch = doc["components"]["schemas"]
    sa = sch["JobSpec"]["properties"].get("secure_aggregation", {})
    check(sa.get("type") == "object" and sa.get("additionalProperties") is False,
          f"secure_aggregation documented as a closed object: {sa}")
    props = sa.get("properties", {})
    check(sorted(props) == ["bits", "clip", "neighbours", "scale", "threshold"],
          f"members documented: {sorted(props)}")
    check(props.get("bits", {}).get("enum") == [32, 64], f"bits: {props.get('bits')}")
    check(props.get("neighbours", {}).get("enum") == ["all", "log"],
          f"neighbours: {props.get('neighbours')}")
    for name in ("Job", "JobDetail"):
        for k in ("secure_recovered_steps", "secure_dropouts"):
            check(k in sch[name]["properties"], f"{name}.{k} documented")


def test_restart(binary):
    tmp = tempfile.TemporaryDirectory(prefix="rm-secagg-")
    db = os.path.join(tmp.name, "rm.db")
    given = {"bits": 64, "clip": 0.75, "scale": 512, "threshold": 3, "neighbours": "log"}
    srv = Server(binary, extra=("--db", db))
    try:
        j = srv.submit(**spec(given, on_failure="shrink"))
        p = srv.submit(**spec())
    finally:
        srv.stop()
    srv = Server(binary, extra=("--db", db))
    try:
        st, _, g = srv.request("GET", "/api/v1/jobs/%d" % j["id"])
        check(st == 200, f"GET after a restart: {st}")
        want_secure(g, **given)
        st, _, g = srv.request("GET", "/api/v1/jobs/%d" % p["id"])
        check(st == 200 and "secure_aggregation" not in g["spec"],
              f"a plain job stays plain after a restart: {g}")
    finally:
        srv.stop()
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(spec_main("secagg_spec", [test_defaults, test_members, test_across, test_document], test_restart))
