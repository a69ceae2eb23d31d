#!/usr/bin/env bash
# Debian's redis-server (Redis 7, built with TLS) and openssl, for the TLS and
# Redis 7 compatibility test (tests/live/store/tls_redis7.rs). Run by `make redis7`, a
# prerequisite of `make integration` only: `make run` and `make build` never
# need it. Skipped when both are present; otherwise installed with apt-get,
# which needs root (CI runs as root). The package's service is not started (a
# policy-rc.d refuses it while installing).
set -euo pipefail
source "$(dirname "$0")/lib/apt.sh"
have=""
if [ -x /usr/bin/redis-server ]; then
  have=$(/usr/bin/redis-server --version)
fi
if [[ $have == *"v=7."* ]] && command -v openssl >/dev/null; then
  exit 0
fi
policy=/usr/sbin/policy-rc.d
placed=""
# Only root can place it (and apt_install takes no one else).
if [ "$(id -u)" -eq 0 ] && [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && placed=1
fi
trap 'if [ -n "$placed" ]; then rm -f "$policy"; fi' EXIT
APT_HINT="  (as root: apt-get install redis-server openssl, or: sudo make redis7)" \
  apt_install --root-only --no-recommends install-redis redis-server openssl
have=$(/usr/bin/redis-server --version)
[[ $have == *"v=7."* ]] || { echo "unexpected redis-server version: $have" >&2; exit 1; }
