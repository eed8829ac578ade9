#!/usr/bin/env bash
# compare.sh - ringmaster's all-reduce side by side with Open MPI (TCP
# loopback and shared memory) and Gloo, in one run, with the ratio per cell.
# loopback mode runs ringmaster twice: over TCP (RINGMASTER_TRANSPORTS=tcp,
# column rm) and over shared memory (the default on one host, rmshm);
# Open MPI likewise (btl tcp,self: mpi; btl vader,self: mpishm). Ratios:
# rm/mpi (TCP paths), shm/msh = rmshm/mpishm, shm/rm = rmshm/rm.
#
#   bench/compare.sh [loopback|netns]
#     NPROCS="2 4 8"  SIZES=4096,65536,1048576,16777216,67108864  REPEATS=1
#     BUILD=<dir with bench/rm_bench>  (default: build-coll, then build)
#
# The peer harnesses (bench/peers, see its README) are copied to a temp
# dir and built there (needs openmpi-bin libopenmpi-dev libgloo-dev). Every
# harness uses the same method: f32 sum in place, per-iteration max over
# ranks, median over iterations, every element checked. The repeats are
# interleaved (mpi, gloo, rm for n = 2, then n = 4, ..., then repeat 2).
# Cells: median over REPEATS of each repeat's busbw (GB/s); within a repeat
# Gloo and ringmaster count their best algorithm (auto included); rm_algo is
# ringmaster's best algorithm in most repeats. Ratios: rm/mpi and rm/gloo of
# those medians (> 1 means ringmaster is faster). The load average is
# printed before and after each repeat (the machine is shared).
#
# netns: the 4 namespaces of bench/peers/netns_bench.sh (1 Gbit tbf links), one
# rank per namespace (ip netns exec), N = 4 only; the namespaces are built
# here and deleted on exit. Each repeat also measures what the network gives
# the ring's traffic pattern: one TCP stream alone (0 -> 1), then 4 streams
# at once, rank i -> i+1 (what a ring all-reduce sends), each timed from
# outside (3 x 64 MiB), with the machine's CPU busy share meanwhile (on a
# 2-vCPU VM the namespaces' bridge and tbf work, not the link, is then the
# limit). The table adds rm's busbw as % of the link and as % of the
# slowest of the 4 concurrent streams (the ring's traffic pattern; other
# algorithms send a different pattern and can beat it).
set -euo pipefail

mode="${1:-loopback}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
SIZES="${SIZES:-4096,65536,1048576,16777216,67108864}"
REPEATS="${REPEATS:-1}"
peers_src="$repo/bench/peers"
bench=""
for d in "${BUILD:-}" "$repo/build-perf" "$repo/build-coll" "$repo/build"; do
  [[ -n "$d" && -x "$d/bench/rm_bench" ]] && { bench="$d/bench/rm_bench"; break; }
done
[[ -n "$bench" ]] || { echo "compare.sh: build rm_bench first (cmake --build ... --target rm_bench)" >&2; exit 2; }

