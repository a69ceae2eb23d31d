#!/usr/bin/env bash
# `make compose`: the demo stack of envoy/docker-compose.yml in the foreground
# (Envoy on 127.0.0.1:10000, admin 127.0.0.1:9901, Valkey on the stack's own
# network). Ctrl-C stops it and removes its containers, network and volumes.
# Extra arguments go to `docker compose` before `up`, e.g.
# `make compose ARGS="--profile sentinel"` or `ARGS="--profile cluster"`.
#
# With TOLLGATE_COMPOSE_REGISTRY=1 (`make compose-registry`, after `make
# image`) it also runs profile `registry`: it starts the stack's registry,
# pushes target/image/artifact:<version> to it with skopeo, then brings the
# rest up; `envoy-registry` (127.0.0.1:10200) runs the module fetched from it.
#
# Needs a running Docker engine and Compose v2 (`docker compose`, or
# .tools/bin/docker-compose from `make docker-tools`). When the pinned images
# are missing and cannot be pulled (no registry), it builds local stand-ins
# from the Envoy and Valkey of `make tools` and the docker-registry of `make
# image-tools` (scripts/compose-images.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif [ -x .tools/bin/docker-compose ]; then
  compose=(.tools/bin/docker-compose)
else
  echo "make compose: no Compose v2: install Docker's compose plugin, or run make docker-tools" >&2
  exit 1
fi
if ! docker info >/dev/null 2>&1; then
  echo "make compose: no Docker engine answers: start Docker (e.g. sudo systemctl start docker)" >&2
  exit 1
fi
compose+=(-f envoy/docker-compose.yml)

missing=0
for image in $(sed -n 's/^ *image: *//p' envoy/docker-compose.yml | sort -u); do
  docker image inspect "$image" >/dev/null 2>&1 || missing=1
done
if [ "$missing" -eq 1 ] && ! "${compose[@]}" --profile sentinel --profile registry --profile cluster pull; then
  echo "make compose: the images cannot be pulled; building local stand-ins" >&2
  scripts/compose-images.sh
fi

port=${TOLLGATE_PORT:-10000}
cat <<MSG
tollgate in Docker Compose: Envoy on http://127.0.0.1:$port, admin on http://127.0.0.1:${TOLLGATE_ADMIN_PORT:-9901}
Rule auth.createToken: POST /auth/token, keyed by x-user-id, 20 per 60s AND 5 per 3s.

  for i in 1 2 3 4 5 6; do curl -s -o /dev/null -w '%{http_code}\n' -X POST -H 'x-user-id: alice' http://127.0.0.1:$port/auth/token; done
  curl -si -X POST -H 'x-user-id: alice' http://127.0.0.1:$port/auth/token

Change the limits live: write a copy of envoy/compose/dynamic/listeners.yaml, then mv it over
the file (docs/deploy.md, "Changing the configuration"). Ctrl-C stops the stack and removes it.
MSG
trap '"${compose[@]}" --profile sentinel --profile registry --profile cluster down --volumes --remove-orphans --timeout 1' EXIT

if [ "${TOLLGATE_COMPOSE_REGISTRY:-}" = 1 ]; then
  version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
  [ -d target/image/artifact ] || { echo "make compose: no target/image/artifact (run make image)" >&2; exit 1; }
  command -v skopeo >/dev/null || { echo "make compose: no skopeo (make image-tools installs it)" >&2; exit 1; }
  export TOLLGATE_MODULE_TAG="$version"
  "${compose[@]}" --profile registry up --detach --pull never registry
  registry=$("${compose[@]}" --profile registry port registry 5000)
  # Retried until the registry listens (a few tenths of a second).
  pushed=0
  for _ in $(seq 100); do
    if skopeo copy --quiet --dest-tls-verify=false "oci:target/image/artifact:$version" \
      "docker://$registry/tollgate:$version" 2>/dev/null; then
      pushed=1
      break
    fi
    sleep 0.1
  done
  [ "$pushed" -eq 1 ] || { echo "make compose: could not push tollgate:$version to the registry on $registry" >&2; exit 1; }
  echo "pushed target/image/artifact:$version to $registry/tollgate:$version;" \
    "envoy-registry runs its module on http://127.0.0.1:${TOLLGATE_OCI_PORT:-10200}"
fi
"${compose[@]}" "$@" up --pull never
