"""A command job of 4 workers running examples/c/session_allreduce (the
session API from C): every agent starts the program, every program joins,
all-reduces and verifies 60 steps exactly, reports them, and leaves; the job
succeeds, and each agent logs its
program's exit status 0."""
import sess


def test(env):
    sess.start(env)
    job = sess.submit(env, "c-session", [sess.EXAMPLE, "--steps", "60", "--step-ms", "1"],
                      steps=60)
    j = sess.wait_final(env, job, timeout=120)
    assert j.state == env.m.JOB_STATE_SUCCEEDED, (j, sess.log(env, job, 0)[-3000:])
    assert j.step == 60 and j.world == 4 and j.generation == 1, j
    for i in range(4):
        b = sess.banners(env, job, i)
        assert len(b) == 1 and b[0][1] == 1 and b[0][3] == 4, (i, b)
        sess.wait_log(env, job, i, r"ringmaster-worker: program exited with status 0")
    ranks = sorted(sess.banners(env, job, i)[0][2] for i in range(4))
    assert ranks == [0, 1, 2, 3], ranks
    kinds = [e.kind for e in sess.events(env, job)]
    assert kinds.count("worker_joined") >= 4, kinds
    for i in range(4):
        assert "wrong" not in sess.log(env, job, i), sess.log(env, job, i)


sess.main(test)
