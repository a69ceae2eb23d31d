#!/usr/bin/env bash
# `make soak`: steady load (200 requests/s) through a real Envoy and Valkey for
# SOAK_SECONDS (default 600), sampling Envoy's RSS, its heap (/memory) and the
# pending store calls every 10 s. Prints a CSV and a summary. Not part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test --test load soak:: -- --ignored --nocapture
