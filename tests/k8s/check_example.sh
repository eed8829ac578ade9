#!/usr/bin/env bash
# tests/k8s/check_example.sh RENDER_K8S WORKERS_YAML - deploy/k8s/workers.yaml must be
# exactly what the coordinator renders for the documented example (below its header
# comment), so the example never drifts from `ringmaster k8s-manifest`.
set -euo pipefail
render="$1"
example="$2"
want="$(mktemp)"
trap 'rm -f "$want"' EXIT
"$render" 1 4 ringmaster:7070 CHANGE-ME ringmaster:0.1.0 >"$want"
if ! diff -u "$want" <(sed '1,/^# ---- rendered below/d' "$example"); then
  echo "FAIL: $example differs from the renderer's output; regenerate it (see its header)"
  exit 1
fi
echo "PASS: $example matches the renderer"
