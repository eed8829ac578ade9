#!/usr/bin/env bash
# tests/demo/run_demo.sh BUILD_DIR - README command one (scripts/demo) as a test.
#
# Runs the demo against this build (--no-setup --no-build: CTest runs after the
# build, and apt-get is not the test's business) with a small job, in a fresh
# state folder, and checks what a user relies on:
#   1. exit status 0, the progress table reached the last step, the output ends
#      with "final test accuracy X" and the dashboard URL (the digits workload);
#      the default model, the transformer LM as a PyTorch DDP command job, ends
#      with "final held-out perplexity X" (skipped where /usr/bin/python3 has no
#      torch or the build is sanitized: Python cannot load an ASan library)
#   2. the coordinator the demo started is gone afterwards (stopped by PID)
#   3. --keep: the coordinator is still running and answers /healthz and the
#      job; the test then stops it by PID as the demo told it to
#   4. a failing job (a worker option the train workload refuses) gives a
#      non-zero status with the reason, and stops the coordinator too
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
demo="$here/../../scripts/demo"
build="$1"
work="$(mktemp -d "${TMPDIR:-/tmp}/rm-demo-test-XXXXXX")"
kept=""
. "$here/../lib/stop_pid.sh"
cleanup() {
  rm_stop_pid "$kept"
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
run_demo() { timeout 300 "$demo" --no-setup --no-build --build-dir "$build" --dir "$work/state" "$@"; }
pid_of() { sed -n 's/^coordinator *PID \([0-9]*\),.*/\1/p' "$1"; }

echo "== demo: 4 workers, 40 steps"
run_demo --model digits --workers 4 --steps 40 | tee "$work/out1" || fail "demo exit status $?"
grep -Eq '^ +40/40 ' "$work/out1" || fail "no progress line for step 40/40"
grep -Eq '^job [0-9]+ succeeded' "$work/out1" || fail "no 'job N succeeded' line"
grep -Eq 'final test accuracy 0\.[0-9]+' "$work/out1" || fail "no final test accuracy"
grep -Eq '^dashboard: +http://127\.0\.0\.1:[0-9]+/jobs/[0-9]+' "$work/out1" || fail "no dashboard URL"
pid="$(pid_of "$work/out1")"
[ -n "$pid" ] || fail "no coordinator PID in the output"
if kill -0 "$pid" 2>/dev/null && grep -q ringmaster "/proc/$pid/cmdline" 2>/dev/null; then
  fail "the demo left its coordinator (PID $pid) running"
fi

echo "== demo --keep: 2 workers, 10 steps"
run_demo --model digits --keep --workers 2 --steps 10 | tee "$work/out2" || fail "demo --keep exit status $?"
kept="$(pid_of "$work/out2")"
grep -q "kill $kept" "$work/out2" || fail "--keep did not say how to stop PID $kept"
kill -0 "$kept" 2>/dev/null || fail "--keep: coordinator $kept is not running"
url="$(sed -n 's/^dashboard: *\(http:\/\/[0-9.:]*\)\/jobs\/.*/\1/p' "$work/out2")"
curl -fsS --max-time 10 "$url/healthz" | grep -q ok || fail "--keep: /healthz"
curl -fsS --max-time 10 -H "Authorization: Bearer $(cat "$work/state/api-token")" "$url/api/v1/jobs/1" | grep -q '"state":"succeeded"' ||
  fail "--keep: job 1 not succeeded on the kept coordinator"
echo "== a second demo while the kept coordinator runs is refused with its PID"
if run_demo --steps 5 >"$work/out3" 2>&1; then fail "second demo on a kept folder succeeded"; fi
grep -q "PID $kept" "$work/out3" || { cat "$work/out3"; fail "refusal does not name PID $kept"; }
kill -TERM "$kept"
for _ in $(seq 100); do kill -0 "$kept" 2>/dev/null || break; sleep 0.1; done
kill -0 "$kept" 2>/dev/null && fail "kept coordinator ignored SIGTERM"
kept=""

echo "== a failing job: non-zero status with the reason"
if run_demo --model digits --workers 2 --steps 10 --options "no_such_option=1" >"$work/out4" 2>&1; then
  cat "$work/out4"; fail "demo succeeded with a bad workload option"
fi
cat "$work/out4"
grep -Eq "^job [0-9]+ failed .*unknown option 'no_such_option'" "$work/out4" ||
  fail "no 'job N failed' line with the workload's reason"
pid="$(pid_of "$work/out4")"
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q ringmaster "/proc/$pid/cmdline" 2>/dev/null; then
  fail "the failed demo left its coordinator running"
fi
if grep -q '^RINGMASTER_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "== the LM demo: skipped (sanitized build)"
elif ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "== the LM demo: skipped (/usr/bin/python3 has no torch)"
else
  echo "== the default demo: the transformer LM, PyTorch DDP, 2 workers, 6 steps"
  run_demo --workers 2 --steps 6 | tee "$work/out5" || fail "LM demo exit status $?"
  grep -q '"workload":"command"' "$work/out5" || fail "the default demo is not a command job"
  grep -Eq '^ +6/6 +[0-9.]+ +[0-9.]+ ' "$work/out5" || fail "no progress line with loss for step 6/6"
  grep -Eq '^job [0-9]+ succeeded' "$work/out5" || fail "LM demo: no 'job N succeeded' line"
  grep -Eq 'final held-out perplexity [0-9]+\.[0-9]+' "$work/out5" || fail "no final perplexity"
fi
echo "PASS"
