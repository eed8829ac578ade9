#!/usr/bin/env bash
# tests/slurm/real_job.sh RINGMASTER RINGMASTER_WORKER WORKDIR TEST_LAUNCH_SLURM - real jobs on the
# Slurm rig (SLURM_CONF already exported by run_rig_test.sh):
#   1. manual path: a 4-worker `train` job with launcher "none", workers started by
#      `srun -n 4 ringmaster-worker ...` (ranks from SLURM_PROCID/SLURM_NTASKS) -> succeeded at
#      step 100 of 100, every rank logs the same test accuracy, >= 0.85
#   1b. a relay per node (`ringmaster relay`, srun --overlap inside the batch job) and the
#      4 workers of an allreduce job with RINGMASTER_RELAY -> succeeded, every worker joined
#      through the relay, the coordinator counted a lane per Join and Session (/metrics)
#   2. the slurm launcher library (rm_launch) driving real workers for a launcher "none" job
#   3. the slurm launcher driven by the coordinator: a 4-worker `train` job with launcher
#      "slurm"; the coordinator writes the batch script and runs sbatch, the workers join ->
#      succeeded at step 100, per-worker logs in the job's log folder, and Slurm's own record
#      of the batch job (scontrol show job) reaches COMPLETED
#   3b. the same launcher with `serve --slurm-relay`: the batch script runs a relay per
#      node, the 4 workers join through it -> succeeded, a lane for each Join and Session
#   4. sbatch refuses (SBATCH_PARTITION=nosuchpartition in the coordinator's
#      environment) -> the job is failed with sbatch's message
#   5. a command job with launcher "slurm": every Slurm task's agent starts
#      examples/c/session_allreduce, which joins through the session API and verifies
#      every all-reduce -> succeeded at step 50, each task logs its program's exit 0
#      (run when EXAMPLE, the 5th argument, is given)
#   6. on_failure replace with launcher "slurm": one worker of a 3-worker train job is
#      SIGKILLed; the coordinator asks the launcher for a replacement, which sbatches a
#      one-task job (replace.sbatch, launch index 3, log worker-3.log) -> succeeded at
#      generation 2
# Every wait has a deadline; the coordinators are stopped by PID. The rig's daemons are
# stopped by run_rig_test.sh (slurm_rig.sh stop: after the step sockets are gone, slurmd,
# slurmctld, munged, by PID).
set -euo pipefail
rm_bin="$1"
worker_bin="$2"
work="$3/real"
launch_test="$4"
example_bin="${5:-}"
mkdir -p "$work"
export RINGMASTER_WORKER_BIN="$worker_bin"
# REST token for serve (its env fallback) and the CLI (same variable).
export RINGMASTER_API_TOKEN="rig-test-token-$$"
coord_pid=""
. "$(cd "$(dirname "$0")" && pwd)/../lib/stop_pid.sh"
stop_coord() {
  rm_stop_pid "$coord_pid"
  coord_pid=""
}
trap stop_coord EXIT

# start_coord NAME [ENV=VALUE...]: sets GRPC, HTTP, coord_pid; cwd = $work/NAME; serve
# also gets the arguments in the array serve_extra.
serve_extra=()
start_coord() {
  local dir="$work/$1"
  shift
  mkdir -p "$dir"
  : >"$dir/serve.out" # exists before the loop reads it (the job opens it later)
  (cd "$dir" && exec env "$@" "$rm_bin" serve --db "$dir/rm.db" --grpc 127.0.0.1:0 \
     --http 127.0.0.1:0 ${serve_extra[@]+"${serve_extra[@]}"} >"$dir/serve.out" \
     2>"$dir/serve.err") &
  coord_pid=$!
  for _ in $(seq 300); do
    GRPC="$(sed -n 's/^ringmaster: grpc listening on //p' "$dir/serve.out")"
    HTTP="$(sed -n 's/^ringmaster: http listening on //p' "$dir/serve.out")"
    [ -n "$GRPC" ] && [ -n "$HTTP" ] && return 0
    kill -0 "$coord_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL: coordinator did not start"; cat "$dir/serve.err"; exit 1
}

