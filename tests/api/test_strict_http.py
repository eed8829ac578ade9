#!/usr/bin/python3
"""test_strict_http.py - the HTTP layer's hardening against a real
`ringmaster serve`, over raw sockets (http.client cannot send a raw %00, a
control character or a bad Content-Length).

Checks, each answer parsed from the raw bytes (exactly one status line per
request, a complete JSON error {"error":{"code","message","field"}}):
  - bad request targets (%00, %zz, a lone '%', '%4', invalid UTF-8, encoded
    and raw control characters, a repeated parameter) in the path or a query
    parameter: 400 naming "path" or the parameter, and nothing changes (the
    job is not cancelled, no job is created);
  - bad Content-Length (-1, abc, 1e3, empty, two of them, too large): one
    answer, JSON, also as the second request of a keep-alive connection;
  - too many query parameters, a too long target, too large headers, bad
    chunking: JSON errors (400/414/431), one answer each;
  - event streams beyond RINGMASTER_SSE_MAX_STREAMS: 503 + Retry-After while
    /healthz answers; after the streams disconnect, streams open again;
  - the requests the HTTP library answers itself (a 100 KB request line,
    HTTP/9.9, an HTTP/2 preface, a lower-case version, no request line):
    exactly the statuses api/openapi.json lists in
    x-ringmaster-library-answers;
  - ids are canonical: 03, +3, " 3", 3.0, 0x3 ... are 404 not_found on every
    path with an id (and a worker index likewise), and change nothing.
Every answer on the wire is also checked against api/openapi.json
(contract.py).
No timing thresholds; every wait has a deadline.

usage: test_strict_http.py --ringmaster PATH
"""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rmserver import args as rmserver_args  # noqa: E402
from rmserver import Server, check, run_cli, sse_slots, verdict  # noqa: E402
import contract  # noqa: E402


def exchange(srv, data, deadline_s=20, library=False):
    """Send raw bytes, read until the server closes (or the deadline)."""
    s = socket.create_connection((srv.host, srv.port), timeout=deadline_s)
    end = time.monotonic() + deadline_s
    out = b""
    try:
        s.sendall(data)
        while time.monotonic() < end:
            try:
                d = s.recv(65536)
            except ConnectionResetError:
                break
            if not d:
                break
            out += d
    except socket.timeout:
        pass
    finally:
        s.close()
    conform(data, out, library)
    return out


def conform(data, raw, library=False):
    """Every answer on the wire is the document's (contract.py); library:
    the request is one the HTTP library answers itself, on purpose."""
    line = data.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    method, target = line[0], (line[1] if len(line) > 1 else "/")
    for st, hdrs, body in parse_responses(raw) or []:
        try:
            contract.check_answer(method, target, st, hdrs, body, library=library)
        except contract.ContractError as e:
            check(False, "contract: %s" % e)


def parse_responses(raw):
    """Split raw bytes into responses [(status, headers, body)]; None when
    the bytes are not a clean sequence of complete responses."""
    out = []
    while raw:
        if not raw.startswith(b"HTTP/1."):
            return None
        end = raw.find(b"\r\n\r\n")
        if end < 0:
            return None
        lines = raw[:end].decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        hdrs = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        n = int(hdrs.get("content-length", "0"))
        body = raw[end + 4:end + 4 + n]
        if len(body) != n:
            return None
        out.append((status, hdrs, body))
        raw = raw[end + 4 + n:]
    return out


