"""fault_campaign.py - benchmark (not a test): random faults against
running training jobs, one table.

Every trial is one `train` job on the digits MLP (4 workers, 300 steps, 2 ms
of simulated compute per step, verify=5: the ranks compare their parameter
checksums every 5 steps and the job fails if they differ; checkpoint_every
10), on one coordinator per kind of trial (SQLite file, launcher none):

  fail      SIGKILL one random rank at a uniformly random step in [5, 250]:
            recovered = the job FAILED with a reason naming that rank and
            every survivor exited non-zero
  shrink    the same kill: recovered = SUCCEEDED at generation 2 (4 -> 3),
            survivors exit 0, test accuracy >= 0.85
  replace   the same kill, with one standby worker waiting (world 4 +
            1, max_restarts 1): recovered = SUCCEEDED at generation 2 with 4
            ranks, accuracy >= 0.85
  sigstop   SIGSTOP one random rank (shrink, heartbeat timeout 1 s):
            recovered as shrink; the stopped worker is SIGKILLed afterwards
  linkcut   cut the data-plane link between two ring neighbours of
            generation 1 (ranks r and r+1 mod 4; see LINK CUTS below) at a
            random step, for the rest of the job (shrink, heartbeat timeout
            2 s, data timeout 2 s): recovered = SUCCEEDED at a later
            generation (>= 2) whose members are the workers whose logs
            show that generation; wrong = one of them exited non-zero or
            is below accuracy 0.85 (verify=5 holds their parameters
            bitwise equal). A line under the table counts the final
            world sizes and the trials that dropped a worker that was not
            an end of the cut link (shrink promises to drop the lost
            member, and a cut blames no one for certain)
  coord     SIGKILL the coordinator at a random step (shrink, 1500 steps so
            the job outlives the outage; the workers train on meanwhile) and restart
            it on the same file and port after 0.2-2 s: recovered =
            SUCCEEDED, every event seen before the kill still there in the
            same order

  hang          the job reached no end state within 120 s
  wrong result  SUCCEEDED but a rank's accuracy is missing or < 0.85, or a
                survivor exited non-zero (a checksum mismatch fails the job
                and counts as not recovered)
  detect        kill -> the worker_lost event (coord: restart -> the
                coordinator_restarted event)
  recover       kill -> the next generation's "generation" event (coord:
                restart -> generation 2 formed)
  resume        kill -> the first step a survivor completed at the next
                generation (its "recovered ... resume_ms=" log line,
                worker/session/session_step.c; the earliest survivor's):
                what the job loses to the failure. fail, shrink, replace
                and sigstop trials only
The transport is the workers' default (shared memory between workers on
one host); RINGMASTER_TRANSPORTS=tcp in the environment makes it TCP.

LINK CUTS (as tests/recovery/test_link_cut.py: needs root and `ip netns`;
the trial is reported as skipped otherwise). Topology, built once for the
linkcut trials and removed at the end: a bridge rmfN-br with 10.212.S.1/24
in the root namespace (the coordinator listens there), and per worker slot
i a namespace rmfN-wI with eth0 10.212.S.(i+2) on a veth to the bridge; a
worker runs under `ip netns exec` with its data port on that address. The
cut of the link between slots a and b is a blackhole route to the other's
address in each of the two namespaces (`ip -n A route add blackhole B/32`
and back): no packet passes between the two in either direction, no FIN or
RST is sent, and both keep their links to the coordinator and to the other
two workers, so both keep heartbeating. A ring neighbour pair is cut
because every all-reduce algorithm at 4 ranks (ring, halving-doubling,
butterfly) and the calibration exchange use the pair (r, r+1) for some r
in {0, 2} -- and the trial takes r uniformly from {0, 1, 2, 3}, so it also
cuts (1, 2) and (3, 0), which the ring uses. The routes are removed after
the trial. Detect = cut -> the first worker_lost / worker_failed event (a
data-plane timeout names a peer that still heartbeats, so the coordinator
only records a failure_report; the reporter's session gives the decision
8 heartbeat intervals, then leaves failed); recover = cut -> generation 2.

  /usr/bin/python3 bench/recovery/fault_campaign.py --coordinator build/coordinator/ringmaster \
      --worker build/worker/agent/ringmaster-worker --proto proto [--trials N] [--coord-trials M]
      [--kinds fail,shrink,replace,sigstop,linkcut,coord]
"""
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "recovery"))
from benchargs import take_flag  # noqa: E402


