#!/usr/bin/env bash
# tests/k8s/run_node.sh SCRIPT [ARGS...] - run a validator script with Node.js from
# tests/k8s. Exit 77 (CTest: skipped) with a message when Node.js is missing, or when
# node_modules is missing and `npm ci` cannot install it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v node >/dev/null 2>&1; then
  echo "SKIP: Node.js not found; the Kubernetes manifest checks need node (scripts/setup installs it)"
  exit 77
fi
if [ ! -d "$here/node_modules/kubernetes-models" ] || [ ! -d "$here/node_modules/yaml" ]; then
  if ! command -v npm >/dev/null 2>&1 ||
     ! (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2); then
    echo "SKIP: tests/k8s/node_modules missing and 'npm ci' failed; run: (cd tests/k8s && npm ci)"
    exit 77
  fi
fi
script="$1"
shift
exec node "$here/$script" "$@"
