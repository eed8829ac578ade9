"""python.c10d.*: the "ringmaster" torch.distributed backend's API, N real
processes with real torch (torchrun-style environment, no coordinator); the
per-rank work is tests/python/c10d_worker.py.

  test_c10d.py MODE N

  timeout        init_process_group(timeout=5 s); after one good all-reduce
                 rank 1 sleeps 13 s: every other rank's all_reduce raises
                 within 10 s (torch's timeout, not libringmaster's 15-30 s),
                 naming the call and its number in the group ("all_reduce
                 #2"), a status, and on at least one rank the stalled peer
  timeout_group  the same through new_group(timeout=5 s) while the default
                 group keeps torch's default (30 min)
  timeout_set    the same with the default group's communicator, built
                 with torch's 30 min, set to 5 s afterwards
                 (Communicator.set_timeout, rm_comm_set_timeout: the path
                 of a ringmaster job's session communicator)
  timeout_opt    the same with the default group at torch's 30 min and the
                 call's own option (AllreduceOptions.timeout = 5 s)
  reinit         init / all-reduce / destroy, three times
  reinit_sub     the same with new_group([0, 1]) in between (rank 2 of 3 is
                 no member)
  dtypes         int8 uint8 bool complex64 complex128 x every op torch
                 defines for them x all_reduce, reduce, reduce_scatter, and
                 broadcast, all_gather, all_to_all_single, gather, scatter,
                 against references computed in Python numbers
  alltoall       all_to_all_single and all_to_all with uneven splits (some
                 empty); disagreeing splits, splits wrong on one rank only,
                 rows of another size on one rank: each raises on every
                 rank, and the group goes on
  mbarrier       ringmaster.torch.monitored_barrier names the late rank (the
                 first; all of them with wait_all_ranks)
  p2p            point-to-point: send, recv, isend, irecv,
                 batch_isend_irecv, any source, tags, sub-groups, errors
                 and timeouts (p2p_worker.py's doc)
  pipeline       a 3-stage pipeline over isend/irecv trains to the
                 one-process model's parameters (p2p_worker.py, 3 ranks)
  async          async_op=True: several calls of several kinds in flight
                 at once complete in call order with the references' values
                 (wait, get_future().then, is_completed, exception); an
                 argument error still raises at the call; a synchronous
                 call waits for the ones queued before it; wait(timeout)
                 raises while the other ranks have not called yet (they
                 call after it did: no timing) and the call completes
                 after; destroy stops the group's thread
  async_fail     rank 1 is SIGKILLed; the other ranks' four queued
                 all-reduces all fail: wait() raises the ringmaster error
                 naming its call (allreduce #3 first), exception() is it,
                 ringmaster.last_exception is set; none hangs
  overlap        DDP's first bucket all-reduce starts on the group's thread
                 before backward ends (the end waits for it: no timing),
                 with the right gradients; then again with
                 RINGMASTER_TORCH_SYNC=1, where the same check must say
                 "no overlap" (so the check can fail)

  test_c10d.py job_mbarrier 3 --coordinator BIN --worker BIN
                 a 3-worker command job through a real coordinator: the
                 default group is the session's communicator, and
                 monitored_barrier is the coordinator's named barrier; rank
                 2 arrives 3 s past a 3 s deadline: every rank raises naming
                 rank 2 (the late one is answered with the broken outcome),
                 the next barrier and all-reduce work, the job succeeds and
                 has a barrier_broken event
  test_c10d.py job_subgroup 3 --coordinator BIN --worker BIN
                 a sub-group in a job across a SIGKILL under shrink: rank
                 2 dies while rank 0 waits for rank 1 in new_group([0, 1])
                 (timeout 60 s) and rank 1 waits for rank 2 in the default
                 group: both raise within seconds (the session aborts the
                 sub-group's communicator), rank 0's sub-group then raises
                 RM_ERR_RECONFIGURED at once, and after reform the two
                 survivors make a new default group and all-reduce on it
  test_c10d.py job_subgroup_closed 3 --coordinator BIN --worker BIN
                 the same with the order job_subgroup leaves to chance
                 made certain: rank 1 closes the sub-group while rank 0
                 waits in it, then dies; rank 0 sees the closed links
                 (PEER_LOST) first and raises RM_ERR_RECONFIGURED once the
                 coordinator decides, its words keeping the PEER_LOST
  test_c10d.py job_reinit 3 --coordinator BIN --worker BIN
                 reinit_sub's rounds in a command job: the default group
                 is the session's communicator each round (not closed by
                 destroy), the sub-group's is new each round
"""
import glob
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rmtest  # noqa: E402

