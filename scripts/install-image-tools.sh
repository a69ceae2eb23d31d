#!/usr/bin/env bash
# Installs the OCI tools that `make image` and the packaging test need, from
# Debian (bookworm or newer) with apt-get. Idempotent: nothing happens when
# they are all present. Needs root (or sudo); no Docker engine is used.
#
#   buildah          builds the "compat" image from the Dockerfile (no daemon)
#   skopeo           copies images between OCI layouts and registries
#   umoci            unpacks a pulled image (the test extracts plugin.wasm with it)
#   docker-registry  the CNCF distribution registry, run on loopback by the test
#                    (on a host with systemd, the package also enables its own
#                    service on :5000; the test never uses that one)
set -euo pipefail

declare -A tool_of=([buildah]=buildah [skopeo]=skopeo [umoci]=umoci [docker-registry]=docker-registry)
missing=()
for pkg in "${!tool_of[@]}"; do
  command -v "${tool_of[$pkg]}" >/dev/null || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null; then
  sudo=(sudo)
else
  echo "install-image-tools: need root or sudo to apt-get install: ${missing[*]}" >&2
  exit 1
fi
command -v apt-get >/dev/null || { echo "install-image-tools: apt-get not found; install ${missing[*]} yourself" >&2; exit 1; }
echo "installing ${missing[*]} with apt-get..."
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
for pkg in "${missing[@]}"; do
  command -v "${tool_of[$pkg]}" >/dev/null || { echo "install-image-tools: $pkg did not install" >&2; exit 1; }
done
