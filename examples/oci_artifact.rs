//! Writes tollgate's module as a Wasm OCI *artifact* image into an OCI image
//! layout directory (the "oci" variant of the Wasm image spec that Istio's
//! image fetcher accepts). `make image` runs it; the "compat" variant is built
//! from the `Dockerfile` by buildah instead.
//!
//!     cargo run --example oci_artifact -- <module.wasm> <layout dir> <tag>
//!
//! The image, as Istio's fetcher (istio/istio pkg/wasm/imagefetcher.go) wants it:
//! - manifest `application/vnd.oci.image.manifest.v1+json` with exactly two
//!   layers: the runtime config (`application/vnd.module.wasm.config.v1+json`)
//!   and the module itself (`application/vnd.module.wasm.content.layer.v1+wasm`,
//!   the raw `.wasm` bytes, uncompressed);
//! - the manifest's config is the same runtime-config blob, so the image is
//!   also a well-formed OCI artifact for registries that read the config type.
//!
//! Nothing depends on the clock or on map order, so the same module always
//! gives the same digests.
//! The layout directory is replaced as a whole.

use oci_spec::image::{
    Descriptor, Digest, ImageIndexBuilder, ImageManifestBuilder, MediaType, OciLayoutBuilder, Sha256Digest,
    ANNOTATION_REF_NAME, ANNOTATION_TITLE, ANNOTATION_VERSION, SCHEMA_VERSION,
};
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

const CONFIG_MEDIA_TYPE: &str = "application/vnd.module.wasm.config.v1+json";
const WASM_MEDIA_TYPE: &str = "application/vnd.module.wasm.content.layer.v1+wasm";
/// The proxy-wasm ABI the Rust SDK's module exports (`proxy_abi_version_0_2_1`).
const ABI_VERSION: &str = "proxy_abi_version_0_2_1";
/// The filter's root context id (`root_id` in the Envoy config).
const ROOT_ID: &str = "tollgate";

type Error = Box<dyn std::error::Error>;

fn main() {
    if let Err(e) = run() {
        eprintln!("oci_artifact: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [module, layout, tag] = args.as_slice() else {
        return Err("usage: oci_artifact <module.wasm> <layout dir> <tag>".into());
    };
    let wasm = std::fs::read(module).map_err(|e| format!("{module}: {e}"))?;
    if !wasm.starts_with(b"\0asm") {
        return Err(format!("{module}: not a wasm module").into());
    }
    if !wasm.windows(ABI_VERSION.len()).any(|w| w == ABI_VERSION.as_bytes()) {
        return Err(format!("{module}: does not export {ABI_VERSION}; update ABI_VERSION").into());
    }
    let digest = write_layout(&wasm, Path::new(layout), tag)?;
    println!("{layout}:{tag} manifest {digest} ({} byte module)", wasm.len());
    Ok(())
}

/// Writes the layout and returns the manifest digest.
fn write_layout(wasm: &[u8], layout: &Path, tag: &str) -> Result<Digest, Error> {
    if layout.exists() {
        std::fs::remove_dir_all(layout)?;
    }
    let blobs = layout.join("blobs").join("sha256");
    std::fs::create_dir_all(&blobs)?;

    let runtime_config = serde_json::json!({
        "type": "envoy_proxy",
        "abiVersions": [ABI_VERSION],
        "config": { "root_ids": [ROOT_ID] },
    });
    let config_bytes = serde_json::to_vec(&runtime_config)?;
    let config = titled(put_blob(&blobs, CONFIG_MEDIA_TYPE, &config_bytes)?, "runtime-config.json");
    let module = titled(put_blob(&blobs, WASM_MEDIA_TYPE, wasm)?, "plugin.wasm");

    let manifest = ImageManifestBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageManifest)
        .config(config.clone())
        .layers(vec![config, module])
        .annotations(HashMap::from([
            (ANNOTATION_VERSION.to_string(), tag.to_string()),
            (ANNOTATION_TITLE.to_string(), "tollgate".to_string()),
        ]))
        .build()?;
    // oci-spec keeps annotations in a HashMap, whose order would change the
    // digest from run to run: every object's keys are sorted first.
    let manifest_bytes = serde_json::to_vec(&sorted(serde_json::to_value(&manifest)?))?;
    let mut manifest_desc = put_blob(&blobs, "application/vnd.oci.image.manifest.v1+json", &manifest_bytes)?;
    let digest = manifest_desc.digest().clone();
    manifest_desc.set_annotations(Some(HashMap::from([(ANNOTATION_REF_NAME.to_string(), tag.to_string())])));

    let index = ImageIndexBuilder::default().schema_version(SCHEMA_VERSION).manifests(vec![manifest_desc]).build()?;
    index.to_file(layout.join("index.json"))?;
    OciLayoutBuilder::default().image_layout_version("1.0.0").build()?.to_file(layout.join("oci-layout"))?;
    Ok(digest)
}

/// Stores `bytes` under `blobs/sha256/<hex>` and describes it.
fn put_blob(blobs: &Path, media_type: &str, bytes: &[u8]) -> Result<Descriptor, Error> {
    let hex: String = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
    let path: PathBuf = blobs.join(&hex);
    std::fs::write(&path, bytes)?;
    let size = u64::try_from(bytes.len())?;
    Ok(Descriptor::new(MediaType::from(media_type), size, Sha256Digest::from_str(&hex)?))
}

fn titled(mut descriptor: Descriptor, title: &str) -> Descriptor {
    descriptor.set_annotations(Some(HashMap::from([(ANNOTATION_TITLE.to_string(), title.to_string())])));
    descriptor
}

/// `value` with every object's keys in sorted order (serde_json keeps
/// insertion order in this crate: its `preserve_order` feature is on).
fn sorted(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(String, serde_json::Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        serde_json::Value::Array(items) => serde_json::Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}
