"""Named metrics of a step (perplexity, lr, ...) through the real
coordinator: ReportStep's `metrics` (messages.proto StepMetric) from a gRPC
client (stubs generated from the .proto), REST /steps, the SQLite step
summaries, a coordinator SIGKILL and restart.

Checked:
  * every report's metrics are in the live window (REST /steps "metrics",
    exact values), and a step without metrics has {};
  * a report whose metrics break a rule (a name with a space, "loss", "",
    32 bytes, a digit first, the same name twice, NaN, +inf, 9 metrics) is
    refused with INVALID_ARGUMENT whose words name the metric and the rule,
    and is not stored (the step is not in /steps);
  * after SIGKILL and restart on the same database, the reloaded history
    (one sample per stored summary of up to 16 steps) carries the last value
    of each metric reported in the summary's window, bit for bit (%.17g),
    including one reported at a single step mid-window; a window whose
    metric names would pass 8 is written before the new names enter it, so
    no metric's value is left out."""
import math
import time

import rmtest

READ = "http://%s/api/v1/jobs/%d/steps?limit=100000"


def steps_of(http, job_id, rank):
    return {s["step"]: s for s in rmtest.get_json(READ % (http, job_id))["steps"]
            if s["rank"] == rank}


def ppl(step):
    return math.exp(4.0 / math.sqrt(step)) + 1e-13 * step  # not round in binary


def metrics_of(step):
    """What rank 0 reports at step: perplexity and lr on 1..33 (eval/loss
    too at 20), eight x-names from 34 (past the 8-name room of the window
    that began at 33), none at 50."""
    if step <= 33:
        m = {"perplexity": ppl(step), "lr": 0.1 / step}
        if step == 20:
            m["eval/loss"] = 1.0 / 3.0
        return m
    if step < 50:
        return {"x%d" % k: k + step / 7.0 for k in range(8)}
    return {}


def report(env, ids, step, metrics):
    m = env.m
    return env.worker.ReportStep(m.ReportStepRequest(
        step=step, compute_ms=1.0, comm_ms=0.5, loss=2.0, accuracy=0.5,
        metrics=[m.StepMetric(name=k, value=v) for k, v in metrics.items()], **ids), timeout=5)


def test(env):
    g = env.grpc
    p = env.start_coordinator(extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(p)
    job = env.submit(name="metrics", world_size=2, steps=1000, heartbeat_timeout_ms=60000)
    res = env.join_all(job, 2, 32100)
    ids = [dict(job_id=job.id, token=job.token, generation=r.generation, worker_id=r.worker_id)
           for r in res]
    r0 = [i for i, r in enumerate(res) if r.rank == 0][0]
    for step in range(1, 51):
        report(env, ids[r0], step, metrics_of(step))
        report(env, ids[1 - r0], step, {})

    bad = [({"bad name": 1.0}, "not allowed"), ({"loss": 1.0}, "step's own field"),
           ({"": 1.0}, "empty"), ({"a" * 32: 1.0}, "longer than 31 bytes"),
           ({"1st": 1.0}, "not allowed"), ({"nan": float("nan")}, "NaN"),
           ({"inf": float("inf")}, "infinite"),
           ({"m%d" % k: 1.0 for k in range(9)}, "9 metrics in one step; at most 8")]
    for metrics, words in bad:
        try:
            report(env, ids[r0], 51, metrics)
            raise AssertionError("metrics %r accepted" % (metrics,))
        except g.RpcError as e:
            assert e.code() == g.StatusCode.INVALID_ARGUMENT, (metrics, e.code())
            assert words in e.details() and "step 51" in e.details(), (metrics, e.details())
    m = env.m
    try:  # the same name twice (a dict cannot say it)
        env.worker.ReportStep(m.ReportStepRequest(step=51, metrics=[
            m.StepMetric(name="lr", value=1.0), m.StepMetric(name="lr", value=2.0)],
            **ids[r0]), timeout=5)
        raise AssertionError("a metric twice accepted")
    except g.RpcError as e:
        assert e.code() == g.StatusCode.INVALID_ARGUMENT and "'lr' is reported twice" in \
            e.details(), e.details()

    live = steps_of(http, job.id, 0)
    assert sorted(live) == list(range(1, 51)), sorted(live)[-5:]  # 51 never stored
    for step, s in live.items():
        assert s["metrics"] == metrics_of(step), (step, s["metrics"], metrics_of(step))
    assert all(s["metrics"] == {} for s in steps_of(http, job.id, 1).values())

    addr = env.addr
    env.kill_coordinator()
    time.sleep(0.3)
    p = env.start_coordinator(addr, extra=["--http", "127.0.0.1:0"])
    http = rmtest.http_addr(p)
    back = steps_of(http, job.id, 0)
    # summaries: 1..16, 17..32, 33 (written early: x0..x7 did not fit), 34..49;
    # 50 was in the window the SIGKILL lost
    assert sorted(back) == [16, 32, 33, 49], sorted(back)
    assert back[16]["metrics"] == metrics_of(16), back[16]
    assert back[32]["metrics"] == dict(metrics_of(32), **{"eval/loss": 1.0 / 3.0}), back[32]
    assert back[33]["metrics"] == metrics_of(33), back[33]
    assert back[49]["metrics"] == metrics_of(49), back[49]
    assert all(s["metrics"] == {} for s in steps_of(http, job.id, 1).values())
    print("metrics after restart: %s" % {k: sorted(v["metrics"]) for k, v in back.items()})
    env.jobs.CancelJob(env.m.CancelJobRequest(job_id=job.id, reason="test over"), timeout=10)


rmtest.main(test)
