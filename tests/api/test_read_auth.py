"""test_read_auth.py - reads need a credential by default (docs/security.md),
against a real `ringmaster serve`:

  default        every read under /api/v1/ (jobs, job, workers, a worker's
                 log, events, barriers, steps, the event stream) answers 401
                 without a token and with a wrong one; 200 with the read token
                 and with the API token; the event stream also with
                 ?access_token=; /healthz, /readyz, /metrics and the OpenAPI
                 document stay open
  read token     cannot submit, cancel or fetch a k8s manifest (401)
  gRPC           Jobs.GetJob / ListJobs: UNAUTHENTICATED without a token, OK
                 with the read token; SubmitJob with the read token refused
  --metrics-auth /metrics 401 without a token, 200 with the read token
  --public-reads every read 200 without a token (REST and gRPC), mutations
                 still 401, and the coordinator warns when it listens beyond
                 loopback
"""
import http.client
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rmserver import args as rmserver_args  # noqa: E402
from rmserver import READ_TOKEN, Server, FAILS, check  # noqa: E402


def reads(jid):
    return ["/api/v1/jobs", "/api/v1/jobs/%d" % jid, "/api/v1/jobs/%d/workers" % jid,
            "/api/v1/jobs/%d/workers/0/log" % jid, "/api/v1/jobs/%d/events" % jid,
            "/api/v1/jobs/%d/barriers" % jid, "/api/v1/jobs/%d/steps" % jid]


def stream_status(srv, query="", token=None):
    c = http.client.HTTPConnection(srv.host, srv.port, timeout=10)
    h = {"Accept": "text/event-stream"}
    if token:
        h["Authorization"] = "Bearer " + token
    c.request("GET", "/api/v1/events" + query, headers=h)
    st = c.getresponse().status
    c.close()
    return st


def grpc_status(srv, method, req, token=None):
    import grpc
    ch = grpc.insecure_channel(srv.grpc)
    md = (("authorization", "Bearer " + token),) if token else ()
    try:
        ch.unary_unary("/ringmaster.v1.Jobs/" + method)(req, timeout=10, metadata=md)
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()
    finally:
        ch.close()


def ok(st):
    return st in (200, 404)  # the log of a launcher "none" job: 404 after auth


