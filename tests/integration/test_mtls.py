"""Mutual TLS: with --tls-cert/--tls-key/--tls-ca the coordinator serves only
clients (Python, and ringmaster-worker) presenting a certificate signed by the CA (certificates are made with
the openssl CLI at test time)."""
import os
import shutil
import subprocess
import sys

import rmtest


def sh(*a, cwd):
    subprocess.run(a, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def make_certs(d):
    sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
       "/CN=rm-test-ca", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    with open(os.path.join(d, "san.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    for who in ("server", "client"):
        sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + who,
           "-keyout", who + ".key", "-out", who + ".csr", cwd=d)
        sh("openssl", "x509", "-req", "-in", who + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
           "-CAcreateserial", "-days", "1", "-extfile", "san.cnf", "-out", who + ".pem", cwd=d)


def certs_or_skip(env):
    """Certificates in env.dir (make_certs), or SKIP without the openssl CLI;
    returns name -> its path."""
    if not shutil.which("openssl"):
        print("SKIP: no openssl CLI")
        sys.exit(rmtest.SKIP)
    make_certs(env.dir)
    return lambda n: os.path.join(env.dir, n)


def test(env):
    p = certs_or_skip(env)
    env.start_coordinator(extra=["--tls-cert", p("server.pem"), "--tls-key", p("server.key"),
                                 "--tls-ca", p("ca.pem")])
    g, m = env.grpc, env.m
    rd = lambda n: open(p(n), "rb").read()  # noqa: E731
    good = env.authed(g.secure_channel(env.addr, g.ssl_channel_credentials(
        rd("ca.pem"), rd("client.key"), rd("client.pem"))))
    job = env.s.JobsStub(good).SubmitJob(m.SubmitJobRequest(spec=m.JobSpec(
        name="tls", world_size=1, launcher="none")), timeout=10).job
    assert job.id > 0
    for ch in (g.secure_channel(env.addr, g.ssl_channel_credentials(rd("ca.pem"))),  # no cert
               g.insecure_channel(env.addr)):  # plaintext
        try:
            env.s.JobsStub(ch).GetJob(m.GetJobRequest(job_id=job.id), timeout=5)
            raise AssertionError("a client without a certificate was served")
        except g.RpcError as e:
            assert e.code() in (g.StatusCode.UNAVAILABLE, g.StatusCode.DEADLINE_EXCEEDED), e
    # the worker agent over mutual TLS: a one-worker job runs to success
    wjob = env.s.JobsStub(good).SubmitJob(m.SubmitJobRequest(spec=m.JobSpec(
        name="tlsw", world_size=1, steps=3, launcher="none",
        workload_options="count=1024")), timeout=10).job
    w = env.start_worker(wjob, 0, ["--tls-ca", p("ca.pem"), "--tls-cert", p("client.pem"),
                                   "--tls-key", p("client.key")])
    assert rmtest.wait_exit(w, 60) == 0, env.worker_log(0)
    assert env.coord.poll() is None


rmtest.main(test)