WORKER = os.path.join(rmtest.HERE, "c10d_worker.py")
P2P_WORKER = os.path.join(rmtest.HERE, "p2p_worker.py")  # the point-to-point modes
P2P_MODES = ("p2p", "pipeline")
STATUSES = ("RM_ERR_TIMEOUT", "RM_ERR_ABORTED", "RM_ERR_PEER_LOST")


def run(mode, n, timeout_s=200, extra_env=None, killed=()):
    w = P2P_WORKER if mode in P2P_MODES else WORKER
    outs = rmtest.run_group("c10d-" + mode, n, lambda r: [rmtest.PY, w, mode],
                            timeout_s=timeout_s, extra_env=extra_env,
                            codes_of={r: -9 for r in killed})
    res = [rmtest.results(o) for o in outs]
    for r, x in enumerate(res):
        if r in killed:
            continue
        assert len(x) == 1, "rank %d printed %d results:\n%s" % (r, len(x), outs[r][-3000:])
    return [x[0] if x else None for x in res], outs


def check_timeout(mode, n):
    res, outs = run(mode, n)
    named = False
    for r, x in enumerate(res):
        if r == 1:
            continue
        assert x["raised"], "rank %d's all_reduce did not fail: %s" % (r, x)
        m = x["message"]
        assert x["elapsed"] < 10.0, "rank %d raised after %.1f s (timeout 5 s): %s" % (
            r, x["elapsed"], m)
        assert "allreduce #2 of the" in m and x["sequence"] == 2, m
        assert x["found"], "rank %d: ringmaster.last_exception is not the raised one" % r
        assert any(s in m for s in STATUSES), m
        if "RM_ERR_TIMEOUT" in m and "waiting for peer rank 1" in m:
            named = True
        print("rank %d after %.1f s: %s" % (r, x["elapsed"], m[:300]))
    assert named, "no rank named the stalled rank 1 in a timeout: %s" % res


def check_mbarrier(n):
    res, _ = run("mbarrier", n)
    late = res[0]["late"]
    for x in res:
        first, every = x["errors"]["False"], x["errors"]["True"]
        assert first and every, "a monitored_barrier with late ranks passed: %s" % x
        assert "rank %d did not reach" % late[0] in first, first
        if len(late) > 1:
            assert "ranks %s did not reach" % ", ".join(map(str, late)) in every, every
        else:
            assert "rank %d did not reach" % late[0] in every, every
    print("rank 0: %s | %s" % (res[0]["errors"]["False"], res[0]["errors"]["True"]))


def check_async_fail(n):
    res, _ = run("async_fail", n, killed=(1,))
    for r, x in enumerate(res):
        if r == 1:
            continue
        ws = x["works"]
        assert len(ws) == 4 and all(w["raised"] for w in ws), "rank %d: %s" % (r, ws)
        # barrier #2 went before: the first queued all-reduce is call #3
        assert "allreduce #3 of the default group" in ws[0]["message"], ws[0]
        assert ws[0]["sequence"] == 3, ws[0]
        for k, w in enumerate(ws):
            assert w["exception_set"] and w["completed"], (k, w)
            assert "allreduce #%d" % (3 + k) in w["message"], (k, w)
            assert any(s in w["message"] for s in STATUSES), (k, w)
        assert "allreduce #" in x["last"], x["last"]
        print("rank %d: %s" % (r, ws[0]["message"][:300]))


def check_overlap(n):
    res, _ = run("overlap", n)
    for r, x in enumerate(res):
        assert x["ok"] and x["buckets"] > 1, x
        assert x["overlap"], "rank %d: no overlap: %s" % (r, x)
    print("async: rank 0's events %s" % res[0]["events"])
    # the check can fail: the synchronous path runs the all-reduce inside
    # the bucket's hook, on backward's thread
    res, _ = run("overlap", n, extra_env={"RINGMASTER_TORCH_SYNC": "1"})
    for r, x in enumerate(res):
        assert x["ok"] and not x["overlap"], "rank %d: overlap with the sync path: %s" % (r, x)
    print("RINGMASTER_TORCH_SYNC=1: rank 0's events %s" % res[0]["events"])


