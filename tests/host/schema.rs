//! The JSON Schema (`schema/tollgate.schema.json`): it is the one the shape
//! table generates, every field of the table is described, and it accepts
//! every configuration the project ships (the valid fixtures, the plugin
//! configurations of `envoy/` and `envoy/istio/wasmplugin.yaml`; the
//! examples of docs/configuration.md are checked in `docs_examples.rs`). It
//! rejects every invalid fixture except those only the validator can see.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tollgate::config::schema::{field_paths, json_schema, json_schema_text, SCHEMA_PATH};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&json_schema()).unwrap()
}

fn errors(validator: &jsonschema::Validator, text: &str) -> Vec<String> {
    let value: Value = serde_json::from_str(text).unwrap();
    validator.iter_errors(&value).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

#[test]
fn the_committed_schema_is_the_generated_one() {
    let committed = std::fs::read_to_string(root().join(SCHEMA_PATH)).unwrap();
    assert!(
        committed == json_schema_text(),
        "{SCHEMA_PATH} is stale: regenerate it with `cargo run --bin tollgate -- schema > {SCHEMA_PATH}`"
    );
}

#[test]
fn the_schema_is_valid_draft_2020_12() {
    let schema = json_schema();
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
    jsonschema::meta::validate(&schema).unwrap();
}

#[test]
fn every_field_of_the_shape_table_is_described() {
    let schema = json_schema_text();
    let paths = field_paths();
    assert!(paths.len() > 60, "{} paths", paths.len());
    assert!(paths.contains(&"rules[].key[].on_missing.default".to_owned()));
    let schema: Value = serde_json::from_str(&schema).unwrap();
    let mut undescribed = Vec::new();
    fn find<'a>(schema: &'a Value, path: &str) -> Option<&'a Value> {
        let mut node = schema;
        for part in path.split('.') {
            let (name, arrays) = (part.trim_end_matches("[]"), part.matches("[]").count());
            node = unwrap_null(node).get("properties")?.get(name)?;
            for _ in 0..arrays {
                node = unwrap_null(node).get("items")?;
            }
        }
        Some(node)
    }
    /// The branch of an `anyOf` (nullable, or string-or-object) that has fields or items.
    fn unwrap_null(node: &Value) -> &Value {
        let Some(branches) = node.get("anyOf").and_then(Value::as_array) else { return node };
        branches
            .iter()
            .map(unwrap_null)
            .find(|b| b.get("properties").is_some() || b.get("items").is_some())
            .unwrap_or(node)
    }
    for path in &paths {
        match find(&schema, path) {
            Some(node) if node.get("description").is_some() => {}
            Some(_) => undescribed.push(path.clone()),
            None => panic!("{path} is not in the schema"),
        }
    }
    assert!(undescribed.is_empty(), "fields without a description: {undescribed:?}");
}

#[test]
fn valid_fixtures_pass() {
    let validator = validator();
    let dir = root().join("tests/fixtures/config/valid");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(errors(&validator, &text), Vec::<String>::new(), "{}", path.display());
            seen += 1;
        }
    }
    assert!(seen >= 3, "{seen} valid fixtures");
}

/// The plugin configurations of every Envoy file and the WasmPlugin.
#[test]
fn shipped_configurations_pass() {
    let validator = validator();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("envoy"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.push(root().join("envoy/istio/wasmplugin.yaml"));
    let mut seen = 0;
    for file in &files {
        for embedded in tollgate::cli::source::load(file).unwrap().configs {
            let text = embedded.json.unwrap();
            assert_eq!(errors(&validator, &text), Vec::<String>::new(), "{}", embedded.origin);
            seen += 1;
        }
    }
    assert!(seen >= files.len(), "{seen} configurations in {} files", files.len());
}

/// Invalid fixtures the schema cannot reject: only the validator sees these
/// (relations between values, regex syntax, the environment, exact numbers).
const VALIDATOR_ONLY: &[&str] = &[
    "concurrency-lease-ttl-too-long",
    "concurrency-lease-ttl-too-short",
    "concurrency-lease-ttl-zero",
    "cost-above-limit",
    "count-cost-log-limits",
    "count-cost-with-rule-cost",
    "count-reserve-default-above-limit",
    "count-reserve-default-with-units",
    "count-reserve-gcra",
    "count-reserve-log-limits",
    "count-reserve-units-above-limit",
    "count-reserve-units-log-cap",
    "count-status-range-reversed",
    "cost-too-large-for-log",
    "duplicate-field",
    "match-header-regex-invalid",
    "match-path-regex-invalid",
    "method-duplicate",
    "never-binds-cost",
    "never-binds-fixed-window",
    "never-binds-gcra",
    "never-binds-longer",
    "never-binds-shorter",
    "period-duplicate",
    "period-duplicate-spelling",
    "period-overflow",
    "period-too-long",
    "period-zero",
    "period-zero-integer",
    "product-too-large-gcra",
    "product-too-large-sliding-window",
    "local-limiter-without-local",
    "response-text-without-text-body",
    "rule-hash-tag-out-of-range",
    "rule-hash-tag-without-key",
    "rule-name-duplicate",
    "shape-cluster-mode",
    "shape-max-delay-too-long",
    "shape-max-delay-zero",
    "shape-shadow-mode",
    "shape-shadow-rule",
    "shape-with-count",
    "sync-interval-not-shorter-than-period",
    "sync-interval-too-long",
    "sync-interval-too-short",
    "sync-with-count",
    "sync-with-shape",
    "timeout-too-long",
    "timeout-zero",
    "valkey-cluster-mode-refresh-too-long",
    "valkey-cluster-mode-refresh-zero",
    "valkey-cluster-mode-seeds-is-store",
    "valkey-password-env-unset",
    "valkey-sentinel-refresh-too-long",
    "valkey-sentinel-refresh-zero",
    "valkey-username-without-password",
];

#[test]
fn invalid_fixtures_are_rejected_unless_only_the_validator_can_tell() {
    let validator = validator();
    let dir = root().join("tests/fixtures/config/invalid");
    let mut wrong = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let Ok(value) = serde_json::from_str::<Value>(&text) else { continue }; // not JSON at all
        let rejected = !validator.is_valid(&value);
        match (rejected, VALIDATOR_ONLY.contains(&name.as_str())) {
            (true, false) | (false, true) => {}
            (true, true) => wrong.push(format!("{name}: the schema rejects it; remove it from VALIDATOR_ONLY")),
            (false, false) => wrong.push(format!("{name}: the schema accepts it")),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn an_invalid_configuration_names_the_field() {
    let validator = validator();
    let text = r#"{ "valkey": { "cluster": "c", "max_batch": 0 }, "rules": [ { "name": "r", "limits": [ { "limit": 1, "period": "3 s" } ] } ] }"#;
    let found = errors(&validator, text);
    assert!(found.iter().any(|e| e.starts_with("/valkey/max_batch:")), "{found:?}");
    assert!(found.iter().any(|e| e.starts_with("/rules/0/limits/0/period:")), "{found:?}");
    assert!(Path::new(&root().join(SCHEMA_PATH)).is_file());
}
