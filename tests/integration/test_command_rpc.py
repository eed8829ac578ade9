"""test_command_rpc.py - the agent's calls of a command job over
real gRPC: Attach (spec, torchrun rendezvous, joined) and ReportExit in each
of its cases, with the programs played by Join/Leave calls from here.

  errors      unknown job NOT_FOUND, wrong token UNAUTHENTICATED, bad
              launch index INVALID_ARGUMENT, ReportExit of a built-in
              workload FAILED_PRECONDITION (Attach of one answers its spec:
              every agent attaches first)
  attach      spec carries command/env/workdir; master_addr/port "" / 0
              until launch index 0 attached, then its host and port, never
              replaced; joined false, then true once the program joined
  (a)         a member's program exits 3 -> lost, on_failure fail -> job
              failed naming the status and the last stderr line; a repeated
              report changes nothing
  (a) shrink  killed by signal 9 -> lost, the job re-forms with 2
  (d)         the same report again -> event only
  (b)         exit 0 without leaving -> lost ("without leaving the job")
  (c)         never joined, agent's reason -> job failed with the reason and
              the stderr lines; a 5000-byte tail keeps the reason < 1024
  left        a member that left, then exited 0 -> event only, job succeeded;
              the event does not quote its stderr (it finished: no news)
"""
import threading

import rmtest


def cmd_spec(m, name, world, **kw):
    return dict(name=name, world_size=world, workload="command",
                command=["python3", "train.py", "--epochs", "3", ""],
                env=["OMP_NUM_THREADS=2", "X=a b"], workdir="/tmp", **kw)


def code(g, fn):
    try:
        fn()
    except g.RpcError as e:
        return e.code()
    return g.StatusCode.OK


def join_all(env, job, world, idx=None):
    m, W = env.m, env.worker
    res = {}

    def join(i):
        res[i] = W.Join(m.JoinRequest(job_id=job.id, token=job.token, host="h%d" % i,
                                      data_addr="127.0.0.1:%d" % (31000 + i), wait_ms=10000,
                                      rank_hint=i, world_hint=world), timeout=20)
    ts = [threading.Thread(target=join, args=(i,)) for i in (idx or range(world))]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return res


def attach(env, job, i, host="", port=0):
    return env.worker.Attach(env.m.AttachRequest(job_id=job.id, token=job.token,
                                                 launch_index=i, host=host, master_port=port),
                             timeout=10)


def exit_(env, job, i, code=0, sig=0, tail="", reason=""):
    return env.worker.ReportExit(env.m.ReportExitRequest(
        job_id=job.id, token=job.token, launch_index=i, exit_code=code, signal=sig,
        stderr_tail=tail, reason=reason), timeout=10)


def kinds(env, job, kind):
    return [e for e in env.events(job.id, job.token, timeout=1) if e.kind == kind]


