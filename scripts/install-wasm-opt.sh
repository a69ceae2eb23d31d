#!/usr/bin/env bash
# wasm-opt (Debian's binaryen, pinned) into .tools/binaryen, without root:
# `apt-get download` fetches the .deb as any user and `dpkg-deb -x` unpacks it
# in place. When this user's apt has no package lists (a fresh machine where
# `apt-get update` never ran), a private copy of the lists is fetched into
# .tools/apt first. Called by scripts/install-tools.sh; idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools"
VERSION=108-1
# SHA-256 of binaryen_108-1_amd64.deb in Debian bookworm (checked on amd64).
SHA256_AMD64=3e78e82c38b9faa7e5645f19ab3d386f8da7c71f8dc19edfaa0ff1b080bd81a8
BIN="$TOOLS/bin/wasm-opt"

have=$("$BIN" --version 2>/dev/null || true)
# `make build` also runs the package's wasm-metadce, from the same directory.
if [[ $have == "wasm-opt version ${VERSION%-*}"* && -x "$TOOLS/binaryen/usr/bin/wasm-metadce" ]]; then
  exit 0
fi
for tool in apt-get dpkg-deb sha256sum; do
  command -v "$tool" >/dev/null || { echo "install-wasm-opt: $tool not found (a Debian machine is needed)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "installing wasm-opt (binaryen $VERSION) into $TOOLS/binaryen..."
if ! (cd "$work" && apt-get download -q=2 "binaryen=$VERSION" >/dev/null 2>&1); then
  # No usable system lists for this user: fetch a private copy (no root needed).
  apt_dir="$TOOLS/apt"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  opts=(-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Debug::NoLocking=1)
  apt-get -q=2 "${opts[@]}" update >/dev/null 2>&1 || true
  (cd "$work" && apt-get download -q=2 "${opts[@]}" "binaryen=$VERSION") || {
    echo "install-wasm-opt: could not download binaryen=$VERSION with 'apt-get download'" >&2
    exit 1
  }
fi
deb=("$work"/binaryen_*.deb)
if [ "$(dpkg --print-architecture)" = amd64 ]; then
  sum=$(sha256sum "${deb[0]}")
  if [ "${sum%% *}" != "$SHA256_AMD64" ]; then
    echo "install-wasm-opt: ${deb[0]##*/} has SHA-256 ${sum%% *}, expected $SHA256_AMD64" >&2
    exit 1
  fi
fi
dpkg-deb -x "${deb[0]}" "$work/root"
rm -rf "$TOOLS/binaryen"
mkdir -p "$TOOLS/binaryen" "$TOOLS/bin"
mv "$work/root/usr" "$TOOLS/binaryen/usr"
ln -sfr "$TOOLS/binaryen/usr/bin/wasm-opt" "$BIN"
have=$("$BIN" --version)
if [[ $have != "wasm-opt version ${VERSION%-*}"* ]]; then
  echo "install-wasm-opt: unexpected version: $have" >&2
  exit 1
fi
