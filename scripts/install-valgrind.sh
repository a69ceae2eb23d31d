#!/usr/bin/env bash
# valgrind (Debian's package): callgrind counts the instructions of
# `make bench-host` (scripts/bench/admitted_cost.py) and `make bench-instructions`
# (scripts/bench/instructions.py). Skipped when present; otherwise installed
# with apt-get as root or through sudo.
set -euo pipefail
source "$(dirname "$0")/lib/apt.sh"
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null && exit 0
APT_HINT="  (make bench-host and make bench-instructions need it)" apt_install install-valgrind valgrind
command -v callgrind_control >/dev/null || { echo "install-valgrind: valgrind did not install" >&2; exit 1; }
