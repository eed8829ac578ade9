"""test_data_plane_impostor.py - an outsider on a worker's data port during
formation, against a real coordinator and real worker processes (TCP).

Worker A is pinned to rank 0 of a 2-worker job (RINGMASTER_LAUNCH_INDEX),
so it accepts rank 1's connection. Once A listens, and before worker B (rank
1) exists, an outsider connects to A's data port and sends a well-formed
48-byte HELLO for (job, generation 1, rank 1, world 2), with no proof, and
keeps the connection open. Then B starts.

  must hold   A refuses the outsider (its log says "HELLO without proof of
              membership"), the job forms with A and B in generation 1 and
              succeeds

Before data-plane keys, A took the outsider as rank 1 (first claimant wins)
and refused the real B as a duplicate: generation 1 never formed.
"""
import os
import socket
import struct
import sys
import time

import rmtest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from rmtestutil import free_port  # noqa: E402


def test(env):
    env.start_coordinator()
    job = env.submit(name="impostor", world_size=2, steps=5, workload="allreduce",
                     workload_options="count=1000,dtype=f32")
    pa, pb = free_port(), free_port()
    tcp = {"RINGMASTER_TRANSPORTS": "tcp", "RINGMASTER_LAUNCH_WORLD": "2",
           "RINGMASTER_CONNECT_TIMEOUT_MS": "8000"}
    a = env.start_worker(job, 0, extra=("--data-addr", "127.0.0.1:%d" % pa),
                         env=dict(tcp, RINGMASTER_LAUNCH_INDEX="0"))
    out = None
    deadline = time.time() + 20
    while out is None and time.time() < deadline:
        try:
            out = socket.create_connection(("127.0.0.1", pa), timeout=1)
        except OSError:
            time.sleep(0.05)
    assert out is not None, "worker A never listened on %d" % pa
    # magic, version 2, HELLO, job, generation 1, rank 1, world 2, length 0
    out.sendall(b"RMFR" + struct.pack("<HHQQQQQ", 2, 2, job.id, 1, 1, 2, 0))
    b = env.start_worker(job, 1, extra=("--data-addr", "127.0.0.1:%d" % pb),
                         env=dict(tcp, RINGMASTER_LAUNCH_INDEX="1"))
    for i, w in enumerate((a, b)):
        assert rmtest.wait_exit(w, 90) == 0, env.worker_log(i)
    j = env.wait_job(job.id, lambda j: j.state == env.m.JOB_STATE_SUCCEEDED, 20)
    assert j.generation == 1, j
    log = env.worker_log(0)
    assert "HELLO without proof of membership" in log, log[-3000:]
    out.close()


rmtest.main(test)
