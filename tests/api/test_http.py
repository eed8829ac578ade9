#!/usr/bin/python3
"""test_http.py - the REST API against a real `ringmaster serve` process.

Covers every endpoint and error case of submit/list/get/cancel
(POST /cancel and DELETE), workers/events/barriers/steps, health, readiness,
static files; 400 (malformed JSON, wrong type, unknown field, bad query) with
the field named, 401 changing nothing, 404, 405 + Allow, 409, 413;
server-sent events (delivery, ?job filter, keep-alive, Last-Event-ID resume
and reset); the OpenAPI document against real answers; the CLI and its exit
codes. Every wait has a deadline.

usage: test_http.py --ringmaster PATH
"""
import json
import os
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import contract  # noqa: E402
from rmserver import args as rmserver_args  # noqa: E402
from rmserver import READ_TOKEN, Server, check, run_cli, verdict  # noqa: E402



def error_of(body):
    return body.get("error", {}) if isinstance(body, dict) else {}


def expect_error(srv, method, path, status, code, field=None, **kw):
    st, hdrs, body = srv.request(method, path, **kw)
    e = error_of(body)
    check(st == status, f"{method} {path}: status {st} != {status} ({body})")
    check(e.get("code") == code, f"{method} {path}: code {e.get('code')} != {code}")
    check(set(e) == {"code", "message", "field"}, f"{method} {path}: error keys {sorted(e)}")
    check(isinstance(e.get("message"), str) and e.get("message"), f"{method} {path}: no message")
    if field is not None:
        check(e.get("field") == field, f"{method} {path}: field {e.get('field')} != {field}")
    return hdrs


def test_jobs(srv):
    j = srv.submit(name="first", world_size=2, steps=7, workload_options={"count": 64})
    check(j["id"] >= 1 and j["state"] == "pending" and len(j["token"]) >= 16, f"submit answer {j}")
    check(j["spec"]["workload_options"] == "count=64" and j["spec"]["world_size"] == 2, "spec echo")
    st, hdrs, _ = srv.request("POST", "/api/v1/jobs", {"name": "second", "world_size": 1, "launcher": "none"},
                              token=srv.token)
    check(st == 201 and hdrs.get("location", "").startswith("/api/v1/jobs/"), "201 + Location")
    st, _, got = srv.request("GET", f"/api/v1/jobs/{j['id']}")
    check(st == 200 and got["spec"]["name"] == "first" and "token" not in got, f"get {got}")
    st, _, lst = srv.request("GET", "/api/v1/jobs?limit=1")
    check(st == 200 and lst["total"] == 2 and len(lst["jobs"]) == 1 and lst["next_offset"] == 1,
          f"paged list {lst}")
    st, _, lst = srv.request("GET", "/api/v1/jobs?limit=1&offset=1")
    check(lst["jobs"][0]["id"] == j["id"] and lst["next_offset"] is None, "second page")
    st, _, lst = srv.request("GET", "/api/v1/jobs?state=pending")
    check(st == 200 and lst["total"] == 2, "state filter")
    st, _, lst = srv.request("GET", "/api/v1/jobs?state=running")
    check(st == 200 and lst["total"] == 0, "state filter running")
    for sub in ("workers", "events", "barriers", "steps"):
        st, _, b = srv.request("GET", f"/api/v1/jobs/{j['id']}/{sub}")
        check(st == 200 and isinstance(b.get(sub), list), f"{sub}: {st} {b}")
    st, _, ev = srv.request("GET", f"/api/v1/jobs/{j['id']}/events")
    check(any(e["kind"] == "job_submitted" for e in ev["events"]), "submit event recorded")
    st, _, c = srv.request("POST", f"/api/v1/jobs/{j['id']}/cancel", {"reason": "test says so"},
                           token=srv.token)
    check(st == 200 and c["state"] == "cancelled", f"cancel {st} {c}")
    expect_error(srv, "POST", f"/api/v1/jobs/{j['id']}/cancel", 409, "conflict", token=srv.token)
    second = lst_id = srv.request("GET", "/api/v1/jobs?state=pending")[2]["jobs"][0]["id"]
    st, _, c = srv.request("DELETE", f"/api/v1/jobs/{lst_id}", token=srv.token)
    check(st == 200 and c["state"] == "cancelled" and c["id"] == second, "DELETE cancels")
    return j


