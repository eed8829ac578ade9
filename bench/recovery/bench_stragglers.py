"""bench_stragglers.py - benchmark (not a test) of the straggler policies
(straggler_policy none, backup, deadline, coded, stale, auto) against
simulated slow workers, on 6 workers of one local coordinator.

Step time. Every number below is the job's wall time per step from the end
of its first step to the end of its last fully reported step, so neither
the job's start (workers joining, data-plane connections, dataset loading,
the first step's setup) nor its end (test evaluation, Leave) counts:
  start  the moment the job's step (GetJob: the minimum over its members
         of their last reported step) first reads >= 1, polled every ~2 ms
         from submission (error ~1-2 ms);
  end    the coordinator's own clock when it stored the last 16-step
         window of the step reports (step_summaries.time_ms: written on
         receipt of the 16th report of a window), the latest over the
         ranks, for the last step that closes a window (steps 48 of 48,
         192 of 200, 80 of 80);
  ms/step = (end - start) / (end_step - 1).
Ratios are that time divided by the same workload + policy with no
straggler (a baseline run of each workload + policy: backup / coded pay
their own overheads in the baseline too).

1. Matrix: workload synthetic (bytes=64K,compute_ms=20) and train (digits
   MLP, batch=64, sim_compute_ms=20) x policy x n slow ranks x slow factor
   F, 6 workers, 48 steps (47 timed). Slow ranks, the same for every
   policy: n=1 {1}, n=2 {1,3}, n=3 {1,3,5}. Parameters: backup
   backup_workers b = n; coded s = 1 throughout (backup_workers=1; the
   groups of s+1=2 are {0,1},{2,3},{4,5}, so each keeps a fast rank for
   every n); deadline and auto backup_workers 0 (deadline's default slack:
   median arrival + max(1 ms, 10 % of the median compute),
   coordinator/core/step_gate.c); stale max_staleness 2.
2. Stale accuracy: train, 200 steps, rank 1 F=4: test accuracy (the
   workers' result "accuracy" and "test_loss", rank 0) and ms/step ratio (to none without
   straggler) of none without straggler, none with it, stale k=2 with it;
   3 repeats, medians.
3. auto on a transient straggler: synthetic, 80 steps, rank 1 F=4 during
   steps [10, 40): ratio to the same policy without straggler, for auto
   and none, the mean ms/step of each 16-step window, and auto's
   "straggler_auto" events (on / off, with their steps).
4. A worker that stalls: synthetic, 64 steps, rank 1 stops 3 s once at
   step 20, under none, backup (b=1), deadline, stale (k=2) and auto: the
   ms/step ratio to the same policy without the stall, the wall time the
   stall cost the job, and the events it raised.

Run (defaults for the three paths: the build/ and proto/ of this repo):
  /usr/bin/python3 bench/recovery/bench_stragglers.py \\
      [--coordinator build/coordinator/ringmaster \\
       --worker build/worker/agent/ringmaster-worker --proto proto] \\
      [--quick] [--repeats N] [--sections 1,2,3,4] [--out FILE]
  --quick     matrix with F=4 and n in {1, 2} only, section 2 with one
              repeat (about 2-3 minutes)
  --repeats   runs of every matrix cell (default 1) and baseline (at least
              3: one noisy baseline would skew a whole row group); the
              median ms/step is used
  --out FILE  also write the tables (markdown) to FILE
Full run on a 2-core machine: about 7 minutes (409 s, 157 jobs, measured;
the "total" line at the end says); --quick about 100 s. Single train runs
on 2 cores are noisy (several %, sometimes 20-40 % for one run): use
--repeats 3 before reading much into one train cell.
"""
import argparse
import json
import os
import re
import sqlite3
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "recovery"))

_p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
_p.add_argument("--quick", action="store_true")
_p.add_argument("--repeats", type=int, default=1)
_p.add_argument("--sections", default="1,2,3,4")
_p.add_argument("--out", default=None)
OPT, _rest = _p.parse_known_args()
sys.argv = sys.argv[:1] + _rest
for _flag, _path in (("--coordinator", "build/coordinator/ringmaster"),
                     ("--worker", "build/worker/agent/ringmaster-worker"),
                     ("--proto", "proto")):
    if _flag not in sys.argv:
        sys.argv += [_flag, os.path.join(ROOT, _path)]
import rc  # noqa: E402

