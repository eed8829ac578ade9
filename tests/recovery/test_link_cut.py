"""A worker whose network link is cut (`ip link set eth0 down` in its network
namespace) is handled like a lost worker (the optional test).

Topology (tests/recovery/netns.py), built here and removed at the end
(needs root and `ip netns`; skips with 77 otherwise):

    root namespace: bridge rmcN-br, 10.211.S.1/24, the coordinator on it
    rmcN-w0..w2:    eth0 10.211.S.(i+2)/24, a veth to the bridge; one
                    ringmaster-worker each (`ip netns exec`, so the process
                    we hold is the worker itself), data port on that address

Nothing leaves 10.211.S.0/24 (no route is added; the bridge is not
forwarded anywhere). A 3-worker `train` job with on_failure=shrink runs; at
step 20 worker 1's link goes down. Unlike SIGKILL, no FIN or RST reaches
anyone: the peers see silence and the coordinator sees missing heartbeats.
The job must re-form at generation 2 with the 2 others and succeed, the
worker_lost event must name the cut worker's rank, the survivors exit 0 at
the accuracy band, and the cut worker (which cannot reach anyone) is
stopped by PID. Whatever a survivor's data plane or failure report blames
must be the cut worker's rank, never the other survivor. Steps carry 20 ms
of simulated compute so the job is still running when the cut lands.
"""
import os
import re
import subprocess

import netns
import rc
import rmtest


def test(env):
    why = netns.missing("rmc")
    if why:
        print("SKIP: cannot build network namespaces (%s)" % why)
        raise SystemExit(rmtest.SKIP)
    net = netns.Net(3, "rmc", 211)
    try:
        net.up()
        run(env, net)
    finally:
        net.down()


def run(env, net):
    env.start_coordinator(net.subnet + ".1:0")
    job = env.submit(name="link-cut", world_size=3, steps=300, heartbeat_timeout_ms=2000,
                     workload="train", workload_options=rc.train_opts(env, "sim_compute_ms=20"),
                     on_failure="shrink", checkpoint_every=10)
    ws = []
    for i, ns in enumerate(net.ns):
        log = open(os.path.join(env.dir, "worker%d.log" % i), "ab")
        p = subprocess.Popen(["ip", "netns", "exec", ns, env.a.worker,
                              "--coordinator", env.addr, "--job", str(job.id),
                              "--token", job.token, "--host", "host%d" % i,
                              "--data-addr", net.addr(i) + ":0", "--data-timeout-ms", "3000",
                              "--connect-timeout-ms", "20000"],
                             stdout=log, stderr=subprocess.STDOUT)
        env.procs.append(p)
        ws.append(p)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 20, 60)
    netns.sh("ip", "-n", net.ns[1], "link", "set", "eth0", "down")
    cut_worker_id = None
    for e in rc.events(env, job):  # the coordinator's id of worker 1 (host1)
        m = re.search(r"worker (\d+) joined from host1 ", e.message)
        if m:
            cut_worker_id = int(m.group(1))
    assert cut_worker_id is not None, "no join event from host1"
    j = env.wait_job(job.id, lambda j: j.state in (env.m.JOB_STATE_SUCCEEDED,
                                                   env.m.JOB_STATE_FAILED), 90)
    assert j.state == env.m.JOB_STATE_SUCCEEDED, j
    assert j.generation == 2 and j.world == 2, j
    lost = [e for e in rc.events(env, job) if e.kind == "worker_lost"]
    assert len(lost) == 1, lost
    cut_rank = lost[0].rank
    assert lost[0].message.startswith("worker %d (" % cut_worker_id), (cut_worker_id, lost[0])
    for i in (0, 2):
        assert rmtest.wait_exit(ws[i], 30) == 0, env.worker_log(i)
        acc = rc.accuracy(env, i)
        assert acc is not None and acc >= 0.85, (i, acc)
        for line in env.worker_log(i).splitlines():
            m = re.search(r"RM_ERR_\w+.*?blam\w+ rank (\d+)|reported \w+ naming rank (\d+)", line)
            if m:
                named = int(m.group(1) or m.group(2))
                assert named == cut_rank, (i, line)
    if ws[1].poll() is None:
        ws[1].kill()
        ws[1].wait(timeout=20)
    print("link cut: worker %d (rank %d) lost; job succeeded at generation 2 with 2 workers"
          % (cut_worker_id, cut_rank))


rc.main(test)
