#!/usr/bin/python3
"""test_cli_tls.py - the CLI (libcurl) over https:// with --cacert.

The REST server speaks plain HTTP, so this test puts a tiny TLS front of its
own on 127.0.0.1:0: Python's http.server behind ssl, serving canned JSON for
the few paths the checks use, with a self-signed certificate made by
`openssl req -x509` in a temp dir. Checks:

  - `jobs --server https://... --cacert ca.pem` prints the table (exit 0);
    RINGMASTER_CACERT does the same; --json too
  - without --cacert: exit 5 and a message about the certificate
  - an unreadable --cacert file: exit 2 (usage)
  - `job ID` (three GETs) over one kept-alive TLS connection; 404 -> 3
  - `cancel` sends the bearer token (exit 0), a wrong one -> 4
  - http:// to the TLS port: exit 5 (no HTTP answer)
  - proxies from the usual variables: https_proxy pointing at a dead port
    -> 5; the same with no_proxy=127.0.0.1 -> 0
  - deadlines: a port that accepts but never answers the TLS handshake
    fails with exit 5 within --timeout, and within --connect-timeout when
    that is shorter

usage: test_cli_tls.py --ringmaster PATH       (exit 77: no openssl binary)
"""
import argparse
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from rmtestutil import free_port  # noqa: E402

FAILS = []
TOKEN = "tls-test-token"


def check(cond, what):
    if cond:
        print("ok:", what)
    else:
        FAILS.append(what)
        print("FAIL:", what, file=sys.stderr)


JOB = {"id": 7, "state": "running", "reason": "", "step": 3, "steps_total": 9,
       "generation": 1, "workers_alive": 2, "workers_joined": 2, "created_ms": 0,
       "spec": {"name": "tls-job", "world_size": 2, "workload": "train",
                "algorithm": "ring", "dtype": "f32", "launcher": "none"}}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the CLI may reuse its connection
    seen = []  # (method, path, authorization, client port)

    def log_message(self, *a):
        pass

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def note(self):
        Handler.seen.append((self.command, self.path, self.headers.get("Authorization"),
                             self.client_address[1]))

    def do_GET(self):
        self.note()
        path = self.path.split("?")[0]
        if path == "/api/v1/jobs":
            self.reply(200, {"jobs": [JOB], "total": 1})
        elif path == "/api/v1/jobs/7":
            self.reply(200, JOB)
        elif path == "/api/v1/jobs/7/workers":
            self.reply(200, {"workers": []})
        elif path == "/api/v1/jobs/7/barriers":
            self.reply(200, {"barriers": []})
        else:
            self.reply(404, {"error": {"code": "not_found", "message": "no such job"}})

    def do_POST(self):
        self.note()
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.reply(401, {"error": {"code": "unauthorized", "message": "bad token"}})
        elif self.path == "/api/v1/jobs/7/cancel" and "reason" in body:
            self.reply(200, dict(JOB, state="cancelled"))
        else:
            self.reply(404, {"error": {"code": "not_found", "message": "no such job"}})


class TLSServer(http.server.ThreadingHTTPServer):
    """Handshake per connection in its handler thread, not in accept()."""
    daemon_threads = True
    ctx = None

    def finish_request(self, request, client_address):
        try:
            request = self.ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # the client refused our certificate, or spoke plain HTTP
        super().finish_request(request, client_address)