def one_error(srv, data, status, code, field=None, what=None):
    """The request gets exactly one response: a JSON error."""
    what = what or repr(data[:80])
    raw = exchange(srv, data)
    rs = parse_responses(raw)
    if not check(rs is not None and len(rs) == 1, f"{what}: want one response, got {raw[:600]!r}"):
        return None
    check(raw.count(b"HTTP/1.1 ") == 1, f"{what}: more than one status line: {raw[:600]!r}")
    st, hdrs, body = rs[0]
    check(st == status, f"{what}: status {st} != {status} ({body[:200]!r})")
    check(hdrs.get("content-type", "").startswith("application/json"),
          f"{what}: content-type {hdrs.get('content-type')}")
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        check(False, f"{what}: body is not a JSON error: {body[:200]!r}")
        return None
    check(set(e) == {"code", "message", "field"}, f"{what}: error keys {sorted(e)}")
    check(e["code"] == code, f"{what}: code {e['code']} != {code}")
    check(isinstance(e["message"], str) and e["message"], f"{what}: no message")
    if field is not None:
        check(e["field"] == field, f"{what}: field {e['field']!r} != {field!r}")
    return hdrs


def req(method, target, token=None, headers=(), body=b""):
    h = [f"{method} ".encode() + target + b" HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close"]
    if token:
        h.append(b"Authorization: Bearer " + token.encode())
    h.extend(headers)
    if body:
        h.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(h) + b"\r\n\r\n" + body


def job_state(srv, jid):
    st, _, j = srv.request("GET", f"/api/v1/jobs/{jid}")
    return j.get("state") if st == 200 else st


def job_total(srv):
    return srv.request("GET", "/api/v1/jobs")[2]["total"]


def test_targets(srv):
    j = srv.submit(name="victim")
    jid = str(j["id"]).encode()
    tok = srv.token
    bad_paths = [b"%00", b"%00x", b"%zz", b"%", b"%4", b"%C3%28", b"%ED%A0%80", b"%C0%AF",
                 b"%0A", b"%7F", b"%F4%90%80%80"]
    for tail in bad_paths:
        one_error(srv, req("DELETE", b"/api/v1/jobs/" + jid + tail, tok), 400, "invalid_request",
                  "path", f"DELETE .../{jid.decode()}{tail.decode()}")
        one_error(srv, req("POST", b"/api/v1/jobs/" + jid + tail + b"/cancel", tok), 400,
                  "invalid_request", "path", f"POST cancel {tail.decode()}")
    # raw control characters in the target (MHD splits the line on spaces only)
    for ctl in (b"\x01", b"\x7f", b"\t", b"\x1b"):
        one_error(srv, req("DELETE", b"/api/v1/jobs/" + jid + ctl, tok), 400, "invalid_request",
                  "path", f"raw {ctl!r}")
    one_error(srv, req("GET", b"/api/v1/jobs/" + jid + b"/workers/%00/log"), 400,
              "invalid_request", "path", "workers/%00/log")
    one_error(srv, req("GET", b"/api/v1/jobs/" + jid + b"/workers/0/log?tail=1%00"), 400,
              "invalid_request", "tail", "?tail=1%00")
    one_error(srv, req("GET", b"/api/v1/jobs/" + jid + b"/workers/0/log?tail=%zz"), 400,
              "invalid_request", "tail", "?tail=%zz")
    one_error(srv, req("GET", b"/api/v1/jobs?limit=1%"), 400, "invalid_request", "limit",
              "?limit=1%")
    one_error(srv, req("GET", b"/api/v1/jobs?state=%FF"), 400, "invalid_request", "state",
              "?state=%FF")
    one_error(srv, req("GET", b"/api/v1/jobs?state=a%0D%0Ab"), 400, "invalid_request", "state",
              "?state=CRLF")
    one_error(srv, req("GET", b"/api/v1/jobs?%00=1"), 400, "invalid_request", "query", "?%00=1")
    one_error(srv, req("GET", b"/api/v1/jobs?limit=1&limit=2"), 400, "invalid_request", "limit",
              "repeated parameter")
    one_error(srv, req("GET", b"/api/v1/events?job=" + jid + b"%00"), 400, "invalid_request",
              "job", "events ?job=%00")
    # a refused target changes nothing, even with a valid token and a body
    one_error(srv, req("POST", b"/api/v1/jobs%00", tok, body=b'{"launcher":"none","world_size":1}'),
              400, "invalid_request", "path", "POST /jobs%00")
    check(job_state(srv, j["id"]) == "pending", f"job state after bad targets: {job_state(srv, j['id'])}")
    check(job_total(srv) == 1, "a refused POST created a job")
    # well-formed encodings still decode (once)
    st, _, lst = srv.request("GET", "/api/v1/jobs?state=pend%69ng")
    check(st == 200 and lst.get("total") == 1, f"?state=pend%69ng: {st} {lst}")
    st, _, _ = srv.request("GET", "/healthz?x=%E2%82%AC&y=a+b&flag")
    check(st == 200, f"valid UTF-8 query: {st}")
    st, _, got = srv.request("GET", "/api/v1/jobs/%3" + jid.decode()[0] + jid.decode()[1:])
    check(st == 200 and got.get("id") == j["id"], f"percent-encoded digit in the path: {st}")
    # and the job can still be cancelled properly
    st, _, c = srv.request("DELETE", f"/api/v1/jobs/{j['id']}", token=tok)
    check(st == 200 and c.get("state") == "cancelled", f"real cancel after the bad ones: {st}")


