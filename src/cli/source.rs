//! Finding tollgate's plugin configurations in a file: plugin JSON itself, an
//! Envoy configuration (YAML or JSON, bootstrap or xDS resource file) whose
//! Wasm filters embed it as a `StringValue`, or an Istio `WasmPlugin`
//! manifest (`spec.pluginConfig`). File-based xDS references (`path`,
//! `path_config_source.path`) are followed, so a bootstrap's LDS and ECDS
//! files are read with it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

const WASM_TYPE: &str = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";
const STRING_VALUE: &str = "type.googleapis.com/google.protobuf.StringValue";
/// The root context of tollgate's module (`root_id`, Istio's `pluginName`).
pub const ROOT_ID: &str = "tollgate";

/// One plugin configuration found in a file.
#[derive(Debug, Clone)]
pub struct Embedded {
    /// Where it is: `envoy/envoy.yaml: demo › tollgate`.
    pub origin: String,
    /// The configuration text given to the filter; `Err` says why there is
    /// none (a `configuration` that is not a `StringValue`).
    pub json: Result<String, String>,
    /// The VM's environment variables known from the file (`key_values`,
    /// `host_env_keys` and Istio's `env` looked up in this process).
    pub env: BTreeMap<String, String>,
    /// From an Istio `WasmPlugin`, whose wiring is in another manifest.
    pub istio: bool,
}

/// Everything read from a file and the files it references.
#[derive(Debug, Default)]
pub struct Found {
    pub configs: Vec<Embedded>,
    /// Envoy documents (YAML or JSON), for the wiring check; empty for plugin
    /// JSON and Istio manifests.
    pub envoy_docs: Vec<Value>,
    /// Files read, the given one first.
    pub files: Vec<PathBuf>,
}

/// Reads `path` (and what it references).
pub fn load(path: &Path) -> Result<Found, String> {
    let mut found = Found::default();
    read_file(path, None, &mut found)?;
    Ok(found)
}

fn read_file(path: &Path, from: Option<&Path>, found: &mut Found) -> Result<(), String> {
    if found.files.iter().any(|f| f == path) || found.files.len() > 32 {
        return Ok(());
    }
    found.files.push(path.to_path_buf());
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let label = match from {
        None => path.display().to_string(),
        Some(parent) => format!("{} (from {})", path.display(), parent.display()),
    };
    let docs = match documents(&bytes) {
        Docs::Plugin => {
            let text = String::from_utf8_lossy(&bytes).into_owned();
            found.configs.push(Embedded { origin: label, json: Ok(text), env: process_env_all(), istio: false });
            return Ok(());
        }
        Docs::Tree(docs) => docs,
        Docs::Unreadable(why) => return Err(format!("{}: {why}", path.display())),
    };
    for doc in docs {
        if doc.get("kind").and_then(Value::as_str) == Some("WasmPlugin") {
            wasm_plugin(&doc, &label, found);
            continue;
        }
        let mut names = Vec::new();
        walk(&doc, &mut names, &label, found);
        for reference in references(&doc) {
            if let Some(target) = resolve(&reference, path) {
                read_file(&target, Some(path), found)?;
            }
        }
        found.envoy_docs.push(doc);
    }
    Ok(())
}

enum Docs {
    /// The file is plugin JSON (possibly invalid: the parser says why).
    Plugin,
    Tree(Vec<Value>),
    Unreadable(String),
}

/// Keys that only Envoy and Kubernetes documents have at the top.
const ENVOY_KEYS: [&str; 7] =
    ["static_resources", "dynamic_resources", "resources", "admin", "apiVersion", "kind", "bootstrap_extensions"];

fn documents(bytes: &[u8]) -> Docs {
    let text = String::from_utf8_lossy(bytes);
    let first = text.trim_start().chars().next();
    if matches!(first, Some('{' | '[') | None) {
        return match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(map)) if ENVOY_KEYS.iter().any(|k| map.contains_key(*k)) => {
                Docs::Tree(vec![Value::Object(map)])
            }
            _ => Docs::Plugin,
        };
    }
    let mut docs = Vec::new();
    for document in serde_norway::Deserializer::from_str(&text) {
        match serde::Deserialize::deserialize(document) {
            Ok(Value::Null) => {}
            Ok(value) => docs.push(value),
            Err(err) => return Docs::Unreadable(format!("not YAML or JSON: {err}")),
        }
    }
    Docs::Tree(docs)
}

