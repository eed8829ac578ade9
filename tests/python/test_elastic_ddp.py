"""python.elastic.ddp_*: elastic DDP in one line. elastic_ddp_prog.py is an
ordinary DDP program whose only elastic line is
``elastic.TorchState(ddp, opt, step=0)`` (no on_reset hook), run as a
3-worker command job through the coordinator:

  test_elastic_ddp.py shrink   on_failure shrink, 120 steps of >= 30 ms,
                               commit every 10; once every rank passed step
                               40 the program of rank 0 (the host of torch's
                               first-generation store) is SIGKILLed by PID.
                               The 2 survivors re-form in place: the job
                               succeeds; their RESULT lines come from the
                               same PIDs that printed the first banners; each
                               saw worlds [3, 2] and the rebuilt DDP model is
                               over the new default group of 2; their
                               parameters are bitwise equal and equal to the
                               1-process run (--single) within 1e-9 relative
                               (rolled back to the last commit and every step
                               applied once: a step lost or applied twice
                               moves them by far more); the job's events have
                               a worker_lost.
  test_elastic_ddp.py replace  the same under on_failure replace: the local
                               launcher starts a fourth program (launch index
                               3) whose unchanged init_process_group joins the
                               re-formed group (no first-generation store:
                               A LATE JOINER, ringmaster/torch); it takes the
                               state from a survivor and the job ends with 3
                               members: the 2 survivors (same PIDs, worlds
                               [3, 3]) and the newcomer, parameters bitwise
                               equal on all 3 and within 1e-9 of 1 process.
"""
import glob
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rmtest  # noqa: E402

PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_ddp_prog.py")


def arg(name):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def log_text(c, job, i):
    path = os.path.join(c.logs, "job-%d" % job, "worker-%d.log" % i)
    if not os.path.exists(path):
        return ""
    with open(path, errors="replace") as fh:
        return fh.read()


def wait_logs(c, job, n, pattern, timeout_s):
    """{launch index: the first match of pattern} for all n launches."""
    deadline = time.monotonic() + timeout_s
    got = {}
    while time.monotonic() < deadline and len(got) < n:
        for i in range(n):
            if i not in got:
                m = re.search(pattern, log_text(c, job, i), re.M)
                if m:
                    got[i] = m
        st = c.get("/api/v1/jobs/%d" % job)["state"]
        if st in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.05)
    assert len(got) == n, "job %d: %r in %d of %d logs after %d s" % (
        job, pattern, len(got), n, timeout_s)
    return got


def wait_terminal(c, job, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        j = c.get("/api/v1/jobs/%d" % job)
        if j["state"] in ("succeeded", "failed", "cancelled"):
            return j
        time.sleep(0.2)
    raise AssertionError("job %d not finished in %d s: %s" % (job, timeout_s, j))


def elastic_ddp(c, policy):
    ref = rmtest.run_group("elastic-ddp-single", 1, lambda r: [rmtest.PY, PROG, "--single"],
                           torchrun=False)
    ref = rmtest.results(ref[0])[0]["params"]
    env = {k: os.environ[k] for k in ("PYTHONPATH", "OMP_NUM_THREADS") if os.environ.get(k)}
    body = {"name": "elastic-ddp", "world_size": 3, "workload": "command",
            "launcher": "local", "env": env, "on_failure": policy,
            "command": [rmtest.PY, PROG, "--steps", "120", "--step-sleep-ms", "30",
                        "--commit-every", "10"]}
    if policy == "replace":
        body["max_restarts"] = 1  # one replacement
    st, _, job = c.request("POST", "/api/v1/jobs", body, token=c.token)
    assert st == 201, (st, job)
    jid = job["id"]
    banners = wait_logs(c, jid, 3, r"elastic_ddp_prog: pid (\d+) generation \d+ rank (\d+) of 3",
                        90)
    pid_of = {i: int(m.group(1)) for i, m in banners.items()}
    rank_of = {i: int(m.group(2)) for i, m in banners.items()}
    wait_logs(c, jid, 3, r"^elastic_ddp_prog: step 40$", 120)
    victim = [i for i in range(3) if rank_of[i] == 0][0]
    os.kill(pid_of[victim], signal.SIGKILL)
    j = wait_terminal(c, jid, 180)
    logs = {i: log_text(c, jid, i) for i in range(3)}
    assert j["state"] == "succeeded", (j, {i: t[-1500:] for i, t in logs.items()})
    survivors = [i for i in range(3) if i != victim]
    world = 2 if policy == "shrink" else 3
    res = {}
    for i in survivors:
        r = rmtest.results(logs[i])
        assert len(r) == 1, ("launch %d" % i, r, logs[i][-2000:])
        res[i] = r[0]
        assert r[0]["pid"] == pid_of[i], ("survivor restarted", i, r[0]["pid"], pid_of[i])
        assert r[0]["worlds"] == [3, world], r[0]["worlds"]
        assert r[0]["world"] == world and r[0]["rm_world"] == world, r[0]
        assert r[0]["ddp_group_is_default"] is True, r[0]
        assert r[0]["resets"] >= 1 and r[0]["generation"] >= 2, r[0]
        b = re.findall(r"elastic_ddp_prog: pid (\d+) generation (\d+) rank (\d+) of (\d+)",
                       logs[i])
        assert len(b) >= 2 and all(int(x[0]) == pid_of[i] for x in b), b
    assert not rmtest.results(logs[victim]), logs[victim][-1500:]
    if policy == "replace":  # the newcomer: launch index 3, a new process
        more = sorted(glob.glob(os.path.join(c.logs, "job-%d" % jid, "worker-*.log")))
        assert len(more) == 4, more
        text = log_text(c, jid, 3)
        r = rmtest.results(text)
        assert len(r) == 1, ("newcomer", text[-2000:])
        assert r[0]["pid"] not in pid_of.values() and r[0]["worlds"] == [3], r[0]
        assert r[0]["world"] == 3 and r[0]["ddp_group_is_default"] is True, r[0]
        res[3] = r[0]
    assert sorted(r["rank"] for r in res.values()) == list(range(world)), res
    assert len({r["param_sha256"] for r in res.values()}) == 1, res
    got = res[survivors[0]]["params"]
    scale = max(abs(x) for x in ref)
    dev = max(abs(a - b) for a, b in zip(got, ref)) / scale
    assert len(got) == len(ref) and dev <= 1e-9, ("parameters differ from 1 process", dev)
    lost = [e for e in c.events(jid) if e.get("kind") == "worker_lost"]
    assert lost, [e.get("kind") for e in c.events(jid)]
    print("elastic DDP, rank 0 of 3 SIGKILLed at step >= 40 under %s: survivors kept "
          "PIDs %s, worlds [3, %d], parameters bitwise equal on %d ranks, %.2g (relative) "
          "from the 1-process run" % (policy, sorted(pid_of[i] for i in survivors), world,
                                      len(res), dev))


def main():
    rmtest.require(torch=True)
    rm_bin, worker = arg("--coordinator"), arg("--worker")
    what = sys.argv[1]

    def test():
        c = rmtest.Coordinator(rm_bin, worker)
        try:
            if what in ("shrink", "replace"):
                elastic_ddp(c, what)
            else:
                raise AssertionError("unknown case %r" % what)
        finally:
            c.stop()
    rmtest.main(test)


if __name__ == "__main__":
    main()