cli() { "$rm_bin" "$@" --server "http://$HTTP" --json; }
field() { python3 -c 'import json,sys
d=json.load(sys.stdin); d=d.get("job",d)
print(d.get(sys.argv[1],""))' "$1"; }

# submit LAUNCHER WORLD [WORKLOAD STEPS OPTIONS] -> "ID TOKEN"
submit() {
  local out
  out="$(printf '{"name":"slurm-%s","world_size":%d,"launcher":"%s","workload":"%s","steps":%d,"workload_options":"%s"}' \
         "$1" "$2" "$1" "${3:-allreduce}" "${4:-5}" "${5:-}" | cli submit -)"
  echo "$(echo "$out" | field id) $(echo "$out" | field token)"
}

# accuracy FILE... -> the one test accuracy every train worker logged (fails if they differ
# or one is missing), checked against the band >= 0.85 (100 steps, global batch 64).
accuracy() {
  local accs
  accs="$(sed -n 's/.*train: [0-9]* steps done; test accuracy \([0-9.]*\),.*/\1/p' "$@" | sort -u)"
  [ "$(sed -n 's/.*train: [0-9]* steps done; test accuracy.*/x/p' "$@" | wc -l)" -eq 4 ] ||
    { echo "FAIL: not every worker logged its test accuracy"; tail -n 3 "$@"; exit 1; }
  [ "$(echo "$accs" | wc -l)" -eq 1 ] || { echo "FAIL: ranks disagree: $accs"; exit 1; }
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 0.85 else 1)' "$accs" ||
    { echo "FAIL: test accuracy $accs below 0.85"; exit 1; }
  echo "$accs"
}

# relay_lanes: the coordinator's ringmaster_relay_lanes_total (/metrics).
relay_lanes() {
  python3 -c 'import sys, urllib.request
for l in urllib.request.urlopen("http://%s/metrics" % sys.argv[1], timeout=10).read().decode().splitlines():
    if l.startswith("ringmaster_relay_lanes_total "): print(int(float(l.split()[1])))' "$HTTP"
}

# wait_state ID: waits (180 s) for a terminal state, prints "STATE REASON".
wait_state() {
  local st=""
  for _ in $(seq 900); do
    st="$(cli job "$1" | field state)"
    case "$st" in succeeded|failed|cancelled) break ;; esac
    sleep 0.2
  done
  echo "$st $(cli job "$1" | field reason)"
}

echo "-- manual srun -n 4 ringmaster-worker (launcher none, train, 100 steps)"
start_coord manual
read -r id token < <(submit none 4 train 100 "batch=64,verify=25")
timeout 180 srun -n 4 --output="$work/manual/worker-%t.log" \
  "$worker_bin" --coordinator "$GRPC" --job "$id" --token "$token"
res="$(wait_state "$id")"
echo "job $id: $res"
[ "${res%% *}" = succeeded ] || { echo "FAIL: manual srun job"; tail -n 5 "$work/manual/"worker-*.log; exit 1; }
[ "$(cli job "$id" | field step)" = 100 ] || { echo "FAIL: job step is not 100"; exit 1; }
grep -q "rank 3 of 4" "$work/manual/"worker-*.log || { echo "FAIL: no rank 3 of 4"; exit 1; }
acc="$(accuracy "$work/manual/"worker-*.log)" || { echo "$acc"; exit 1; }
echo "test accuracy $acc on all 4 ranks"
stop_coord

echo "-- a relay per node inside an allocation (the README's recipe), 4 workers through it"
start_coord relayed
# long enough (train, 20 ms steps) that every worker's Session opens after its Join
read -r id token < <(submit none 4 train 60 "batch=64,sim_compute_ms=20")
d="$work/relayed"
cat >"$d/job.sh" <<JOB
#!/bin/bash
#SBATCH --ntasks=4
#SBATCH --output=$d/batch.out
set -u
srun -N "\$SLURM_JOB_NUM_NODES" -n "\$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --overlap \
  --output="$d/relay-%N.log" "$rm_bin" relay \
  --coordinator "$GRPC" --listen "unix:$d/relay.sock" &
relay=\$!
for _ in \$(seq 100); do [ -S "$d/relay.sock" ] && break; sleep 0.1; done
RINGMASTER_RELAY="unix:$d/relay.sock" srun -n 4 --output="$d/worker-%t.log" \
  "$worker_bin" --coordinator "$GRPC" --job "$id" --token "$token"