/// Every Wasm filter of tollgate's module below `value`, with the names of
/// the objects around it (listener, filter).
fn walk(value: &Value, names: &mut Vec<String>, label: &str, found: &mut Found) {
    match value {
        Value::Object(map) => {
            let name = map.get("name").and_then(Value::as_str).map(str::to_owned);
            // Listener and filter names; Envoy's own network filters say nothing.
            let name = name.filter(|n| !n.starts_with("envoy."));
            if let Some(name) = &name {
                names.push(name.clone());
            }
            if map.get("@type").and_then(Value::as_str) == Some(WASM_TYPE) {
                if let Some(embedded) = wasm_filter(map.get("config"), names, label) {
                    found.configs.push(embedded);
                }
            } else {
                for child in map.values() {
                    walk(child, names, label, found);
                }
            }
            if name.is_some() {
                names.pop();
            }
        }
        Value::Array(items) => items.iter().for_each(|item| walk(item, names, label, found)),
        _ => {}
    }
}

fn wasm_filter(config: Option<&Value>, names: &[String], label: &str) -> Option<Embedded> {
    let config = config?;
    if config.get("root_id").and_then(Value::as_str) != Some(ROOT_ID) {
        return None;
    }
    let mut shown: Vec<&str> = names.iter().map(String::as_str).collect();
    shown.dedup();
    let origin = if shown.is_empty() { label.to_owned() } else { format!("{label}: {}", shown.join(" › ")) };
    let configuration = config.get("configuration");
    let json = match configuration {
        None => Ok(String::new()),
        Some(c) => match (c.get("@type").and_then(Value::as_str), c.get("value")) {
            (Some(STRING_VALUE), Some(Value::String(text))) => Ok(text.clone()),
            (Some(STRING_VALUE), None) => Ok(String::new()),
            (other, _) => Err(format!(
                "configuration has @type {}: tollgate reads a {STRING_VALUE} holding its JSON",
                other.unwrap_or("(none)")
            )),
        },
    };
    let mut env = BTreeMap::new();
    if let Some(vars) = config.pointer("/vm_config/environment_variables") {
        if let Some(Value::Object(pairs)) = vars.get("key_values") {
            for (k, v) in pairs {
                env.insert(k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_owned));
            }
        }
        if let Some(Value::Array(keys)) = vars.get("host_env_keys") {
            for key in keys.iter().filter_map(Value::as_str) {
                if let Ok(v) = std::env::var(key) {
                    env.insert(key.to_owned(), v);
                }
            }
        }
    }
    Some(Embedded { origin, json, env, istio: false })
}

/// An Istio `WasmPlugin`: `spec.pluginConfig`, as the JSON Istio hands the
/// filter, and `spec.vmConfig.env`.
fn wasm_plugin(doc: &Value, label: &str, found: &mut Found) {
    let name = doc.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("(unnamed)");
    let origin = format!("{label}: WasmPlugin {name}");
    let json = match doc.pointer("/spec/pluginConfig") {
        None => Ok(String::new()),
        Some(config) => serde_json::to_string(config).map_err(|e| e.to_string()),
    };
    let mut env = BTreeMap::new();
    if let Some(Value::Array(vars)) = doc.pointer("/spec/vmConfig/env") {
        for var in vars {
            let Some(key) = var.get("name").and_then(Value::as_str) else { continue };
            let from_host = var.get("valueFrom").and_then(Value::as_str) == Some("HOST");
            let value = if from_host {
                std::env::var(key).ok()
            } else {
                var.get("value").and_then(Value::as_str).map(str::to_owned)
            };
            if let Some(value) = value {
                env.insert(key.to_owned(), value);
            }
        }
    }
    found.configs.push(Embedded { origin, json, env, istio: true });
}

fn process_env_all() -> BTreeMap<String, String> {
    std::env::vars().collect()
}

/// File-based xDS sources named in `doc` (`path_config_source.path`, and the
/// older `path` of a config source).
fn references(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn visit(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let is_source =
                        matches!(key.as_str(), "path_config_source" | "config_source" | "lds_config" | "cds_config");
                    if is_source {
                        if let Some(path) = child.get("path").and_then(Value::as_str) {
                            out.push(path.to_owned());
                        }
                    }
                    visit(child, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|item| visit(item, out)),
            _ => {}
        }
    }
    visit(doc, &mut out);
    out.dedup();
    out
}

/// Envoy resolves relative paths from its working directory: try this
/// process's, then the referencing file's directory and its parents.
fn resolve(reference: &str, from: &Path) -> Option<PathBuf> {
    let target = Path::new(reference);
    if target.is_absolute() || target.is_file() {
        return target.is_file().then(|| target.to_path_buf());
    }
    let mut dir = from.parent();
    while let Some(d) = dir {
        let candidate = d.join(target);
        if candidate.is_file() {
            return Some(candidate);
        }
        dir = d.parent();
    }
    None
}
