"""Every deployment in deploy/ runs with TLS on both ports and the API token.

  k8s       each container that runs `ringmaster serve` (coordinator.yaml) has
            --tls-cert/--tls-key/--tls-ca, --http-tls-cert/--http-tls-key and
            --api-token-file, each file under a mounted Secret volume; its
            probes are httpGet with scheme HTTPS
  workers   deploy/k8s/worker-tls.sh on what the coordinator renders (render_k8s,
            a train job and a command job) and on deploy/k8s/workers.yaml: every
            worker container has --tls-ca/--tls-cert/--tls-key under a mounted
            Secret; the output still passes tests/k8s/validate.mjs (when Node.js
            and its modules are there); a second pass is refused
  systemd   ExecStart has the five TLS flags, each %d/NAME with a LoadCredential=
            NAME line, --api-token-file, --worker ringmaster-worker-tls
  slurm     ringmaster-job.sbatch with a stand-in srun: RINGMASTER_TLS_DIR adds the
            worker's three TLS flags; a folder without the files is refused
  certs     deploy/gen-certs.sh: openssl verify against ca.pem, serverAuth and the
            Service/loopback SANs on the coordinator's, clientAuth on the worker's,
            keys 0600; a second run reuses the CA
  live      (with --ringmaster/--worker) a coordinator on those certificates:
            /readyz over https with ca.pem, plaintext http refused, a 2-worker job
            of the local launcher through deploy/ringmaster-worker-tls succeeds
            over mutual TLS, a worker without a certificate cannot attach

usage: test_deploy_tls.py [--ringmaster PATH --worker PATH] [--render PATH]
"""
import argparse
import json
import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")
SERVE_TLS = ("--tls-cert", "--tls-key", "--tls-ca", "--http-tls-cert", "--http-tls-key",
             "--api-token-file")
WORKER_TLS = ("--tls-ca", "--tls-cert", "--tls-key")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def flag_values(args, flags, where):
    out = {}
    for f in flags:
        if f not in args:
            fail("%s: no %s in %s" % (where, f, args))
        out[f] = args[args.index(f) + 1]
    return out


def secret_mounts(pod):
    secrets = {v["name"] for v in pod.get("volumes", []) if "secret" in v}
    return secrets


def check_files_mounted(pod, container, paths, where):
    secrets = secret_mounts(pod)
    mounts = [m["mountPath"].rstrip("/") + "/" for m in container.get("volumeMounts", [])
              if m["name"] in secrets]
    for p in paths:
        if not any(p.startswith(m) for m in mounts):
            fail("%s: %s is under no mounted Secret (%s)" % (where, p, mounts))


def pods(docs):
    for d in docs:
        if d.get("kind") in ("Deployment", "Job"):
            yield d["metadata"]["name"], d["spec"]["template"]["spec"]


def check_k8s_coordinator():
    docs = [d for d in yaml.safe_load_all(open(os.path.join(DEPLOY, "k8s", "coordinator.yaml")))
            if d]
    n = 0
    for name, pod in pods(docs):
        for c in pod["containers"]:
            argv = c.get("command", []) + c.get("args", [])
            if "serve" not in argv:
                continue
            n += 1
            where = "coordinator.yaml %s/%s" % (name, c["name"])
            v = flag_values(argv, SERVE_TLS, where)
            check_files_mounted(pod, c, v.values(), where)
            for probe in ("readinessProbe", "livenessProbe"):
                g = c.get(probe, {}).get("httpGet")
                if not g or g.get("scheme") != "HTTPS":
                    fail("%s: %s is not httpGet with scheme HTTPS: %s" % (where, probe, c.get(probe)))
    if n == 0:
        fail("coordinator.yaml: no container runs `ringmaster serve`")
    print("ok   k8s: %d coordinator container(s) with gRPC mTLS, HTTPS, token, HTTPS probes" % n)


