#!/usr/bin/env bash
# netns_ddp.sh - bench_torch.py's asynchronous section (all-reduce return
# times and DDP step times: native backend, Python backend async and sync,
# torch's gloo) with each rank in a network namespace of its own, the
# namespaces joined by a bridge over tbf-limited veths (RATE, default 1gbit):
# there the wire, not the CPU, limits the all-reduce, and what overlaps with
# backward shows in the step time. Root (ip netns). A benchmark, not a test.
#
#   bench/torch/netns_ddp.sh        WORLD=2 RATE=1gbit REPS=5 QUICK= BATCH=32
#     (BATCH: the ResNet-18's global batch)
#     RINGMASTER_LIBRARY=<libringmaster.so> (default: build/worker's)
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
WORLD="${WORLD:-2}" RATE="${RATE:-1gbit}" REPS="${REPS:-5}" QUICK="${QUICK:-}"
BATCH="${BATCH:-32}"
lib="${RINGMASTER_LIBRARY:-$repo/build/worker/libringmaster.so.0.1.0}"
[[ -e "$lib" ]] || { echo "netns_ddp.sh: build libringmaster first ($lib)" >&2; exit 2; }
tag="rmtd$$"
# rank 0's output (the BENCH line that --table prints from)
out="$(mktemp /tmp/rm-netns-ddp.XXXXXX)"
# shellcheck source=bench/netns_lib.sh
. "$repo/bench/netns_lib.sh"
cleanup() {
  netns_down
  rm -f "$out"
}
trap cleanup EXIT
netns_up "$tag" "$WORLD" "$RATE" 198.19.8
echo "# netns_ddp: $WORLD namespaces, one rank each, $RATE tbf links; $(date -u +%FT%TZ)" \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
port=$((20000 + $$ % 20000))
args=(--async-worker --reps "$REPS" --resnet-batch "$BATCH")
[[ -n "$QUICK" ]] && args+=(--quick)
pids=()
run_rank() {
  ip netns exec "${tag}h$1" env MASTER_ADDR=198.19.8.1 MASTER_PORT="$port" RANK="$1" \
    WORLD_SIZE="$WORLD" LOCAL_RANK=0 GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
    PYTHONPATH="$repo/python" RINGMASTER_LIBRARY="$lib" PYTHONDONTWRITEBYTECODE=1 \
    /usr/bin/python3 "$repo/bench/torch/bench_torch.py" "${args[@]}"
}
for ((r = 1; r < WORLD; r++)); do
  run_rank "$r" >/dev/null &
  pids+=($!)
done
run_rank 0 >"$out"
for p in "${pids[@]}"; do wait "$p"; done
/usr/bin/python3 "$repo/bench/torch/bench_torch.py" --table "$out" --worlds "$WORLD"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
