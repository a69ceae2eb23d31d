#!/usr/bin/env bash
# Builds local stand-ins for the images envoy/docker-compose.yml pins, for a
# machine that cannot pull them: the Envoy and valkey-server binaries that
# `make tools` installs and Debian's docker-registry (`make image-tools`) for
# registry:<version> (same versions, checked), the glibc libraries `ldd`
# lists, and busybox as /bin/sh (with wget, sed and sha256sum for
# envoy/compose/fetch-module.sh), imported from a tarball (`docker import`:
# no builder, no base image, nothing pulled). Needs a running Docker engine.
# Without docker-registry the registry stand-in is skipped, with a note. The
# valkey stand-in also gets a valkey-cli (valkey-cli, or Debian's redis-cli
# of `make redis7`: profile `cluster`'s init runs scripts/valkey-cluster-join.sh
# with it); without one, a note.
#
# An image that already has the tag is kept: a stand-in built from the same
# binary by the same script (label org.tollgate.stand-in = the sha256 of
# both), or the official image itself (no such label). A stale stand-in is
# rebuilt, and the old one removed.
set -euo pipefail
SELF="$(readlink -f "$0")"
cd "$(dirname "$0")/.."
ENVOY="${TOLLGATE_ENVOY:-$PWD/.tools/bin/envoy}"
VALKEY="${TOLLGATE_VALKEY:-$PWD/.tools/bin/valkey-server}"
REGISTRY="$(command -v docker-registry || true)"
BUSYBOX="$(command -v busybox || true)"
CLI="${TOLLGATE_VALKEY_CLI:-$(command -v valkey-cli || command -v redis-cli || true)}"
[ -n "$BUSYBOX" ] || { echo "compose-images: no busybox (scripts/install-docker.sh installs it)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The tags, read from the compose file so that they cannot drift apart.
tag_of() {
  local tag
  tag=$(sed -n "s|^ *image: *\($1:[^ ]*\) *$|\1|p" envoy/docker-compose.yml | sort -u)
  [ "$(wc -l <<<"$tag")" -eq 1 ] && [ -n "$tag" ] || { echo "compose-images: no single $1 tag" >&2; exit 1; }
  echo "$tag"
}

# copy_binary ROOT BINARY NAME: BINARY as ROOT/usr/local/bin/NAME, with the
# dynamic loader and libraries at the paths it asks for.
copy_binary() {
  local lib
  cp "$2" "$1/usr/local/bin/$3"
  for lib in $(ldd "$2" | grep -o '/[^ ]*'); do
    mkdir -p "$1$(dirname "$lib")"
    cp -L "$lib" "$1$lib"
  done
}

# stand_in TAG BINARY NAME...: an image running BINARY as /usr/local/bin/NAME
# (with EXTRA, a second binary, as /usr/local/bin/EXTRA_NAME).
stand_in() {
  local tag=$1 binary version label current root lib extra=${EXTRA:-}
  binary=$(readlink -f "$2")
  shift 2
  [ -x "$binary" ] || { echo "compose-images: $binary missing (run make tools)" >&2; exit 1; }
  version=${tag##*:}
  version=${version#v}
  # The stand-in must be the version the tag names.
  local said
  said=$("$binary" --version 2>&1 || true)
  case "$said" in
    *"/$version/"* | *"v=$version "* | *" $version+"* | *" $version") ;;
    *) echo "compose-images: $tag, but $binary says: $said" >&2; exit 1 ;;
  esac
  label=$(cat "$binary" "$SELF" ${extra:+"$extra"} | sha256sum | cut -d' ' -f1)
  if current=$(docker image inspect -f '{{index .Config.Labels "org.tollgate.stand-in"}}' "$tag" 2>/dev/null); then
    if [ "$current" = "$label" ]; then
      echo "compose-images: $tag: stand-in up to date"
      return
    elif [ -z "$current" ] || [ "$current" = "<no value>" ]; then
      echo "compose-images: $tag: an image not built here (the official one?); kept"
      return
    fi
  fi
  root="$work/$1"
  mkdir -p "$root/usr/local/bin" "$root/bin" "$root/tmp" "$root/data" "$root/etc"
  chmod 1777 "$root/tmp"
  copy_binary "$root" "$binary" "$1"
  for name in "${@:2}"; do ln -s "$1" "$root/usr/local/bin/$name"; done
  if [ -n "$extra" ]; then
    copy_binary "$root" "$extra" "$EXTRA_NAME"
  fi
  cp "$BUSYBOX" "$root/bin/busybox"
  for applet in sh printf cat echo ls mkdir rm mv sleep wget sed tr grep cut wc sha256sum; do ln -s busybox "$root/bin/$applet"; done
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
  if [ "$1" = registry ]; then
    # The official image's config, at its path.
    mkdir -p "$root/etc/docker/registry" "$root/var/lib/registry"
    printf '%s\n' "version: 0.1" "log:" "  fields:" "    service: registry" "storage:" "  cache:" \
      "    blobdescriptor: inmemory" "  filesystem:" "    rootdirectory: /var/lib/registry" "http:" \
      "  addr: :5000" "  headers:" "    X-Content-Type-Options: [nosniff]" >"$root/etc/docker/registry/config.yml"
  fi
  tar -C "$root" -cf - . | docker import \
    --change "ENV PATH=/usr/local/bin:/bin" \
    --change "LABEL org.tollgate.stand-in=$label" \
    --change "WORKDIR /data" \
    - "$tag" >/dev/null
  echo "compose-images: $tag: built from $binary"
}

stand_in "$(tag_of envoyproxy/envoy)" "$ENVOY" envoy
if [ -n "$CLI" ]; then
  EXTRA=$(readlink -f "$CLI") EXTRA_NAME=valkey-cli stand_in "$(tag_of valkey/valkey)" "$VALKEY" valkey-server valkey-sentinel
else
  echo "compose-images: no valkey-cli or redis-cli (make redis7 installs redis-cli): the valkey stand-in has none, and profile cluster cannot form its cluster"
  stand_in "$(tag_of valkey/valkey)" "$VALKEY" valkey-server valkey-sentinel
fi
if [ -n "$REGISTRY" ]; then
  stand_in "$(tag_of registry)" "$REGISTRY" registry
else
  echo "compose-images: no docker-registry (make image-tools installs it): no stand-in for profile registry"
fi
# Stale stand-ins that a rebuild untagged: dangling, removed.
docker image prune --force --filter label=org.tollgate.stand-in >/dev/null