WORLD = 6
COMPUTE_MS = 20
STEPS = 48
SYN = "bytes=64K,compute_ms=%d" % COMPUTE_MS
SLOW = {1: "1", 2: "1:3", 3: "1:3:5"}
POLICIES = ("none", "backup", "deadline", "coded", "stale", "auto")
WORKLOADS = ("synthetic", "train")
NEXT = [0]
OUT = []
BASE_REPEATS = 3


class RunFailed(Exception):
    pass


def emit(line=""):
    print(line, flush=True)
    OUT.append(line)


def opts(env, workload, extra=""):
    if workload == "synthetic":
        return SYN + ("," + extra if extra else "")
    return rc.train_opts(env, "sim_compute_ms=%d" % COMPUTE_MS + ("," + extra if extra else ""))


def slow_opts(ranks, factor, window=None):
    if not ranks:
        return ""
    o = "slow_rank=%s,slow_factor=%g" % (ranks, factor)
    if window:
        o += ",slow_from=%d,slow_until=%d" % window
    return o


def policy_spec(policy, n):
    if policy == "backup":
        return dict(straggler_policy="backup", backup_workers=n)
    if policy == "coded":
        return dict(straggler_policy="coded", backup_workers=1)
    if policy == "stale":
        return dict(straggler_policy="stale", max_staleness=2, backup_workers=0)
    return dict(straggler_policy=policy, backup_workers=0)


def first_step_ms(env, job, timeout):
    """Wall clock (ms) at which the job's step first read >= 1."""
    deadline = time.time() + timeout
    prev_mid = None
    while time.time() < deadline:
        t0 = time.time()
        try:
            j = env.get(job.id)
        except env.grpc.RpcError:
            time.sleep(0.01)
            continue
        t1 = time.time()
        mid = (t0 + t1) / 2
        if j.state in (env.m.JOB_STATE_SUCCEEDED, env.m.JOB_STATE_FAILED):
            raise RunFailed("job %d ended before its first step was seen: %s %s"
                            % (job.id, j.state, j.reason))
        if j.state == env.m.JOB_STATE_RUNNING and j.step >= 1:
            return 1000 * ((prev_mid + mid) / 2 if prev_mid else mid)
        prev_mid = mid
        time.sleep(0.002)
    raise RunFailed("job %d: no first step in %d s" % (job.id, timeout))


def windows(env, job):
    """The job's 16-step windows closed by a report: {last_step: (max
    time_ms over ranks, rank 0's mean step ms)}."""
    db = sqlite3.connect(env.db, timeout=10)
    try:
        rows = db.execute("SELECT rank, last_step, count, time_ms, mean_step_ms FROM "
                          "step_summaries WHERE job_id = ? AND generation = 1",
                          (job.id,)).fetchall()
    finally:
        db.close()
    out = {}
    for rank, last, count, t, mean in rows:
        if count != 16:
            continue
        tm, m0 = out.get(last, (0, None))
        out[last] = (max(tm, t), mean if rank == 0 else m0)
    return out


def result(env, i):
    m = re.findall(r"ringmaster-worker: result (\{.*\})", env.worker_log(i))
    return json.loads(m[-1]) if m else None


def run_job(env, workload, extra, steps, spec, timeout=240):
    """One job of WORLD workers; returns dict(ms=ms/step, end_step, results
    by rank, job, t1, win)."""
    job = env.submit(name="bs-%s-%s" % (workload, spec.get("straggler_policy")),
                     world_size=WORLD, steps=steps, heartbeat_timeout_ms=10000,
                     workload=workload, workload_options=opts(env, workload, extra), **spec)
    first = NEXT[0]
    NEXT[0] += WORLD
    ws = rc.start(env, job, WORLD, first=first)
    try:
        t1 = first_step_ms(env, job, 60)
        try:
            j = rc.wait_final(env, job, timeout)
        except AssertionError as e:
            raise RunFailed(str(e)[:300])
        if j.state != env.m.JOB_STATE_SUCCEEDED:
            raise RunFailed("job %d %s: %s" % (job.id, j.state, j.reason))
        for w in ws:
            try:
                w.wait(timeout=30)
            except Exception:  # noqa: BLE001 - killed below
                pass
    finally:
        for w in ws:
            if w.poll() is None:
                w.kill()
                w.wait()
    win = windows(env, job)
    if not win:
        raise RunFailed("job %d: no step windows" % job.id)
    end_step = max(win)
    res = {}
    for i in range(WORLD):
        r = result(env, first + i)
        if r:
            res[r["straggler"]["rank"]] = r
    return dict(ms=(win[end_step][0] - t1) / (end_step - 1), end_step=end_step, results=res,
                job=job, t1=t1, win=win)


