"""test_aggregation_spec.py - the job spec's "aggregation" field
through REST and the CLI, against a real `ringmaster serve`:

  validation   every rule of include/ringmaster/aggregation.h violated at
               submit is a 400 naming the field (aggregation.f, .m,
               .clip_norm, .tau, .method) and quoting the rule; JSON-level
               errors (unknown member, wrong types, not an object) name
               aggregation.<member>; the boundaries of every rule are
               accepted; an elastic job is checked at n = min_workers
  round trip   POST -> GET shows the aggregation (omitted = mean, zeros); a
               restarted server on the same database still has it;
               `ringmaster job ID` prints it; the dashboard's form has it
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rmserver import args as rmserver_args  # noqa: E402
from rmserver import Server  # noqa: E402


def spec(n=5, agg=None, **kw):
    s = {"name": "agg", "world_size": n, "launcher": "none"}
    if agg is not None:
        s["aggregation"] = agg
    s.update(kw)
    return s


def refused(srv, body, field, words=()):
    st, _, j = srv.request("POST", "/api/v1/jobs", body, token=srv.token)
    assert st == 400, (body, st, j)
    assert j["error"]["field"] == field, (body, j)
    for w in words:
        assert w in j["error"]["message"], (w, body, j)


def accepted(srv, body):
    st, _, j = srv.request("POST", "/api/v1/jobs", body, token=srv.token)
    assert st == 201, (body, st, j)
    return j


def validation(srv):
    # JSON layer: names the member
    refused(srv, spec(agg="krum"), "aggregation", ["must be an object"])
    refused(srv, spec(agg={"method": 3}), "aggregation.method", ["must be a string"])
    refused(srv, spec(agg={"mthod": "krum"}), "aggregation.mthod", ["unknown field"])
    refused(srv, spec(agg={"f": 1.5}), "aggregation.f", ["must be an integer"])
    refused(srv, spec(agg={"f": -1}), "aggregation.f")
    refused(srv, spec(agg={"m": "2"}), "aggregation.m")
    refused(srv, spec(agg={"clip_norm": "5"}), "aggregation.clip_norm", ["must be a number"])
    refused(srv, spec(agg={"tau": True}), "aggregation.tau")
    refused(srv, spec(agg={"iterations": -2}), "aggregation.iterations")
    refused(srv, spec(agg={"method": "k" * 40}), "aggregation.method")
    # coordinator: method names and the rules (rm_agg_check's words)
    refused(srv, spec(agg={"method": "kurm"}), "aggregation.method",
            ["mean", "median", "trimmed_mean", "krum", "multi_krum", "bulyan", "centered_clip"])
    refused(srv, spec(agg={"clip_norm": -1}), "aggregation.clip_norm", ["clip_norm must be"])
    refused(srv, spec(4, {"method": "median", "f": 2}), "aggregation.f",
            ["median needs n >= 2f + 1: n = 4, f = 2", "world_size"])
    refused(srv, spec(4, {"method": "trimmed_mean", "f": 2}), "aggregation.f",
            ["trimmed_mean needs n > 2f: n = 4, f = 2"])
    refused(srv, spec(4, {"method": "krum", "f": 1}), "aggregation.f",
            ["krum needs n > 2f + 2: n = 4, f = 1"])
    refused(srv, spec(4, {"method": "multi_krum", "f": 1}), "aggregation.f",
            ["multi_krum needs n > 2f + 2: n = 4, f = 1"])
    refused(srv, spec(5, {"method": "multi_krum", "f": 1, "m": 5}), "aggregation.m",
            ["multi_krum needs 0 <= m <= n - f: m = 5, n - f = 4"])
    refused(srv, spec(6, {"method": "bulyan", "f": 1}), "aggregation.f",
            ["bulyan needs n >= 4f + 3: n = 6, f = 1"])
    refused(srv, spec(4, {"method": "centered_clip", "f": 2}), "aggregation.f",
            ["centered_clip needs n >= 2f + 1: n = 4, f = 2"])
    refused(srv, spec(5, {"method": "centered_clip", "tau": -0.5}), "aggregation.tau",
            ["centered_clip needs tau >= 0"])
    # a bad clip_norm is named even when the rule on n fails too
    refused(srv, spec(4, {"method": "krum", "f": 1, "clip_norm": -1}), "aggregation.clip_norm")
    # elastic: the smallest group it may form with
    refused(srv, {"name": "el", "min_workers": 4, "max_workers": 8, "launcher": "none",
                  "aggregation": {"method": "krum", "f": 1}}, "aggregation.f",
            ["krum needs n > 2f + 2: n = 4, f = 1", "min_workers"])
    # the boundaries hold
    accepted(srv, spec(5, {"method": "krum", "f": 1}))
    accepted(srv, spec(5, {"method": "multi_krum", "f": 1, "m": 4}))
    accepted(srv, spec(7, {"method": "bulyan", "f": 1}))
    accepted(srv, spec(5, {"method": "median", "f": 2}))
    accepted(srv, spec(3, {"method": "trimmed_mean", "f": 1}))
    accepted(srv, spec(3, {"method": "centered_clip", "f": 1, "tau": 0, "iterations": 0}))
    accepted(srv, spec(1, {"clip_norm": 2.5}))
    accepted(srv, spec(1, {}))
    accepted(srv, {"name": "el", "min_workers": 5, "max_workers": 8, "launcher": "none",
                   "aggregation": {"method": "krum", "f": 1}})
    # every method name is known
    for m in ("mean", "median", "trimmed_mean", "krum", "multi_krum", "bulyan", "centered_clip"):
        accepted(srv, spec(9, {"method": m, "f": 1}))


WANT = [
    {"method": "krum", "f": 1, "m": 0, "clip_norm": 2.5, "tau": 0, "iterations": 0},
    {"method": "multi_krum", "f": 1, "m": 3, "clip_norm": 0, "tau": 0, "iterations": 0},
    {"method": "centered_clip", "f": 2, "m": 0, "clip_norm": 10, "tau": 0.25, "iterations": 4},
]
DEFAULT = {"method": "mean", "f": 0, "m": 0, "clip_norm": 0, "tau": 0, "iterations": 0}


def check_stored(srv, ids):
    for i, want in zip(ids, WANT + [DEFAULT]):
        st, _, g = srv.request("GET", "/api/v1/jobs/%d" % i)
        assert st == 200 and g["spec"]["aggregation"] == want, (i, g["spec"].get("aggregation"))


def main():
    a = rmserver_args()
    tmp = tempfile.mkdtemp(prefix="rm-agg-")
    db = os.path.join(tmp, "rm.db")
    srv = Server(a.ringmaster, extra=("--db", db))
    try:
        validation(srv)
        ids = [accepted(srv, spec(5, w, name="rt%d" % k))["id"] for k, w in enumerate(WANT)]
        ids.append(accepted(srv, spec(2, name="plain"))["id"])
        check_stored(srv, ids)
        st, _, lst = srv.request("GET", "/api/v1/jobs")
        assert any(j["spec"]["aggregation"] == WANT[0] for j in lst["jobs"]), lst
        st, _, page = srv.request("GET", "/")
        if st == 200 and isinstance(page, str) and "<template" in page:
            assert 'name="aggregation.method"' in page and "centered_clip" in page
    finally:
        srv.stop()
    srv = Server(a.ringmaster, extra=("--db", db))
    try:
        check_stored(srv, ids)
        out = subprocess.run([a.ringmaster, "job", str(ids[0]), "--server", "http://" + srv.http],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out
        assert "aggregation krum  f 1  clip_norm 2.5" in out.stdout, out.stdout
        out = subprocess.run([a.ringmaster, "job", str(ids[3]), "--server", "http://" + srv.http],
                             capture_output=True, text=True, timeout=30)
        assert "aggregation mean\n" in out.stdout, out.stdout
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")


if __name__ == "__main__":
    main()