TRIALS = int(take_flag("--trials", "100"))
COORD_TRIALS = int(take_flag("--coord-trials", "20"))
KINDS = take_flag("--kinds", "fail,shrink,replace,sigstop,linkcut,coord").split(",")
LINK_DATA_TIMEOUT_MS = 2000
LINKCUT_NOTES = ""
SEED = int(take_flag("--seed", "1"))
import netns  # noqa: E402
import rc  # noqa: E402

STEPS, WORLD = 300, 4


def submit(env, n, policy, hb=2000, steps=STEPS):
    spec = dict(name="t%d" % n, world_size=WORLD, steps=steps, heartbeat_timeout_ms=hb,
                workload="train", workload_options=rc.train_opts(env, "sim_compute_ms=2"),
                on_failure=policy, checkpoint_every=10)
    if policy == "replace":
        spec["max_restarts"] = 1
    return env.submit(**spec)


def wait_step(env, job, step, timeout=60):
    return env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= step,
                        timeout)


def ev_time(evs, kind, after_ms, contains=""):
    ts = [e.time_ms for e in evs if e.kind == kind and e.time_ms >= after_ms and
          contains in e.message]
    return ts[0] if ts else None


def end(env, job, timeout=120):
    done = (env.m.JOB_STATE_SUCCEEDED, env.m.JOB_STATE_FAILED, env.m.JOB_STATE_CANCELLED)
    try:
        return env.wait_job(job.id, lambda j: j.state in done, timeout)
    except AssertionError:
        return None


def exits(ws, timeout=60):
    out = []
    for w in ws:
        try:
            out.append(w.wait(timeout=timeout))
        except Exception:  # noqa: BLE001 - a hang is a result here
            w.kill()
            out.append(None)
    return out


def worker_trial(env, n, kind, rng):
    policy = {"fail": "fail", "shrink": "shrink", "replace": "replace", "sigstop": "shrink"}[kind]
    job = submit(env, n, policy, hb=1000 if kind == "sigstop" else 2000)
    # log files are per index and appended to: one range per kind, so a
    # trial never reads the lines of another kind's trial n
    first = KINDS.index(kind) * 10000 + n * 10
    ws = rc.start(env, job, WORLD, first=first)
    standby = rc.start(env, job, 1, first=first + WORLD)[0] if kind == "replace" else None
    wait_step(env, job, rng.randint(5, 250))
    procs = ws + ([standby] if standby else [])
    # the victim is a member of generation 1 (its log says so): with a
    # standby, whichever process joined last waits, not necessarily the 5th
    members = [i for i in range(len(procs)) if "generation 1: rank" in
               env.worker_log(first + i)]
    victim = rng.choice(members)
    t_kill = time.time() * 1000
    procs[victim].send_signal(signal.SIGSTOP if kind == "sigstop" else signal.SIGKILL)
    j = end(env, job)
    if kind == "sigstop":
        procs[victim].send_signal(signal.SIGKILL)
    others = [w for i, w in enumerate(procs) if i != victim]
    codes = exits(others)
    procs[victim].wait(timeout=20)
    evs = env.events(job.id, job.token, timeout=1)
    r = {"hang": j is None, "recovered": False, "wrong": False,
         "detect": None, "recover": None, "resume": None}
    lost = ev_time(evs, "worker_lost", t_kill - 5) or ev_time(evs, "worker_failed", t_kill - 5)
    r["detect"] = lost - t_kill if lost else None
    gen = ev_time(evs, "generation", t_kill - 5)
    r["recover"] = gen - t_kill if gen else None
    resumed = [int(x[3]) for i in range(len(procs)) if i != victim
               for x in rc.recovered(env, first + i) if int(x[3]) >= t_kill]
    r["resume"] = min(resumed) - t_kill if resumed else None
    if j is None:
        return r
    if kind == "fail":
        r["recovered"] = (j.state == env.m.JOB_STATE_FAILED and "lost" in j.reason and
                          all(c not in (0, None) for c in codes))
        return r
    if j.state == env.m.JOB_STATE_SUCCEEDED and j.generation == 2:
        r["recovered"] = True
        accs = [rc.accuracy(env, first + i) for i in range(len(procs)) if i != victim]
        r["wrong"] = any(c != 0 for c in codes) or any(a is None or a < 0.85 for a in accs)
    return r


