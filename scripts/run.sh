#!/usr/bin/env bash
# `make run`: Valkey on 127.0.0.1:6379 and Envoy with envoy/envoy.yaml in the
# foreground (demo listener :10000, admin :9901). Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools"
ENVOY="${TOLLGATE_ENVOY:-$TOOLS/bin/envoy}"
VALKEY="${TOLLGATE_VALKEY:-$TOOLS/bin/valkey-server}"
STATE="$TOOLS/run"
mkdir -p "$STATE"

for port in 6379 10000 10001 9901; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is already in use; stop what listens there first" >&2
    exit 1
  fi
done

"$VALKEY" --port 6379 --bind 127.0.0.1 --save "" --appendonly no --dir "$STATE" \
  --logfile "$STATE/valkey.log" &
valkey_pid=$!
envoy_pid=""
stop() {
  trap - INT TERM EXIT
  [ -n "$envoy_pid" ] && kill "$envoy_pid" 2>/dev/null || true
  kill "$valkey_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  echo "stopped Envoy and Valkey"
}
trap stop INT TERM EXIT

until (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; do
  kill -0 "$valkey_pid" 2>/dev/null || { echo "valkey-server exited; see $STATE/valkey.log" >&2; exit 1; }
  sleep 0.05
done

cat <<'MSG'
tollgate demo: Envoy on http://127.0.0.1:10000, admin on http://127.0.0.1:9901, Valkey on 127.0.0.1:6379
Rule auth.createToken: POST /auth/token, keyed by x-user-id, 20 per 60s AND 5 per 3s.

  # six calls in a row: five pass, the sixth gets 429 from the 3s window
  for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code}\n' -X POST -H 'x-user-id: alice' http://127.0.0.1:10000/auth/token; done
  # the headers of one call
  curl -si -X POST -H 'x-user-id: alice' http://127.0.0.1:10000/auth/token
  # another user has a bucket of their own; other paths are not limited
  curl -si -X POST -H 'x-user-id: bob' http://127.0.0.1:10000/auth/token
  curl -si http://127.0.0.1:10000/hello

Envoy prints one access log line per request, with tollgate's decision.
Ctrl-C stops Envoy and Valkey.
MSG
"$ENVOY" -c envoy/envoy.yaml --concurrency 2 --log-level warning --file-flush-interval-msec 500 &
envoy_pid=$!
wait "$envoy_pid"
