# netns_lib.sh - simulated hosts for the benchmarks (sourced by
# hier_netns.sh and torch/netns_ddp.sh; root): N network namespaces joined
# by a bridge, each over a veth limited by a tbf qdisc. Namespace h is
# "${tag}h$h" with address "$net.$((h + 1))/24" on its eth0.
#
#   netns_up TAG N RATE NET    make them (NET: the /24's first three octets)
#   netns_down                 delete what netns_up made, newest first
# Callers run `trap netns_down EXIT` before netns_up, so that a failure
# half-way leaves nothing behind.
netns_made=()
netns_down() {
  for ((i = ${#netns_made[@]} - 1; i >= 0; i--)); do
    case "${netns_made[$i]}" in
      ns:*) ip netns del "${netns_made[$i]#ns:}" 2>/dev/null || true ;;
      link:*) ip link del "${netns_made[$i]#link:}" 2>/dev/null || true ;;
    esac
  done
  netns_made=()
}
netns_up() {
  local tag="$1" n="$2" rate="$3" net="$4" br="${1}br" h ns
  ip link add "$br" type bridge && netns_made+=("link:$br")
  ip link set "$br" up
  for ((h = 0; h < n; h++)); do
    ns="${tag}h$h"
    ip netns add "$ns" && netns_made+=("ns:$ns")
    ip link add "${tag}v$h" type veth peer name eth0 netns "$ns" && netns_made+=("link:${tag}v$h")
    ip link set "${tag}v$h" master "$br" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$net.$((h + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
  done
}
