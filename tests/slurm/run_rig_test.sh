#!/usr/bin/env bash
# tests/slurm/run_rig_test.sh - CTest driver for the Slurm tests on a private rig.
#
#   run_rig_test.sh TEST_LAUNCH_SLURM [RINGMASTER RINGMASTER_WORKER]
#
# Starts slurm_rig.sh in a fresh folder (own ports, own munge socket), then:
#   1. srun -n 4 hostname            four tasks answer
#   2. sbatch --wait                 a 2-task batch job whose srun tasks see their ranks,
#                                    and deploy/slurm/ringmaster-job.sbatch with a stand-in worker
#   3. TEST_LAUNCH_SLURM rig         the slurm launcher: sbatch, per-task logs, scancel,
#                                    a refused submission
#   4. with RINGMASTER and RINGMASTER_WORKER: real jobs against a real coordinator
#      (tests/slurm/real_job.sh: manual srun, the slurm launcher, an sbatch refusal)
# and always stops the rig (trap), which leaves nothing behind. Exit 77 = skipped
# (not root: slurmd must run as root to start jobs).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
test_bin="$1"
rm_bin="${2:-}"
worker_bin="${3:-}"
example_bin="${4:-}"

if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: the Slurm rig needs root (slurmd runs jobs as their user)"
  exit 77
fi

base="$(mktemp -d "${TMPDIR:-/tmp}/rm-slurm-ctest-XXXXXX")"
export RM_SLURM_RIG_DIR="$base/rig"
cleanup() {
  "$here/slurm_rig.sh" stop || true
  rm -rf "$base"
}
trap cleanup EXIT

"$here/slurm_rig.sh" start
eval "$("$here/slurm_rig.sh" env)"

echo "== srun -n 4 hostname"
out="$(timeout 120 srun -n 4 hostname)"
echo "$out"
[ "$(echo "$out" | grep -c "^$(hostname)\$")" -eq 4 ] || { echo "FAIL: srun -n 4"; exit 1; }

echo "== sbatch --wait"
cat >"$base/job.sh" <<JOB
#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --output=$base/job.out
srun bash -c 'echo "task \$SLURM_PROCID of \$SLURM_NTASKS"'
JOB
timeout 120 sbatch --wait "$base/job.sh"
cat "$base/job.out"
grep -qx "task 0 of 2" "$base/job.out" && grep -qx "task 1 of 2" "$base/job.out" ||
  { echo "FAIL: sbatch --wait output"; exit 1; }

echo "== deploy/slurm/ringmaster-job.sbatch (documented example) with a stand-in worker"
cat >"$base/fake-worker" <<'W'
#!/bin/sh
echo "rank=$SLURM_PROCID of $SLURM_NTASKS args=$*"
W
chmod +x "$base/fake-worker"
(cd "$base" && RINGMASTER_COORDINATOR=127.0.0.1:7070 RINGMASTER_JOB=5 RINGMASTER_TOKEN=tok \
   RINGMASTER_WORKER="$base/fake-worker" RINGMASTER_WORKLOAD=train \
   timeout 120 sbatch --wait --parsable --nodes=1 --ntasks=4 --ntasks-per-node=4 \
   --cpus-per-task=1 "$here/../../deploy/slurm/ringmaster-job.sbatch" >"$base/example.id")
sid="$(cut -d';' -f1 "$base/example.id")"
cat "$base/ringmaster-$sid.out"
for r in 0 1 2 3; do
  grep -qx "rank=$r of 4 args=--coordinator 127.0.0.1:7070 --job 5 --token tok --workload train" \
    "$base/ringmaster-$sid-worker-$r.log" || { echo "FAIL: example script, rank $r"; exit 1; }
done

echo "== slurm launcher on the rig"
"$test_bin" rig

if [ -n "$rm_bin" ] && [ -n "$worker_bin" ]; then
  echo "== real ringmaster job through Slurm"
  "$here/real_job.sh" "$rm_bin" "$worker_bin" "$base" "$test_bin" "$example_bin"
else
  echo "NOTE: ringmaster/ringmaster-worker targets not built; real-job part not run"
fi
echo "PASS"
