"""A command job's spec is applied or the job says so (SPEC USE,
coordinator/core/spec_use.c, worker/session/session_use.c): the C session
program examples/c/session_allreduce all-reduces its vector with a plain
rm_allreduce. Under secure_aggregation the library refuses that call before
any byte is sent and the job fails with words naming what was asked, what
happened and what to call; the same under a robust aggregation (median).
Never a success: before SPEC USE both jobs succeeded with the spec
ignored. Under straggler_policy backup the same plain all-reduce is not
refused (it is still correct): the job succeeds with one
straggler_policy_unused event naming what to call."""
import sess


def check_failed(env, job, words):
    j = sess.wait_final(env, job, timeout=120)
    assert j.state == env.m.JOB_STATE_FAILED, (j, sess.log(env, job, 0)[-3000:])
    for w in words:
        assert w in j.reason, (w, j.reason)
    # the refusal came before the first step's all-reduce finished: no step
    assert j.step == 0, j
    for i in range(4):
        assert "wrong" not in sess.log(env, job, i), sess.log(env, job, i)


def test(env):
    sess.start(env)
    cmd = [sess.EXAMPLE, "--steps", "20", "--step-ms", "1"]
    job = sess.submit(env, "plain-under-secagg", cmd, steps=20, secagg_bits=32)
    check_failed(env, job, ["spec not applied", "secure_aggregation",
                            "refused before it was sent", "rm_session_secure_allreduce"])
    job = sess.submit(env, "plain-under-median", cmd, steps=20, aggregation="median",
                      aggregation_f=1)
    check_failed(env, job, ["spec not applied", "robust aggregation", "refused",
                            "rm_aggregate"])
    job = sess.submit(env, "plain-under-backup", cmd, steps=20, straggler_policy="backup",
                      backup_workers=1)
    j = sess.wait_final(env, job, timeout=120)
    assert j.state == env.m.JOB_STATE_SUCCEEDED and j.step == 20, j
    unused = [e for e in sess.events(env, job) if e.kind == "straggler_policy_unused"]
    assert len(unused) == 1, [(e.kind, e.message) for e in sess.events(env, job)]
    assert "backup" in unused[0].message and "rm_session_allreduce_step" in unused[0].message, \
        unused[0].message


sess.main(test)