def test(env):
    env.start_coordinator()
    m, g, W = env.m, env.grpc, env.worker
    S = m.JobState

    # ---- errors ----
    job = env.submit(**cmd_spec(m, "cmd-a", 2))
    assert list(job.spec.command) == ["python3", "train.py", "--epochs", "3", ""], job.spec
    # env values are secret: every answer masks them, only Attach hands them out
    assert list(job.spec.env) == ["OMP_NUM_THREADS=***", "X=***"] and job.spec.workdir == "/tmp"
    assert list(env.get(job.id).spec.command)[:2] == ["python3", "train.py"]
    plain = env.submit(name="plain", world_size=1)
    cases = [
        ("unknown job", lambda: W.Attach(m.AttachRequest(job_id=99999, token="x"), timeout=5),
         g.StatusCode.NOT_FOUND),
        ("wrong token", lambda: W.Attach(m.AttachRequest(job_id=job.id, token="bad"), timeout=5),
         g.StatusCode.UNAUTHENTICATED),
        ("bad index", lambda: W.Attach(m.AttachRequest(job_id=job.id, token=job.token,
                                                       launch_index=-5), timeout=5),
         g.StatusCode.INVALID_ARGUMENT),
        ("long host", lambda: attach(env, job, 0, "h" * 200, 1), g.StatusCode.INVALID_ARGUMENT),
        ("exit: not a command job", lambda: W.ReportExit(m.ReportExitRequest(
            job_id=plain.id, token=plain.token, launch_index=0), timeout=5),
         g.StatusCode.FAILED_PRECONDITION),
        ("exit: unknown job", lambda: W.ReportExit(m.ReportExitRequest(job_id=99999, token="x"),
                                                   timeout=5), g.StatusCode.NOT_FOUND),
        ("exit: wrong token", lambda: W.ReportExit(m.ReportExitRequest(
            job_id=job.id, token="bad"), timeout=5), g.StatusCode.UNAUTHENTICATED),
        ("exit: bad index", lambda: exit_(env, job, -1), g.StatusCode.INVALID_ARGUMENT),
        ("exit: bad signal", lambda: exit_(env, job, 0, -1, -3), g.StatusCode.INVALID_ARGUMENT),
    ]
    for name, fn, want in cases:
        got = code(g, fn)
        assert got == want, "%s: got %s, want %s" % (name, got, want)
    # every agent attaches first, whatever the workload: a built-in one learns its spec
    r = W.Attach(m.AttachRequest(job_id=plain.id, token=plain.token, launch_index=0, host="x",
                                 master_port=5), timeout=5)
    assert r.spec.workload == "allreduce" and r.master_port == 0 and not r.joined, r

    # ---- Attach: spec, rendezvous, joined ----
    r = attach(env, job, 1, "h1")
    assert r.master_addr == "" and r.master_port == 0 and not r.joined, r
    assert list(r.spec.command)[0] == "python3" and r.spec.workdir == "/tmp"
    assert r.world_size == 2 and r.job_state == S.JOB_STATE_PENDING, r
    r = attach(env, job, 0, "hostA", 29500)
    assert (r.master_addr, r.master_port) == ("hostA", 29500), r
    r = attach(env, job, 0, "hostB", 29600)  # first come, never replaced
    assert (r.master_addr, r.master_port) == ("hostA", 29500), r
    assert attach(env, job, 1).master_addr == "hostA"

    # ---- (a) a member exits 3 under on_failure fail ----
    res = join_all(env, job, 2)
    assert all(x.formed for x in res.values()), res
    assert attach(env, job, 1).joined and attach(env, job, 0).joined
    tail = "Traceback (most recent call last):\n  File x\nValueError: boom at step 7\n"
    r = exit_(env, job, 1, 3, 0, tail)
    assert r.job_state == S.JOB_STATE_FAILED, r
    j = env.get(job.id)
    assert "exited with status 3" in j.reason and "ValueError: boom at step 7" in j.reason, j.reason
    ev = kinds(env, job, "program_exited")
    assert len(ev) == 1 and "launch index 1" in ev[0].message and ev[0].rank == 1, ev
    assert "ValueError: boom" in ev[0].message and "exited with status 3" in ev[0].message
    r = exit_(env, job, 1, 3, 0, tail)  # again: an event, nothing else
    assert r.job_state == S.JOB_STATE_FAILED
    assert len(kinds(env, job, "worker_lost")) == 1

    # ---- (a) signal under shrink, (d) again, (b) exit 0 without leaving ----
    job = env.submit(**cmd_spec(m, "cmd-b", 3, on_failure="shrink"))
    join_all(env, job, 3)
    r = exit_(env, job, 2, -1, 9, "oom\n")
    assert r.job_state in (S.JOB_STATE_FORMING, S.JOB_STATE_RUNNING), r
    lost = kinds(env, job, "worker_lost")
    assert len(lost) == 1 and "killed by signal 9" in lost[0].message, lost
    env.wait_job(job.id, lambda j: j.state == S.JOB_STATE_RUNNING and j.world == 2, 10)
    r = exit_(env, job, 2, -1, 9, "oom\n")  # (d) already lost
    assert r.job_state == S.JOB_STATE_RUNNING and len(kinds(env, job, "worker_lost")) == 1
    assert len(kinds(env, job, "program_exited")) == 2
    r = exit_(env, job, 1, 0)  # (b)
    lost = kinds(env, job, "worker_lost")
    assert len(lost) == 2 and "exited 0 without leaving the job" in lost[1].message, lost
    assert r.job_state != S.JOB_STATE_FAILED, r

    # ---- (c) never joined ----
    job = env.submit(**cmd_spec(m, "cmd-c", 2))
    big = "".join("line %04d of a long traceback\n" % i for i in range(170))  # ~5000 bytes
    r = exit_(env, job, 0, 1, 0, "ModuleNotFoundError: No module named 'torch'\n",
              "did not join within 500 ms")
    assert r.job_state == S.JOB_STATE_FAILED, r
    j = env.get(job.id)
    for want in ("launch index 0", "never joined", "did not join within 500 ms",
                 "exited with status 1", "No module named 'torch'"):
        assert want in j.reason, (want, j.reason)
    job = env.submit(**cmd_spec(m, "cmd-c2", 2))
    r = exit_(env, job, 1, -1, 11, big)
    j = env.get(job.id)
    assert r.job_state == S.JOB_STATE_FAILED and len(j.reason.encode()) < 1024, len(j.reason)
    assert "killed by signal 11" in j.reason and "line 0169" in j.reason, j.reason

    # ---- left cleanly, then exit 0: event only ----
    job = env.submit(**cmd_spec(m, "cmd-d", 1))
    res = join_all(env, job, 1)
    w = res[0]
    W.Leave(m.LeaveRequest(job_id=job.id, token=job.token, worker_id=w.worker_id,
                           generation=w.generation, ok=True, step=0), timeout=10)
    r = exit_(env, job, 0, 0, 0, "2026-12-06T22:00:00.000Z I ringmaster[7] probe.c:1 probe\n")
    assert r.job_state == S.JOB_STATE_SUCCEEDED, r
    ev = kinds(env, job, "program_exited")
    assert len(ev) == 1 and not kinds(env, job, "worker_lost")
    # a program that finished is no news: its stderr is not quoted
    assert "exited with status 0" in ev[0].message and "stderr" not in ev[0].message \
        and "probe" not in ev[0].message, ev[0].message


if __name__ == "__main__":
    rmtest.main(test)
