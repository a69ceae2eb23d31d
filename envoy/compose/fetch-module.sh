#!/bin/sh
# The `module-fetch` service of envoy/docker-compose.yml (profile `registry`):
# copies the Wasm module of the OCI artifact tollgate:$TOLLGATE_MODULE_TAG
# (`make image`, target/image/artifact) from the registry into /module, where
# `envoy-registry` mounts it. Envoy cannot pull an image itself; this does it
# through the registry's HTTP API with busybox wget: the manifest, then the
# layer of type application/vnd.module.wasm.content.layer.v1+wasm by digest.
# The file is written only when its sha256 is that digest, so Envoy runs the
# image's module byte for byte. Waits up to 120 s for the image to be pushed.
set -eu
repo="$TOLLGATE_REGISTRY/v2/tollgate"
tag="$TOLLGATE_MODULE_TAG"
layer_type="application/vnd.module.wasm.content.layer.v1+wasm"

echo "module-fetch: waiting for tollgate:$tag in the registry (make compose-registry pushes it)"
tries=0
until wget -q -O /tmp/manifest --header "Accept: application/vnd.oci.image.manifest.v1+json" \
  "$repo/manifests/$tag" 2>/dev/null; do
  tries=$((tries + 1))
  if [ "$tries" -ge 600 ]; then
    echo "module-fetch: no tollgate:$tag in $TOLLGATE_REGISTRY after 120 s" >&2
    exit 1
  fi
  sleep 0.2
done

# One JSON object per line; the layer's is the one naming the Wasm type.
digest=$(tr -d ' \t\r\n' </tmp/manifest | tr '{' '\n' | grep -F "\"mediaType\":\"$layer_type\"" |
  sed -n 's/.*"digest":"\(sha256:[0-9a-f]\{64\}\)".*/\1/p')
if [ "$(echo "$digest" | wc -w)" -ne 1 ]; then
  echo "module-fetch: tollgate:$tag has no single layer of type $layer_type" >&2
  exit 1
fi

wget -q -O /module/tollgate.wasm.part "$repo/blobs/$digest"
got="sha256:$(sha256sum /module/tollgate.wasm.part | cut -d' ' -f1)"
if [ "$got" != "$digest" ]; then
  rm -f /module/tollgate.wasm.part
  echo "module-fetch: the layer's sha256 is $got, not $digest" >&2
  exit 1
fi
mv /module/tollgate.wasm.part /module/tollgate.wasm
echo "module-fetch: tollgate:$tag layer $digest -> /module/tollgate.wasm ($(wc -c </module/tollgate.wasm) bytes)"