def test_errors(srv):
    tok = srv.token
    expect_error(srv, "POST", "/api/v1/jobs", 400, "invalid_json", raw=b"{\"name\":", token=tok)
    expect_error(srv, "POST", "/api/v1/jobs", 400, "invalid_json", raw=b"", token=tok)
    expect_error(srv, "POST", "/api/v1/jobs", 400, "invalid_type", "world_size",
                 body={"name": "a", "world_size": "4"}, token=tok)
    expect_error(srv, "POST", "/api/v1/jobs", 400, "unknown_field", "colour",
                 body={"name": "a", "colour": "red"}, token=tok)
    expect_error(srv, "POST", "/api/v1/jobs", 400, "missing_field", "name", body={}, token=tok)
    expect_error(srv, "POST", "/api/v1/jobs", 400, "invalid_value", "algorithm",
                 body={"name": "a", "world_size": 1, "algorithm": "bogus"}, token=tok)
    expect_error(srv, "POST", "/api/v1/jobs", 400, "invalid_value", "world_size",
                 body={"name": "a", "world_size": 0}, token=tok)
    expect_error(srv, "GET", "/api/v1/jobs?state=nope", 400, "invalid_value", "state")
    expect_error(srv, "GET", "/api/v1/jobs?limit=0", 400, "invalid_value", "limit")
    expect_error(srv, "GET", "/api/v1/jobs?limit=abc", 400, "invalid_value", "limit")
    expect_error(srv, "GET", "/api/v1/jobs/1/events?after=x", 400, "invalid_value", "after")
    expect_error(srv, "GET", "/api/v1/events?job=abc", 400, "invalid_value", "job")
    # 413: declared length over the limit, and a chunked body that grows past it.
    st, body = raw_post(srv, 2 << 20, chunked=False)
    check(st == 413 and b"payload_too_large" in body, f"declared oversized body -> 413 ({st})")
    st, body = raw_post(srv, 2 << 20, chunked=True)
    check(st == 413 and b"payload_too_large" in body, f"chunked oversized body -> 413 ({st})")
    # 404s
    for p in ("/api/v1/jobs/999999", "/api/v1/jobs/abc", "/api/v1/jobs/999999/workers",
              "/api/v1/jobs/999999/events", "/api/v1/jobs/999999/barriers",
              "/api/v1/jobs/999999/steps", "/api/v1/nothing", "/static/nothing.js"):
        expect_error(srv, "GET", p, 404, "not_found")
    expect_error(srv, "POST", "/api/v1/jobs/999999/cancel", 404, "not_found", token=tok)
    # 405 with Allow
    for method, path, allow in (("PUT", "/api/v1/jobs", "GET, HEAD, POST"),
                                ("PATCH", "/api/v1/jobs/1", "GET, HEAD, DELETE"),
                                ("GET", "/api/v1/jobs/1/cancel", "POST"),
                                ("POST", "/metrics", "GET, HEAD"),
                                ("DELETE", "/healthz", "GET, HEAD")):
        h = expect_error(srv, method, path, 405, "method_not_allowed", token=tok)
        check(h.get("allow") == allow, f"{method} {path}: Allow {h.get('allow')!r} != {allow!r}")


