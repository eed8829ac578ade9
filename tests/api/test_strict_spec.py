#!/usr/bin/python3
"""test_strict_spec.py - job specs are strict (item 4) and the CLI's
usage errors and --help (item 6), against a real `ringmaster serve`.

  document   api/openapi.json's JobSpec against the server: for every enum
             field (algorithm, dtype, workload, launcher, on_failure,
             straggler_policy, aggregation.method) every listed value is
             accepted (an alias is stored as its canonical name), a
             changed-case value and "" are refused naming the field; for
             every integer field the schema states minimum and maximum, and
             the server accepts maximum and minimum and refuses maximum + 1,
             minimum - 1, 2^63, 2^64 and -2^70 naming the field and quoting
             the documented maximum.
  defects    the cases found from outside, one check each: halving_doubling
             accepted; RING / Tree / F32 / Fail refused; "" refused for every
             name field; an unknown workload refused at submit, the message
             listing exactly the documented workloads; integers beyond int64
             (a uint64 steps too) refused as invalid_value naming the field;
             no message names a library flag (JSON_*); world_size -1 quotes
             the range that really holds (0 alone refused with the same
             words, 0 elastic accepted); name 63 characters fits, 64 does
             not; a NUL in a string and a duplicate key are invalid_json
             whose message names the field / the key.
  cli        --help and -h after every subcommand: usage on stdout, exit 0;
             jobs --limit abc / 0 / 1001, --offset -1, --timeout abc,
             logs --timeout x: exit 2 (usage) even with a server that would
             answer; the documented codes 0, 3 and 6 still hold.

Accepted jobs use launcher "none" except where the launcher itself is under
test (then --worker /bin/false, a private log dir, and the job is cancelled).
Every wait has a deadline; no timing thresholds.

usage: test_strict_spec.py --ringmaster PATH
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import contract  # noqa: E402
from rmserver import args as rmserver_args  # noqa: E402
from rmserver import READ_TOKEN, Server, verdict  # noqa: E402
from rmserver import check as record  # noqa: E402

COUNT = {"checks": 0, "accepted": 0, "refused": 0}
MESSAGES = []
SEQ = [0]
ALIASES = {"algorithm": {"halving_doubling": "hd", "halving-doubling": "hd",
                         "hier": "hierarchical"}}


def check(cond, what):
    COUNT["checks"] += 1
    record(cond, what)


def name():
    SEQ[0] += 1
    return "strict-%d" % SEQ[0]


def post(srv, spec=None, raw=None):
    st, _, body = srv.request("POST", "/api/v1/jobs", spec, token=srv.token, raw=raw)
    if st != 201 and isinstance(body, dict):
        MESSAGES.append(body.get("error", {}).get("message", ""))
    return st, body


def spec_with(extra):
    s = {"name": name(), "world_size": 1, "launcher": "none"}
    for k, v in extra.items():
        if k.startswith("aggregation."):
            s.setdefault("aggregation", {})[k.split(".", 1)[1]] = v
        elif v is None:
            s.pop(k, None)
        else:
            s[k] = v
    return s


def accepted(srv, extra, what):
    st, body = post(srv, spec_with(extra))
    check(st == 201, f"{what}: {extra} -> {st} {body}")
    if st == 201:
        COUNT["accepted"] += 1
        if body["spec"].get("launcher") not in ("none", None):  # stop what was started
            srv.request("DELETE", f"/api/v1/jobs/{body['id']}", token=srv.token)
    return body if st == 201 else None


def refused(srv, extra, field, what, words=(), code="invalid_value", raw=None):
    st, body = post(srv, None if raw is not None else spec_with(extra), raw=raw)
    e = body.get("error", {}) if isinstance(body, dict) else {}
    ok = st == 400 and e.get("field") == (field or None) and e.get("code") == code  # "" -> null
    check(ok, f"{what}: {extra if raw is None else raw!r} -> {st} {body} "
              f"(wanted 400 {code} field {field})")
    for w in words:
        check(w in e.get("message", ""), f"{what}: {w!r} not in {e.get('message')!r}")
    if ok:
        COUNT["refused"] += 1
    return e


def fields(doc):
    """(dotted field name, schema) for JobSpec's properties and aggregation's."""
    js = contract.resolve(doc, doc["components"]["schemas"]["JobSpec"])
    for k, p in js["properties"].items():
        p = contract.resolve(doc, p)
        if k == "aggregation":
            for m, q in p["properties"].items():
                yield "aggregation." + m, contract.resolve(doc, q)
        else:
            yield k, p


# What else a value needs to be accepted (the relations between fields).
ENUM_CONTEXT = {
    ("workload", "command"): {"command": ["true"]},
    ("straggler_policy", "backup"): {"world_size": 2, "backup_workers": 1},
    ("straggler_policy", "coded"): {"world_size": 2, "backup_workers": 1, "workload": "synthetic"},
    ("straggler_policy", "stale"): {"max_staleness": 1, "workload": "synthetic"},
    ("aggregation.method", None): {"world_size": 3},
}
INT_CONTEXT = {  # field -> (context at the maximum, context at the minimum)
    "max_staleness": ({"straggler_policy": "stale", "workload": "synthetic"}, {}),
    "world_size": ({}, {"min_workers": 1, "max_workers": 1}),
    "min_workers": ({"world_size": None, "max_workers": 65536}, {}),
    "max_workers": ({"world_size": None, "min_workers": 1}, {}),
}


def changed_case(v):
    return v.upper() if v.upper() != v else v.capitalize() if v.capitalize() != v else None


def test_document(srv, doc):
    enums = ints = 0
    for field, p in fields(doc):
        if "enum" in p:
            enums += 1
            for v in p["enum"]:
                ctx = dict(ENUM_CONTEXT.get((field, v), ENUM_CONTEXT.get((field, None), {})))
                ctx[field] = v
                j = accepted(srv, ctx, f"documented {field}")
                if j:
                    got = j["spec"]
                    for part in field.split("."):
                        got = got.get(part) if isinstance(got, dict) else None
                    want = ALIASES.get(field, {}).get(v, v)
                    check(got == want, f"{field} {v!r} stored as {got!r}, wanted {want!r}")
                    check(want in p["enum"], f"{field}: canonical {want!r} is documented")
                cc = changed_case(v)
                if cc is not None and cc not in p["enum"]:
                    refused(srv, {**ctx, field: cc}, field, f"changed case {field}")
            refused(srv, {field: ""}, field, f"empty {field}", ["empty"])
            refused(srv, {field: "x" * 40}, field, f"overlong {field}")
        elif p.get("type") == "integer":
            ints += 1
            check("minimum" in p and "maximum" in p, f"{field}: schema states minimum and maximum")
            if "minimum" not in p or "maximum" not in p:
                continue
            lo, hi = p["minimum"], p["maximum"]
            at_hi, at_lo = INT_CONTEXT.get(field, ({}, {}))
            accepted(srv, {**at_hi, field: hi}, f"{field} maximum")
            accepted(srv, {**at_lo, field: lo}, f"{field} minimum")
            for bad in (hi + 1, lo - 1, 2**63, 2**64, 2**64 - 1, -2**70, 2**70):
                refused(srv, {**at_hi, field: bad}, field, f"{field} = {bad}", [str(hi)])
            refused(srv, {field: 1.5}, field, f"{field} real", code="invalid_type")
            refused(srv, {field: "1"}, field, f"{field} string", code="invalid_type")
    check(enums == 7, f"JobSpec has 7 enum fields, found {enums}")
    check(ints >= 12, f"JobSpec has >= 12 integer fields, found {ints}")
    return enums, ints


def test_defects(srv, doc):
    accepted(srv, {"algorithm": "halving_doubling"}, "halving_doubling")
    for f, v in (("algorithm", "RING"), ("algorithm", "Tree"), ("dtype", "F32"),
                 ("on_failure", "Fail"), ("launcher", "None"), ("workload", "Train"),
                 ("straggler_policy", "NONE"), ("aggregation.method", "Krum")):
        refused(srv, {f: v}, f, f"case {v}", ["exact spelling"] if f != "aggregation.method" else ())
    for f in ("algorithm", "dtype", "on_failure", "straggler_policy", "launcher", "workload",
              "aggregation.method"):
        refused(srv, {f: ""}, f, f"empty {f}", ["an omitted field takes the default"])
    wl = dict(fields(doc))["workload"]["enum"]
    e = refused(srv, {"workload": "frob"}, "workload", "unknown workload", wl)
    listed = e.get("message", "").split("must be ", 1)[-1].split(" (")[0]
    check(sorted(w.strip() for w in listed.replace(" or ", ", ").split(",")) == sorted(wl),
          f"workloads in the message {listed!r} == documented {wl}")
    for v in (2**53 + 1, 2**63, 2**64 - 1, 2**64, -1, -2**64):
        refused(srv, {"steps": v}, "steps", f"steps {v}", ["9007199254740992"])
    e1 = refused(srv, {"world_size": -1}, "world_size", "world_size -1", ["1..65536"])
    e0 = refused(srv, {"world_size": 0}, "world_size", "world_size 0 alone")
    check(e0.get("message") == e1.get("message"), f"-1 and 0 say the same: {e0} {e1}")
    accepted(srv, {"world_size": 0, "min_workers": 1, "max_workers": 2}, "world_size 0 elastic")
    accepted(srv, {"name": "n" * 63}, "name 63 characters")
    refused(srv, {"name": "n" * 64}, "name", "name 64 characters")
    # malformed text: invalid_json, field "", the message saying where
    refused(srv, {"name": "a\u0000b"}, "", "NUL in name", ["NUL", "name"], code="invalid_json")
    refused(srv, {"command": ["a\u0000"], "workload": "command"}, "", "NUL in command",
            ["NUL", "command[0]"], code="invalid_json")
    refused(srv, None, "", "duplicate key", ["'world_size' appears twice"], code="invalid_json",
            raw=b'{"name": "dup", "world_size": 1, "world_size": 2}')
    refused(srv, None, "steps", "steps beyond uint64 after a NUL-free body",
            raw=b'{"name": "big", "world_size": 1, "launcher": "none", "steps": 99999999999999999999999}')
    for raw in (b'{"name": "x", "steps": 1e400}', b'{"name": ', b'{"name": "x"} trailing',
                b'{"name": "\xff"}', b'[1, 2]', b'{"name": "x",}', b'{"name": "x\\u0000"}'):
        st, body = post(srv, raw=raw)
        check(st == 400, f"{raw!r} -> {st}")
    bad = [m for m in MESSAGES if "JSON_" in m or "jansson" in m.lower()]
    check(not bad, f"messages naming library flags: {bad}")
    check(len(MESSAGES) >= 100, f"looked at {len(MESSAGES)} refusal messages")


def run_cli(binary, url, *args, token=None):
    env = dict(os.environ)
    env.pop("RINGMASTER_API_TOKEN", None)
    env["RINGMASTER_SERVER"] = url
    env["RINGMASTER_READ_TOKEN"] = READ_TOKEN  # reads need a token
    if token:
        env["RINGMASTER_API_TOKEN"] = token
    p = subprocess.run([binary, *args], env=env, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def test_cli(srv, binary):
    url = f"http://{srv.http}"
    for sub in ("submit", "jobs", "job", "cancel", "k8s-manifest", "run", "logs"):
        for h in ("--help", "-h"):
            rc, out, err = run_cli(binary, url, sub, h)
            check(rc == 0 and "usage" in out and err == "", f"{sub} {h}: rc {rc} out {out[:60]!r} err {err[:80]!r}")
    for args in (("jobs", "--limit", "abc"), ("jobs", "--limit", "0"), ("jobs", "--limit", "1001"),
                 ("jobs", "--offset", "-1"), ("jobs", "--offset", "x"), ("jobs", "--timeout", "abc"),
                 ("jobs", "--connect-timeout", "0"), ("logs", "1", "--timeout", "x"),
                 ("logs", "1", "--worker", "x"), ("jobs", "extra"), ("jobs", "--nope")):
        rc, out, err = run_cli(binary, url, *args)
        check(rc == 2 and "usage" in err, f"{' '.join(args)}: rc {rc} (wanted 2, usage on stderr) {err[:80]!r}")
    rc, out, _ = run_cli(binary, url, "jobs", "--limit", "1000", "--offset", "0")
    check(rc == 0 and "STATE" in out, f"jobs --limit 1000: rc {rc}")
    check(run_cli(binary, url, "jobs", "--state", "bogus")[0] == 6, "jobs --state bogus -> 6 (refused)")
    check(run_cli(binary, url, "job", "987654")[0] == 3, "job 987654 -> 3")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"name": "cli-case", "world_size": 1, "launcher": "none", "algorithm": "RING"}, f)
    try:
        rc, _, err = run_cli(binary, url, "submit", f.name, token=srv.token)
        check(rc == 6 and "algorithm" in err, f"cli submit RING -> {rc} {err!r}")
    finally:
        os.unlink(f.name)


def main():
    a = rmserver_args()
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../api/openapi.json")) as f:
        doc = json.load(f)
    logs = tempfile.TemporaryDirectory(prefix="rm-strict-logs-")
    srv = Server(a.ringmaster, extra=("--log-dir", logs.name, "--worker", "/bin/false"))
    try:
        st, _, served = srv.request("GET", "/api/v1/openapi.json")
        check(st == 200 and served == doc, "the server serves api/openapi.json")
        enums, ints = test_document(srv, doc)
        test_defects(srv, doc)
        test_cli(srv, a.ringmaster)
        st, _, _ = srv.request("GET", "/healthz")
        check(st == 200, "server healthy after every case")
    finally:
        rc = srv.stop()
        logs.cleanup()
    check(rc == 0, f"server exit status {rc} after SIGTERM")
    print(f"strict spec: {enums} enum fields, {ints} integer fields, {COUNT['accepted']} specs "
          f"accepted, {COUNT['refused']} refused as wanted, {COUNT['checks']} checks")
    return verdict("api strict_spec: all checks passed")


if __name__ == "__main__":
    sys.exit(main())
