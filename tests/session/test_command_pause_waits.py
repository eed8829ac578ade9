"""What needs the coordinator waits for it across its stall, within its own
deadline, and says so (worker/session/session_live.c COORDINATOR AWAY;
docs/liveness.md).

A 3-worker command job running examples/c/session_allreduce; while its
workers wait on the coordinator it is SIGSTOPped for 3x the job's heartbeat
timeout, then SIGCONTinued:

  gate      straggler_policy deadline (every step's gradient goes through
            the step gate, rm_session_allreduce_step); heartbeat timeout
            2 s, so the pause (6 s) outlasts a gate call's own deadline
            (its wait plus 5 s);
  barrier   every 5th step a named barrier (1 s deadline); heartbeat
            timeout 5 s, so the pause (15 s) outlasts the arrival's own
            deadline (the barrier's plus 10 s; the workers train on for
            about a second of it before they arrive).

Checked in each: the job succeeds in its first generation with its 3
members and no worker lost, every program finished without re-forming
("reforms":0), and a worker log says it waited for the coordinator at that
wait ("waiting for the coordinator at the step gate of step N" /
"... at barrier 'sync'") with its deadline moved on, then how long it
waited. Before, the wait gave up at its own deadline: the step failed and
the job re-formed (or the program stopped), and no line said why."""
import re
import signal
import time

import sess

WAITING = re.compile(r"waiting for the coordinator at (.+?): it did not answer for "
                     r"[0-9.]+ s of this wait; the wait's deadline moves on")
DONE = re.compile(r"waiting for the coordinator at (.+?): done after ([0-9.]+) s, "
                  r"([0-9.]+) s of it with the coordinator away")


def run(env, kind, hb_ms, args, **spec):
    job = sess.submit(env, "pause-" + kind,
                      [sess.EXAMPLE, "--steps", "400", "--step-ms", "5", "--count", "256"] + args,
                      world=3, steps=400, heartbeat_timeout_ms=hb_ms, **spec)
    st = env.m
    j0 = env.wait_job(job.id, lambda j: j.state == st.JOB_STATE_RUNNING and j.step >= 20, 90)
    env.coord.send_signal(signal.SIGSTOP)
    try:
        time.sleep(3 * hb_ms / 1000.0)
    finally:
        env.coord.send_signal(signal.SIGCONT)
    j = sess.wait_final(env, job, timeout=120)
    logs = [sess.log(env, job, i) for i in range(3)]
    assert j.state == st.JOB_STATE_SUCCEEDED, (kind, j, logs[0][-3000:])
    assert j.generation == j0.generation and j.world == 3, (kind, j0, j)
    lost = [e for e in sess.events(env, job) if e.kind == "worker_lost"]
    assert not lost, (kind, lost)
    for i in range(3):
        m = sess.wait_log(env, job, i, r'session_allreduce: done (\{.*\})')
        assert '"reforms":0' in m.group(1), (kind, i, m.group(1))
    waited = [w for log in logs for w in WAITING.findall(log)]
    done = [d for log in logs for d in DONE.findall(log)]
    assert waited, (kind, [log[-2000:] for log in logs])
    want = "barrier 'sync'" if kind == "barrier" else "the step gate of step "
    assert all(w.startswith(want) for w in waited), (kind, waited)
    # each wait that said so ended, answered, and most of it was the pause
    assert len(done) == len(waited), (kind, waited, done)
    longest = max(float(d[1]) for d in done)
    assert longest > hb_ms / 1000.0, (kind, done)
    print(kind, ": pause of %.0f s;" % (3 * hb_ms / 1000.0), len(waited),
          "waits said so; longest %.1f s" % longest)


def test(env):
    sess.start(env)
    run(env, "gate", 2000, ["--gradient"], straggler_policy="deadline")
    run(env, "barrier", 5000, ["--barrier-every", "5", "--barrier-ms", "1000"])


sess.main(test)