def coord_trial(env, n, rng):
    job = submit(env, n, "shrink", steps=5 * STEPS)  # outlives a 2 s outage
    first = n * 10
    ws = rc.start(env, job, WORLD, first=first)
    wait_step(env, job, rng.randint(5, 250))
    before = env.events(job.id, job.token, timeout=1)
    addr = env.addr
    env.kill_coordinator()
    time.sleep(rng.uniform(0.2, 2.0))
    t_up = time.time() * 1000
    env.start_coordinator(addr)
    # events through Watch while the job still runs (Watch refuses a job
    # that ended before this coordinator started)
    evs = []
    try:
        env.wait_job(job.id, lambda j: j.generation >= 2 or j.state >= env.m.JOB_STATE_SUCCEEDED,
                     120)
        evs = env.events(job.id, job.token, timeout=1)
    except (AssertionError, env.grpc.RpcError):
        pass
    j = end(env, job)
    codes = exits(ws)
    r = {"hang": j is None, "recovered": False, "wrong": False, "detect": None,
         "recover": None}
    restarted = ev_time(evs, "coordinator_restarted", t_up - 5)
    r["detect"] = restarted - t_up if restarted else None
    gen = ev_time(evs, "generation", t_up - 5)
    r["recover"] = gen - t_up if gen else None
    kept = [(e.seq, e.kind, e.message) for e in evs[:len(before)]] == \
        [(e.seq, e.kind, e.message) for e in before]
    if j is not None and j.state == env.m.JOB_STATE_SUCCEEDED:
        r["recovered"] = kept
        accs = [rc.accuracy(env, first + i) for i in range(WORLD)]
        r["wrong"] = any(c != 0 for c in codes) or any(a is None or a < 0.85 for a in accs)
    return r


# ---- link cuts (LINK CUTS above) ----
def start_in_ns(env, net, job, slot, log_index):
    log = open(os.path.join(env.dir, "worker%d.log" % log_index), "ab")
    p = subprocess.Popen(["ip", "netns", "exec", net.ns[slot], env.a.worker,
                          "--coordinator", env.addr, "--job", str(job.id),
                          "--token", job.token, "--host", "host%d" % slot,
                          "--data-addr", net.addr(slot) + ":0",
                          "--data-timeout-ms", str(LINK_DATA_TIMEOUT_MS),
                          "--connect-timeout-ms", "20000"],
                         stdout=log, stderr=subprocess.STDOUT)
    env.procs.append(p)
    return p


