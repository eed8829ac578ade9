#!/usr/bin/env bash
# tests/k8s/check_cli.sh RINGMASTER - `ringmaster k8s-manifest JOB` end to end: a real
# `ringmaster serve` on free ports, jobs submitted with the CLI, the manifests fetched
# over REST (GET /api/v1/jobs/{id}/k8s-manifest) by the CLI and validated by
# validate.mjs (Kubernetes schemas + ringmaster invariants, --expect-world N).
# Also: the token is in the Secret, --image/--namespace land in the manifests, and the
# CLI exit codes for no token (4), unknown job (3), bad namespace and a finished job (6).
# The server is stopped by its PID (SIGTERM, then SIGKILL after 10 s).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
rm_bin="$1"
tmp="$(mktemp -d)"
srv=""
. "$here/../lib/stop_pid.sh"
cleanup() {
  rm_stop_pid "$srv"
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Without Node.js (or its modules) run_node.sh exits 77 and so does this script
# (set -e), which CTest reports as skipped like the other k8s tests.
command -v node >/dev/null 2>&1 || { echo "SKIP: Node.js not found"; exit 77; }

export RINGMASTER_API_TOKEN=k8s-cli-token RINGMASTER_LOG_LEVEL=warn
"$rm_bin" serve --db "$tmp/rm.db" --grpc 127.0.0.1:0 --http 127.0.0.1:0 \
  --advertise ringmaster.example.svc:7070 >"$tmp/out" 2>"$tmp/err" &
srv=$!
http=""
for _ in $(seq 200); do
  http="$(sed -n 's/^ringmaster: http listening on //p' "$tmp/out")"
  [ -n "$http" ] && break
  kill -0 "$srv" 2>/dev/null || { cat "$tmp/err" >&2; fail "server exited early"; }
  sleep 0.1
done
[ -n "$http" ] || fail "server did not print its http address within 20 s"
export RINGMASTER_SERVER="http://$http"

submit() { # name world -> job id
  printf '{"name":"%s","world_size":%d,"launcher":"none"}' "$1" "$2" >"$tmp/spec.json"
  "$rm_bin" submit "$tmp/spec.json" --json | sed -n 's/^  "id": \([0-9]*\),*$/\1/p'
}

for world in 1 4 16; do
  id="$(submit "k8s-w$world" "$world")"
  [ -n "$id" ] || fail "submit world $world printed no id"
  echo "== job $id, world $world"
  "$rm_bin" k8s-manifest "$id" >"$tmp/m.yaml" || fail "k8s-manifest $id exit $?"
  "$here/run_node.sh" validate.mjs --expect-world "$world" - <"$tmp/m.yaml"
  grep -q 'ringmaster.example.svc:7070' "$tmp/m.yaml" || fail "workers do not dial --advertise"
done

printf '{"name":"tok","world_size":2,"launcher":"none"}' | "$rm_bin" submit - --json >"$tmp/sub.json"
id="$(sed -n 's/^  "id": \([0-9]*\),*$/\1/p' "$tmp/sub.json")"
token="$(sed -n 's/^  "token": "\(.*\)",*$/\1/p' "$tmp/sub.json")"
[ -n "$id" ] && [ -n "$token" ] || fail "submit - printed no id/token: $(cat "$tmp/sub.json")"
echo "== job $id: --image, --namespace, token"
"$rm_bin" k8s-manifest "$id" --image registry.example/rm:1.2 --namespace ml-team >"$tmp/m.yaml"
"$here/run_node.sh" validate.mjs --expect-world 2 - <"$tmp/m.yaml"
grep -q 'registry.example/rm:1.2' "$tmp/m.yaml" || fail "--image not in the manifests"
grep -q 'namespace: "ml-team"' "$tmp/m.yaml" || fail "--namespace not in the manifests"
grep -q "token: \"$token\"" "$tmp/m.yaml" || fail "the job's token is not in the Secret"

set +e
RINGMASTER_API_TOKEN= "$rm_bin" k8s-manifest "$id" >/dev/null 2>&1; rc_noauth=$?
"$rm_bin" k8s-manifest 987654 >/dev/null 2>&1; rc_404=$?
"$rm_bin" k8s-manifest "$id" --namespace 'Bad_NS' >/dev/null 2>&1; rc_ns=$?
"$rm_bin" cancel "$id" >/dev/null
"$rm_bin" k8s-manifest "$id" >/dev/null 2>&1; rc_done=$?
set -e
[ $rc_noauth -eq 4 ] || fail "no token: exit $rc_noauth, want 4"
[ $rc_404 -eq 3 ] || fail "unknown job: exit $rc_404, want 3"
[ $rc_ns -eq 6 ] || fail "bad namespace: exit $rc_ns, want 6"
[ $rc_done -eq 6 ] || fail "cancelled job: exit $rc_done, want 6"
echo "k8s-manifest CLI: all checks passed"
