"""test_command_spec.py - command jobs through REST and the CLI,
against a real `ringmaster serve`:

  validation   400 naming the field: command required both ways, wrong JSON
               types, NUL, sizes (65 arguments, 4097 bytes, 256-byte
               workdir), env keys (bad characters, RINGMASTER_*), coded
               refused, unknown workload, env/workdir on a built-in workload
  round trip   POST -> GET shows command/env keys (values ***)/workdir; a restarted server on
               the same database still has them; `ringmaster job ID` shows
               the command
  log offset   GET .../log?offset=N answers from N on; offset with tail is 400
  CLI run      argument errors (exit 2, naming the option); with a fake
               agent (--worker: a script that prints and exits 1) the run
               streams "[i] ..." lines and exits 1 with the job's reason;
               with a fake agent that sleeps, SIGINT cancels the job and the
               run exits 130; `ringmaster logs ID` prints every worker's lines
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rmserver import args as rmserver_args  # noqa: E402
from rmserver import Server  # noqa: E402

BASE = {"name": "c", "world_size": 2, "workload": "command", "launcher": "none"}


def spec(**kw):
    s = dict(BASE)
    s.update(kw)
    return {k: v for k, v in s.items() if v is not None}


def refused(srv, body, field, words=(), raw=None):
    st, _, j = srv.request("POST", "/api/v1/jobs", body, token=srv.token, raw=raw)
    assert st == 400, (body, st, j)
    assert j["error"]["field"] == field, (body, j)
    for w in words:
        assert w in j["error"]["message"], (w, j)


def validation(srv):
    refused(srv, spec(), "command", ["required for workload command"])
    refused(srv, spec(workload="allreduce", command=["x"]), "command", ["only for workload"])
    refused(srv, spec(command="python3 x.py"), "command", ["array of strings"])
    refused(srv, spec(command=["x", 3]), "command", ["command[1]"])
    refused(srv, spec(command=[""]), "command", ["must not be empty"])
    refused(srv, spec(command=["a"] * 65), "command", ["64"])
    refused(srv, spec(command=["a" * 4096]), "command", ["4096"])
    refused(srv, spec(command=["x"], env=["A=1"]), "env", ["object of strings"])
    refused(srv, spec(command=["x"], env={"A": 1}), "env", ["env.A"])
    refused(srv, spec(command=["x"], env={"1A": "x"}), "env", ["not KEY=VALUE"])
    refused(srv, spec(command=["x"], env={"A-B": "x"}), "env")
    refused(srv, spec(command=["x"], env={"RINGMASTER_TOKEN": "x"}), "env",
            ["RINGMASTER_", "set by the worker agent"])
    refused(srv, spec(command=["x"], env={"K%d" % i: "v" for i in range(65)}), "env", ["64"])
    refused(srv, spec(command=["x"], env={"K": "v" * 4100}), "env", ["4096"])
    refused(srv, spec(command=["x"], workdir=7), "workdir")
    refused(srv, spec(command=["x"], workdir="/" + "d" * 255), "workdir")
    refused(srv, spec(workload="allreduce", env={"A": "1"}), "env", ["only for workload"])
    refused(srv, spec(workload="allreduce", workdir="/tmp"), "workdir", ["only for workload"])
    refused(srv, spec(command=["x"], straggler_policy="coded", backup_workers=1),
            "straggler_policy", ["cannot make a user's program"])
    refused(srv, spec(workload="nosuch"), "workload", ["command"])
    # NUL: Jansson refuses it for the whole body (invalid_json, no field)
    st, _, j = srv.request("POST", "/api/v1/jobs", token=srv.token,
                           raw=b'{"name":"c","world_size":1,"workload":"command",'
                               b'"command":["a\\u0000b"],"launcher":"none"}')
    assert st == 400 and j["error"]["code"] == "invalid_json", (st, j)
    # the limits themselves are accepted
    srv.submit(**spec(command=["a"] * 64))
    srv.submit(**spec(command=["a" * 4095]))
    srv.submit(**spec(command=["x"], straggler_policy="backup", backup_workers=1))


def round_trip(binary):
    tmp = tempfile.mkdtemp(prefix="rm-cmd-")
    db = os.path.join(tmp, "rm.db")
    want = {"command": ["python3", "-c", "import sys; print(sys.argv)", "", "x y"],
            "env": {"OMP_NUM_THREADS": "2", "_A": "é=1"}, "workdir": "/tmp/some dir"}
    # env values are secret: reads show the keys, every value masked
    shown = dict(want, env={k: "***" for k in want["env"]})
    srv = Server(binary, extra=("--db", db))
    try:
        validation(srv)
        j = srv.submit(**spec(**want))
        st, _, g = srv.request("GET", "/api/v1/jobs/%d" % j["id"])
        assert st == 200 and all(g["spec"][k] == v for k, v in shown.items()), g["spec"]
        st, _, lst = srv.request("GET", "/api/v1/jobs")
        assert lst["jobs"][0]["spec"]["command"] == want["command"]
        st, _, plain = srv.request("GET", "/api/v1/jobs/%d" % srv.submit(name="p")["id"])
        assert plain["spec"]["command"] == [] and plain["spec"]["env"] == {}
    finally:
        srv.stop()
    srv = Server(binary, extra=("--db", db))
    try:
        st, _, g = srv.request("GET", "/api/v1/jobs/%d" % j["id"])
        assert st == 200 and all(g["spec"][k] == v for k, v in shown.items()), g["spec"]
        out = subprocess.run([binary, "job", str(j["id"]), "--server", "http://" + srv.http],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out
        assert "command     python3 -c \"import sys; print(sys.argv)\" \"\" \"x y\"" in out.stdout, \
            out.stdout
        assert "OMP_NUM_THREADS=***" in out.stdout and "/tmp/some dir" in out.stdout, out.stdout
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def write(path, text, mode=0o755):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def run_cli(binary, args, **kw):
    return subprocess.run([binary, "run", *args], capture_output=True, text=True, timeout=60, **kw)


def cli(binary):
    for args, words in [([], "-n N"), (["-n", "0", "--", "x"], "-n needs an integer"),
                        (["-n", "2"], "no program"), (["-n", "2", "--bogus", "--", "x"],
                                                      "unknown option '--bogus'"),
                        (["-n", "2", "--launcher", "k8s", "--", "x"], "local or slurm"),
                        (["-n", "2", "--on-failure", "retry", "--", "x"], "fail, shrink"),
                        (["-n", "2", "--env", "NOEQUALS", "--", "x"], "KEY=VALUE"),
                        (["-n", "2", "--steps"], "--steps needs a value"),
                        (["-n", "2", "--min-workers", "3", "--", "x"], "--min-workers")]:
        r = run_cli(binary, args, env=dict(os.environ, RINGMASTER_SERVER="http://127.0.0.1:9"))
        assert r.returncode == 2 and words in r.stderr, (args, r.returncode, r.stderr)

    tmp = tempfile.mkdtemp(prefix="rm-run-")
    fake = os.path.join(tmp, "fake-agent")
    # the fake agent: prints two lines (one without a newline at the end) and
    # exits 1; once the file SLEEP exists (the Ctrl-C case) it sleeps instead,
    # so the job is still running when the run is interrupted
    sleep_flag = os.path.join(tmp, "SLEEP")
    write(fake, "#!/bin/sh\necho \"hello from $RINGMASTER_LAUNCH_INDEX local "
          "$RINGMASTER_LOCAL_RANK/$RINGMASTER_LOCAL_WORLD\"\n"
          "[ -e '%s' ] && exec sleep 60\nprintf 'bye %%s' \"$RINGMASTER_LAUNCH_INDEX\"\n"
          "exit 1\n" % sleep_flag)
    logs = os.path.join(tmp, "logs")
    srv = Server(binary, extra=("--worker", fake, "--log-dir", logs))
    try:
        url = "http://" + srv.http
        r = run_cli(binary, ["-n", "2", "--server", url, "--token", srv.token, "--env", "A=1",
                             "--", "/bin/echo", "hi"])
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        lines = r.stdout.splitlines()
        job_id = lines[0]
        assert job_id.isdigit(), lines
        for i in (0, 1):
            assert "[%d] hello from %d local %d/2" % (i, i, i) in lines, r.stdout
            assert "[%d] bye %d" % (i, i) in lines, r.stdout
        assert "job %s failed" % job_id in r.stderr and "submitted" in r.stderr, r.stderr
        st, _, g = srv.request("GET", "/api/v1/jobs/%s" % job_id)
        assert g["spec"]["command"] == ["/bin/echo", "hi"] and g["spec"]["env"] == {"A": "***"}
        # log offset
        st, h, t = srv.request("GET", "/api/v1/jobs/%s/workers/0/log?offset=0" % job_id)
        assert st == 200 and "hello from 0" in t and h["x-log-offset"] == "0", (st, h, t)
        n = len(t.encode())
        st, h, t2 = srv.request("GET", "/api/v1/jobs/%s/workers/0/log?offset=%d" % (job_id, n - 5))
        assert st == 200 and t2 == t[-5:] and h["x-log-offset"] == str(n - 5), (t2, h)
        st, h, t3 = srv.request("GET", "/api/v1/jobs/%s/workers/0/log?offset=%d" % (job_id, n + 99))
        assert st == 200 and t3 == "" and h["x-log-offset"] == str(n), (t3, h)
        st, _, e = srv.request("GET", "/api/v1/jobs/%s/workers/0/log?offset=1&tail=2" % job_id)
        assert st == 400 and e["error"]["field"] == "offset", e
        # ringmaster logs
        out = subprocess.run([binary, "logs", job_id, "--server", url], capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 0 and "[1] hello from 1" in out.stdout, out
        out = subprocess.run([binary, "logs", job_id, "--worker", "1", "--server", url],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0 and out.stdout.startswith("hello from 1"), out
        # Ctrl-C cancels
        write(sleep_flag, "", 0o644)
        p = subprocess.Popen([binary, "run", "-n", "2", "--server", url, "--token", srv.token,
                              "--", "/bin/true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        job_id = p.stdout.readline().strip()
        assert job_id.isdigit(), job_id
        deadline = time.time() + 20
        while time.time() < deadline:
            st, _, g = srv.request("GET", "/api/v1/jobs/%s/workers/1/log" % job_id)
            if st == 200 and "hello" in g:
                break
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=40)
        assert p.returncode == 130, (p.returncode, out, err)
        assert "cancelling job %s" % job_id in err, err
        st, _, g = srv.request("GET", "/api/v1/jobs/%s" % job_id)
        assert g["state"] == "cancelled" and "Ctrl-C" in g["reason"], g
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    a = rmserver_args()
    round_trip(a.ringmaster)
    cli(a.ringmaster)
    print("PASS")


if __name__ == "__main__":
    main()