def gen1_rank(env, log_index, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(r"generation 1: rank (\d+) of", env.worker_log(log_index))
        if m:
            return int(m.group(1))
        time.sleep(0.02)
    return None


def linkcut_trial(env, net, n, rng):
    job = submit(env, n, "shrink")
    first = n * 10
    ws = [start_in_ns(env, net, job, i, first + i) for i in range(WORLD)]
    wait_step(env, job, rng.randint(5, 250))
    slot_of = {gen1_rank(env, first + i): i for i in range(WORLD)}
    r0 = rng.randrange(WORLD)
    a, b = slot_of.get(r0), slot_of.get((r0 + 1) % WORLD)
    r = {"hang": False, "recovered": False, "wrong": False, "detect": None,
         "recover": None, "cut": (r0, (r0 + 1) % WORLD), "world": None, "bystanders": 0}
    if a is None or b is None:
        r["hang"] = True  # no rank line: counted, never seen so far
        return r
    t_cut = time.time() * 1000
    net.cut(a, b)
    try:
        j = end(env, job)
    finally:
        net.cut(a, b, on=False)
    codes = exits(ws)
    evs = env.events(job.id, job.token, timeout=1)
    r["hang"] = j is None
    lost = ev_time(evs, "worker_lost", t_cut - 5) or ev_time(evs, "worker_failed", t_cut - 5)
    r["detect"] = lost - t_cut if lost else None
    gen = ev_time(evs, "generation", t_cut - 5)
    r["recover"] = gen - t_cut if gen else None
    if j is None or j.state != env.m.JOB_STATE_SUCCEEDED or j.generation < 2:
        return r
    # the members at the end: the workers whose log shows the last generation
    last = [i for i in range(WORLD)
            if "generation %d: rank" % j.generation in env.worker_log(first + i)]
    dropped = set(range(WORLD)) - set(last)
    r["world"] = j.world
    r["bystanders"] = len(dropped - {a, b})  # dropped, yet not an end of the cut
    r["recovered"] = len(last) == j.world
    accs = [rc.accuracy(env, first + i) for i in last]
    r["wrong"] = any(codes[i] != 0 for i in last) or any(x is None or x < 0.85 for x in accs)
    return r


def linkcut_trials(env, trials, rng):
    why = netns.missing("rmf")
    if why:
        sys.stderr.write("linkcut: skipped (%s)\n" % why)
        return None
    net = netns.Net(WORLD, "rmf", 212)
    res = []
    try:
        net.up()
        env.start_coordinator(net.subnet + ".1:0")
        for n in range(trials):
            t0 = time.time()
            res.append(linkcut_trial(env, net, n, rng))
            sys.stderr.write("linkcut %d/%d %.1fs %s\n" % (n + 1, trials, time.time() - t0,
                                                           res[-1]))
        env.kill_coordinator(signal.SIGTERM)
    finally:
        net.down()
    global LINKCUT_NOTES
    ok = [x for x in res if x["world"] is not None]
    worlds = sorted(set(x["world"] for x in ok))
    LINKCUT_NOTES = ("linkcut: of %d trials that succeeded at a later generation, final world "
                     "%s; %d dropped a worker that was not an end of the cut link" %
                     (len(ok), ", ".join("%d in %d" % (w, sum(x["world"] == w for x in ok))
                                         for w in worlds),
                      sum(x["bystanders"] > 0 for x in ok)))
    return res


def fmt(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-", "-"
    return "%.1f" % statistics.median(xs), "%.1f" % max(xs)


def table_row(kind, res):
    d, r = [x["detect"] for x in res], [x["recover"] for x in res]
    u = [x.get("resume") for x in res]
    return ((kind, len(res), sum(x["recovered"] for x in res), sum(x["hang"] for x in res),
             sum(x["wrong"] for x in res)) + fmt(d) + fmt(r) + fmt(u))


def campaign(env):
    rng = random.Random(SEED)
    rows = []
    for kind in KINDS:
        trials = COORD_TRIALS if kind == "coord" else TRIALS
        if kind == "linkcut":
            res = linkcut_trials(env, trials, rng)
            if res is not None:
                rows.append(table_row(kind, res))
            continue
        env.start_coordinator()
        res = []
        for n in range(trials):
            res.append(coord_trial(env, n, rng) if kind == "coord" else
                       worker_trial(env, n, kind, rng))
            sys.stderr.write("%s %d/%d %s\n" % (kind, n + 1, trials, res[-1]))
        env.kill_coordinator(signal.SIGTERM)
        rows.append(table_row(kind, res))
    print("| trial | trials | recovered | hangs | wrong results | detect median ms | "
          "detect max ms | recover median ms | recover max ms | resume median ms | "
          "resume max ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print("| %s | %d | %d | %d | %d | %s | %s | %s | %s | %s | %s |" % row)
    if LINKCUT_NOTES:
        print()
        print(LINKCUT_NOTES)


rc.main(campaign)