def node_validate(text, world):
    r = subprocess.run([os.path.join(ROOT, "tests", "k8s", "run_node.sh"), "validate.mjs",
                        "--expect-world", str(world), "-"], input=text.encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    if r.returncode == 77:
        return "skipped (%s)" % r.stdout.decode().strip().splitlines()[-1]
    if r.returncode != 0:
        fail("validate.mjs refused worker-tls.sh output:\n" + r.stdout.decode())
    return "valid"


def check_worker_manifest(text, world, where):
    filt = os.path.join(DEPLOY, "k8s", "worker-tls.sh")
    r = subprocess.run([filt], input=text.encode(), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=30)
    if r.returncode != 0:
        fail("%s: worker-tls.sh failed: %s" % (where, r.stderr.decode()))
    out = r.stdout.decode()
    jobs = 0
    for name, pod in pods([d for d in yaml.safe_load_all(out) if d]):
        for c in pod["containers"]:
            jobs += 1
            v = flag_values(c.get("args", []), WORKER_TLS, "%s %s" % (where, name))
            check_files_mounted(pod, c, v.values(), "%s %s" % (where, name))
    if jobs == 0:
        fail("%s: no worker container after worker-tls.sh" % where)
    again = subprocess.run([filt], input=out.encode(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
    if again.returncode == 0:
        fail("%s: worker-tls.sh accepted its own output (TLS flags twice)" % where)
    print("ok   %s: worker certificate mounted and passed; validate.mjs: %s"
          % (where, node_validate(out, world)))


def check_k8s_workers(render):
    example = open(os.path.join(DEPLOY, "k8s", "workers.yaml")).read()
    check_worker_manifest(example, 4, "workers.yaml")
    if not render:
        print("note rendered manifests not checked (no --render)")
        return
    for env, world, what in (({}, 4, "rendered train job"),
                             ({"RENDER_COMMAND": "python3 train.py --epochs 3"}, 3,
                              "rendered command job")):
        r = subprocess.run([render, "12", str(world), "ringmaster:7070", "tok", "img:1"],
                           env=dict(os.environ, **env), stdout=subprocess.PIPE, check=True,
                           timeout=30)
        check_worker_manifest(r.stdout.decode(), world, what)


def check_systemd():
    unit = open(os.path.join(DEPLOY, "systemd", "ringmaster.service")).read()
    m = re.search(r"^ExecStart=((?:.*\\\n)*.*)$", unit, re.M)
    argv = shlex.split(m.group(1).replace("\\\n", " "))
    v = flag_values(argv, SERVE_TLS + ("--worker",), "ringmaster.service ExecStart")
    creds = set(re.findall(r"^LoadCredential=([^:]+):", unit, re.M))
    for f in SERVE_TLS:
        name = v[f][len("%d/"):] if v[f].startswith("%d/") else None
        if name not in creds:
            fail("ringmaster.service: %s %s is not a LoadCredential= file" % (f, v[f]))
    if not v["--worker"].endswith("/ringmaster-worker-tls"):
        fail("ringmaster.service: --worker %s does not add the worker certificate" % v["--worker"])
    for name in ("worker.pem", "worker-key.pem", "ca.pem"):
        if name not in creds:
            fail("ringmaster.service: no LoadCredential=%s for the local workers" % name)
    print("ok   systemd: gRPC mTLS, HTTPS, token from credentials; workers via ringmaster-worker-tls")


def check_slurm(tmp, certs):
    fake = os.path.join(tmp, "bin")
    os.makedirs(fake)
    with open(os.path.join(fake, "srun"), "w") as f:
        f.write('#!/bin/sh\necho "srun $*"\n')
    os.chmod(os.path.join(fake, "srun"), 0o755)
    env = dict(os.environ, PATH=fake + ":" + os.environ["PATH"], HOME=tmp, SLURM_NTASKS="4",
               SLURM_JOB_NODELIST="n1", RINGMASTER_COORDINATOR="login1:7070",
               RINGMASTER_JOB="5", RINGMASTER_TOKEN="tok", RINGMASTER_TLS_DIR=certs)
    script = os.path.join(DEPLOY, "slurm", "ringmaster-job.sbatch")
    r = subprocess.run(["bash", script], env=env, stdout=subprocess.PIPE, timeout=30)
    line = [x for x in r.stdout.decode().splitlines() if x.startswith("srun ")]
    if r.returncode != 0 or not line:
        fail("ringmaster-job.sbatch: rc %d, %r" % (r.returncode, r.stdout))
    v = flag_values(line[0].split(), WORKER_TLS, "ringmaster-job.sbatch srun line")
    if v["--tls-cert"] != os.path.join(certs, "worker.pem"):
        fail("ringmaster-job.sbatch: --tls-cert %s" % v["--tls-cert"])
    env["RINGMASTER_TLS_DIR"] = os.path.join(tmp, "nothing")
    if subprocess.run(["bash", script], env=env, stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL, timeout=30).returncode == 0:
        fail("ringmaster-job.sbatch: ran with a RINGMASTER_TLS_DIR without certificates")
    print("ok   slurm: the example script passes the worker certificate")


def x509_text(path):
    return subprocess.run(["openssl", "x509", "-in", path, "-noout", "-text"], check=True,
                          stdout=subprocess.PIPE, timeout=30).stdout.decode()


def check_certs(certs):
    gen = os.path.join(DEPLOY, "gen-certs.sh")
    subprocess.run([gen, "-o", certs, "-d", "2", "DNS:coord.example"], check=True,
                   stdout=subprocess.DEVNULL, timeout=120)
    p = lambda n: os.path.join(certs, n)  # noqa: E731
    subprocess.run(["openssl", "verify", "-CAfile", p("ca.pem"), p("coordinator.pem"),
                    p("worker.pem")], check=True, stdout=subprocess.DEVNULL, timeout=30)
    coord, worker = x509_text(p("coordinator.pem")), x509_text(p("worker.pem"))
    for want in ("TLS Web Server Authentication", "DNS:ringmaster,", "IP Address:127.0.0.1",
                 "DNS:ringmaster.default.svc.cluster.local", "DNS:coord.example"):
        if want not in coord:
            fail("coordinator.pem lacks %s" % want)
    if "TLS Web Client Authentication" not in worker:
        fail("worker.pem is not a client certificate")
    for k in ("ca-key.pem", "coordinator-key.pem", "worker-key.pem"):
        if os.stat(p(k)).st_mode & 0o077:
            fail("%s is readable by others" % k)
    ca = open(p("ca.pem")).read()
    subprocess.run([gen, "-o", certs, "-d", "2"], check=True, stdout=subprocess.DEVNULL,
                   timeout=120)
    if open(p("ca.pem")).read() != ca:
        fail("a second gen-certs.sh run replaced the CA")
    print("ok   certs: openssl verify, server/client usages, SANs, key modes, CA reused")


def check_live(tmp, certs, ringmaster, worker):
    p = lambda n: os.path.join(certs, n)  # noqa: E731
    with open(os.path.join(tmp, "tok"), "w") as f:
        f.write("t0k3n\n")
    env = dict(os.environ, RINGMASTER_WORKER_TLS_DIR=certs, RINGMASTER_WORKER_REAL=worker)
    coord = subprocess.Popen(
        [ringmaster, "serve", "--db", os.path.join(tmp, "db"), "--grpc", "127.0.0.1:0",
         "--http", "127.0.0.1:0", "--api-token-file", os.path.join(tmp, "tok"),
         "--log-dir", os.path.join(tmp, "logs"),
         "--worker", os.path.join(DEPLOY, "ringmaster-worker-tls"),
         "--tls-cert", p("coordinator.pem"), "--tls-key", p("coordinator-key.pem"),
         "--tls-ca", p("ca.pem"), "--http-tls-cert", p("coordinator.pem"),
         "--http-tls-key", p("coordinator-key.pem")],
        env=env, stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "coord.log"), "wb"))
    try:
        addrs = {}
        deadline = time.time() + 20
        while len(addrs) < 2 and time.time() < deadline:
            line = coord.stdout.readline().decode()
            if not line:
                break
            m = re.search(r"(grpc|http) listening on (\S+)", line)
            if m:
                addrs[m.group(1)] = m.group(2)
        if len(addrs) < 2:
            fail("coordinator did not start: %s" % open(os.path.join(tmp, "coord.log")).read())
        ctx = ssl.create_default_context(cafile=p("ca.pem"))
        body = urllib.request.urlopen("https://%s/readyz" % addrs["http"], context=ctx,
                                      timeout=10).read()
        if b"ready" not in body:
            fail("/readyz over https: %r" % body)
        try:
            urllib.request.urlopen("http://%s/healthz" % addrs["http"], timeout=5).read()
            fail("plaintext http was served")
        except (OSError, urllib.error.URLError, http_errors()):
            pass
        cli = [ringmaster, "--cacert", p("ca.pem"), "--server", "https://" + addrs["http"],
               "--token-file", os.path.join(tmp, "tok"), "--json"]
        spec = {"name": "tls-local", "world_size": 2, "steps": 10, "launcher": "local",
                "workload": "allreduce", "workload_options": "count=256"}
        job = submit(cli, spec)
        state = wait_state(cli, job["id"])
        if state != "succeeded":
            fail("local job over mutual TLS ended %s: %s" % (state, worker_logs(tmp, job["id"])))
        plain = submit(cli, {"name": "plain", "world_size": 1, "launcher": "none",
                             "workload": "allreduce"})
        r = subprocess.run([worker, "--coordinator", addrs["grpc"], "--job", str(plain["id"]),
                            "--token", plain["worker_token"]],
                           env=dict(os.environ, RINGMASTER_COORDINATOR_TIMEOUT_MS="3000"),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        if r.returncode == 0:
            fail("a worker without a certificate joined")
        print("ok   live: https /readyz, http refused, local job via ringmaster-worker-tls "
              "succeeded over mutual TLS, a worker without a certificate refused")
    finally:
        coord.terminate()
        try:
            coord.wait(timeout=30)
        except subprocess.TimeoutExpired:
            coord.kill()
            coord.wait(timeout=10)


def http_errors():
    import http.client
    return http.client.HTTPException


def submit(cli, spec):
    r = subprocess.run(cli[:1] + ["submit", "-"] + cli[1:], input=json.dumps(spec).encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    if r.returncode != 0:
        fail("submit over https: rc %d: %s" % (r.returncode, r.stdout.decode()))
    d = json.loads(r.stdout)
    job = d.get("job", d)
    job.setdefault("worker_token", d.get("worker_token") or d.get("token"))
    return job


def wait_state(cli, job_id, timeout=60):
    deadline = time.time() + timeout
    state = None
    while time.time() < deadline:
        r = subprocess.run(cli[:1] + ["job", str(job_id)] + cli[1:], stdout=subprocess.PIPE,
                           timeout=30)
        d = json.loads(r.stdout)
        state = d.get("job", d).get("state")
        if state in ("succeeded", "failed", "cancelled"):
            return state
        time.sleep(0.2)
    return state


def worker_logs(tmp, job_id):
    d = os.path.join(tmp, "logs", "job-%s" % job_id)
    out = []
    for n in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        out.append(open(os.path.join(d, n), errors="replace").read()[-1500:])
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ringmaster")
    ap.add_argument("--worker")
    ap.add_argument("--render")
    a = ap.parse_args()
    if not shutil.which("openssl"):
        print("SKIP: no openssl CLI")
        return 77
    tmp = tempfile.mkdtemp(prefix="rm-deploy-")
    try:
        certs = os.path.join(tmp, "certs")
        check_k8s_coordinator()
        check_k8s_workers(a.render)
        check_systemd()
        check_certs(certs)
        check_slurm(tmp, certs)
        if a.ringmaster and a.worker:
            check_live(tmp, certs, a.ringmaster, a.worker)
        else:
            print("note live check not run (no --ringmaster/--worker)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