def run_job(mode, n, lost=0, **spec):
    """mode of c10d_worker.py as an n-worker command job through a real
    coordinator (spec: more of the job's fields; lost: workers that die
    and print no result); returns (coordinator, job, RESULT dicts); the
    caller stops the coordinator."""
    rm_bin = sys.argv[sys.argv.index("--coordinator") + 1]
    worker = sys.argv[sys.argv.index("--worker") + 1]
    c = rmtest.Coordinator(rm_bin, worker)
    env = {k: os.environ[k] for k in ("PYTHONPATH", "OMP_NUM_THREADS") if os.environ.get(k)}
    body = {"name": "c10d-" + mode, "world_size": n, "workload": "command",
            "launcher": "local", "env": env, "command": [rmtest.PY, WORKER, mode]}
    body.update(spec)
    st, _, job = c.request("POST", "/api/v1/jobs", body, token=c.token)
    assert st == 201, (st, job)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        j = c.get("/api/v1/jobs/%d" % job["id"])
        if j["state"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.2)
    logs = sorted(glob.glob(os.path.join(c.logs, "job-%d" % job["id"], "worker-*.log")))
    texts = []
    for f in logs:
        with open(f, errors="replace") as fh:
            texts.append(fh.read())
    assert j["state"] == "succeeded", (j, [t[-2000:] for t in texts])
    res = [x for t in texts for x in rmtest.results(t)]
    assert len(res) == n - lost, (res, [t[-3000:] for t in texts])
    return c, j, res


def job_mbarrier(n):
    c, j, res = run_job("job_mbarrier", n)
    try:
        late = res[0]["late"]
        for x in res:
            e = x["error"]
            assert e and "monitored_barrier #2" in e and "RM_ERR_TIMEOUT" in e, x
            assert ("rank %d" % late) in e.split("failed:", 1)[1], x
        kinds = [ev.get("kind") for ev in c.events(j["id"])]
        assert "barrier_broken" in kinds, kinds
        print("rank %d: %s" % (res[0]["rank"], res[0]["error"][:400]))
    finally:
        c.stop()


def job_subgroup(n):
    c, j, res = run_job("job_subgroup", n, on_failure="shrink", lost=1)
    try:
        for x in res:
            assert x.get("ok") and x["world"] == n - 1, x
            # rank 0 waited on rank 1 in the sub-group (timeout 60 s): the
            # session's abort ended it, not the timeout
            assert x["elapsed"] < 30, x
            if x["rank"] == 0:
                assert "RM_ERR_RECONFIGURED" in x["error"], x
                assert "RM_ERR_RECONFIGURED" in x["again"], x
        print("job_subgroup: %s" % [(x["rank"], round(x["elapsed"], 2), x["error"][:160])
                                    for x in res])
    finally:
        c.stop()


def job_subgroup_closed(n):
    c, j, res = run_job("job_subgroup_closed", n, on_failure="shrink", lost=1)
    try:
        for x in res:
            assert x.get("ok") and x["world"] == n - 1, x
            if x["rank"] == 0:
                # the closed links were seen first; the coordinator's verdict
                # replaced them, and the words keep them
                assert "RM_ERR_RECONFIGURED" in x["error"], x
                assert "failed first: RM_ERR_PEER_LOST" in x["error"], x
                assert "RM_ERR_RECONFIGURED" in x["again"], x
                assert x["elapsed"] < 30, x
        print("job_subgroup_closed: %s" % [(x["rank"], round(x["elapsed"], 2), x["error"][:400])
                                           for x in res])
    finally:
        c.stop()


def job_reinit(n):
    c, j, res = run_job("job_reinit", n)
    try:
        assert all(x.get("ok") for x in res), res
        print("job_reinit: %s" % res[0])
    finally:
        c.stop()


def main():
    rmtest.require(torch=True)
    mode, n = sys.argv[1], int(sys.argv[2])
    if mode == "job_mbarrier":
        job_mbarrier(n)
    elif mode == "job_reinit":
        job_reinit(n)
    elif mode == "job_subgroup":
        job_subgroup(n)
    elif mode == "job_subgroup_closed":
        job_subgroup_closed(n)
    elif mode.startswith("timeout"):
        check_timeout(mode, n)
    elif mode == "mbarrier":
        check_mbarrier(n)
    elif mode == "async_fail":
        check_async_fail(n)
    elif mode == "overlap":
        check_overlap(n)
    else:
        res, _ = run(mode, n)
        assert all(x.get("ok") for x in res), res
        print("%s N=%d: %s" % (mode, n, res[0]))
    print("PASS")


if __name__ == "__main__":
    main()
