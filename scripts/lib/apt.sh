# The apt-get preamble of scripts/install-*.sh, sourced (bash):
#
#   apt_install [--root-only] [--no-recommends] WHO PKG...
#
# Installs PKG... from Debian with apt-get: `apt-get update -qq` (once per
# script run), then `apt-get install -y -qq`, noninteractive, its output
# dropped; with --no-recommends, without recommended packages. As root
# directly, otherwise through sudo (unless --root-only). With neither, or
# without apt-get, it says so (prefixed WHO:, followed by $APT_HINT when set)
# and exits 1. The caller checks what it needed afterwards.

apt_updated=""

apt_install() {
  local need="root or sudo" recommends=() sudo=() who
  while :; do
    case $1 in
      --root-only) need=root ;;
      --no-recommends) recommends=(--no-install-recommends) ;;
      *) break ;;
    esac
    shift
  done
  who=$1
  shift
  if [ "$(id -u)" -ne 0 ]; then
    if [ "$need" != root ] && command -v sudo >/dev/null; then
      sudo=(sudo)
    else
      echo "$who: need $need to apt-get install: $*" >&2
      [ -z "${APT_HINT:-}" ] || echo "$APT_HINT" >&2
      exit 1
    fi
  fi
  command -v apt-get >/dev/null || { echo "$who: no apt-get; install $* yourself" >&2; exit 1; }
  echo "installing $* with apt-get..."
  if [ -z "$apt_updated" ]; then
    "${sudo[@]}" apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${recommends[@]}" "$@" >/dev/null
}
