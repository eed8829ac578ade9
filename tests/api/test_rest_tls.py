#!/usr/bin/python3
"""test_rest_tls.py - the REST API and dashboard over HTTPS:
`serve --http-tls-cert PEM --http-tls-key PEM` (libmicrohttpd with GnuTLS).

A self-signed certificate for 127.0.0.1 (openssl req -x509 in a temp dir):
  - /healthz, the dashboard page and a job list over https with the
    certificate as CA; a submit with the token -> 201, without -> 401
  - an event stream over https delivers the submitted job's event
  - the CLI: `jobs --server https://... --cacert cert.pem` exit 0 and shows
    the job; without --cacert exit 5 (certificate not trusted)
  - plain http:// to the TLS port gets no HTTP answer, and the server
    serves https afterwards
  - only one of the two flags, or an unreadable file: serve exits 1 saying
    which

usage: test_rest_tls.py --ringmaster PATH       (exit 77: no openssl binary)
"""
import argparse
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

TOKEN = "rest-tls-token"
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, file=sys.stderr)


def start(binary, tmp, extra):
    env = dict(os.environ, RINGMASTER_API_TOKEN=TOKEN, RINGMASTER_LOG_LEVEL="warn",
               RINGMASTER_READ_TOKEN="test-read-token")
    p = subprocess.Popen([binary, "serve", "--db", os.path.join(tmp, "rm.db"), "--grpc",
                          "127.0.0.1:0", "--http", "127.0.0.1:0", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.time() + 20
    while time.time() < deadline:
        line = p.stdout.readline().decode()
        if not line:
            break
        if "http listening on" in line:
            return p, line.split()[-1]
    p.wait(timeout=20)
    return p, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringmaster", required=True)
    a = ap.parse_args()
    if not shutil.which("openssl"):
        print("SKIP: no openssl binary")
        return 77
    tmp = tempfile.mkdtemp(prefix="rm-tls-")
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", key, "-out", cert, "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p = None
    try:
        # refusals first
        q, addr = start(a.ringmaster, tmp, ["--http-tls-cert", cert])
        err = q.stderr.read().decode()
        check(addr is None and q.returncode == 1 and "--http-tls-key" in err, "one flag: " + err)
        q, addr = start(a.ringmaster, tmp, ["--http-tls-cert", cert, "--http-tls-key",
                                            os.path.join(tmp, "nope.pem")])
        err = q.stderr.read().decode()
        check(addr is None and q.returncode == 1 and "nope.pem" in err, "missing key: " + err)

        p, addr = start(a.ringmaster, tmp, ["--http-tls-cert", cert, "--http-tls-key", key])
        check(addr is not None, "serve with TLS did not start")
        if addr is None:
            return 1
        host, port = addr.rsplit(":", 1)
        ctx = ssl.create_default_context(cafile=cert)

        def req(method, path, body=None, token=None):
            c = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=20)
            h = {"Content-Type": "application/json"}
            if token:
                h["Authorization"] = "Bearer " + token
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers=h)
            r = c.getresponse()
            data = r.read()
            c.close()
            return r.status, data

        st, _ = req("GET", "/healthz")
        check(st == 200, "healthz over https: %d" % st)
        st, page = req("GET", "/")
        check(st == 200 and b"<html" in page.lower(), "dashboard page over https")
        st, _ = req("POST", "/api/v1/jobs", {"name": "anon", "world_size": 1, "launcher": "none"})
        check(st == 401, "submit without token: %d" % st)
        # an event stream, then the submit that produces an event on it
        s = ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=20),
                            server_hostname=host)
        s.sendall(b"GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-read-token\r\nAccept: text/event-stream\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:  # the stream is open before the submit
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
        check(head.startswith(b"HTTP/1.1 200"), "event stream over https: %r" % head[:100])
        st, body = req("POST", "/api/v1/jobs", {"name": "tls-job", "world_size": 1,
                                                "launcher": "none"}, TOKEN)
        check(st == 201, "submit with token: %d %s" % (st, body[:200]))
        got, deadline = head, time.time() + 20
        while b"tls-job" not in got and time.time() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            got += chunk
        s.close()
        check(b"tls-job" in got, "event stream over https did not deliver the job event")
        cli = [a.ringmaster, "jobs", "--server", "https://" + addr]
        r = subprocess.run(cli + ["--cacert", cert, "--token", TOKEN], capture_output=True, timeout=30)
        check(r.returncode == 0 and b"tls-job" in r.stdout, "CLI over https: %d %r %r" %
              (r.returncode, r.stdout[-200:], r.stderr[-200:]))
        r = subprocess.run(cli, capture_output=True, timeout=30,
                           env=dict(os.environ, SSL_CERT_FILE="/nonexistent",
                                    RINGMASTER_READ_TOKEN="test-read-token"))
        check(r.returncode == 5, "CLI without the CA: exit %d %r" % (r.returncode, r.stderr))
        # plain HTTP to the TLS port: no HTTP answer, server unharmed
        c = socket.create_connection((host, int(port)), timeout=10)
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            data = c.recv(4096)
        except (socket.timeout, ConnectionResetError):
            data = b""
        c.close()
        check(not data.startswith(b"HTTP/1.1 200"), "plain http answered on the TLS port")
        st, _ = req("GET", "/healthz")
        check(st == 200 and p.poll() is None, "server after plain http")
    finally:
        if p and p.poll() is None:
            p.terminate()
            p.wait(timeout=20)
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILS:
        print("%d check(s) failed" % len(FAILS))
        return 1
    print("PASS")
    return 0


sys.exit(main())
