"""benchargs.py - the recovery benchmarks' own options, taken out of sys.argv
before the test harness (tests/recovery/rc.py -> rmtest) parses the rest at
import."""
import sys


def take_flag(flag, default):
    """`--flag VALUE` from sys.argv (removed from it), or default."""
    if flag in sys.argv:
        i = sys.argv.index(flag)
        v = sys.argv[i + 1]
        del sys.argv[i:i + 2]
        return v
    return default
