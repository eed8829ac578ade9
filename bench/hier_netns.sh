#!/usr/bin/env bash
# hier_netns.sh - hierarchical all-reduce against the flat algorithms on
# simulated hosts: H network namespaces x L ranks each (default 2 x 2), the
# namespaces joined by a bridge with a tbf-limited veth each (RATE, default
# 1gbit). Inside a namespace the ranks use shared memory (same host
# identity), across namespaces TCP. One rm_bench table (every algorithm,
# every result checked), rank 0 printing.
#
#   sudo bench/hier_netns.sh        HOSTS=2 LOCAL=2 RATE=1gbit REPEATS=1
#     SIZES=65536,1048576,16777216,67108864 BUILD=<dir with bench/rm_bench>
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
HOSTS="${HOSTS:-2}" LOCAL="${LOCAL:-2}" RATE="${RATE:-1gbit}" REPEATS="${REPEATS:-1}"
SIZES="${SIZES:-65536,1048576,16777216,67108864}"
bench=""
for d in "${BUILD:-}" "$repo/build-perf" "$repo/build"; do
  [[ -n "$d" && -x "$d/bench/rm_bench" ]] && { bench="$d/bench/rm_bench"; break; }
done
[[ -n "$bench" ]] || { echo "hier_netns.sh: build rm_bench first" >&2; exit 2; }
tag="rmhb$$"
# shellcheck source=bench/netns_lib.sh
. "$repo/bench/netns_lib.sh"
cleanup() {
  netns_down
  rm -rf "${rdv:-}"
}
trap cleanup EXIT
netns_up "$tag" "$HOSTS" "$RATE" 198.19.7
world=$((HOSTS * LOCAL))
echo "# hier_netns: $HOSTS namespaces x $LOCAL ranks, $RATE tbf links; $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((rep = 1; rep <= REPEATS; rep++)); do
  rdv="$(mktemp -d /tmp/rm-hier.XXXXXX)"
  pids=()
  for ((r = 1; r < world; r++)); do
    h=$((r / LOCAL))
    ip netns exec "${tag}h$h" "$bench" --rank "$r" --world "$world" --rendezvous "$rdv" \
      --bind "198.19.7.$((h + 1))" -s "$SIZES" >/dev/null &
    pids+=($!)
  done
  ip netns exec "${tag}h0" "$bench" --rank 0 --world "$world" --rendezvous "$rdv" \
    --bind 198.19.7.1 -s "$SIZES"
  for p in "${pids[@]}"; do wait "$p"; done
  rm -rf "$rdv"
done
