#!/usr/bin/env bash
# run_peers.sh - run the whole peer-reference suite and print a compact table.
#
# Usage (as root, from anywhere):  bench/peers/run_peers.sh
#   about 20 minutes with the defaults on a 2-core machine.
# Knobs (environment):
#   NPROCS="2 4 8"   process counts; 8 (and 4) oversubscribe the 2 cores
#   REPEATS=2        how many times each configuration runs (interleaved)
#   SIZES=4096,65536,1048576,16777216,67108864   message sizes in bytes
#   MPI_ALGOS=1      also run Open MPI's "tuned" allreduce with a forced
#                    algorithm over TCP: 2 reduce+bcast (tree-based),
#                    3 recursive doubling, 4 ring, 6 Rabenseifner (recursive
#                    halving reduce-scatter + recursive doubling allgather)
#   NETNS=0          1: also run netns_bench.sh all (4 namespaces, 1 Gbit tbf)
# Output: results/<timestamp>/ with env.txt, raw.txt (everything printed),
# results.tsv (one parsed line per measurement), ceilings.txt, table.txt.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"
make -s

NPROCS="${NPROCS:-2 4 8}"
REPEATS="${REPEATS:-2}"
SIZES="${SIZES:-4096,65536,1048576,16777216,67108864}"
MPI_ALGOS="${MPI_ALGOS:-1}"
NETNS="${NETNS:-0}"

out="results/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
raw="$out/raw.txt" tsv="$out/results.tsv" ceil="$out/ceilings.txt"
: >"$raw"
: >"$ceil"
printf 'rep\timpl\tn\tbytes\titers\tmedian_us\tmin_us\tp90_us\talgbw\tbusbw\tcheck\tbusy_before\n' >"$tsv"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# pml ob1 keeps Open MPI on its BTLs (not UCX); no binding, like the Gloo ranks.
MPIRUN=(mpirun --oversubscribe --bind-to none --mca pml ob1)
TCP=(--mca btl tcp,self --mca btl_tcp_if_include lo)
SHM=(--mca btl vader,self)

{ # what the numbers were taken on
  echo "date: $(date -Is)"
  echo "kernel: $(uname -r)"
  lscpu | grep -E 'Model name|^CPU\(s\)|L2 cache|L3 cache|Hypervisor'
  echo "mem: $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "openmpi: $(dpkg-query -W -f '${Version}' openmpi-bin)"
  echo "gloo: $(dpkg-query -W -f '${Version}' libgloo-dev)"
  echo "NPROCS=$NPROCS REPEATS=$REPEATS SIZES=$SIZES MPI_ALGOS=$MPI_ALGOS NETNS=$NETNS"
} >"$out/env.txt"

busy() { # % of all CPUs busy during 0.5 s: load from other processes
  local a b
  read -r _ u1 n1 s1 i1 w1 q1 sq1 st1 _ </proc/stat
  sleep 0.5
  read -r _ u2 n2 s2 i2 w2 q2 sq2 st2 _ </proc/stat
  a=$(((u2 + n2 + s2 + q2 + sq2 + st2) - (u1 + n1 + s1 + q1 + sq1 + st1)))
  b=$((a + (i2 + w2) - (i1 + w1)))
  echo $((b > 0 ? 100 * a / b : 0))
}

run_cfg() { # run_cfg REP NAME CMD... : run one configuration, log and parse
  local rep=$1 name=$2 b
  shift 2
  b=$(busy)
  echo "## rep=$rep cfg=$name busy_before=${b}% loadavg=$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$raw" >&2
  "$@" 2>&1 | tee -a "$raw" |
    awk -v r="$rep" -v b="$b" '$1 !~ /^#/ && NF == 10 {
        printf "%s", r; for (i = 1; i <= NF; i++) printf "\t%s", $i; printf "\t%s\n", b }' >>"$tsv" ||
    echo "## FAILED: rep=$rep cfg=$name" | tee -a "$raw" "$out/failures.txt" >&2
}