def default(binary):
    import grpc
    srv = Server(binary)
    try:
        jid = srv.submit(name="r")["id"]
        for p in reads(jid):
            st, _, _ = srv.request("GET", p, token="")
            check(st == 401, "%s without a token: %d" % (p, st))
            st, _, _ = srv.request("GET", p, token="wrong")
            check(st == 401, "%s with a wrong token: %d" % (p, st))
            st, _, b = srv.request("GET", p, token=READ_TOKEN)
            check(ok(st) and (st == 200 or "log" in p), "%s with the read token: %d %s" % (p, st, b))
            st, _, _ = srv.request("GET", p, token=srv.token)
            check(ok(st), "%s with the API token: %d" % (p, st))
        st, h, b = srv.request("GET", "/api/v1/jobs", token="")
        check(h.get("www-authenticate", "").startswith("Bearer") and b["error"]["code"] == "unauthorized",
              "401 answer: %s %s" % (h, b))
        check(stream_status(srv) == 401, "event stream without a token")
        check(stream_status(srv, "?access_token=wrong") == 401, "event stream, wrong access_token")
        check(stream_status(srv, "?access_token=" + READ_TOKEN) == 200, "event stream, access_token")
        check(stream_status(srv, token=READ_TOKEN) == 200, "event stream, read token header")
        for p in ("/healthz", "/readyz", "/metrics", "/api/v1/openapi.json", "/"):
            st, _, _ = srv.request("GET", p, token="")
            check(st == 200, "%s stays open: %d" % (p, st))
        # the read token reads only
        st, _, _ = srv.request("POST", "/api/v1/jobs", {"name": "x", "world_size": 1,
                                                       "launcher": "none"}, token=READ_TOKEN)
        check(st == 401, "submit with the read token: %d" % st)
        st, _, _ = srv.request("POST", "/api/v1/jobs/%d/cancel" % jid, {}, token=READ_TOKEN)
        check(st == 401, "cancel with the read token: %d" % st)
        st, _, _ = srv.request("DELETE", "/api/v1/jobs/%d" % jid, token=READ_TOKEN)
        check(st == 401, "delete with the read token: %d" % st)
        st, _, _ = srv.request("GET", "/api/v1/jobs/%d/k8s-manifest" % jid, token=READ_TOKEN)
        check(st == 401, "k8s-manifest (holds the worker token) with the read token: %d" % st)
        get = b"\x08" + bytes([jid])
        check(grpc_status(srv, "GetJob", get) == grpc.StatusCode.UNAUTHENTICATED, "gRPC GetJob, no token")
        check(grpc_status(srv, "ListJobs", b"\x08\x01", "wrong") == grpc.StatusCode.UNAUTHENTICATED,
              "gRPC ListJobs, wrong token")
        check(grpc_status(srv, "GetJob", get, READ_TOKEN) == grpc.StatusCode.OK, "gRPC GetJob, read token")
        check(grpc_status(srv, "ListJobs", b"\x08\x01", READ_TOKEN) == grpc.StatusCode.OK,
              "gRPC ListJobs, read token")
        check(grpc_status(srv, "GetJob", get, srv.token) == grpc.StatusCode.OK, "gRPC GetJob, API token")
        check(grpc_status(srv, "CancelJob", get, READ_TOKEN) == grpc.StatusCode.UNAUTHENTICATED,
              "gRPC CancelJob with the read token")
    finally:
        srv.stop()


def metrics_auth(binary):
    srv = Server(binary, extra=("--metrics-auth",))
    try:
        st, _, _ = srv.request("GET", "/metrics", token="")
        check(st == 401, "--metrics-auth: /metrics without a token: %d" % st)
        st, _, body = srv.request("GET", "/metrics", token=READ_TOKEN)
        check(st == 200 and "ringmaster_" in body, "--metrics-auth: /metrics with the read token: %d" % st)
        st, _, _ = srv.request("GET", "/healthz", token="")
        check(st == 200, "--metrics-auth: /healthz open")
    finally:
        srv.stop()


def public_reads(binary):
    import grpc
    srv = Server(binary, extra=("--public-reads", "--grpc", "0.0.0.0:0"))
    try:
        jid = srv.submit(name="p")["id"]
        for p in reads(jid):
            st, _, _ = srv.request("GET", p, token="")
            check(ok(st), "--public-reads: %s without a token: %d" % (p, st))
        check(stream_status(srv) == 200, "--public-reads: event stream without a token")
        check(grpc_status(srv, "GetJob", b"\x08" + bytes([jid])) == grpc.StatusCode.OK,
              "--public-reads: gRPC GetJob without a token")
        st, _, _ = srv.request("POST", "/api/v1/jobs", {"name": "x", "world_size": 1,
                                                       "launcher": "none"}, token="")
        check(st == 401, "--public-reads: submit without a token still 401: %d" % st)
        deadline = time.monotonic() + 10
        warned = False
        while not warned and time.monotonic() < deadline:
            with open(srv.log.name) as f:
                warned = "--public-reads" in f.read()
            time.sleep(0.1)
        check(warned, "--public-reads beyond loopback: a warning in the log")
    finally:
        srv.stop()


def main():
    a = rmserver_args()
    try:
        import grpc  # noqa: F401
    except ImportError:
        print("skipped: no grpcio")
        return 77
    default(a.ringmaster)
    metrics_auth(a.ringmaster)
    public_reads(a.ringmaster)
    for f in FAILS:
        print("FAIL:", f)
    if FAILS:
        return 1
    print("read auth: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
