#!/usr/bin/env bash
# Builds local stand-ins for the images envoy/docker-compose.yml pins, for a
# machine that cannot pull them: the Envoy and valkey-server binaries that
# `make tools` installs (same versions), the glibc libraries `ldd` lists, and
# busybox as /bin/sh, imported from a tarball (`docker import`: no builder, no
# base image, nothing pulled). Needs a running Docker engine.
#
# An image that already has the tag is kept: a stand-in whose binary is
# unchanged (label org.tollgate.stand-in = the binary's sha256), or the
# official image itself (no such label). A stale stand-in is rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."
ENVOY="${TOLLGATE_ENVOY:-$PWD/.tools/bin/envoy}"
VALKEY="${TOLLGATE_VALKEY:-$PWD/.tools/bin/valkey-server}"
BUSYBOX="$(command -v busybox || true)"
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

# stand_in TAG BINARY NAME...: an image running BINARY as /usr/local/bin/NAME.
stand_in() {
  local tag=$1 binary version label current root lib
  binary=$(readlink -f "$2")
  shift 2
  [ -x "$binary" ] || { echo "compose-images: $binary missing (run make tools)" >&2; exit 1; }
  version=${tag##*:}
  version=${version#v}
  # The stand-in must be the version the tag names.
  local said
  said=$("$binary" --version 2>&1 || true)
  case "$said" in
    *"/$version/"* | *"v=$version "*) ;;
    *) echo "compose-images: $tag, but $binary says: $said" >&2; exit 1 ;;
  esac
  label=$(sha256sum "$binary" | cut -d' ' -f1)
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
  cp "$binary" "$root/usr/local/bin/$1"
  for name in "${@:2}"; do ln -s "$1" "$root/usr/local/bin/$name"; done
  cp "$BUSYBOX" "$root/bin/busybox"
  for applet in sh printf cat echo ls mkdir rm sleep; do ln -s busybox "$root/bin/$applet"; done
  # The dynamic loader and libraries, at the paths the binary asks for.
  for lib in $(ldd "$binary" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
  tar -C "$root" -cf - . | docker import \
    --change "ENV PATH=/usr/local/bin:/bin" \
    --change "LABEL org.tollgate.stand-in=$label" \
    --change "WORKDIR /data" \
    - "$tag" >/dev/null
  echo "compose-images: $tag: built from $binary"
}

stand_in "$(tag_of envoyproxy/envoy)" "$ENVOY" envoy
stand_in "$(tag_of valkey/valkey)" "$VALKEY" valkey-server valkey-sentinel
