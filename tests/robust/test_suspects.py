"""End to end through the coordinator (local launcher, 10 real workers):
a `train` job with aggregation krum, f = 2, and the last 2 ranks attacking
(signflip scaled by 4, then gaussian) ends with byzantine_suspect events naming exactly
ranks 8 and 9, the REST-visible suspect flag on exactly those workers, and
the job succeeded with ranks bitwise equal (verify=5); the same job with no
attack names nobody. The data plane's rm_aggregate marks outliers
(worker/aggregate/aggregate.c "excluded"), the coordinator counts them over
a window (coordinator/core/suspect.c: M = 10 of the last W = 20 steps)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "recovery"))
import rc  # noqa: E402


def run(env, name, attack):
    extra = "batch=640,hidden=32,lr=0.05" + (",attack=%s,attackers=2" % attack if attack else "")
    job = env.submit(name=name, world_size=10, steps=60, workload="train", launcher="local",
                     workload_options=rc.train_opts(env, extra), heartbeat_timeout_ms=10000,
                     aggregation="krum", aggregation_f=2)
    j = rc.wait_final(env, job, timeout=240)
    assert j.state == env.m.JOB_STATE_SUCCEEDED, (name, j, rc.launcher_log(env, job, 0)[-2000:])
    ev = rc.events(env, job)
    named = sorted({e.rank for e in ev if e.kind == "byzantine_suspect"})
    return named, [e.message for e in ev if e.kind == "byzantine_suspect"]


def test(env):
    rc.start_local_coordinator(env)
    # signflip scaled by 4 (the Krum paper's reversed gradient): a plain -g
    # from a worker whose own batch is this noisy is no farther from the
    # honest gradients than they are from each other, so nothing can name it
    for attack in ("signflip,attack_scale=4", "gaussian"):
        named, words = run(env, "krum-" + attack.split(",")[0], attack)
        assert named == [8, 9], (attack, named, words)
        assert all("krum" in w for w in words), words
    named, words = run(env, "krum-clean", None)
    assert named == [], ("clean run named", named, words)


rc.main_local(test)
