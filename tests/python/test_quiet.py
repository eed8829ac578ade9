"""python.quiet: the library is quiet inside a user's program. Two ranks of a
small program (ringmaster.init() from the torchrun variables, one
all-reduce, finalize) run twice:

  without RINGMASTER_LOG_LEVEL   no line at INFO or DEBUG from libringmaster on
                                 stderr (its transport and device probes were
                                 printed at INFO on every rank before)
  RINGMASTER_LOG_LEVEL=info      the same program prints them (so the first
                                 check sees what it looks for, and the knob
                                 works)
Both runs' all-reduce results are right.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rmtest  # noqa: E402

PROG = r"""
import numpy as np, ringmaster
ringmaster.init()
x = np.full(4, ringmaster.rank() + 1.0, np.float32)
ringmaster.allreduce(x, "sum")
print("RESULT {\"sum\": %s}" % float(x[0]), flush=True)
ringmaster.finalize()
"""
# the library's log line: "<time>Z <E|W|I|D> ringmaster[<pid>] ..."
LINE = re.compile(r"^\S+Z ([EWID]) ringmaster\[\d+\]", re.M)


def run(level):
    extra = {} if level is None else {"RINGMASTER_LOG_LEVEL": level}
    saved = os.environ.pop("RINGMASTER_LOG_LEVEL", None)
    try:
        outs = rmtest.run_group("quiet-%s" % level, 2, lambda r: [rmtest.PY, "-c", PROG],
                                extra_env=extra)
    finally:
        if saved is not None:
            os.environ["RINGMASTER_LOG_LEVEL"] = saved
    for o in outs:
        r = rmtest.results(o)
        assert len(r) == 1 and r[0]["sum"] == 3.0, o[-2000:]
    return [LINE.findall(o) for o in outs], outs


def test():
    quiet, outs = run(None)
    for lv, o in zip(quiet, outs):
        assert not [x for x in lv if x in "ID"], "INFO/DEBUG lines by default:\n" + o[-2000:]
    levels, outs = run("info")
    assert all("I" in lv for lv in levels), "no INFO line at RINGMASTER_LOG_LEVEL=info:\n" \
        + outs[0][-2000:]
    print("by default: %s line(s) at WARN/ERROR, none at INFO; at info: %d INFO lines per rank"
          % (sum(len(x) for x in quiet), min(lv.count("I") for lv in levels)))


if __name__ == "__main__":
    rmtest.require(torch=False)
    rmtest.main(test)
