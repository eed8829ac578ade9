"""`ringmaster relay` with real worker processes (relay/relay.c, worker/
session/session_live.c RELAY, coordinator/rpc/relay.c):

- four workers with RINGMASTER_RELAY join and open their Sessions at the
  relay, and the coordinator sees a lane for each Join and each Session
  (ringmaster_relay_lanes_total on /metrics) while the job trains;
- with 3 lane numbers a stream (RINGMASTER_RELAY_LANES, a test knob) the
  relay opens new streams as they run out and closes each old one once its
  last lane ended;
- the relay is SIGKILLed mid-job: nobody is declared lost, the workers'
  next Sessions go to the coordinator directly, and the job trains on past
  the heartbeat timeout;
- through a new relay, a worker SIGKILLed is declared lost at once by the
  relay's report of its broken Session, long before its heartbeat timeout;
- a second relay on a live relay's socket exits 1 and leaves it alone;
- the relay ends on SIGTERM with status 0 and removes its socket."""
import os
import signal
import subprocess
import time

import rmtest


def test(env):
    coord = env.start_coordinator(extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(coord)
    sock = os.path.join(env.dir, "relay.sock")
    # 3 lane numbers a stream (a test knob): the relay turns its streams
    # over, and closes one once its last lane ended
    relay, via = env.start_relay(sock, env={"RINGMASTER_RELAY_LANES": "3"})
    # a second relay on the same socket refuses to take it over
    second = subprocess.run([env.a.coordinator, "relay", "--coordinator", env.addr, "--listen",
                             "unix:" + sock], capture_output=True, timeout=20)
    assert second.returncode == 1 and b"already listens" in second.stderr, second

    # 1. four workers' Sessions through the relay
    job = env.submit(name="relayed", world_size=4, steps=10**9, heartbeat_timeout_ms=3000,
                     workload_options="count=4096")
    ws = [env.start_worker(job, i, ["--data-timeout-ms", "60000"], env=via) for i in range(4)]
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 5, 60)
    t0 = time.time()
    # a lane for each worker's Join and one for its Session
    while time.time() < t0 + 20 and rmtest.metric(http, "ringmaster_relay_lanes_total") < 8:
        time.sleep(0.1)
    assert rmtest.metric(http, "ringmaster_relay_lanes_total") >= 8
    assert all("Join and Sessions through relay" in env.worker_log(i) for i in range(4))
    relay_log = lambda: open(os.path.join(env.dir, "relay.log"), "rb").read().decode()
    t0 = time.time()
    while time.time() < t0 + 20 and "stream 1 ended: its lane numbers ran out" not in relay_log():
        time.sleep(0.1)
    assert "stream 1 ended: its lane numbers ran out" in relay_log(), relay_log()
    assert "stream 3 to the coordinator opened" in relay_log(), relay_log()
    assert rmtest.metric(http, "ringmaster_relay_messages_total") >= 1

    # 2. the relay dies: nobody lost, the job trains on past the 3 s timeout
    relay.send_signal(signal.SIGKILL)
    relay.wait(timeout=10)
    step = env.get(job.id).step
    time.sleep(5)
    j = env.get(job.id)
    assert j.state == env.m.JOB_STATE_RUNNING and j.step > step + 5, (step, j)
    lost = [e.message for e in env.events(job.id, job.token) if e.kind == "worker_lost"]
    assert not lost, lost
    assert any("the next one goes to the coordinator" in env.worker_log(i) for i in range(4))
    env.jobs.CancelJob(env.m.CancelJobRequest(job_id=job.id), timeout=10)
    for w in ws:
        rmtest.wait_exit(w, 60)

    # 3. a new relay; a worker SIGKILLed is lost at once by the relay's report
    # (alone in its job: no peer's data plane reports it first)
    relay, _ = env.start_relay(sock)
    job2 = env.submit(name="relayed-kill", world_size=1, steps=10**9,
                      heartbeat_timeout_ms=60000, workload_options="count=4096")
    w = env.start_worker(job2, 4, ["--data-timeout-ms", "60000"], env=via)
    env.wait_job(job2.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 3, 60)
    t0 = time.time()
    while time.time() < t0 + 20 and rmtest.metric(http, "ringmaster_relay_lanes_total") < 10:
        time.sleep(0.1)
    assert rmtest.metric(http, "ringmaster_relay_lanes_total") >= 10
    t_kill = time.time()
    w.send_signal(signal.SIGKILL)
    w.wait(timeout=10)
    why = "its relay saw its Session cancelled"
    lost = []
    while time.time() < t_kill + 30 and not lost:
        time.sleep(0.1)
        lost = [e.message for e in env.events(job2.id, job2.token, timeout=1)
                if e.kind == "worker_lost"]
    assert lost and why in lost[0], lost
    assert time.time() - t_kill < 30  # its heartbeat timeout is 60 s

    # 4. SIGTERM: exit 0, socket removed
    relay.send_signal(signal.SIGTERM)
    assert rmtest.wait_exit(relay, 20) == 0
    assert not os.path.exists(sock)


if __name__ == "__main__":
    rmtest.main(test)