def med_run(env, workload, extra, steps, spec, repeats):
    """Median ms/step over repeats and the last run's record; None if every
    run failed."""
    ms, last = [], None
    for _ in range(repeats):
        try:
            r = run_job(env, workload, extra, steps, spec)
        except RunFailed as e:
            emit("<!-- run failed: %s %s %s: %s -->" % (workload, spec, extra, e))
            continue
        ms.append(r["ms"])
        last = r
    if not ms:
        return None, None
    return statistics.median(ms), last


def contrib(rec):
    """'min..max contributors, dropped, folded' of the run's ranks."""
    if not rec or not rec["results"]:
        return "-"
    st = [r["straggler"] for r in rec["results"].values()]
    lo = min(s["min_contributors"] for s in st)
    hi = max(s["max_contributors"] for s in st)
    dropped = sum(s["my_dropped_steps"] for s in st)
    folded = max(s["folded"] for s in st)
    return "%d..%d, drop %d, fold %d" % (lo, hi, dropped, folded)


def fmt_ratio(a, b):
    return "%.2f" % (a / b) if a is not None and b else "fail"


def section_matrix(env):
    global BASE_REPEATS
    BASE_REPEATS = max(3, OPT.repeats)
    fs = (4,) if OPT.quick else (2, 4, 8)
    ns = (1, 2) if OPT.quick else (1, 2, 3)
    emit("## 1. ms/step with n slow workers (factor F) / same policy without straggler")
    emit("")
    emit("world %d, %d steps (%d timed), compute %d ms/step; slow ranks n=1 {1}, n=2 {1,3}, "
         "n=3 {1,3,5}; backup b=n, coded s=1 (groups {0,1},{2,3},{4,5}), deadline/auto b=0, "
         "stale k=2; %d run(s) per cell, %d per baseline, medians"
         % (WORLD, STEPS, STEPS - 1, COMPUTE_MS, OPT.repeats, BASE_REPEATS))
    emit("")
    emit("| workload | policy | n | " + " | ".join("F=%d" % f for f in fs) +
         " | base ms/step | F=4 contributors min..max, dropped (rank-steps), folded |")
    emit("|---|---|---|" + "---|" * len(fs) + "---|---|")
    for wl in WORKLOADS:
        for pol in POLICIES:
            base, _ = med_run(env, wl, "", STEPS, policy_spec(pol, 1), BASE_REPEATS)
            for n in ns:
                cells, note = [], "-"
                for f in fs:
                    ms, rec = med_run(env, wl, slow_opts(SLOW[n], f), STEPS,
                                      policy_spec(pol, n), OPT.repeats)
                    cells.append(fmt_ratio(ms, base))
                    if f == 4:
                        note = contrib(rec)
                emit("| %s | %s | %d | %s | %s | %s |" % (
                    wl, pol, n, " | ".join(cells), "%.2f" % base if base else "fail", note))
    emit("")


def section_stale(env):
    reps = 1 if OPT.quick else 3
    steps = 200
    emit("## 2. stale k=2 vs none: train, %d steps, world %d, rank 1 slow F=4, "
         "%d repeat(s), medians" % (steps, WORLD, reps))
    emit("")
    emit("| run | test accuracy | test loss | ms/step | ratio to none without straggler | "
         "folded (rank 0) | accuracies |")
    emit("|---|---|---|---|---|---|---|")
    cfgs = (("none, no straggler", "", policy_spec("none", 0)),
            ("none, rank 1 F=4", slow_opts("1", 4), policy_spec("none", 0)),
            ("stale k=2, rank 1 F=4", slow_opts("1", 4), policy_spec("stale", 0)))
    base = None
    for label, extra, spec in cfgs:
        ms, acc, loss, fold = [], [], [], []
        for _ in range(reps):
            try:
                r = run_job(env, "train", extra, steps, spec)
            except RunFailed as e:
                emit("<!-- run failed: %s: %s -->" % (label, e))
                continue
            ms.append(r["ms"])
            r0 = r["results"].get(0)
            if r0:
                acc.append(r0["accuracy"])
                loss.append(r0["test_loss"])
                fold.append(r0["straggler"]["folded"])
        m = statistics.median(ms) if ms else None
        if base is None:
            base = m
        emit("| %s | %s | %s | %s | %s | %s | %s |" % (
            label, "%.4f" % statistics.median(acc) if acc else "fail",
            "%.4f" % statistics.median(loss) if loss else "fail",
            "%.2f" % m if m else "fail", fmt_ratio(m, base),
            " ".join("%d" % f for f in fold), " ".join("%.4f" % a for a in acc)))
    emit("")