rc=\$?
kill \$relay
wait \$relay
exit \$rc
JOB
timeout 180 sbatch --wait "$d/job.sh" || { echo "FAIL: the relayed batch job"; cat "$d/batch.out"
                                           tail -n 5 "$d/"*.log; exit 1; }
res="$(wait_state "$id")"
echo "job $id: $res"
[ "${res%% *}" = succeeded ] || { echo "FAIL: relayed job"; tail -n 5 "$d/"*.log; exit 1; }
[ "$(grep -l 'Join and Sessions through relay' "$d/"worker-*.log | wc -l)" -eq 4 ] ||
  { echo "FAIL: not every worker went through the relay"; tail -n 5 "$d/"worker-*.log; exit 1; }
lanes="$(relay_lanes)"
echo "relay lanes at the coordinator: $lanes"
[ "${lanes:-0}" -ge 8 ] || { echo "FAIL: wanted a lane for each Join and Session (8)"; exit 1; }
grep -q "relay for coordinator" "$d/"relay-*.log || { echo "FAIL: no relay log"; exit 1; }
stop_coord

echo "-- the slurm launcher library driving real workers (launcher none job)"
start_coord library
read -r id token < <(submit none 2)
timeout 320 "$launch_test" launch "$id" "$token" "$GRPC" "$worker_bin" 2 "$work/library/logs"
res="$(wait_state "$id")"
echo "job $id: $res"
[ "${res%% *}" = succeeded ] || { echo "FAIL: job launched by rm_launch's slurm launcher"; exit 1; }
grep -q "rank 1 of 2" "$work/library/logs/worker-0.log" "$work/library/logs/worker-1.log" ||
  { echo "FAIL: worker logs"; cat "$work/library/logs/"*; exit 1; }
stop_coord

echo "-- the slurm launcher driven by the coordinator (train, 4 workers, 100 steps)"
start_coord launcher
read -r id token < <(submit slurm 4 train 100 "batch=64,verify=25")
res="$(wait_state "$id")"
echo "job $id: $res"
logs="$work/launcher/ringmaster-logs/job-$id"
[ "${res%% *}" = succeeded ] || { echo "FAIL: slurm launcher job"; cat "$work/launcher/serve.err"
                                   tail -n 5 "$logs/"*; exit 1; }
[ "$(cli job "$id" | field step)" = 100 ] || { echo "FAIL: job step is not 100"; exit 1; }
ls "$logs/"
[ -s "$logs/job.sbatch" ] || { echo "FAIL: no generated batch script"; exit 1; }
acc="$(accuracy "$logs/"worker-*.log)" || { echo "$acc"; exit 1; }
echo "test accuracy $acc on all 4 ranks"
# The Slurm job id is in the batch job's output file name (slurm-%j.out).
sid="$(find "$logs" -maxdepth 1 -name 'slurm-*.out' | sed -n 's/.*slurm-\([0-9]*\)\.out$/\1/p' | head -n 1)"
[ -n "$sid" ] || { echo "FAIL: no slurm-<id>.out in $logs"; exit 1; }
sstate=""
for _ in $(seq 300); do
  sstate="$(scontrol show job "$sid" -o 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')"
  case "$sstate" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
  sleep 0.2
done
echo "slurm job $sid: $sstate"
[ "$sstate" = COMPLETED ] || { echo "FAIL: slurm job $sid ended $sstate, wanted COMPLETED"; exit 1; }
stop_coord

echo "-- the slurm launcher with a relay per node (serve --slurm-relay)"
serve_extra=(--slurm-relay "$rm_bin")
start_coord launcher-relay
serve_extra=()
# long enough (train, 20 ms steps) that every worker's Session opens after its Join
read -r id token < <(submit slurm 4 train 60 "batch=64,sim_compute_ms=20")
res="$(wait_state "$id")"
echo "job $id: $res"
logs="$work/launcher-relay/ringmaster-logs/job-$id"
[ "${res%% *}" = succeeded ] || { echo "FAIL: slurm launcher job with relays"
                                   cat "$work/launcher-relay/serve.err"; tail -n 5 "$logs/"*; exit 1; }
