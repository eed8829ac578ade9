#!/usr/bin/env bash
# deploy/gen-certs.sh - a private CA plus the coordinator's and the workers'
# certificates for a test install (openssl CLI only). Not for production:
# the CA key stays next to the certificates; a real install keeps it
# offline or uses its own PKI, with the same file names.
#
#   deploy/gen-certs.sh [-o DIR] [-d DAYS] [SAN ...]
#
#   -o DIR   output folder (default ./ringmaster-certs; created 0700)
#   -d DAYS  validity of the leaf certificates (default 365; the CA: 10 x)
#   SAN      extra names of the coordinator, as openssl writes them:
#            DNS:coord.example  IP:10.0.0.5 (repeatable). Always included:
#            DNS:localhost, IP:127.0.0.1, IP:::1 and the Kubernetes Service
#            names DNS:ringmaster, DNS:ringmaster.$NS.svc,
#            DNS:ringmaster.$NS.svc.cluster.local (NS: $RINGMASTER_K8S_NAMESPACE,
#            default "default").
#
# Files (keys 0600, certificates 0644):
#
#   ca.pem  ca-key.pem                 the CA (basicConstraints CA:TRUE); an
#                                      existing pair in DIR is reused, so running
#                                      the script again issues new leaves only
#   coordinator.pem coordinator-key.pem  serverAuth, the SANs above: serve
#                                      --tls-cert/--tls-key (gRPC, mutual TLS) and
#                                      --http-tls-cert/--http-tls-key (REST)
#   worker.pem  worker-key.pem         clientAuth, CN ringmaster-worker: the
#                                      workers' --tls-cert/--tls-key (and any gRPC
#                                      client of the coordinator, e.g. a program
#                                      that submits over gRPC)
#
# The coordinator's gRPC port requires a client certificate signed by ca.pem
# and verifies it; workers verify the coordinator's certificate against
# ca.pem and the name they dial (--coordinator HOST:PORT) against its SANs.
# The CLI and browsers verify the REST certificate: `ringmaster --cacert
# DIR/ca.pem --server https://HOST:8080 ...`.
#
# Afterwards: `openssl verify -CAfile DIR/ca.pem DIR/coordinator.pem DIR/worker.pem`.
# For Kubernetes (deploy/k8s/README.md):
#   kubectl create secret generic ringmaster-coordinator-tls \
#     --from-file=DIR/ca.pem --from-file=DIR/coordinator.pem --from-file=DIR/coordinator-key.pem
#   kubectl create secret generic ringmaster-worker-tls \
#     --from-file=DIR/ca.pem --from-file=DIR/worker.pem --from-file=DIR/worker-key.pem
set -euo pipefail

out=./ringmaster-certs
days=365
while getopts "o:d:h" opt; do
  case "$opt" in
    o) out="$OPTARG" ;;
    d) days="$OPTARG" ;;
    h) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 [-o DIR] [-d DAYS] [SAN ...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
case "$days" in '' | *[!0-9]*) echo "$0: -d wants a number of days" >&2; exit 2 ;; esac
command -v openssl >/dev/null || { echo "$0: needs the openssl CLI" >&2; exit 1; }

ns="${RINGMASTER_K8S_NAMESPACE:-default}"
sans="DNS:localhost,IP:127.0.0.1,IP:::1,DNS:ringmaster,DNS:ringmaster.$ns.svc"
sans="$sans,DNS:ringmaster.$ns.svc.cluster.local"
for s in "$@"; do
  case "$s" in
    DNS:?* | IP:?*) sans="$sans,$s" ;;
    *) echo "$0: SAN '$s' must look like DNS:name or IP:address" >&2; exit 2 ;;
  esac
done

umask 077
mkdir -p "$out"
chmod 0700 "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if [ -s "$out/ca.pem" ] && [ -s "$out/ca-key.pem" ]; then
  echo "reusing the CA in $out"
else
  openssl req -x509 -newkey rsa:3072 -nodes -sha256 -days $((days * 10)) \
    -subj "/CN=ringmaster test CA" -keyout "$out/ca-key.pem" -out "$out/ca.pem" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>"$tmp/err" ||
    { cat "$tmp/err" >&2; exit 1; }
fi

# issue NAME CN EXTENSIONS: NAME.pem + NAME-key.pem signed by the CA.
issue() {
  local name="$1" cn="$2" ext="$3"
  printf '%s\n' "$ext" >"$tmp/$name.ext"
  openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=$cn" \
    -keyout "$out/$name-key.pem" -out "$tmp/$name.csr" 2>"$tmp/err" ||
    { cat "$tmp/err" >&2; exit 1; }
  openssl x509 -req -sha256 -days "$days" -in "$tmp/$name.csr" -CA "$out/ca.pem" \
    -CAkey "$out/ca-key.pem" -set_serial "0x$(openssl rand -hex 16)" \
    -extfile "$tmp/$name.ext" -out "$out/$name.pem" 2>"$tmp/err" ||
    { cat "$tmp/err" >&2; exit 1; }
}

issue coordinator ringmaster-coordinator "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$sans"
issue worker ringmaster-worker "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"

chmod 0600 "$out"/*-key.pem
chmod 0644 "$out"/ca.pem "$out"/coordinator.pem "$out"/worker.pem
openssl verify -CAfile "$out/ca.pem" "$out/coordinator.pem" "$out/worker.pem"
echo "coordinator names: $sans"