def section_auto(env):
    steps = 80
    emit("## 3. transient straggler: synthetic, %d steps, rank 1 slow F=4 during steps "
         "[10, 40)" % steps)
    emit("")
    emit("| policy | ms/step transient | ms/step no straggler | ratio | "
         "ms/step per 16-step window (rank 0, worker-measured) |")
    emit("|---|---|---|---|---|")
    evs = []
    for pol in ("auto", "none"):
        try:
            b = run_job(env, "synthetic", "", steps, policy_spec(pol, 0))
            t = run_job(env, "synthetic", slow_opts("1", 4, (10, 40)), steps,
                        policy_spec(pol, 0))
        except RunFailed as e:
            emit("| %s | fail: %s | | | |" % (pol, e))
            continue
        w = " / ".join("%d-%d: %.1f" % (k - 15, k, t["win"][k][1])
                       for k in sorted(t["win"]) if t["win"][k][1] is not None)
        emit("| %s | %.2f | %.2f | %.2f | %s |" % (pol, t["ms"], b["ms"], t["ms"] / b["ms"], w))
        if pol == "auto":
            evs = [e for e in rc.events(env, t["job"]) if e.kind == "straggler_auto"]
            t1 = t["t1"]
    emit("")
    emit("auto's straggler_auto events (ms after the end of step 1):")
    emit("")
    for e in evs:
        emit("- +%d ms: %s" % (e.time_ms - t1, e.message))
    if not evs:
        emit("- (none)")
    emit("")


def section_stall(env):
    """A worker that stops for seconds: rank 1 stalls STALL_MS once, at step
    20 of 64 (synthetic), under each policy: the job's ms/step against the
    same policy without the stall, how long the stall held the others (the
    window that holds it, minus a normal one), and every event the run
    raised beyond joins, leaves and state changes."""
    steps, stall = 64, 3000
    emit("## 4. a worker that stalls: synthetic, %d steps, rank 1 stops %d ms once at "
         "step 20" % (steps, stall))
    emit("")
    emit("| policy | ms/step with stall | without | ratio | extra wall time ms | events |")
    emit("|---|---|---|---|---|---|")
    plain = ("job_submitted", "worker_joined", "worker_left", "generation", "job_state",
             "job_result")
    for pol in ("none", "backup", "deadline", "stale", "auto"):
        spec = policy_spec(pol, 1)
        try:
            b = run_job(env, "synthetic", "", steps, spec)
            t = run_job(env, "synthetic", "stall_rank=1,stall_step=20,stall_ms=%d" % stall,
                        steps, spec)
        except RunFailed as e:
            emit("| %s | fail: %s | | | | |" % (pol, e))
            continue
        extra = (t["ms"] - b["ms"]) * (t["end_step"] - 1)
        evs = [e for e in rc.events(env, t["job"]) if e.kind not in plain]
        words = "; ".join("%s: %s" % (e.kind, e.message) for e in evs) or "-"
        emit("| %s | %.2f | %.2f | %.2f | %.0f | %s |" % (pol, t["ms"], b["ms"], t["ms"] / b["ms"],
                                                          extra, words))
    emit("")


def bench(env):
    t0 = time.time()
    env.start_coordinator()
    secs = set(OPT.sections.split(","))
    emit("# straggler policies benchmark%s" % (" (--quick)" if OPT.quick else ""))
    emit("")
    if "1" in secs:
        section_matrix(env)
        emit("<!-- section 1: %.0f s -->" % (time.time() - t0))
    if "2" in secs:
        t2 = time.time()
        section_stale(env)
        emit("<!-- section 2: %.0f s -->" % (time.time() - t2))
    if "3" in secs:
        t3 = time.time()
        section_auto(env)
        emit("<!-- section 3: %.0f s -->" % (time.time() - t3))
    if "4" in secs:
        t4 = time.time()
        section_stall(env)
        emit("<!-- section 4: %.0f s -->" % (time.time() - t4))
    emit("total: %.0f s (%d jobs)" % (time.time() - t0, NEXT[0] // WORLD))
    if OPT.out:
        with open(OPT.out, "w") as f:
            f.write("\n".join(OUT) + "\n")


rc.main(bench)
