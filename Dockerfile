# tollgate as a Wasm plugin image, "compat" variant of the Wasm image spec:
# one layer holding /plugin.wasm, which is what Istio's WasmPlugin
# (url: oci://...) and other OCI-pulling Envoy control planes extract.
#
#   make build
#   docker build -t REGISTRY/tollgate:0.1.0 .
#   docker push REGISTRY/tollgate:0.1.0
#
# Keep exactly one COPY: the fetcher reads plugin.wasm from the last layer.
# `make image` builds this same file with buildah (no Docker needed) into the
# OCI layout target/image/compat, and adds the manifest annotation
# module.wasm.image/variant=compat that the spec asks of OCI-typed layers.
# .dockerignore keeps the build context down to the module.
FROM scratch
COPY target/wasm32-wasip1/release/tollgate.wasm /plugin.wasm
