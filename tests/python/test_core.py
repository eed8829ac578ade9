"""python.core.*: the core API without a coordinator, real processes.

  test_core.py check N   N ranks of core_worker.py check (in-place numpy and
                         torch all-reduce for every dtype/op/algorithm, data
                         pointers unchanged, broadcast, allgather,
                         reduce_scatter, alltoall, barrier, bad buffers)
  test_core.py device N  N ranks of core_worker.py device (collectives on
                         device arrays given by __cuda_array_interface__;
                         77 when the library has no GPU runtime and no
                         stand-in GPU)
  test_core.py kill N    N ranks all-reducing; rank 1 is SIGKILLed: every
                         survivor raises PeerLost naming rank 1 within the
                         data-plane deadline (RINGMASTER_TIMEOUT_MS=15000)
"""
import json
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rmtest  # noqa: E402

WORKER = os.path.join(rmtest.HERE, "core_worker.py")


def group(mode, n, d):
    peers = ",".join("127.0.0.1:%d" % p for p in rmtest.free_ports(n))
    return [rmtest.Proc([rmtest.PY, WORKER, mode, "--rank", str(r), "--peers", peers],
                        rmtest.env(), os.path.join(d, "rank%d.log" % r), "rank %d" % r)
            for r in range(n)]


def check(n):
    d = rmtest.tmpdir("core")
    procs = group("check", n, d)
    codes = rmtest.wait_all(procs, 150)
    for r, (p, c) in enumerate(zip(procs, codes)):
        out = p.output()
        assert c == 0 and ("OK rank %d" % r) in out, "rank %d exit %d:\n%s" % (r, c, out[-3000:])
    print("%d ranks: all checks passed" % n)


def device(n):
    import ringmaster
    from ringmaster import _lib
    if _lib.session_fn("rm_testhook_gpu_alloc") is None:
        print("SKIP: this libringmaster has no test hooks (device memory for the test)")
        sys.exit(77)
    d = rmtest.tmpdir("device")
    procs = group("device", n, d)
    codes = rmtest.wait_all(procs, 150)
    for r, (p, c) in enumerate(zip(procs, codes)):
        out = p.output()
        if c == 0 and ("OK rank %d" % r) in out:
            continue
        if "no device memory" in out:
            print("SKIP: no GPU runtime (no GPU, and RINGMASTER_TEST_GPU does not name the tests' doubles)")
            sys.exit(77)
        raise AssertionError("rank %d exit %d:\n%s" % (r, c, out[-3000:]))
    print("%d ranks: device checks passed (%s)" % (n, ringmaster.library_path))


def kill(n):
    d = rmtest.tmpdir("kill")
    procs = group("kill", n, d)
    for p in procs:
        rmtest.wait_for(p, r"READY", 60)
    time.sleep(0.3)
    victim = 1
    t0 = time.monotonic()
    procs[victim].kill(signal.SIGKILL)
    survivors = [p for r, p in enumerate(procs) if r != victim]
    codes = rmtest.wait_all(survivors, 40)
    took = time.monotonic() - t0
    procs[victim].p.wait()
    for p, c in zip(survivors, codes):
        out = p.output()
        m = re.search(r"ERROR (\{.*\})", out)
        assert c == 0 and m, "%s exit %d, no ERROR line:\n%s" % (p.name, c, out[-3000:])
        e = json.loads(m.group(1))
        print("%s: %s %s peer %s after %.2f s: %s" % (p.name, e["cls"], e["status"], e["peer"],
                                                      e["seconds"], e["message"]))
        assert e["cls"] == "PeerLost" and e["status"] == "RM_ERR_PEER_LOST", e
        assert e["peer"] == victim, "survivor names peer %s, not %d: %s" % (e["peer"], victim, e)
        assert "rank %d" % victim in e["message"], e
    assert took < 30, "survivors took %.1f s" % took


def main():
    rmtest.require(torch=True)
    mode, n = sys.argv[1], int(sys.argv[2])
    rmtest.main(lambda: {"check": check, "kill": kill, "device": device}[mode](n))


if __name__ == "__main__":
    main()