def raw_post(srv, size, chunked):
    """POST a body of `size` bytes on a raw socket; the server may answer 413
    and close before the body is sent, so send errors are expected."""
    s = socket.create_connection((srv.host, srv.port), timeout=30)
    framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % size
    s.sendall(b"POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\n" + framing +
              b"\r\nContent-Type: application/json\r\nAuthorization: Bearer " +
              srv.token.encode() + b"\r\nConnection: close\r\n\r\n")
    chunk = b"a" * 65536
    try:
        for _ in range(size // len(chunk) + 2):
            s.sendall((b"%x\r\n" % len(chunk) + chunk + b"\r\n") if chunked else chunk)
        if chunked:
            s.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    data = b""
    while True:
        try:
            d = s.recv(65536)
        except OSError:
            break
        if not d:
            break
        data += d
    s.close()
    try:
        return int(data.split(b" ", 2)[1]), data
    except (IndexError, ValueError):
        return -1, data


def test_auth(srv):
    before = srv.request("GET", "/api/v1/jobs")[2]["total"]
    for tok in (None, "wrong-token", srv.token + "x", srv.token[:-1]):
        h = expect_error(srv, "POST", "/api/v1/jobs", 401, "unauthorized",
                         body={"name": "sneaky", "world_size": 1, "launcher": "none"}, token=tok)
        check("bearer" in h.get("www-authenticate", "").lower(), "WWW-Authenticate on 401")
    st, _, _ = srv.request("POST", "/api/v1/jobs", {"name": "basic"},
                           headers={"Authorization": "Basic " + srv.token})
    check(st == 401, "Basic scheme refused")
    j = srv.submit(name="victim")
    expect_error(srv, "POST", f"/api/v1/jobs/{j['id']}/cancel", 401, "unauthorized")
    expect_error(srv, "DELETE", f"/api/v1/jobs/{j['id']}", 401, "unauthorized", token="nope")
    check(srv.request("GET", f"/api/v1/jobs/{j['id']}")[2]["state"] == "pending",
          "401 cancel changed nothing")
    check(srv.request("GET", "/api/v1/jobs")[2]["total"] == before + 1, "401 submit stored nothing")


def test_misc(srv):
    st, _, b = srv.request("GET", "/healthz")
    check(st == 200 and b == {"status": "ok"}, "healthz")
    st, _, b = srv.request("GET", "/readyz")
    check(st == 200 and b["status"] == "ready" and b["grpc"] == srv.grpc, f"readyz {b}")
    for path, ctype in (("/", "text/html"), ("/jobs/1", "text/html"), ("/static/app.js", "text/javascript"),
                        ("/static/style.css", "text/css"), ("/metrics", "text/plain")):
        st, h, _ = srv.request("GET", path)
        check(st == 200 and h.get("content-type", "").startswith(ctype), f"{path}: {st} {h}")
    st, h, body = srv.request("GET", "/static/chart.js")
    if os.path.exists("/usr/share/javascript/chart.js/chart.min.js"):
        check(st == 200 and "Chart" in body[:2000], "chart.js served from libjs-chart.js")
    st, h, body = srv.request("HEAD", "/api/v1/jobs")
    check(st == 200, "HEAD allowed where GET is")


class Sse:
    """A raw text/event-stream reader with deadlines."""

    def __init__(self, srv, query="", last_id=None):
        self.s = socket.create_connection((srv.host, srv.port), timeout=10)
        extra = f"Last-Event-ID: {last_id}\r\n" if last_id is not None else ""
        self.s.sendall(f"GET /api/v1/events{query} HTTP/1.1\r\nHost: x\r\n"
                       f"Authorization: Bearer {READ_TOKEN}\r\n"
                       f"Accept: text/event-stream\r\n{extra}\r\n".encode())
        self.buf = b""
        head = self._until(b"\r\n\r\n", 10)
        self.status = int(head.split(b" ", 2)[1])
        self.headers = head.decode().lower()

    def _until(self, sep, timeout):
        deadline = time.monotonic() + timeout
        while sep not in self.buf:
            self.s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                d = self.s.recv(65536)
            except socket.timeout:
                d = None
            if not d or time.monotonic() > deadline:
                raise TimeoutError(f"no {sep!r} within {timeout}s; have {self.buf[-300:]!r}")
            self.buf += d
        out, self.buf = self.buf.split(sep, 1)
        return out

    def blocks(self, timeout):
        """Yields raw blocks (events or comments), de-chunked lazily."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            try:
                size = int(self._until(b"\r\n", deadline - time.monotonic()), 16)
                data = self._until(b"\r\n", deadline - time.monotonic()) if size else b""
            except TimeoutError:
                return
            text += data.decode()
            while "\n\n" in text:
                block, text = text.split("\n\n", 1)
                yield block

    def events(self, timeout):
        for block in self.blocks(timeout):
            ev = {}
            for line in block.split("\n"):
                if line.startswith(":") or ":" not in line:
                    continue
                k, v = line.split(":", 1)
                ev[k] = v[1:] if v.startswith(" ") else v
            if "event" in ev:
                yield ev

    def close(self):
        self.s.close()


def test_sse(srv):
    a = srv.submit(name="sse-a")
    b = srv.submit(name="sse-b")
    all_s, a_s = Sse(srv), Sse(srv, f"?job={a['id']}")
    check(all_s.status == 200 and "text/event-stream" in all_s.headers, "SSE headers")
    srv.request("POST", f"/api/v1/jobs/{b['id']}/cancel", {}, token=srv.token)
    srv.request("POST", f"/api/v1/jobs/{a['id']}/cancel", {}, token=srv.token)
    got_all, got_a = [], []
    for ev in all_s.events(10):
        got_all.append(ev)
        if sum(1 for e in got_all if e["event"] == "event") >= 2 and \
                {json.loads(e["data"])["job_id"] for e in got_all if e["event"] == "event"} >= {a["id"], b["id"]}:
            break
    for ev in a_s.events(10):
        got_a.append(ev)
        if any(json.loads(e["data"]).get("job_id") == a["id"] for e in got_a if e["event"] == "event"):
            break
    jobs_all = {json.loads(e["data"])["job_id"] for e in got_all if e["event"] == "event"}
    check({a["id"], b["id"]} <= jobs_all, f"unfiltered stream saw both jobs: {jobs_all}")
    jobs_a = {json.loads(e["data"])["job_id"] for e in got_a if e["event"] == "event"}
    check(jobs_a == {a["id"]}, f"?job filter: {jobs_a}")
    check(all(e.get("id", "").isdigit() for e in got_all), "every event has an id")
    all_s.close()
    a_s.close()
    # Resume: reconnect with the id before the last event seen -> it is replayed.
    last = got_all[-1]
    prev_id = int(last["id"]) - 1
    r = Sse(srv, last_id=prev_id)
    replay = next(r.events(10), None)
    check(replay is not None and replay["id"] == last["id"] and replay["data"] == last["data"],
          f"Last-Event-ID resume replays {last['id']}: got {replay}")
    r.close()
    r = Sse(srv, last_id=1)
    first = next(r.events(10), None)
    check(first is not None and first["event"] == "reset", f"too-old Last-Event-ID -> reset: {first}")
    r.close()
    # Keep-alive comments (server started with a short keep-alive).
    k = Sse(srv)
    comments = [bl for bl in k.blocks(3) if bl.startswith(": keep-alive")]
    check(len(comments) >= 1, "keep-alive comment within 3 s (keep-alive 300 ms)")
    k.close()


def test_openapi(srv, job):
    st, _, doc = srv.request("GET", "/api/v1/openapi.json")
    check(st == 200 and doc.get("openapi", "").startswith("3."), "OpenAPI 3 document served")
    with open(os.path.join(os.path.dirname(__file__), "../../api/openapi.json")) as f:
        check(json.load(f) == doc, "served document == api/openapi.json in the repo")
    fresh = srv.submit(name="oa-fresh")
    checked = 0
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            real = path.replace("{id}", str(fresh["id"] if method in ("post", "delete") else job["id"]))
            real = real.replace("{index}", "0")
            if path == "/api/v1/events":
                s = Sse(srv)
                check(s.status == 200 and "200" in op["responses"], "events documented 200")
                s.close()
                checked += 1
                continue
            body = None
            if path == "/api/v1/jobs" and method == "post":
                body = {"name": "oa-submit", "world_size": 1, "launcher": "none"}
            st, h, ans = srv.request(method.upper(), real, body, token=srv.token)
            check(str(st) in op["responses"], f"{method} {path}: {st} not documented")
            resp = contract.resolve(doc, op["responses"].get(str(st), {}))
            content = resp.get("content", {})
            if "application/json" in content and isinstance(ans, dict):
                schema = contract.resolve(doc, content["application/json"]["schema"])
                missing = [k for k in schema.get("required", []) if k not in ans]
                check(not missing, f"{method} {path}: missing documented fields {missing}")
            checked += 1
            # documented error answers really happen
            if "404" in op["responses"]:
                st, _, ans = srv.request(method.upper(), path.replace("{id}", "987654").replace("{index}", "0"),
                                         token=srv.token)
                check(st == 404 and "error" in ans, f"{method} {path}: documented 404")
            # /metrics answers 401 only under --metrics-auth (test_read_auth)
            if "401" in op["responses"] and path != "/metrics":
                st, _, ans = srv.request(method.upper(), real, body, token="")
                check(st == 401 and "error" in ans, f"{method} {path}: documented 401")
    check(checked >= 13, f"checked {checked} operations")
    # every API route the server has is documented
    for p in ("/api/v1/jobs", "/api/v1/jobs/{id}", "/api/v1/jobs/{id}/cancel",
              "/api/v1/jobs/{id}/workers", "/api/v1/jobs/{id}/events", "/api/v1/jobs/{id}/barriers",
              "/api/v1/jobs/{id}/steps", "/api/v1/jobs/{id}/workers/{index}/log",
              "/api/v1/jobs/{id}/k8s-manifest", "/api/v1/events", "/api/v1/openapi.json", "/healthz",
              "/readyz", "/metrics"):
        check(p in doc["paths"], f"{p} documented")




def test_cli(srv, binary):
    url = f"http://{srv.http}"
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"name": "from-cli", "world_size": 3, "launcher": "none", "steps": 9}, f)
        spec = f.name
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write('{"name": "bad", "wrld_size": 3}')
        bad = f.name
    rc, out, err = run_cli(binary, url, "submit", spec, "--json", token=srv.token)
    check(rc == 0, f"cli submit rc {rc}: {err}")
    jid = json.loads(out)["id"]
    rc, out, _ = run_cli(binary, url, "jobs")
    check(rc == 0 and "from-cli" in out and "STATE" in out, f"cli jobs table: {out}")
    rc, out, _ = run_cli(binary, url, "jobs", "--json", "--state", "pending")
    check(rc == 0 and any(j["id"] == jid for j in json.loads(out)["jobs"]), "cli jobs --json")
    rc, out, _ = run_cli(binary, url, "job", str(jid))
    check(rc == 0 and "from-cli" in out and "workers" in out, f"cli job: {out}")
    rc, out, _ = run_cli(binary, url, "job", str(jid), "--json")
    check(rc == 0 and json.loads(out)["workers"] == [], "cli job --json")
    check(run_cli(binary, url, "job", "987654")[0] == 3, "cli not found -> 3")
    check(run_cli(binary, url, "cancel", str(jid), token="wrong")[0] == 4, "cli bad token -> 4")
    check(run_cli(binary, url, "submit", bad, token=srv.token)[0] == 6, "cli bad spec -> 6")
    check(run_cli(binary, url, "submit", "/nonexistent.json", token=srv.token)[0] == 2, "cli unreadable -> 2")
    check(run_cli(binary, url, "frobnicate")[0] == 2, "cli usage -> 2")
    check(run_cli(binary, url, "job")[0] == 2, "cli missing id -> 2")
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()
    check(run_cli(binary, f"http://127.0.0.1:{port}", "jobs")[0] == 5, "cli unreachable -> 5")
    rc, out, _ = run_cli(binary, url, "cancel", str(jid), token=srv.token)
    check(rc == 0 and "cancelled" in out, f"cli cancel: {out}")
    check(run_cli(binary, url, "cancel", str(jid), token=srv.token)[0] == 6, "cli cancel twice -> 6")
    os.unlink(spec)
    os.unlink(bad)


def main():
    a = rmserver_args()
    srv = Server(a.ringmaster, env={"RINGMASTER_SSE_KEEPALIVE_MS": "300"})
    try:
        job = test_jobs(srv)
        test_errors(srv)
        test_auth(srv)
        test_misc(srv)
        test_sse(srv)
        test_openapi(srv, job)
        test_cli(srv, a.ringmaster)
        st, _, _ = srv.request("GET", "/healthz")
        check(st == 200, "server still healthy after every error case")
    finally:
        rc = srv.stop()
    check(rc == 0, f"server exit status {rc} after SIGTERM")
    return verdict("api http: all checks passed")


if __name__ == "__main__":
    sys.exit(main())
