#!/usr/bin/python3
"""The commands the README and docs/ show, held to what the programs do.

1. Every command line in an indented or fenced shell block of README.md and
   docs/*.md whose program is ours (`build/coordinator/ringmaster SUB`,
   `ringmaster SUB`, `ringmaster-worker`, `scripts/X`, a repository program
   run with /usr/bin/python3, a built example) names a program that exists
   and only options that program's --help lists; every REST path a `curl`
   line uses is a path of api/openapi.json.
2. The README's "A job" section runs as written, in a temporary folder, with
   ports serve picks (port 0) in place of 7070 and 8080 and this build in place of build/:
   the coordinator starts from the documented command, the documented JSON
   is the job.json that the documented `submit`, `jobs`, `job 1`, `cancel 1`
   and `curl` lines use, and each exits 0 (the job is submitted, listed,
   shown and cancelled; a cancel may find it finished: exit 6, "already").

usage: test_doc_commands.py --build BUILD_DIR
"""
import argparse
import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHELLS = ("", "sh", "bash", "shell", "console")
# programs that are not ours: their lines are read for REST paths only
EXTERNAL = {"srun", "sbatch", "cmake", "kubectl", "helm", "curl", "export", "cd", "cp", "docker",
            "systemctl", "apt-get", "sudo", "mpirun", "torchrun", "git", "pip", "make", "openssl",
            "cc", "gcc", "pkg-config", "nvidia-smi", "ibv_devinfo"}
PLACEHOLDERS = {"train.py", "my_train.py", "my_program", "./my_program"}  # a user's own program
# a line whose first word is none of these is prose or a diagram in an indented block
OURS = re.compile(r"^(build/|scripts/|examples/|\./|/usr/bin/python3$|python3$|ringmaster$|ringmaster-worker$)")


def blocks(path):
    """(line number, command) of each shell line; continuations joined."""
    out, fence, lang, cur, start = [], False, "", None, 0
    for n, line in enumerate(open(path, encoding="utf-8").read().split("\n"), 1):
        if line.lstrip().startswith("```"):
            fence, lang = (not fence), line.strip()[3:].strip()
            continue
        shell = (fence and lang in SHELLS) or (not fence and line.startswith("    ") and line.strip())
        if not shell:
            cur = None
            continue
        text = re.sub(r"\s+#\s.*$", "", line.strip())
        if cur is not None:
            cur += " " + text.rstrip("\\").strip()
            if not text.endswith("\\"):
                out.append((start, cur))
                cur = None
            continue
        if text.endswith("\\"):
            cur, start = text.rstrip("\\").strip(), n
        else:
            out.append((n, text))
    return out


def ours(cmd):
    try:
        argv = shlex.split(cmd)
    except ValueError:
        return None
    while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
        argv = argv[1:]
    if not argv:
        return None
    return argv


class Help:
    def __init__(self, build):
        self.build, self.cache = build, {}

    def text(self, argv):
        key = tuple(argv)
        if key not in self.cache:
            r = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=60,
                               cwd=REPO, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
            self.cache[key] = (r.returncode, r.stdout + r.stderr)
        return self.cache[key]


def options(argv):
    opts = []
    for a in argv:
        if a == "--":
            break
        if a.startswith("--") and len(a) > 2:
            opts.append(a.split("=", 1)[0])
    return opts


