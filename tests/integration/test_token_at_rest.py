"""Worker tokens at rest ("Worker tokens are stored as hashes and
compared in constant time"; coordinator/store/store_key.c).

(1) A running job's token appears nowhere in the SQLite file or its -wal;
    the key file <db>.key is 32 bytes, mode 0600.
(2) Workers authenticate with the token; a wrong one (same length, one
    digit changed) is refused with UNAUTHENTICATED.
(3) After a SIGKILL and restart, the workers re-join (authenticate) at
    generation 2, the coordinator still hands the token to a launcher (the k8s
    launcher's manifest, rendered from the restarted coordinator's record),
    and a replacement worker started with that token after a member loss
    (on_failure replace) authenticates and the job re-forms at generation 3.
(4) A key file with group/other permissions, of the wrong size, or missing
    next to a database with sealed tokens: the coordinator refuses to start,
    naming the file.
(5) Migration 0010: a database written before it (user_version 9, plaintext
    token column) is sealed at the first start: the old token leaves the
    file and -wal, and workers started with it still authenticate."""
import json
import os
import re
import sqlite3
import subprocess
import urllib.request

import rmtest


def db_bytes(env):
    out = b""
    for suffix in ("", "-wal"):
        try:
            with open(env.db + suffix, "rb") as f:
                out += f.read()
        except FileNotFoundError:
            pass
    return out


def manifest_token(env, http, job_id):
    req = urllib.request.Request("http://%s/api/v1/jobs/%d/k8s-manifest" % (http, job_id),
                                 headers={"Authorization": "Bearer " + env.token})
    with urllib.request.urlopen(req, timeout=10) as r:
        text = r.read().decode()
    m = re.search(r"^\s*token:\s*\"?([0-9a-f]+)\"?\s*$", text, re.M)
    assert m, text
    return m.group(1)


def refused_start(env, why):
    """serve on env.db must exit non-zero, naming the key file and why."""
    p = subprocess.run([env.a.coordinator, "serve", "--db", env.db, "--grpc", "127.0.0.1:0",
                        "--api-token", env.token], capture_output=True, timeout=30)
    err = p.stderr.decode(errors="replace") + p.stdout.decode(errors="replace")
    assert p.returncode != 0 and env.db + ".key" in err and why in err, (p.returncode, err)


def grpc_code(env, fn):
    try:
        fn()
    except env.grpc.RpcError as e:
        return e.code()
    return env.grpc.StatusCode.OK


def part_running_restart_replace(env):
    p = env.start_coordinator(extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(p)
    job = env.submit(name="token-at-rest", world_size=2, steps=10**6, heartbeat_timeout_ms=3000,
                     workload="synthetic", workload_options="bytes=4096,compute_ms=5",
                     on_failure="replace", max_restarts=2)
    tok = job.token
    assert re.fullmatch(r"[0-9a-f]{48}", tok), tok
    key = os.stat(env.db + ".key")
    assert key.st_size == 32 and (key.st_mode & 0o777) == 0o600, oct(key.st_mode)
    ws = [env.start_worker(job, i) for i in range(2)]
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 20, 60)
    # (2) a wrong token of the same length is refused before anything else
    bad = tok[:-1] + ("0" if tok[-1] != "0" else "1")
    hb = lambda t: env.worker.Heartbeat(env.m.HeartbeatRequest(  # noqa: E731
        job_id=job.id, token=t, generation=1, worker_id=10**9), timeout=10)
    assert grpc_code(env, lambda: hb(bad)) == env.grpc.StatusCode.UNAUTHENTICATED
    assert grpc_code(env, lambda: hb("")) == env.grpc.StatusCode.UNAUTHENTICATED
    assert grpc_code(env, lambda: hb(tok)) == env.grpc.StatusCode.NOT_FOUND  # token ok
    # (1) the file holds no token
    data = db_bytes(env)
    assert tok.encode() not in data and tok.upper().encode() not in data
    assert bytes.fromhex(tok) not in data
    row = sqlite3.connect(env.db).execute(
        "SELECT token, token_verifier, token_salt FROM jobs WHERE id=?", (job.id,)).fetchone()
    assert row[0] == "" and len(row[1]) == 64 and len(row[2]) == 32, row
    # (3) restart: re-join, launcher hand-off, replacement
    addr = env.addr
    env.kill_coordinator()
    p = env.start_coordinator(addr, extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(p)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.generation == 2, 60)
    handed = manifest_token(env, http, job.id)
    assert handed == tok, (handed, tok)
    ws[0].kill()
    ws[0].wait(timeout=10)
    env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_FORMING, 30)
    job.token = handed  # what the launcher gives the replacement
    ws.append(env.start_worker(job, 2))
    j = env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.generation == 3
                     and j.world == 2, 60)
    assert "joined" in env.worker_log(2) or "rank" in env.worker_log(2), env.worker_log(2)
    data = db_bytes(env)
    assert tok.encode() not in data
    print("token at rest: job %d ran, restarted, replaced at generation %d; no token bytes in "
          "%d bytes of db+wal" % (job.id, j.generation, len(data)))
    env.jobs.CancelJob(env.m.CancelJobRequest(job_id=job.id, reason="test over"), timeout=10)
    for w in ws[1:]:
        rmtest.wait_exit(w, 30)
    env.kill_coordinator()


