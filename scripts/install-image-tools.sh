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
source "$(dirname "$0")/lib/apt.sh"

declare -A tool_of=([buildah]=buildah [skopeo]=skopeo [umoci]=umoci [docker-registry]=docker-registry)
missing=()
for pkg in "${!tool_of[@]}"; do
  command -v "${tool_of[$pkg]}" >/dev/null || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

apt_install install-image-tools "${missing[@]}"
for pkg in "${missing[@]}"; do
  command -v "${tool_of[$pkg]}" >/dev/null || { echo "install-image-tools: $pkg did not install" >&2; exit 1; }
done
