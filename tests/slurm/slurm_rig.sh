#!/usr/bin/env bash
# tests/slurm/slurm_rig.sh - a private one-node Slurm cluster for tests, on this host.
#
#   slurm_rig.sh start   write the config, start munged, slurmctld, slurmd; wait for an idle node
#   slurm_rig.sh env     print `export ...` lines for srun/sbatch (eval "$(slurm_rig.sh env)")
#   slurm_rig.sh status  exit 0 when the rig answers, 1 otherwise
#   slurm_rig.sh stop    cancel jobs, wait for step sockets to vanish, stop slurmd, slurmctld,
#                        munged by PID (in that order), remove the rig folder
#
# Everything lives in one folder, $RM_SLURM_RIG_DIR (default ${TMPDIR:-/tmp}/ringmaster-slurm-rig):
#   slurm.conf, plugstack.conf   the cluster's configuration (SLURM_CONF points here)
#   munge/munge.key, munge.socket.2, munged.pid, munged.log, munged.seed
#   state/ spool/                StateSaveLocation, SlurmdSpoolDir (step sockets live in spool/)
#   slurmctld.pid slurmd.pid log/
# Nothing is written outside it; the host's /etc/slurm and /etc/munge are not touched and a
# munged or Slurm the host may run is left alone: the rig uses its own munge socket (AuthInfo=
# socket=...) and its own free TCP ports, so two rigs in two folders can run side by side.
#
# Lifecycle (idempotent-ish):
#   absent --start--> starting --node idle--> running --stop--> absent
#   start on a running rig only prints "already running"; start on a folder left behind by a
#   crashed run first stops what it can and wipes the folder; stop on an absent rig does nothing.
#
# Must run as root (slurmd runs jobs as their submitting user). Installs slurm-wlm and munge
# with apt-get when they are missing. Every wait has a deadline; daemons are stopped only
# through the PIDs this script recorded, never by name.
set -euo pipefail

RIG="${RM_SLURM_RIG_DIR:-${TMPDIR:-/tmp}/ringmaster-slurm-rig}"
START_DEADLINE_S="${RM_SLURM_RIG_START_S:-60}"
STOP_DEADLINE_S="${RM_SLURM_RIG_STOP_S:-60}"
CPUS="${RM_SLURM_RIG_CPUS:-16}"

log() { echo "slurm_rig: $*" >&2; }
die() { log "error: $*"; exit 1; }

