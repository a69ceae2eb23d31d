#!/usr/bin/env bash
# wrk (Debian's package), the load generator of `make bench`
# (scripts/bench/suite.py). Skipped when present; otherwise installed with apt-get
# as root or through sudo.
set -euo pipefail
source "$(dirname "$0")/lib/apt.sh"
command -v wrk >/dev/null && exit 0
APT_HINT="  (make bench needs it)" apt_install install-wrk wrk
command -v wrk >/dev/null || { echo "install-wrk: wrk did not install" >&2; exit 1; }
