"""A scripted worker for barrier tests: joins like ringmaster-worker (Python
gRPC client), prints its rank, heartbeats, and on a stdin line "barrier NAME
TIMEOUT_MS" calls Barrier and prints the answer. SIGSTOP freezes it like a
hung training process."""
import os
import sys
import threading
import time

sys.path.insert(0, sys.argv[1])
import grpc  # noqa: E402
from ringmaster.v1 import messages_pb2 as m, service_pb2_grpc as s  # noqa: E402

addr, job_id, token, host = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
w = s.WorkerStub(grpc.insecure_channel(addr))
while True:
    r = w.Join(m.JoinRequest(job_id=job_id, token=token, host=host,
                             data_addr="127.0.0.1:%d" % (20000 + os.getpid() % 20000),
                             wait_ms=5000), timeout=15)
    if r.formed:
        break
print("rank", r.rank, flush=True)
ids = dict(job_id=job_id, token=token, generation=r.generation, worker_id=r.worker_id)


def beat():
    while True:
        try:
            w.Heartbeat(m.HeartbeatRequest(**ids), timeout=5)
        except grpc.RpcError:
            pass
        time.sleep(0.2)


threading.Thread(target=beat, daemon=True).start()
for line in sys.stdin:
    cmd = line.split()
    if cmd and cmd[0] == "barrier":
        b = w.Barrier(m.BarrierRequest(name=cmd[1], timeout_ms=int(cmd[2]), **ids), timeout=60)
        print("released" if b.released else "broken", b.reason, "missing",
              " ".join("%d:%s:%d" % (x.rank, m.WorkerState.Name(x.state), x.ms_since_heartbeat)
                       for x in b.missing), flush=True)