def test_limits(srv):
    many = b"&".join(b"p%d=1" % i for i in range(500))
    one_error(srv, req("GET", b"/healthz?" + many), 400, "too_many_parameters", "query",
              "500 query parameters")
    st, _, _ = srv.request("GET", "/healthz?" + "&".join(f"p{i}=1" for i in range(64)))
    check(st == 200, f"64 query parameters: {st}")
    one_error(srv, req("GET", b"/api/v1/jobs?x=" + b"a" * 10000), 414, "uri_too_long", None,
              "10 KB target")
    one_error(srv, req("GET", b"/healthz", headers=[b"X-Big: " + b"b" * 70000]), 431,
              "headers_too_large", None, "70 KB header")
    one_error(srv, req("GET", b"/healthz", headers=[b"X-Ctl: a\x01b"]), 400, "invalid_request",
              "X-Ctl", "control character in a header")
    chunked = (b"POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: "
               b"Bearer " + srv.token.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
    one_error(srv, chunked, 400, "invalid_request", "Transfer-Encoding", "bad chunk size")
    one_error(srv, req("POST", b"/api/v1/jobs", srv.token, headers=[b"Transfer-Encoding: gzip"]),
              501, "not_implemented", "Transfer-Encoding", "Transfer-Encoding: gzip")


def test_content_length(srv):
    before = job_total(srv)
    spec = b'{"launcher":"none","world_size":1}'
    for cl, status, code in ((b"-1", 400, "invalid_request"), (b"abc", 400, "invalid_request"),
                             (b"1e3", 400, "invalid_request"), (b"", 400, "invalid_request"),
                             (b"0x10", 400, "invalid_request"), (b" 12 3", 400, "invalid_request"),
                             (b"99999999999999999999999", 413, "payload_too_large")):
        data = req("POST", b"/api/v1/jobs", srv.token, headers=[b"Content-Length: " + cl]) + spec
        one_error(srv, data, status, code, "Content-Length", f"Content-Length: {cl!r}")
    two = req("POST", b"/api/v1/jobs", srv.token,
              headers=[b"Content-Length: %d" % len(spec), b"Content-Length: %d" % len(spec)]) + spec
    one_error(srv, two, 400, "invalid_request", "Content-Length", "two Content-Length headers")
    check(job_total(srv) == before, "a request with a bad Content-Length created a job")
    # second request of a keep-alive connection: one answer each, no more
    ka = (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
          b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
    raw = exchange(srv, ka)
    rs = parse_responses(raw)
    if check(rs is not None and len(rs) == 2, f"keep-alive + bad Content-Length: {raw[:800]!r}"):
        check(rs[0][0] == 200 and rs[1][0] == 400, f"keep-alive statuses {rs[0][0]} {rs[1][0]}")
        check(json.loads(rs[1][2])["error"]["field"] == "Content-Length", "keep-alive field")
    # the server is fine afterwards
    check(srv.request("GET", "/healthz")[0] == 200, "healthz after the bad requests")


def test_library_answers(srv):
    """The requests libmicrohttpd refuses before the server sees them get
    its own answers: exactly x-ringmaster-library-answers, nothing else."""
    doc = contract.Contract()
    listed = sorted(a["status"] for a in doc.doc["x-ringmaster-library-answers"] if a["status"])
    check(listed == [400, 414, 505], f"x-ringmaster-library-answers lists {listed}")
    for data, want, what in (
            (b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "100 KB request line"),
            (b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", 505, "HTTP/9.9"),
            (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, "HTTP/2 preface"),
            (b"GET /healthz http/1.1\r\nHost: x\r\n\r\n", 400, "lower-case version")):
        raw = exchange(srv, data, library=True)
        rs = parse_responses(raw)
        if check(rs is not None and len(rs) == 1, f"{what}: want one answer, got {raw[:300]!r}"):
            check(rs[0][0] == want, f"{what}: status {rs[0][0]} != {want}")
    raw = exchange(srv, b"GARBAGE\r\n\r\n", deadline_s=10, library=True)
    check(raw == b"", f"no request line at all: closed without an answer, got {raw[:200]!r}")
    # what the server refuses itself, just inside those, is JSON
    one_error(srv, req("GET", b"/healthz?x=" + b"a" * 20000), 414, "uri_too_long", None, "20 KB target")
    check(srv.request("GET", "/healthz")[0] == 200, "healthz after the library's refusals")


def test_canonical_ids(srv):
    """An id in a path is canonical decimal; another spelling of it is
    another name, 404 not_found, and changes nothing."""
    j = srv.submit(name="canon")
    jid = j["id"]
    tok = srv.token
    for spelling in ("0%d" % jid, "00%d" % jid, "+%d" % jid, "%%20%d" % jid, "%d%%20" % jid,
                     "%d.0" % jid, "0x%x" % jid, "%de0" % jid, "-0", "0"):
        t = spelling.encode()
        one_error(srv, req("GET", b"/api/v1/jobs/" + t, tok), 404, "not_found", None, f"GET /jobs/{spelling}")
        one_error(srv, req("DELETE", b"/api/v1/jobs/" + t, tok), 404, "not_found", None,
                  f"DELETE /jobs/{spelling}")
        one_error(srv, req("POST", b"/api/v1/jobs/" + t + b"/cancel", tok), 404, "not_found", None,
                  f"POST /jobs/{spelling}/cancel")
        for sub in (b"/workers", b"/steps", b"/events", b"/barriers", b"/workers/0/log"):
            one_error(srv, req("GET", b"/api/v1/jobs/" + t + sub, tok), 404, "not_found", None,
                      f"GET /jobs/{spelling}{sub.decode()}")
    for idx in (b"00", b"+0", b"0%20"):
        one_error(srv, req("GET", b"/api/v1/jobs/%d/workers/" % jid + idx + b"/log", tok), 404, "not_found",
                  None, f"worker index {idx!r}")
    one_error(srv, req("GET", b"/api/v1/events?job=0%d" % jid, tok), 400, "invalid_value", "job",
              "events ?job=0N")
    check(job_state(srv, jid) == "pending", f"job state after other spellings: {job_state(srv, jid)}")
    st, _, got = srv.request("GET", f"/api/v1/jobs/{jid}")
    check(st == 200 and got.get("id") == jid, f"the canonical id still reads: {st}")
    # the CLI shows the server's message, as for any other error
    rc, _, err = run_cli(srv.binary, "http://" + srv.http, "cancel", "0%d" % jid, token=tok)
    check(rc != 0 and ("HTTP 404: no job '0%d'" % jid) in err, f"CLI cancel 0{jid}: rc {rc} {err!r}")
    check(job_state(srv, jid) == "pending", "the CLI's cancel of another spelling changed the job")


def test_whole_field(srv):
    """An unknown field is named whole in error.field, however long (up to
    the body's own limit), at the top level and nested."""
    for name in ("x" * 300, "\u00e9t\u00e9-" + "y" * 200, 'q"uote\\' + "z" * 100):
        for body in ({"launcher": "none", "world_size": 1, name: 1},
                     {"launcher": "none", "world_size": 1, "aggregation": {"method": "mean", name: 1}}):
            st, _, j = srv.request("POST", "/api/v1/jobs", body, token=srv.token)
            want = name if "aggregation" not in body else "aggregation." + name
            check(st == 400 and j["error"]["code"] == "unknown_field" and j["error"]["field"] == want,
                  f"unknown field of {len(name)} chars: {st} field {j.get('error', {}).get('field')!r:.80}")


def open_stream(srv):
    s = socket.create_connection((srv.host, srv.port), timeout=20)
    s.sendall(b"GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-read-token\r\n\r\n")
    head = b""
    end = time.monotonic() + 20
    while b"\r\n\r\n" not in head and time.monotonic() < end:
        d = s.recv(4096)
        if not d:
            break
        head += d
    return s, head


def test_stream_limit(binary):
    limit = 3
    srv = Server(binary, env={"RINGMASTER_SSE_MAX_STREAMS": str(limit)})
    streams = []
    try:
        for _ in range(limit):
            s, head = open_stream(srv)
            streams.append(s)
            check(head.startswith(b"HTTP/1.1 200"), f"stream within the limit: {head[:80]!r}")
        for _ in range(2):  # beyond it: refused, clearly, every time
            s, head = open_stream(srv)
            raw = head
            end = time.monotonic() + 20
            while time.monotonic() < end:
                d = s.recv(4096)
                if not d:
                    break
                raw += d
            s.close()
            rs = parse_responses(raw)
            if check(rs is not None and len(rs) == 1, f"stream beyond the limit: {raw[:400]!r}"):
                st, hdrs, body = rs[0]
                check(st == 503, f"beyond the limit: status {st}")
                check(hdrs.get("retry-after", "").isdigit(), f"Retry-After: {hdrs.get('retry-after')}")
                check(json.loads(body)["error"]["code"] == "too_many_streams", f"503 body {body!r}")
        st, _, b = srv.request("GET", "/healthz")
        check(st == 200 and b == {"status": "ok"}, f"/healthz at the stream limit: {st}")
        st, _, _ = srv.request("GET", "/api/v1/jobs")
        check(st == 200, f"API at the stream limit: {st}")
        check(sse_slots(srv) == limit, f"ringmaster_sse_streams {sse_slots(srv)} != {limit}")
        for s in streams:
            s.close()
        streams = []
        end = time.monotonic() + 60  # a deadline, not a threshold
        while sse_slots(srv) != 0 and time.monotonic() < end:
            time.sleep(0.1)
        check(sse_slots(srv) == 0, "stream slots not given back after the clients left")
        for _ in range(limit):
            s, head = open_stream(srv)
            streams.append(s)
            check(head.startswith(b"HTTP/1.1 200"), f"stream after recovery: {head[:80]!r}")
        check(srv.request("GET", "/healthz")[0] == 200, "/healthz after recovery")
    finally:
        for s in streams:
            s.close()
        rc = srv.stop()
        check(rc == 0, f"serve exit code {rc}")


def main():
    args = rmserver_args()
    srv = Server(args.ringmaster)
    try:
        test_targets(srv)
        test_content_length(srv)
        test_limits(srv)
        test_library_answers(srv)
        test_canonical_ids(srv)
        test_whole_field(srv)
    finally:
        rc = srv.stop()
        check(rc == 0, f"serve exit code {rc}")
    test_stream_limit(args.ringmaster)
    return verdict("ok")


if __name__ == "__main__":
    sys.exit(main())