def make_cert(d):
    key, cert = os.path.join(d, "key.pem"), os.path.join(d, "ca.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    return key, cert


def cli(binary, *args, env=None, timeout=30):
    e = {k: v for k, v in os.environ.items()
         if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
         and not k.startswith("RINGMASTER_")}
    e.update(env or {})
    t = time.monotonic()
    p = subprocess.run([binary, *args], env=e, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringmaster", required=True)
    a = ap.parse_args()
    if shutil.which("openssl") is None:
        print("SKIP: no openssl binary to make a test certificate")
        return 77
    tmp = tempfile.mkdtemp(prefix="rm-cli-tls-")
    srv = None
    mute = None
    try:
        key, ca = make_cert(tmp)
        TLSServer.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        TLSServer.ctx.load_cert_chain(ca, key)
        srv = TLSServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        url = f"https://127.0.0.1:{srv.server_address[1]}"
        rm = a.ringmaster

        rc, out, err, _ = cli(rm, "jobs", "--server", url, "--cacert", ca)
        check(rc == 0 and "tls-job" in out and "STATE" in out,
              f"jobs over https with --cacert: rc {rc} out {out!r} err {err!r}")
        rc, out, err, _ = cli(rm, "jobs", "--json",
                              env={"RINGMASTER_SERVER": url, "RINGMASTER_CACERT": ca})
        check(rc == 0 and json.loads(out or "{}").get("jobs", [{}])[0].get("id") == 7,
              f"jobs --json with RINGMASTER_CACERT: rc {rc} err {err!r}")

        rc, out, err, _ = cli(rm, "jobs", "--server", url)
        check(rc == 5 and "certificate" in err,
              f"without --cacert: exit 5 and a certificate message (rc {rc}, err {err!r})")
        rc, out, err, _ = cli(rm, "jobs", "--server", url, "--cacert",
                              os.path.join(tmp, "missing.pem"))
        check(rc == 2 and "missing.pem" in err, f"unreadable --cacert -> 2 (rc {rc}, {err!r})")

        Handler.seen.clear()
        rc, out, err, _ = cli(rm, "job", "7", "--server", url, "--cacert", ca)
        ports = {s[3] for s in Handler.seen}
        check(rc == 0 and "tls-job" in out and "workers" in out, f"job 7: rc {rc} err {err!r}")
        check(len(Handler.seen) == 3 and len(ports) == 1,
              f"job 7: 3 requests on one kept-alive connection (seen {Handler.seen})")
        rc, _, err, _ = cli(rm, "job", "8", "--server", url, "--cacert", ca)
        check(rc == 3 and "no such job" in err, f"job 8 -> 3 (rc {rc}, {err!r})")

        Handler.seen.clear()
        rc, out, err, _ = cli(rm, "cancel", "7", "--server", url, "--cacert", ca,
                              "--token", TOKEN)
        check(rc == 0 and "cancelled" in out, f"cancel with the token: rc {rc} err {err!r}")
        check(Handler.seen and Handler.seen[-1][2] == f"Bearer {TOKEN}",
              f"cancel sent the bearer token ({Handler.seen})")
        rc, _, err, _ = cli(rm, "cancel", "7", "--server", url, "--cacert", ca,
                            "--token", "wrong")
        check(rc == 4, f"cancel with a wrong token -> 4 (rc {rc}, {err!r})")

        rc, _, err, _ = cli(rm, "jobs", "--server", url.replace("https://", "http://"))
        check(rc == 5, f"http:// to the TLS port -> 5 (rc {rc}, {err!r})")

        dead = f"http://127.0.0.1:{free_port()}"
        rc, _, err, _ = cli(rm, "jobs", "--server", url, "--cacert", ca,
                            env={"https_proxy": dead})
        check(rc == 5, f"https_proxy at a dead port -> 5 (rc {rc}, {err!r})")
        rc, out, err, _ = cli(rm, "jobs", "--server", url, "--cacert", ca,
                              env={"https_proxy": dead, "no_proxy": "127.0.0.1"})
        check(rc == 0 and "tls-job" in out, f"no_proxy=127.0.0.1 bypasses it (rc {rc}, {err!r})")

        # A port that accepts (the kernel's backlog) but never answers.
        mute = socket.socket()
        mute.bind(("127.0.0.1", 0))
        mute.listen(16)
        murl = f"https://127.0.0.1:{mute.getsockname()[1]}"
        rc, _, err, took = cli(rm, "jobs", "--server", murl, "--cacert", ca, "--timeout", "800")
        check(rc == 5 and "deadline" in err and took < 5,
              f"silent server: exit 5 within --timeout 800 (rc {rc}, {took:.1f} s, {err!r})")
        rc, _, err, took = cli(rm, "jobs", "--server", murl, "--cacert", ca, "--timeout", "20000",
                               "--connect-timeout", "500")
        check(rc == 5 and took < 5,
              f"silent server: exit 5 within --connect-timeout 500 (rc {rc}, {took:.1f} s, {err!r})")
    finally:
        if srv is not None:
            srv.shutdown()
            srv.server_close()
        if mute is not None:
            mute.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILS:
        print(f"{len(FAILS)} check(s) failed", file=sys.stderr)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
