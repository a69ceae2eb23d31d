#!/usr/bin/env bash
# Debian's redis-server (Redis 7, built with TLS) and openssl, for the TLS and
# Redis 7 compatibility test (tests/tls_redis7.rs). Called by
# scripts/install-tools.sh. Skipped when both are present; otherwise installed
# with apt-get, which needs root (CI runs as root). The package's service is
# not started (a policy-rc.d refuses it while installing).
set -euo pipefail
if [ -x /usr/bin/redis-server ] && /usr/bin/redis-server --version | grep -q "v=7\." && command -v openssl >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "redis-server 7 and openssl are needed by tests/tls_redis7.rs: run 'apt-get install redis-server openssl' as root" >&2
  exit 1
fi
echo "installing redis-server and openssl (apt-get)..."
policy=/usr/sbin/policy-rc.d
placed=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && placed=1
fi
trap '[ -n "$placed" ] && rm -f "$policy"' EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends redis-server openssl >/dev/null
/usr/bin/redis-server --version | grep -q "v=7\." || { echo "unexpected redis-server version" >&2; exit 1; }