need_packages() {
  local missing=()
  command -v munged >/dev/null 2>&1 || missing+=(munge)
  for b in slurmctld slurmd srun sbatch sinfo; do
    command -v "$b" >/dev/null 2>&1 || { missing+=(slurm-wlm); break; }
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "missing ${missing[*]} and not root to install them"
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Two distinct free TCP ports on 127.0.0.1 (bind port 0, read it back, release).
free_ports() {
  python3 - <<'EOF'
import socket
socks = []
for _ in range(2):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
EOF
}

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
read_pid() { [ -s "$1" ] && tr -dc '0-9' <"$1" || true; }

# wait_until DEADLINE_S DESCRIPTION COMMAND...: poll COMMAND every 0.2 s until it succeeds.
wait_until() {
  local deadline=$(($(date +%s) + $1)) what="$2"
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || { log "timed out waiting for $what"; return 1; }
    sleep 0.2
  done
}

write_config() {
  local host ports ctld_port slurmd_port
  host="$(hostname -s)"
  read -r ctld_port slurmd_port < <(free_ports)
  mkdir -p "$RIG"/{munge,state,spool,log}
  chmod 700 "$RIG" "$RIG/munge"
  : >"$RIG/plugstack.conf"
  cat >"$RIG/slurm.conf" <<EOF
# Written by tests/slurm/slurm_rig.sh: a one-node test cluster. Not for production.
ClusterName=ringmaster-rig
SlurmctldHost=${host}(127.0.0.1)
SlurmctldPort=${ctld_port}
SlurmdPort=${slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=${RIG}/munge/munge.socket.2
CredType=cred/munge
StateSaveLocation=${RIG}/state
SlurmdSpoolDir=${RIG}/spool
SlurmctldPidFile=${RIG}/slurmctld.pid
SlurmdPidFile=${RIG}/slurmd.pid
SlurmctldLogFile=${RIG}/log/slurmctld.log
SlurmdLogFile=${RIG}/log/slurmd.log
PlugStackConfig=${RIG}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MailProg=/bin/true
KillWait=5
MinJobAge=60
SlurmdTimeout=60
InactiveLimit=0
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${CPUS} State=UNKNOWN
PartitionName=rig Nodes=${host} Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munged() {
  dd if=/dev/urandom of="$RIG/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$RIG/munge/munge.key"
  munged --force --key-file="$RIG/munge/munge.key" --socket="$RIG/munge/munge.socket.2" \
    --pid-file="$RIG/munge/munged.pid" --log-file="$RIG/munge/munged.log" \
    --seed-file="$RIG/munge/munged.seed" </dev/null >/dev/null 2>&1 ||
    die "munged failed to start: $(tail -n 5 "$RIG/munge/munged.log" 2>/dev/null)"
  wait_until 10 "munged's pid file" test -s "$RIG/munge/munged.pid" || return 1
  wait_until 10 "munged's socket" test -S "$RIG/munge/munge.socket.2"
}

# The daemons detach (no -D) and close their standard streams, so a CTest run that started
# them is not kept waiting on an inherited pipe.
start_slurm() {
  export SLURM_CONF="$RIG/slurm.conf"
  slurmctld -i </dev/null >"$RIG/log/slurmctld.out" 2>&1 ||
    die "slurmctld failed: $(tail -n 5 "$RIG/log/slurmctld.log" 2>/dev/null)"
  wait_until 20 "slurmctld to answer" scontrol ping || {
    tail -n 20 "$RIG/log/slurmctld.log" >&2 || true
    return 1
  }
  slurmd </dev/null >"$RIG/log/slurmd.out" 2>&1 ||
    die "slurmd failed: $(tail -n 5 "$RIG/log/slurmd.log" 2>/dev/null)"
  if ! wait_until "$START_DEADLINE_S" "the node to be idle" node_idle; then
    sinfo -N -o '%N %T %E' >&2 || true
    tail -n 20 "$RIG/log/slurmd.log" >&2 || true
    return 1
  fi
}

node_idle() { sinfo -h -N -o '%T' 2>/dev/null | grep -qx 'idle'; }

rig_running() {
  [ -f "$RIG/slurm.conf" ] || return 1
  pid_alive "$(read_pid "$RIG/munge/munged.pid")" || return 1
  pid_alive "$(read_pid "$RIG/slurmctld.pid")" || return 1
  pid_alive "$(read_pid "$RIG/slurmd.pid")" || return 1
  SLURM_CONF="$RIG/slurm.conf" scontrol ping >/dev/null 2>&1
}

# Step sockets are named <node>_<job>.<step> in SlurmdSpoolDir; they go when the step ends.
no_step_sockets() { ! find "$RIG/spool" -maxdepth 1 -type s -name '*_*.*' 2>/dev/null | grep -q .; }
no_jobs() { [ -z "$(squeue -h -t all -o '%i %T' 2>/dev/null | grep -Ev 'COMPLETED|CANCELLED|FAILED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|BOOT_FAIL|DEADLINE')" ]; }

# stop_pid NAME PIDFILE: SIGTERM, wait up to 20 s, then SIGKILL; by PID only.
stop_pid() {
  local name="$1" pid
  pid="$(read_pid "$2")"
  pid_alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_until 20 "$name ($pid) to exit" bash -c "! kill -0 $pid"; then
    log "$name ($pid) ignored SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    wait_until 5 "$name ($pid) to die" bash -c "! kill -0 $pid" || true
  fi
}

cmd_stop() {
  [ -d "$RIG" ] || return 0
  if [ -f "$RIG/slurm.conf" ] && pid_alive "$(read_pid "$RIG/slurmctld.pid")"; then
    export SLURM_CONF="$RIG/slurm.conf"
    for j in $(squeue -h -o '%i' 2>/dev/null); do scancel "$j" 2>/dev/null || true; done
    wait_until "$STOP_DEADLINE_S" "jobs to end" no_jobs || true
  fi
  wait_until "$STOP_DEADLINE_S" "job step sockets to go" no_step_sockets || true
  stop_pid slurmd "$RIG/slurmd.pid"
  stop_pid slurmctld "$RIG/slurmctld.pid"
  stop_pid munged "$RIG/munge/munged.pid"
  rm -rf "$RIG"
  log "stopped"
}

cmd_start() {
  if rig_running; then
    log "already running in $RIG"
    return 0
  fi
  [ -d "$RIG" ] && { log "cleaning a stale rig in $RIG"; cmd_stop; }
  [ "$(id -u)" -eq 0 ] || die "must run as root"
  need_packages
  write_config
  if ! { start_munged && start_slurm; }; then
    log "start failed; cleaning up"
    cmd_stop
    exit 1
  fi
  log "running in $RIG (node $(hostname -s), $CPUS CPUs)"
}

cmd_env() {
  [ -f "$RIG/slurm.conf" ] || die "no rig in $RIG (run: $0 start)"
  echo "export SLURM_CONF='$RIG/slurm.conf'"
  echo "export RM_SLURM_RIG_DIR='$RIG'"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  env) cmd_env ;;
  status) rig_running ;;
  *) echo "usage: $0 start|stop|env|status" >&2; exit 2 ;;
esac