tmp="$(mktemp -d /tmp/rm-compare.XXXXXX)"
cleanup() {
  [[ "$mode" == netns ]] && "$tmp/peers/netns_bench.sh" down 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
cp -r "$peers_src" "$tmp/peers"
make -s -C "$tmp/peers" mpi_allreduce gloo_allreduce tcp_stream >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# raw lines are appended as they come (KEEP_RAW keeps them even if a later
# harness dies); a harness that fails is logged and the run goes on
raw="${KEEP_RAW:-$tmp/raw.txt}"
ceil="$tmp/ceil.txt"
: >"$raw"
: >"$ceil"

# Normalise every harness's lines to: impl n bytes median_us busbw
rep=0
peer_lines() { awk -v rep="$rep" '!/^#/ && NF >= 10 {print $1, $2, $3, $5, $9, "-", rep}'; }
rm_lines() { awk -v impl="$1" -v rep="$rep" '!/^#/ && NF >= 10 {print impl, $5, $1, $7, $9, $6, rep}'; }

run_loopback() {
  local n=$1
  { mpirun -np "$n" --oversubscribe --bind-to none --mca pml ob1 --mca btl tcp,self \
    --mca btl_tcp_if_include lo "$tmp/peers/mpi_allreduce" -l mpi -s "$SIZES" ||
    echo "# repeat $rep n=$n: mpi failed" >&2; } | peer_lines >>"$raw"
  { mpirun -np "$n" --oversubscribe --bind-to none --mca pml ob1 --mca btl vader,self \
    "$tmp/peers/mpi_allreduce" -l mpi -s "$SIZES" ||
    echo "# repeat $rep n=$n: mpi vader failed" >&2; } | peer_lines | sed 's/^mpi/mpishm/' >>"$raw"
  { "$tmp/peers/gloo_run.sh" "$n" -s "$SIZES" || echo "# repeat $rep n=$n: gloo failed" >&2; } |
    peer_lines | sed 's/^gloo[^ ]*/gloo/' >>"$raw"
  { RINGMASTER_TRANSPORTS=tcp "$bench" -n "$n" -s "$SIZES" ||
    echo "# repeat $rep n=$n: rm_bench (tcp) failed" >&2; } | rm_lines rm >>"$raw"
  { RINGMASTER_TRANSPORTS=shm,tcp "$bench" -n "$n" -s "$SIZES" ||
    echo "# repeat $rep n=$n: rm_bench (shm) failed" >&2; } | rm_lines rmshm >>"$raw"
}

# One timed stream SRC -> DST (namespaces arbench*), GB/s on stdout.
stream() {
  local src=$1 dst=$2 port=$3 bytes=67108864 reps=3 t0 t1
  ip netns exec "arbench$dst" "$tmp/peers/tcp_stream" -L "198.18.0.$((dst + 1)):$port" \
    -t "$bytes" -r "$reps" >/dev/null 2>&1 &
  local lpid=$!
  sleep 0.3
  t0=$(date +%s%N)
  ip netns exec "arbench$src" "$tmp/peers/tcp_stream" -C "198.18.0.$((dst + 1)):$port" \
    -t "$bytes" -r "$reps" >/dev/null 2>&1
  wait "$lpid"
  t1=$(date +%s%N)
  awk -v b=$((bytes * reps)) -v ns=$((t1 - t0)) 'BEGIN { printf "%.4f\n", b / ns }'
}

cpu_jiffies() { awk '/^cpu /{print $2 + $3 + $4 + $6 + $7 + $8, $5}' /proc/stat; }

# ceil lines: "ceil1 GBps rep" (one stream), "ceil4 GBps rep" (slowest of
# the 4 concurrent ring streams), "cpu4 busy% rep" (during those 4)
run_ceiling() {
  local f="$tmp/ceil_streams" b0 i0 b1 i1 pids=()
  echo "ceil1 $(stream 0 1 29601) $rep" >>"$ceil"
  : >"$f"
  read -r b0 i0 < <(cpu_jiffies)
  for ((i = 0; i < 4; i++)); do
    stream "$i" $(((i + 1) % 4)) $((29610 + i)) >>"$f" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  read -r b1 i1 < <(cpu_jiffies)
  echo "ceil4 $(sort -g "$f" | head -1) $rep" >>"$ceil"
  awk -v b=$((b1 - b0)) -v i=$((i1 - i0)) -v r="$rep" \
    'BEGIN { printf "cpu4 %.1f %s\n", 100 * b / (b + i), r }' >>"$ceil"
}

run_netns() {
  local n=4 port=29500 peers=""
  run_ceiling
  for ((r = 0; r < n; r++)); do peers+="${peers:+,}198.18.0.$((r + 1)):$port"; done
  "$tmp/peers/netns_bench.sh" mpi "$n" -s "$SIZES" | peer_lines | sed 's/^mpi[^ ]*/mpi/' >>"$raw"
  "$tmp/peers/netns_bench.sh" gloo "$n" -s "$SIZES" | peer_lines | sed 's/^gloo[^ ]*/gloo/' >>"$raw"
  local pids=()
  for ((r = 1; r < n; r++)); do
    ip netns exec "arbench$r" "$bench" --rank "$r" --world "$n" --peers "$peers" -s "$SIZES" >/dev/null &
    pids+=($!)
  done
  ip netns exec arbench0 "$bench" --rank 0 --world "$n" --peers "$peers" -s "$SIZES" | rm_lines rm >>"$raw"
  for p in "${pids[@]}"; do wait "$p"; done
}

if [[ "$mode" == netns ]]; then
  "$tmp/peers/netns_bench.sh" up >/dev/null
  NPROCS=4
fi
for ((rep = 1; rep <= REPEATS; rep++)); do
  echo "# repeat $rep start $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
  for n in ${NPROCS:-2 4 8}; do
    if [[ "$mode" == netns ]]; then run_netns; else run_loopback "$n"; fi
  done
  echo "# repeat $rep end   $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
done

# Table: per (n, size) and impl the median over repeats of that repeat's
# best busbw; ratios of the medians.
printf "# %s: busbw GB/s, median over %s interleaved repeat(s) (rm = best ringmaster algorithm per repeat)\n" "$mode" "$REPEATS"
python3 - "$raw" "$ceil" "$mode" <<'PY'
import collections, statistics, sys
best = {}  # (impl, n, bytes, rep) -> (busbw, algo)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 7:
        continue
    key = (f[0], int(f[1]), int(f[2]), f[6])
    bw = float(f[4])
    if key not in best or bw > best[key][0]:
        best[key] = (bw, f[5])
cells = collections.defaultdict(list)
algos = collections.defaultdict(list)
for (impl, n, b, rep), (bw, algo) in best.items():
    cells[(impl, n, b)].append(bw)
    if impl in ("rm", "rmshm"):
        algos[(impl, n, b)].append(algo)
netns = sys.argv[3] == "netns"
link = 0.125  # GB/s, the 1 Gbit tbf rate of netns_bench.sh
ceil = collections.defaultdict(list)
for line in open(sys.argv[2]):
    f = line.split()
    if len(f) == 3:
        ceil[f[0]].append(float(f[1]))
c4 = statistics.median(ceil["ceil4"]) if ceil["ceil4"] else 0.0
def ratio(x, y):
    return x / y if y else 0.0
shm = any(k[0] == "rmshm" for k in cells)
if shm:
    # rm = ringmaster over TCP loopback, rmshm = over shared memory; mpi =
    # Open MPI's TCP path, mpishm = Open MPI over shared memory (vader)
    head = "%3s %10s %8s %8s %8s %8s %8s %-13s %7s %7s %7s %7s" % (
        "n", "bytes", "mpi", "mpishm", "gloo", "rm", "rmshm", "rmshm_algo",
        "rm/mpi", "shm/msh", "shm/rm", "rm/gloo")
else:
    head = "%3s %10s %9s %9s %9s %-15s %8s %8s" % ("n", "bytes", "mpi", "gloo", "rm", "rm_algo", "rm/mpi", "rm/gloo")
print(head + ("  %6s %6s" % ("%link", "%4str") if netns else ""))
for n, b in sorted({(k[1], k[2]) for k in cells}):
    med = {i: statistics.median(cells[(i, n, b)]) if cells[(i, n, b)] else 0.0
           for i in ("mpi", "mpishm", "gloo", "rm", "rmshm")}
    a = collections.Counter(algos[("rmshm" if shm else "rm", n, b)]).most_common(1)
    if shm:
        print("%3d %10d %8.3f %8.3f %8.3f %8.3f %8.3f %-13s %7.2f %7.2f %7.2f %7.2f" % (
            n, b, med["mpi"], med["mpishm"], med["gloo"], med["rm"], med["rmshm"],
            a[0][0] if a else "-", ratio(med["rm"], med["mpi"]),
            ratio(med["rmshm"], med["mpishm"]), ratio(med["rmshm"], med["rm"]),
            ratio(med["rm"], med["gloo"])))
        continue
    row = "%3d %10d %9.3f %9.3f %9.3f %-15s %8.2f %8.2f" % (
        n, b, med["mpi"], med["gloo"], med["rm"], a[0][0] if a else "-",
        med["rm"] / med["mpi"] if med["mpi"] else 0, med["rm"] / med["gloo"] if med["gloo"] else 0)
    if netns:
        row += "  %5.0f%% %5.0f%%" % (100 * med["rm"] / link, 100 * med["rm"] / c4 if c4 else 0)
    print(row)
if netns:
    c1 = statistics.median(ceil["ceil1"]) if ceil["ceil1"] else 0.0
    cpu = statistics.median(ceil["cpu4"]) if ceil["cpu4"] else 0.0
    print("# link %.3f GB/s; one TCP stream alone %.3f GB/s (%.0f%%); 4 concurrent streams "
          "i -> i+1 (the ring's pattern): slowest %.3f GB/s (%.0f%% of the link), CPU busy %.0f%% "
          "meanwhile (medians over repeats)" % (link, c1, 100 * c1 / link, c4, 100 * c4 / link, cpu))
PY
