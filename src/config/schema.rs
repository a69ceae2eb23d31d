//! The JSON Schema (draft 2020-12) of the plugin configuration, generated
//! from the shapes the parser reads with (declared in [`super::raw`]): objects,
//! field names, JSON types, required fields and `null` for optional ones come
//! from it; each field's description and simple value rules (ranges, enums,
//! patterns, "exactly one of") from [`super::schema_fields`], built from the
//! same constants the validator uses. Host-only: the wasm module never holds
//! it. Committed as `schema/tollgate.schema.json`; `tests/host/schema.rs` checks
//! it is current.
//!
//! The schema accepts every valid configuration; it cannot see everything
//! the validator does (windows that can never bind, duplicate names, regex
//! syntax, environment variables), so `tollgate check` remains the full check.

use serde_json::{json, Map, Value};

use super::raw::RawConfig;
use super::schema_fields::{field_facts, DURATION_PATTERN};
use super::shape::{Kind, Object, Shape};

/// Where the committed schema lives, relative to the repository root.
pub const SCHEMA_PATH: &str = "schema/tollgate.schema.json";

/// The schema as pretty-printed JSON, with a final newline (the committed file).
pub fn json_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&json_schema()).unwrap_or_default();
    text.push('\n');
    text
}

/// The schema.
pub fn json_schema() -> Value {
    let mut root = object_schema(&RawConfig::SHAPE, "");
    if let Value::Object(map) = &mut root {
        let mut head = Map::new();
        head.insert("$schema".into(), json!("https://json-schema.org/draft/2020-12/schema"));
        head.insert("$id".into(), json!("https://tollgate.invalid/schema/tollgate.schema.json"));
        head.insert("title".into(), json!("tollgate plugin configuration"));
        head.insert(
            "description".into(),
            json!(
                "The JSON configuration of the tollgate Envoy filter (Envoy's StringValue `configuration`, or \
                 Istio's WasmPlugin `pluginConfig`). Generated from the parser's shape table by \
                 `tollgate schema`; `tollgate check` runs the full validation."
            ),
        );
        head.insert(
            "$defs".into(),
            json!({
                "duration": {
                    "description": "A duration: \"<digits><unit>\" with unit ms, s, m, h or d (\"250ms\", \"3s\", \"10m\", \"1h\", \"1d\"), or an integer number of seconds.",
                    "anyOf": [
                        { "type": "string", "pattern": DURATION_PATTERN },
                        { "type": "integer", "minimum": 0 }
                    ]
                }
            }),
        );
        head.append(map);
        *map = head;
    }
    root
}

/// The path of a field below `parent` (`valkey.cluster`, `rules[].name`).
fn child(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}.{name}")
    }
}

fn object_schema(shape: &Shape, path: &str) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for field in shape.fields {
        let field_path = child(path, field.name);
        let mut schema = kind_schema(field.kind, &field_path);
        if !field.required {
            schema = nullable(schema);
        }
        properties.insert(field.name.to_owned(), schema);
        if field.required {
            required.push(json!(field.name));
        }
    }
    let mut out = Map::new();
    out.insert("type".into(), json!("object"));
    out.insert("additionalProperties".into(), json!(false));
    out.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        out.insert("required".into(), Value::Array(required));
    }
    let facts = field_facts(&format!("{path}{{}}"));
    merge(&mut out, facts);
    Value::Object(out)
}

fn kind_schema(kind: Kind, path: &str) -> Value {
    let base = match kind {
        Kind::Str => json!({ "type": "string" }),
        Kind::Bool => json!({ "type": "boolean" }),
        Kind::U64 => json!({ "type": "integer", "minimum": 0 }),
        Kind::U32 => json!({ "type": "integer", "minimum": 0, "maximum": u32::MAX }),
        Kind::Number => json!({ "type": "number" }),
        Kind::Duration => json!({ "$ref": "#/$defs/duration" }),
        Kind::Any => json!({}),
        Kind::Obj(shape) => object_schema(shape, path),
        Kind::Arr(item) => json!({ "type": "array", "items": kind_schema(*item, &format!("{path}[]")) }),
        Kind::StrOrObj(shape) => {
            let text = with_facts(json!({ "type": "string" }), field_facts(&format!("{path}:string")));
            json!({ "anyOf": [ text, object_schema(shape, path) ] })
        }
        Kind::NumOrObj(shape) => {
            let number = with_facts(json!({ "type": "number" }), field_facts(&format!("{path}:number")));
            json!({ "anyOf": [ number, object_schema(shape, path) ] })
        }
    };
    with_facts(base, field_facts(path))
}

fn with_facts(mut schema: Value, facts: Map<String, Value>) -> Value {
    if let Value::Object(map) = &mut schema {
        merge(map, facts);
    }
    schema
}

/// Adds `facts` to `out`, the description first.
fn merge(out: &mut Map<String, Value>, mut facts: Map<String, Value>) {
    let mut merged = Map::new();
    if let Some(description) = facts.remove("description") {
        merged.insert("description".into(), description);
    }
    merged.append(out);
    merged.append(&mut facts);
    *out = merged;
}

/// An optional field: `null` means "left out".
fn nullable(schema: Value) -> Value {
    let Value::Object(mut map) = schema else { return schema };
    match map.get("type").cloned() {
        Some(Value::String(t)) => {
            map.insert("type".into(), json!([t, "null"]));
            Value::Object(map)
        }
        _ => {
            let mut out = Map::new();
            for key in ["description", "default"] {
                if let Some(value) = map.remove(key) {
                    out.insert(key.into(), value);
                }
            }
            out.insert("anyOf".into(), json!([Value::Object(map), { "type": "null" }]));
            Value::Object(out)
        }
    }
}

/// Every path the shapes have, in field order (for the test that each
/// one is described).
pub fn field_paths() -> Vec<String> {
    fn walk(kind: Kind, path: &str, out: &mut Vec<String>) {
        match kind {
            Kind::Obj(shape) | Kind::StrOrObj(shape) | Kind::NumOrObj(shape) => {
                for field in shape.fields {
                    let p = child(path, field.name);
                    out.push(p.clone());
                    walk(field.kind, &p, out);
                }
            }
            Kind::Arr(item) => walk(*item, &format!("{path}[]"), out),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(Kind::Obj(&RawConfig::SHAPE), "", &mut out);
    out
}
