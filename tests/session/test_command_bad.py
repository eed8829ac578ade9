"""Command jobs whose program is broken: each job fails with a reason that
says which worker and why, with the program's last stderr line, and nothing
hangs (every wait here has a deadline):
  - a command that does not exist   -> "status 127", "cannot run"
  - a program that exits 1 at once  -> "status 1" and its last stderr line
  - a Python program that raises    -> the exception's last line
  - a program that never joins      -> "did not join" within the agent's
                                       RINGMASTER_COORDINATOR_TIMEOUT_MS
"""
import sess

PY = "/usr/bin/python3"


def fails(env, name, command, *words, timeout=60):
    job = sess.submit(env, name, command, world=2)
    j = sess.wait_final(env, job, timeout=timeout)
    assert j.state == env.m.JOB_STATE_FAILED, (name, j)
    for w in words:
        assert w in j.reason, (name, w, j.reason)
    ev = [e for e in sess.events(env, job) if e.kind == "program_exited"]
    assert ev, name
    return j


def test(env):
    sess.start(env, coordinator_timeout_ms=4000)
    fails(env, "nosuch", ["/nonexistent/ringmaster-test-program", "--x"],
          "status 127", "cannot run")
    fails(env, "exit1", ["/bin/sh", "-c", "echo 'bad config: no data' >&2; exit 1"],
          "status 1", "bad config: no data")
    fails(env, "raises", [PY, "-c", "raise RuntimeError('model exploded')"],
          "RuntimeError: model exploded")
    fails(env, "nojoin", ["/bin/sleep", "600"], "did not join", timeout=90)


sess.main(test)
