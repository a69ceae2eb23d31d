#!/usr/bin/env bash
# iproute2 (ip, ss) and iptables, for tests/load/netns.rs: Envoy and Valkey in two
# network namespaces joined by a veth pair, and a silently cut link. Skipped
# when present; otherwise installed with apt-get, which needs root (CI runs as
# root, and the test itself needs root to create namespaces).
set -euo pipefail
source "$(dirname "$0")/lib/apt.sh"
missing=()
for tool in ip ss iptables; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] && exit 0
APT_HINT="  (tests/load/netns.rs needs ${missing[*]}; CI runs as root)" \
  apt_install --root-only --no-recommends install-netns-tools iproute2 iptables