def part_key_file_checks(env):
    kp = env.db + ".key"
    os.chmod(kp, 0o644)
    refused_start(env, "chmod 600")
    os.chmod(kp, 0o600)
    with open(kp, "rb") as f:
        good = f.read()
    with open(kp, "wb") as f:
        f.write(good[:16])
    refused_start(env, "exactly 32 bytes")
    with open(kp, "wb") as f:
        f.write(good)
    os.rename(kp, kp + ".bak")
    refused_start(env, "missing")
    with open(kp, "wb") as f:  # another database's key (0600)
        f.write(os.urandom(32))
    os.chmod(kp, 0o600)
    refused_start(env, "another database")
    os.replace(kp + ".bak", kp)
    with open(kp, "rb") as f:
        assert f.read() == good


def part_migration(env):
    """A pre-0010 database: user_version 9, the token in plain text."""
    for suffix in ("", "-wal", "-shm", ".key"):
        try:
            os.unlink(env.db + suffix)
        except FileNotFoundError:
            pass
    env.start_coordinator()
    job = env.submit(name="legacy", world_size=2, steps=10**6, heartbeat_timeout_ms=3000,
                     workload="synthetic", workload_options="bytes=4096,compute_ms=5")
    env.kill_coordinator()
    legacy = "ab" * 24  # a 0001-era token: 48 hex digits
    db = sqlite3.connect(env.db)
    db.execute("UPDATE jobs SET token=? WHERE id=?", (legacy, job.id))
    # what 0010 and every later migration added: a database of that age
    # has none of it
    for col in ("token_salt", "token_sealed", "token_verifier", "secagg_bits",
                "secagg_clip", "secagg_scale", "secagg_threshold", "secagg_neighbours",
                "secure_recovered_steps", "secure_dropouts", "env_salt", "env_sealed", "env_mac"):
        db.execute("ALTER TABLE jobs DROP COLUMN " + col)
    db.execute("ALTER TABLE workers DROP COLUMN transports")  # 0012
    db.execute("ALTER TABLE step_summaries DROP COLUMN last_metrics")  # 0014
    db.execute("PRAGMA user_version=9")
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    os.unlink(env.db + ".key")
    assert legacy.encode() in db_bytes(env)  # the old format, as it was
    env.start_coordinator()
    assert "applied migration 0010" in open(os.path.join(env.dir, "coord.log")).read()
    data = db_bytes(env)
    assert legacy.encode() not in data, "plaintext token left after the sweep"
    job.token = legacy
    ws = [env.start_worker(job, 10 + i) for i in range(2)]
    j = env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_RUNNING and j.step >= 10, 60)
    hb = lambda t: env.worker.Heartbeat(env.m.HeartbeatRequest(  # noqa: E731
        job_id=job.id, token=t, generation=j.generation, worker_id=10**9), timeout=10)
    assert grpc_code(env, lambda: hb("cd" * 24)) == env.grpc.StatusCode.UNAUTHENTICATED
    print("token at rest: migrated job %d runs with its pre-0010 token; the file no longer "
          "holds it" % job.id)
    env.jobs.CancelJob(env.m.CancelJobRequest(job_id=job.id, reason="test over"), timeout=10)
    for w in ws:
        rmtest.wait_exit(w, 30)


def test(env):
    part_running_restart_replace(env)
    part_key_file_checks(env)
    part_migration(env)


rmtest.main(test)
