"""A coordinator cut off from all its workers does not blame them
(coordinator/core/liveness.c, case 2: most of a job's workers silent
together is a hush, not a loss).

The coordinator runs in its own network namespace, joined to this one by a
veth pair; the workers and this test stay here. The link is cut both ways
(both ends of the veth down: nothing crosses, the connections are not
reset) for 3x the heartbeat timeout during a 3-worker synthetic job, then restored. For each
on_failure policy (fail, shrink, replace): no worker is declared lost, the
job keeps its generation and its 3 members and finishes, and the events
heartbeats_silent and coordinator_unreachable are recorded. Then under
`shrink` with a worker SIGKILLed during the cut: afterwards exactly that
worker is declared lost. Needs root (ip netns); skipped with a
message otherwise."""
import os
import signal
import subprocess
import time

import rmtest

HB_MS = 1000
CUT_S = 3 * HB_MS / 1000.0


def sh(*cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)


class Net:
    def __init__(self):
        n = os.getpid() % 200 + 20
        self.ns, self.a, self.b = "rmpart%d" % os.getpid(), "rmp%da" % os.getpid(), "rmp%db" % os.getpid()
        self.ip_a, self.ip_b = "10.213.%d.1" % n, "10.213.%d.2" % n
        self.made = False

    def up(self):
        steps = [["ip", "netns", "add", self.ns]]
        self.made = True
        steps += [["ip", "link", "add", self.a, "type", "veth", "peer", "name", self.b],
                  ["ip", "link", "set", self.b, "netns", self.ns],
                  ["ip", "addr", "add", self.ip_a + "/30", "dev", self.a],
                  ["ip", "link", "set", self.a, "up"],
                  ["ip", "-n", self.ns, "addr", "add", self.ip_b + "/30", "dev", self.b],
                  ["ip", "-n", self.ns, "link", "set", self.b, "up"],
                  ["ip", "-n", self.ns, "link", "set", "lo", "up"]]
        for s in steps:
            r = sh(*s)
            if r.returncode:
                return "%s: %s" % (" ".join(s), r.stdout.decode().strip())
        return None

    def cut(self, on):
        # both ends of the veth down: nothing crosses either way; the
        # connections stay open (no reset) and retransmit until restored
        # `ip -n` enters the namespace for the one netlink call (no mount
        # namespace, no /sys remount as `ip netns exec` makes), and a failed
        # call is tried again: the state it sets is the same either way
        for pre, dev in ((["ip"], self.a), (["ip", "-n", self.ns], self.b)):
            for attempt in range(3):
                r = sh(*pre, "link", "set", dev, "down" if on else "up")
                if r.returncode == 0:
                    break
                time.sleep(0.2)
            assert r.returncode == 0, "%s %s: %s" % (" ".join(pre), dev, r.stdout)

    def down(self):
        if self.made:
            sh("ip", "link", "del", self.a)
            sh("ip", "netns", "del", self.ns)


def run(env, policy, kill=False):
    st = env.m
    job = env.submit(name="cut-" + policy + ("-kill" if kill else ""), world_size=3,
                     steps=1500, heartbeat_timeout_ms=HB_MS, on_failure=policy,
                     workload="synthetic", workload_options="bytes=4096,compute_ms=5")
    ws = [env.start_worker(job, 3 * env.runs + i, ["--data-timeout-ms", "60000"])
          for i in range(3)]
    env.runs += 1
    j0 = env.wait_job(job.id, lambda j: j.state == st.JOB_STATE_RUNNING and j.step >= 20, 60)
    env.net.cut(True)
    try:
        if kill:
            time.sleep(CUT_S / 3)
            ws[1].send_signal(signal.SIGKILL)
            ws[1].wait(timeout=10)
            time.sleep(2 * CUT_S / 3)
        else:
            time.sleep(CUT_S)
    finally:
        env.net.cut(False)
    if kill:
        j = env.wait_job(job.id, lambda j: j.generation > j0.generation
                         and j.state == st.JOB_STATE_RUNNING, 60)
        assert j.world == 2, j
        lost = [e for e in env.events(job.id, job.token) if e.kind == "worker_lost"]
        assert len(lost) == 1, lost
        victim = env.worker_log(3 * (env.runs - 1) + 1)
        assert ("rank %d of 3" % lost[0].rank) in victim, (lost, victim)
        env.jobs.CancelJob(st.CancelJobRequest(job_id=job.id, reason="test over"), timeout=10)
        for w in ws:
            w.kill()
            w.wait(timeout=20)
        return
    j = env.wait_job(job.id, lambda j: j.state in (st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED,
                                                   st.JOB_STATE_CANCELLED), 120)
    assert j.state == st.JOB_STATE_SUCCEEDED, j
    assert j.generation == j0.generation and j.world == 3, (j0, j)
    ev = env.events(job.id, job.token)
    assert not [e for e in ev if e.kind == "worker_lost"], [e for e in ev if e.kind == "worker_lost"]
    kinds = [e.kind for e in ev]
    assert "heartbeats_silent" in kinds and "coordinator_unreachable" in kinds, kinds
    for w in ws:
        assert rmtest.wait_exit(w, 60) == 0


def test(env):
    if os.geteuid() != 0:
        print("SKIP: needs root for ip netns")
        raise SystemExit(rmtest.SKIP)
    env.net = Net()
    env.runs = 0
    try:
        why = env.net.up()
        if why:
            print("SKIP: cannot make a network namespace here:", why)
            raise SystemExit(rmtest.SKIP)
        wrap = os.path.join(env.dir, "coord-in-ns")
        with open(wrap, "w") as f:
            f.write('#!/bin/sh\nexec ip netns exec %s %s "$@"\n' % (env.net.ns, env.a.coordinator))
        os.chmod(wrap, 0o755)
        env.a.coordinator = wrap
        env.start_coordinator(env.net.ip_b + ":0")
        for policy in ("fail", "shrink", "replace"):
            run(env, policy)
            print("cut under", policy, ": no worker lost, generation and members kept")
        run(env, "shrink", kill=True)
        print("cut with a worker SIGKILLed: exactly that worker lost")
    finally:
        for p in env.procs:  # before the namespace goes
            if p.poll() is None:
                p.kill()
                p.wait(timeout=20)
        env.net.down()


rmtest.main(test)
