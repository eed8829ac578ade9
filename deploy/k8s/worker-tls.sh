#!/bin/sh
# deploy/k8s/worker-tls.sh - add mutual TLS to the worker manifests the
# coordinator renders (`ringmaster k8s-manifest JOB_ID`), so the workers can
# join a coordinator that serves gRPC with --tls-cert/--tls-key/--tls-ca
# (deploy/k8s/coordinator.yaml does):
#
#   ringmaster --cacert certs/ca.pem --server https://127.0.0.1:8080 \
#     k8s-manifest JOB_ID | deploy/k8s/worker-tls.sh | kubectl apply -f -
#
# A filter, stdin to stdout. In every Indexed Job of the stream it
#   - appends --tls-ca/--tls-cert/--tls-key /etc/ringmaster-tls/{ca,worker,
#     worker-key}.pem to the worker's args (after the --token argument),
#   - mounts the Secret $RINGMASTER_WORKER_TLS_SECRET (default
#     ringmaster-worker-tls; deploy/gen-certs.sh and coordinator.yaml's header
#     show how to create it) read-only at /etc/ringmaster-tls.
# The Secret with the job's token and the headless Service pass unchanged.
# It edits the renderer's fixed layout (coordinator/launch/k8s.c) and fails,
# printing nothing, when a Job does not have it or already has TLS flags.
# tests/deploy/check_deploy_tls.sh runs it on rendered manifests and checks
# the result against the Kubernetes schemas.
set -eu
secret="${RINGMASTER_WORKER_TLS_SECRET:-ringmaster-worker-tls}"
case "$secret" in
  '' | *[!a-z0-9.-]*) echo "worker-tls.sh: bad Secret name '$secret'" >&2; exit 2 ;;
esac
in="$(cat)"
out="$(printf '%s\n' "$in" | awk -v secret="$secret" '
  function flush_job() {
    if (in_job && (tok != 1 || env != 1 || rp != 1)) bad = 1
  }
  /^kind: Job$/ { flush_job(); in_job = 1; jobs++; tok = env = rp = 0 }
  /^---$/ { flush_job(); in_job = 0 }
  /^ *- "--tls-(ca|cert|key)"$/ { bad = 1 }
  in_job && /^          env:$/ {
    print "          volumeMounts:"
    print "            - name: ringmaster-tls"
    print "              mountPath: /etc/ringmaster-tls"
    print "              readOnly: true"
    env++
  }
  { print }
  in_job && /^            - "\$\(RINGMASTER_TOKEN\)"$/ {
    print "            - \"--tls-ca\""
    print "            - \"/etc/ringmaster-tls/ca.pem\""
    print "            - \"--tls-cert\""
    print "            - \"/etc/ringmaster-tls/worker.pem\""
    print "            - \"--tls-key\""
    print "            - \"/etc/ringmaster-tls/worker-key.pem\""
    tok++
  }
  in_job && /^      restartPolicy: Never$/ {
    print "      volumes:"
    print "        - name: ringmaster-tls"
    print "          secret:"
    print "            secretName: " secret
    print "            defaultMode: 0400"
    rp++
  }
  END { flush_job(); if (bad || jobs == 0) exit 1 }
')" || {
  echo "worker-tls.sh: input is not the coordinator's rendered worker manifests" \
       "(no Indexed Job in its layout, or TLS flags already there)" >&2
  exit 1
}
printf '%s\n' "$out"
