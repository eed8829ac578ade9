"""cmdtest.py - what the `workload: command` tests share.

Their command line: the `ringmaster` binary, the worker binary and the
example program a job's command runs (tests/command/CMakeLists.txt).
"""
import argparse


def args():
    """--ringmaster, --worker and --example, parsed."""
    p = argparse.ArgumentParser()
    for name in ("--ringmaster", "--worker", "--example"):
        p.add_argument(name, required=True)
    return p.parse_args()
