#!/usr/bin/env bash
# `make image`: packs the release module into the two OCI image layouts that
# Istio's Wasm image fetcher accepts, tagged with the crate version:
#
#   target/image/compat:<version>     the Dockerfile built by buildah: one
#                                     tar+gzip layer holding /plugin.wasm,
#                                     annotated module.wasm.image/variant=compat
#   target/image/artifact:<version>   a Wasm OCI artifact: the raw module as a
#                                     layer of type
#                                     application/vnd.module.wasm.content.layer.v1+wasm
#                                     (written by examples/oci_artifact.rs)
#
# Push either one with skopeo, e.g.
#   skopeo copy oci:target/image/compat:0.1.0 docker://REGISTRY/tollgate:0.1.0
# Layer timestamps are pinned to the epoch, so a module gives the same digests
# on every build.
set -euo pipefail
cd "$(dirname "$0")/.."

wasm=target/wasm32-wasip1/release/tollgate.wasm
[ -f "$wasm" ] || { echo "build-image: $wasm is missing (run make build)" >&2; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || { echo "build-image: no version in Cargo.toml" >&2; exit 1; }

out=target/image
mkdir -p "$out"
# buildah keeps its own storage under target/, with the vfs driver: no daemon,
# no overlay mounts, nothing outside the repository.
buildah=(buildah --root "$PWD/$out/buildah/root" --runroot "$PWD/$out/buildah/run" --storage-driver vfs)
name="localhost/tollgate:$version"

"${buildah[@]}" build --quiet --isolation chroot --timestamp 0 \
  --annotation module.wasm.image/variant=compat \
  -f Dockerfile -t "$name" . >/dev/null
rm -rf "$out/compat"
"${buildah[@]}" push --quiet "$name" "oci:$PWD/$out/compat:$version"
"${buildah[@]}" rmi --all --force >/dev/null

cargo run --quiet --example oci_artifact -- "$wasm" "$out/artifact" "$version" >/dev/null

for variant in compat artifact; do
  digest=$(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "$out/$variant/index.json")
  size=$(du -sb "$out/$variant/blobs" | cut -f1)
  echo "image $out/$variant:$version  manifest $digest  ($size bytes of blobs)"
done