for ((rep = 1; rep <= REPEATS; rep++)); do
  # Ceilings: memcpy/reduce bandwidth and one TCP stream on loopback.
  ./memcpy_bw | sed "s/^/rep=$rep /" | tee -a "$ceil"
  ./tcp_stream -c 131072 | sed "s/^/rep=$rep /" | tee -a "$ceil"
  ./tcp_stream -c 1048576 | sed "s/^/rep=$rep /" | tee -a "$ceil"
  if command -v iperf3 >/dev/null; then
    iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
    sleep 0.5
    iperf3 -c 127.0.0.1 -p 5299 -t 5 -f g | awk -v r="$rep" '/receiver/{print "rep=" r " iperf3 loopback " $7, $8}' | tee -a "$ceil"
    wait
  fi

  for n in $NPROCS; do
    run_cfg "$rep" "mpi_tcp n=$n" "${MPIRUN[@]}" -np "$n" "${TCP[@]}" ./mpi_allreduce -s "$SIZES" -l mpi_tcp
    run_cfg "$rep" "mpi_shm n=$n" "${MPIRUN[@]}" -np "$n" "${SHM[@]}" ./mpi_allreduce -s "$SIZES" -l mpi_shm
    run_cfg "$rep" "gloo n=$n" ./gloo_run.sh "$n" -s "$SIZES"
    if [[ "$MPI_ALGOS" == 1 ]]; then
      for a in 2:redbcast 3:recdbl 4:ring 6:rabenseifner; do
        run_cfg "$rep" "mpi_tcp alg=${a} n=$n" "${MPIRUN[@]}" -np "$n" "${TCP[@]}" \
          --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm "${a%%:*}" \
          ./mpi_allreduce -s "$SIZES" -l "mpi_tcp_${a#*:}"
      done
    fi
  done

  if [[ "$NETNS" == 1 ]]; then
    run_cfg "$rep" "netns n=4" ./netns_bench.sh all -s "$SIZES"
  fi
done

# Compact table: rows impl/n, columns sizes; cell = best median time over the
# repeats (us) and the busbw (GB/s) of that run. Second table: spread of the
# medians over the repeats, (worst - best) / best.
awk -F'\t' -v sizes="$SIZES" '
  NR == 1 { next }
  {
    k = $2 SUBSEP $3; if (!(k in seen)) { seen[k] = 1; rows[++nr] = k }
    c = k SUBSEP $4
    if (!(c in best) || $6 < best[c]) { best[c] = $6; bw[c] = $10 }
    if (!(c in worst) || $6 > worst[c]) worst[c] = $6
    if ($11 != "ok") fail = fail "\n  FAILED CHECK: " $2 " n=" $3 " bytes=" $4 " rep=" $1
    runs[c]++
  }
  function h(b) { return b >= 1048576 ? b / 1048576 "MiB" : b / 1024 "KiB" }
  END {
    ns = split(sizes, sz, ",")
    print "cell: best median over repeats (us) and busbw of that run (GB/s)"
    printf "%-20s %2s", "impl", "n"
    for (j = 1; j <= ns; j++) printf " | %16s", h(sz[j])
    printf "\n"
    for (i = 1; i <= nr; i++) {
      split(rows[i], p, SUBSEP); printf "%-20s %2s", p[1], p[2]
      for (j = 1; j <= ns; j++) {
        c = rows[i] SUBSEP sz[j]
        if (c in best) printf " | %9.1f %6.3f", best[c], bw[c]; else printf " | %16s", "-"
      }
      printf "\n"
    }
    printf "\nspread of medians over repeats, (worst-best)/best\n%-20s %2s", "impl", "n"
    for (j = 1; j <= ns; j++) printf " | %7s", h(sz[j])
    printf "\n"
    for (i = 1; i <= nr; i++) {
      split(rows[i], p, SUBSEP); printf "%-20s %2s", p[1], p[2]
      for (j = 1; j <= ns; j++) {
        c = rows[i] SUBSEP sz[j]
        if (c in best) printf " | %6.0f%%", 100 * (worst[c] - best[c]) / best[c]; else printf " | %7s", "-"
      }
      printf "\n"
    }
    if (fail != "") print fail
  }' "$tsv" >"$out/table.txt"
[[ -s "$out/failures.txt" ]] && cat "$out/failures.txt" >>"$out/table.txt"

echo
echo "== ceilings ($ceil)"
cat "$ceil"
echo
echo "== results ($out/table.txt; raw: $raw)"
cat "$out/table.txt"