grep -q " relay --coordinator " "$logs/job.sbatch" || { echo "FAIL: no relay step"; exit 1; }
grep -q "relay for coordinator" "$logs/"relay-*.log || { echo "FAIL: no relay log"; ls "$logs"; exit 1; }
[ "$(grep -l 'Join and Sessions through relay' "$logs/"worker-*.log | wc -l)" -eq 4 ] ||
  { echo "FAIL: not every worker went through the relay"; tail -n 5 "$logs/"worker-*.log; exit 1; }
lanes="$(relay_lanes)"
echo "relay lanes at the coordinator: $lanes"
[ "${lanes:-0}" -ge 8 ] || { echo "FAIL: wanted a lane for each Join and Session (8)"
                             cat "$logs/job.sbatch" "$logs/"slurm-*.out "$logs/"relay-*.log
                             grep -h relay "$logs/"worker-*.log; exit 1; }
stop_coord

echo "-- sbatch refuses: the job fails with its message"
start_coord refused SBATCH_PARTITION=nosuchpartition
read -r id token < <(submit slurm 2)
res="$(wait_state "$id")"
echo "job $id: $res"
case "$res" in
  failed*"nvalid partition"*) ;;
  *) echo "FAIL: wanted failed with sbatch's message"; exit 1 ;;
esac
stop_coord

echo "-- on_failure replace under the slurm launcher: a SIGKILLed worker is relaunched"
start_coord replace
out="$(printf '{"name":"slurm-replace","world_size":3,"launcher":"slurm","workload":"train","steps":400,"workload_options":"batch=64,verify=25,sim_compute_ms=20","on_failure":"replace","max_restarts":1,"checkpoint_every":20,"heartbeat_timeout_ms":3000}' | cli submit -)"
id="$(echo "$out" | field id)"
logs="$work/replace/ringmaster-logs/job-$id"
for _ in $(seq 600); do
  [ "$(cli job "$id" | field state)" = running ] && [ "$(cli job "$id" | field step)" -ge 30 ] && break
  sleep 0.2
done
vpid="$(sed -n 's/^ringmaster-worker: pid //p' "$logs/worker-1.log" | head -n 1)"
[ -n "$vpid" ] || { echo "FAIL: no pid in worker-1.log"; cat "$logs/"worker-*.log; exit 1; }
kill -KILL "$vpid"
res="$(wait_state "$id")"
echo "job $id: $res (generation $(cli job "$id" | field generation))"
[ "${res%% *}" = succeeded ] || { echo "FAIL: slurm replace job"; cat "$work/replace/serve.err"
                                   tail -n 5 "$logs/"*.log; exit 1; }
[ "$(cli job "$id" | field generation)" = 2 ] || { echo "FAIL: not re-formed once"; exit 1; }
[ -s "$logs/replace.sbatch" ] && [ -s "$logs/worker-3.log" ] ||
  { echo "FAIL: no replacement worker-3.log"; ls "$logs"; exit 1; }
grep -q "loaded the checkpoint\|generation 2: rank" "$logs/worker-3.log" ||
  { echo "FAIL: the replacement did not join generation 2"; tail "$logs/worker-3.log"; exit 1; }
stop_coord

if [ -n "$example_bin" ]; then
  echo "-- a command job through the slurm launcher (examples/c/session_allreduce, 4 tasks)"
  start_coord command
  out="$(printf '{"name":"slurm-command","world_size":4,"launcher":"slurm","workload":"command","steps":50,"command":["%s","--steps","50","--step-ms","1"]}' \
         "$example_bin" | cli submit -)"
  id="$(echo "$out" | field id)"
  res="$(wait_state "$id")"
  echo "job $id: $res"
  logs="$work/command/ringmaster-logs/job-$id"
  [ "${res%% *}" = succeeded ] || { echo "FAIL: slurm command job"; cat "$work/command/serve.err"
                                     tail -n 8 "$logs/"worker-*.log; exit 1; }
  [ "$(cli job "$id" | field step)" = 50 ] || { echo "FAIL: job step is not 50"; exit 1; }
  [ "$(grep -l 'program exited with status 0' "$logs/"worker-*.log | wc -l)" -eq 4 ] ||
    { echo "FAIL: not every task's program exited 0"; tail -n 5 "$logs/"worker-*.log; exit 1; }
  grep -q "session_allreduce: pid .* rank 3 of 4" "$logs/"worker-*.log ||
    { echo "FAIL: no program joined as rank 3 of 4"; exit 1; }
  stop_coord
fi
echo "real jobs: PASS"
