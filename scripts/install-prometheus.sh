#!/usr/bin/env bash
# Debian's prometheus (2.42, with promtool), for the alert rules and the
# dashboard of monitoring/ (tests/live/operations/monitoring.rs: `promtool test rules`,
# and every expression evaluated by a real Prometheus scraping Envoy). Run by
# `make prometheus`, a prerequisite of `make integration` only. Skipped when
# both are present; otherwise installed with apt-get, which needs root (CI
# runs as root). The package's service is not started (a policy-rc.d refuses
# it while installing); the test starts its own Prometheus.
set -euo pipefail
source "$(dirname "$0")/lib/apt.sh"
if [ -x /usr/bin/prometheus ] && [ -x /usr/bin/promtool ]; then
  exit 0
fi
policy=/usr/sbin/policy-rc.d
placed=""
# Only root can place it (and apt_install takes no one else).
if [ "$(id -u)" -eq 0 ] && [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && placed=1
fi
trap 'if [ -n "$placed" ]; then rm -f "$policy"; fi' EXIT
APT_HINT="  (as root: apt-get install prometheus, or: sudo make prometheus)" \
  apt_install --root-only --no-recommends install-prometheus prometheus
/usr/bin/promtool --version >/dev/null
