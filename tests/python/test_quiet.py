"""python.quiet: the library is quiet inside a user's program. Two ranks of a
small program (ringmaster.init() from the torchrun variables, one
all-reduce, finalize) run twice:

  without RINGMASTER_LOG_LEVEL   no line at INFO or DEBUG from libringmaster on
                                 stderr (its transport and device probes were
                                 printed at INFO on every rank before)
  RINGMASTER_LOG_LEVEL=info      the same program prints them (so the first
                                 check sees what it looks for, and the knob
                                 works)
Both runs' all-reduce results are right. Then, with --coordinator and
--worker, a 2-worker command job of an ordinary DDP program
(elastic_ddp_prog.py, 10 steps) under a coordinator started without
RINGMASTER_LOG_LEVEL (empty: the default):
  the job succeeds; no INFO or DEBUG line of libringmaster comes from the
  programs' processes (the agents' own INFO lines share the worker logs and
  are told apart by pid); each program_exited event gives the status 0 and
  quotes no stderr.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rmtest  # noqa: E402

PROG = r"""
import numpy as np, ringmaster
ringmaster.init()
x = np.full(4, ringmaster.rank() + 1.0, np.float32)
ringmaster.allreduce(x, "sum")
print("RESULT {\"sum\": %s}" % float(x[0]), flush=True)
ringmaster.finalize()
"""
# the library's log line: "<time>Z <E|W|I|D> ringmaster[<pid>] ..."
LINE = re.compile(r"^\S+Z ([EWID]) ringmaster\[\d+\]", re.M)


def run(level):
    extra = {} if level is None else {"RINGMASTER_LOG_LEVEL": level}
    saved = os.environ.pop("RINGMASTER_LOG_LEVEL", None)
    try:
        outs = rmtest.run_group("quiet-%s" % level, 2, lambda r: [rmtest.PY, "-c", PROG],
                                extra_env=extra)
    finally:
        if saved is not None:
            os.environ["RINGMASTER_LOG_LEVEL"] = saved
    for o in outs:
        r = rmtest.results(o)
        assert len(r) == 1 and r[0]["sum"] == 3.0, o[-2000:]
    return [LINE.findall(o) for o in outs], outs


def test():
    quiet, outs = run(None)
    for lv, o in zip(quiet, outs):
        assert not [x for x in lv if x in "ID"], "INFO/DEBUG lines by default:\n" + o[-2000:]
    levels, outs = run("info")
    assert all("I" in lv for lv in levels), "no INFO line at RINGMASTER_LOG_LEVEL=info:\n" \
        + outs[0][-2000:]
    print("by default: %s line(s) at WARN/ERROR, none at INFO; at info: %d INFO lines per rank"
          % (sum(len(x) for x in quiet), min(lv.count("I") for lv in levels)))


def arg(name):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def job_quiet(rm_bin, worker):
    import time
    prog = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elastic_ddp_prog.py")
    c = rmtest.Coordinator(rm_bin, worker, extra_env={"RINGMASTER_LOG_LEVEL": ""})
    try:
        env = {k: os.environ[k] for k in ("PYTHONPATH", "OMP_NUM_THREADS") if os.environ.get(k)}
        body = {"name": "quiet", "world_size": 2, "workload": "command", "launcher": "local",
                "env": env, "command": [rmtest.PY, prog, "--steps", "10"]}
        st, _, job = c.request("POST", "/api/v1/jobs", body, token=c.token)
        assert st == 201, (st, job)
        deadline = time.monotonic() + 120
        while True:
            j = c.get("/api/v1/jobs/%d" % job["id"])
            if j["state"] in ("succeeded", "failed", "cancelled"):
                break
            assert time.monotonic() < deadline, j
            time.sleep(0.2)
        logs = []
        for i in range(2):
            with open(os.path.join(c.logs, "job-%d" % job["id"], "worker-%d.log" % i),
                      errors="replace") as fh:
                logs.append(fh.read())
        assert j["state"] == "succeeded", (j, logs)
        info = 0
        for text in logs:
            prog_pid = re.search(r"elastic_ddp_prog: pid (\d+)", text).group(1)
            lines = re.findall(r"^\S+Z ([EWID]) ringmaster\[(\d+)\].*$", text, re.M)
            mine = [lv for lv, pid in lines if pid == prog_pid]
            info += sum(1 for lv, pid in lines if pid != prog_pid and lv == "I")
            assert not [lv for lv in mine if lv in "ID"], "INFO in the program's stderr:\n" + text
        deadline = time.monotonic() + 30  # the agents report the exits after the job ended
        while True:
            ev = [e for e in c.events(job["id"]) if e.get("kind") == "program_exited"]
            if len(ev) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(ev) == 2, ev
        for e in ev:
            msg = e.get("message") or ""
            assert "exited with status 0" in msg and "stderr" not in msg, msg
        print("command job, DDP program, default level: no INFO line from the programs "
              "(%d from the agents), program_exited without stderr: %s"
              % (info, ev[0]["message"]))
    finally:
        c.stop()


def main():
    job = arg("--coordinator")
    rmtest.require(torch=bool(job))

    def both():
        test()
        if job:
            job_quiet(job, arg("--worker"))
    rmtest.main(both)


if __name__ == "__main__":
    main()
