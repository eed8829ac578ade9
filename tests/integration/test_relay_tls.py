"""`ringmaster relay` listening on HOST:PORT over mutual TLS (relay/relay.c
LISTEN SIDE), so one relay carries the workers of many hosts, against a
coordinator that itself requires mutual TLS (certificates made with the
openssl CLI at test time, as in test_mtls):

- a relay asked to listen on a non-loopback address without the TLS files
  refuses to start (exit 2) and says what to give it;
- with the TLS files, a relay on 127.0.0.1:0 serves four real workers that
  have the same files and RINGMASTER_RELAY=127.0.0.1:PORT: each Joins and
  opens its Session through the relay over mutual TLS (their logs say so;
  the coordinator counts a lane for each Join and each Session), and the job
  trains to success;
- a client with no certificate, and a plaintext one, get nothing from the
  relay (UNAVAILABLE), while a client with a certificate signed by the CA
  does reach it (its Join with a wrong token is refused by the coordinator,
  through the relay: PERMISSION_DENIED or UNAUTHENTICATED, not UNAVAILABLE);
- the relay ends on SIGTERM with status 0."""
import signal
import subprocess

import rmtest
from test_mtls import certs_or_skip


def test(env):
    p = certs_or_skip(env)
    rd = lambda n: open(p(n), "rb").read()  # noqa: E731
    tls = ["--tls-ca", p("ca.pem"), "--tls-cert", p("client.pem"), "--tls-key", p("client.key")]
    coord = env.start_coordinator(extra=["--tls-cert", p("server.pem"), "--tls-key",
                                         p("server.key"), "--tls-ca", p("ca.pem"),
                                         "--http", "127.0.0.1:0"])
    http = rmtest.http_addr(coord)
    g, m = env.grpc, env.m
    creds = g.ssl_channel_credentials(rd("ca.pem"), rd("client.key"), rd("client.pem"))
    good = g.secure_channel(env.addr, creds)
    env.jobs = env.s.JobsStub(env.authed(good))
    env.worker = env.s.WorkerStub(env.authed(good))

    # 1. plaintext on a non-loopback address: refused
    bad = subprocess.run([env.a.coordinator, "relay", "--coordinator", env.addr, "--listen",
                          "0.0.0.0:0"], capture_output=True, timeout=20)
    assert bad.returncode == 2 and b"not a loopback address" in bad.stderr, bad

    # 2. a relay over mutual TLS on 127.0.0.1 (its certificate names it: the
    # "client" one carries subjectAltName IP:127.0.0.1)
    log = open(p("relay.log"), "ab")
    relay = subprocess.Popen([env.a.coordinator, "relay", "--coordinator", env.addr,
                              "--listen", "127.0.0.1:0", *tls], stdout=subprocess.PIPE,
                             stderr=log)
    env.procs.append(relay)
    line = relay.stdout.readline().decode()
    assert "relay listening on 127.0.0.1:" in line, line
    raddr = line.split()[-1]

    job = env.submit(name="relay-tls", world_size=4, steps=30, heartbeat_timeout_ms=10000,
                     workload_options="count=4096")
    ws = [env.start_worker(job, i, [*tls, "--data-timeout-ms", "60000"],
                           env={"RINGMASTER_RELAY": raddr}) for i in range(4)]
    for i, w in enumerate(ws):
        assert rmtest.wait_exit(w, 120) == 0, env.worker_log(i)
    j = env.get(job.id)
    assert j.state == m.JOB_STATE_SUCCEEDED, j
    for i in range(4):
        assert "Join and Sessions through relay %s (mutual TLS)" % raddr in env.worker_log(i), \
            env.worker_log(i)
        assert "go to the coordinator" not in env.worker_log(i), env.worker_log(i)
    # (the relay logs how it listens after its "listening" line: read it now)
    assert "(mutual TLS)" in open(p("relay.log"), "rb").read().decode()
    # a lane for each worker's Join and one for its Session
    assert rmtest.metric(http, "ringmaster_relay_lanes_total") >= 8

    # 3. no certificate, or plaintext: nothing; a certificate: the coordinator answers
    join = m.JoinRequest(job_id=job.id, token="not-the-token", worker_id=0)
    for ch in (g.secure_channel(raddr, g.ssl_channel_credentials(rd("ca.pem"))),
               g.insecure_channel(raddr)):
        try:
            env.s.WorkerStub(ch).Join(join, timeout=5)
            raise AssertionError("the relay served a client without a certificate")
        except g.RpcError as e:
            assert e.code() in (g.StatusCode.UNAVAILABLE, g.StatusCode.DEADLINE_EXCEEDED), e
    try:
        env.s.WorkerStub(g.secure_channel(raddr, creds)).Join(join, timeout=10)
        raise AssertionError("a Join with a wrong token was accepted")
    except g.RpcError as e:
        assert e.code() in (g.StatusCode.PERMISSION_DENIED, g.StatusCode.UNAUTHENTICATED,
                            g.StatusCode.FAILED_PRECONDITION), e

    # 4. SIGTERM: exit 0
    relay.send_signal(signal.SIGTERM)
    assert rmtest.wait_exit(relay, 20) == 0
    assert coord.poll() is None


if __name__ == "__main__":
    rmtest.main(test)
