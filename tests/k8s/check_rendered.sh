#!/usr/bin/env bash
# tests/k8s/check_rendered.sh RENDER_K8S - validate what the coordinator renders for jobs
# of several world sizes (and a token that needs escaping) through validate.mjs on stdin.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
render="$1"
for world in 1 4 16; do
  echo "== job 42, world $world"
  set +e
  "$render" 42 "$world" ringmaster:7070 "s3cr3t'\"x
y" img:1 ml | "$here/run_node.sh" validate.mjs --expect-world "$world" -
  rc=$?
  set -e
  [ $rc -eq 0 ] || exit $rc
done
echo "== job 9, default image and namespace"
"$render" 9 2 10.0.0.5:7070 tok | "$here/run_node.sh" validate.mjs --expect-world 2 -