def check_static(build, problems):
    h = Help(build)
    rm = os.path.join(build, "coordinator", "ringmaster")
    worker = os.path.join(build, "worker", "agent", "ringmaster-worker")
    api = json.load(open(os.path.join(REPO, "api", "openapi.json")))
    templates = [re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", p) + "$") for p in api["paths"]]
    files = [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    checked = 0
    for f in files:
        rel = os.path.relpath(f, REPO)
        for n, cmd in blocks(f):
            where = "%s:%d" % (rel, n)
            argv = ours(cmd)
            if not argv:
                continue
            prog = argv[0]
            if prog == "curl":
                for url in re.findall(r"https?://[^\s\"']+", cmd):
                    path = re.sub(r"^https?://[^/]+", "", url).split("?")[0]
                    if path.startswith("/api/") and not any(t.match(path) for t in templates):
                        problems.append("%s: %s is not a path of api/openapi.json" % (where, path))
                checked += 1
                continue
            if prog in EXTERNAL or prog.startswith("$") or not OURS.match(prog):
                continue
            progs = []  # (help argv, argv whose options it must list)
            if prog in ("build/coordinator/ringmaster", "ringmaster"):
                if len(argv) < 2:
                    problems.append("%s: ringmaster without a command" % where)
                    continue
                progs.append(([rm, argv[1]], argv[2:]))
                if argv[1] == "run" and "--" in argv:
                    rest = argv[argv.index("--") + 1:]
                    if rest:
                        progs.append((None, rest))
            elif prog == "ringmaster-worker":
                progs.append(([worker], argv[1:]))
            else:
                progs.append((None, argv))
            for help_argv, args in progs:
                if help_argv is None:
                    p = args[0]
                    if p in ("/usr/bin/python3", "python3"):
                        if len(args) < 2 or args[1] in PLACEHOLDERS:
                            continue
                        script = os.path.join(REPO, args[1])
                        if not os.path.isfile(script):
                            problems.append("%s: %s does not exist" % (where, args[1]))
                            continue
                        help_argv, args = ["/usr/bin/python3", script], args[2:]
                    elif p.startswith("build/"):
                        exe = os.path.join(build, p[len("build/"):])
                        if not os.access(exe, os.X_OK):
                            problems.append("%s: %s is not built by this build" % (where, p))
                            continue
                        help_argv, args = [exe], args[1:]
                    elif p.startswith("scripts/"):
                        exe = os.path.join(REPO, p)
                        if not os.access(exe, os.X_OK):
                            problems.append("%s: %s does not exist" % (where, p))
                            continue
                        help_argv, args = [exe], args[1:]
                    elif p in PLACEHOLDERS:
                        continue
                    else:
                        problems.append("%s: unknown program %r (add it to the test's lists)" % (where, p))
                        continue
                rc, text = h.text(help_argv)
                if rc != 0 and "usage" not in text.lower():
                    problems.append("%s: %s --help printed no usage" % (where, " ".join(help_argv)))
                    continue
                for o in options(args):
                    if not re.search(re.escape(o) + r"(?![\w-])", text):
                        problems.append("%s: %s: option %s is not in its --help" %
                                        (where, os.path.basename(help_argv[-1]), o))
                checked += 1
    return checked


def section(text, title):
    m = re.search(r"^## " + re.escape(title) + r"\n(.*?)(?=^## )", text, re.S | re.M)
    return m.group(1) if m else None


def run_readme_job(build, problems):
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    sec = section(text, "A job")
    if sec is None:
        problems.append("README.md: no '## A job' section")
        return
    tmp = tempfile.mkdtemp(prefix="rm-doc-")
    # the documented ports become port 0 for serve (it picks free ones and
    # prints them); later commands get the HTTP address it printed
    bound = {"127.0.0.1:7070": "127.0.0.1:0", "127.0.0.1:8080": "127.0.0.1:0"}

    def local(cmd):
        for doc, here in bound.items():
            cmd = cmd.replace(doc, here)
        return re.sub(r"(^|\s)build/", r"\1" + build + "/", cmd)
    spec = re.search(r"```json\n(.*?)```", sec, re.S)
    cmds = [c for _, c in blocks_of_text(sec)]
    env = dict(os.environ)
    for k in ("RINGMASTER_API_TOKEN", "RINGMASTER_READ_TOKEN", "RINGMASTER_API_TOKEN_FILE"):
        env.pop(k, None)
    serve = None
    try:
        if not spec:
            problems.append("README.md 'A job': no JSON job spec")
            return
        with open(os.path.join(tmp, "job.json"), "w") as f:
            f.write(spec.group(1))
        json.loads(spec.group(1))
        prose = " ".join(re.findall(r"`(curl [^`]+)`", sec.replace("\n", " ")))
        if prose:
            cmds.append(prose)
        ran = 0
        for c in cmds:
            c = local(c)
            if " serve " in c:
                c = re.sub(r"\s*&\s*$", "", c)  # backgrounded in the docs; here the test holds it
                serve = subprocess.Popen(["bash", "-c", "exec " + c + " --log-dir logs"], cwd=tmp, env=env,
                                         stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "serve.err"), "w"),
                                         text=True, start_new_session=True)
                deadline = time.time() + 30
                ok = False
                while time.time() < deadline:
                    line = serve.stdout.readline()
                    if not line:
                        break
                    if "http listening on" in line:
                        bound["127.0.0.1:8080"] = line.rsplit(" ", 1)[1].strip()
                        env["RINGMASTER_SERVER"] = "http://" + bound["127.0.0.1:8080"]
                        ok = True
                        break
                if not ok:
                    problems.append("README.md 'A job': the documented serve command did not start: %s"
                                    % open(os.path.join(tmp, "serve.err")).read()[-500:])
                    return
                continue
            if c.startswith("export "):
                name = re.match(r"export ([A-Z_][A-Z0-9_]*)=", c)
                if name:
                    env[name.group(1)] = subprocess.run(["bash", "-c", '%s; printf %%s "$%s"' % (c, name.group(1))],
                                                        capture_output=True, text=True, env=env).stdout
                continue
            r = subprocess.run(["bash", "-c", c], cwd=tmp, env=env, capture_output=True, text=True, timeout=60)
            ran += 1
            if r.returncode == 6 and " cancel " in c and "already" in r.stderr:
                pass  # the documented job finished first (300 steps of the digits take seconds)
            elif r.returncode != 0:
                problems.append("README.md 'A job': `%s` exited %d: %s" % (c, r.returncode,
                                                                         (r.stderr or r.stdout).strip()[-300:]))
            elif c.startswith("curl") and '"error"' in r.stdout:
                problems.append("README.md 'A job': `%s` answered an error: %s" % (c, r.stdout[-300:]))
        if ran < 4:
            problems.append("README.md 'A job': only %d commands found to run" % ran)
        print("README 'A job': %d documented commands ran against a coordinator started as documented" % ran)
    finally:
        if serve and serve.poll() is None:
            os.killpg(serve.pid, signal.SIGTERM)
            try:
                serve.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(serve.pid, signal.SIGKILL)
                serve.wait()
        subprocess.run(["rm", "-rf", tmp])


def blocks_of_text(text):
    fd, path = tempfile.mkstemp(suffix=".md")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    try:
        return blocks(path)
    finally:
        os.unlink(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    problems = []
    n = check_static(build, problems)
    print("%d documented command lines checked against the programs' --help and openapi.json" % n)
    run_readme_job(build, problems)
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
