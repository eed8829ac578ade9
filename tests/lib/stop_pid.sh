# stop_pid.sh - sourced by the shell tests: stop one process we started.
#
#   rm_stop_pid PID   SIGTERM, wait up to 10 s for it to go, then SIGKILL;
#                     reaps it when it is our child. No-op for "" or a PID
#                     that is gone. Never by name (no pkill/killall).
rm_stop_pid() {
  local pid="$1"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
