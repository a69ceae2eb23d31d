#!/usr/bin/env bash
# iproute2 (ip, ss) and iptables, for tests/netns.rs: Envoy and Valkey in two
# network namespaces joined by a veth pair, and a silently cut link. Skipped
# when present; otherwise installed with apt-get, which needs root (CI runs as
# root, and the test itself needs root to create namespaces).
set -euo pipefail
missing=()
for tool in ip ss iptables; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "tests/netns.rs needs ${missing[*]}: run 'apt-get install iproute2 iptables' as root" >&2
  exit 1
fi
echo "installing iproute2 and iptables (apt-get)..."
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends iproute2 iptables >/dev/null
