//! Kubernetes manifests (envoy/istio/, envoy/envoy-gateway/) read as JSON,
//! and the checks their CRDs' schemas make of them.

use serde::Deserialize;
use serde_json::Value as Json;
use std::path::Path;

/// Every YAML document of the file at `path`, as JSON values.
pub fn yaml_documents(path: &Path) -> Vec<Json> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Json::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

/// `value` is a string among `allowed` (a CRD's `enum`).
pub fn one_of(value: &Json, allowed: &[&str], what: &str) {
    let s = value.as_str().unwrap_or_else(|| panic!("{what}: not a string: {value}"));
    assert!(allowed.contains(&s), "{what}: {s} is not one of {allowed:?}");
}

/// A DNS-1123 subdomain, as Kubernetes wants `metadata.name`.
pub fn is_dns1123(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}
