#!/usr/bin/env bash
# wrk_api.sh - benchmark (not a test) of the REST API with many jobs stored:
# starts `ringmaster serve` on free ports with a temp db, submits N jobs, runs
# wrk against GET /api/v1/jobs (first page of 100), GET /api/v1/jobs/{id} and
# /metrics, prints requests/s and p99 latency per endpoint, stops the server
# by PID.
#   api/bench/wrk_api.sh BUILD_DIR [JOBS=2000] [SECONDS=10] [CONNECTIONS=32]
set -euo pipefail
build=${1:?usage: wrk_api.sh BUILD_DIR [jobs] [seconds] [connections]}
jobs=${2:-2000}; secs=${3:-10}; conns=${4:-32}
bin=$build/coordinator/ringmaster
tmp=$(mktemp -d)
export RINGMASTER_API_TOKEN=bench RINGMASTER_LOG_LEVEL=warn
"$bin" serve --db "$tmp/rm.db" --grpc 127.0.0.1:0 --http 127.0.0.1:0 >"$tmp/out" 2>"$tmp/err" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do grep -q "http listening" "$tmp/out" 2>/dev/null && break; sleep 0.1; done
addr=$(awk '/http listening/ {print $NF}' "$tmp/out")
echo "server http://$addr (pid $pid); storing $jobs jobs"
/usr/bin/python3 - "$addr" "$jobs" <<'PY'
import http.client, json, sys
host, port = sys.argv[1].rsplit(":", 1)
c = http.client.HTTPConnection(host, int(port))
for i in range(int(sys.argv[2])):
    c.request("POST", "/api/v1/jobs", json.dumps({"name": f"bench-{i}", "world_size": 4, "launcher": "none"}),
              {"Authorization": "Bearer bench", "Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    assert r.status == 201, r.status
PY
printf "%-28s %12s %10s %10s\n" endpoint "requests/s" "p50" "p99"
for path in "/api/v1/jobs" "/api/v1/jobs/$((jobs / 2))" "/metrics"; do
  out=$(wrk -t2 -c"$conns" -d"${secs}s" --latency "http://$addr$path")
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  errs=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
  printf "%-28s %12s %10s %10s %s\n" "$path" "$rps" "$p50" "$p99" "${errs:+non-2xx: $errs}"
done
