//! The declarations against the reader: every declared field is read from
//! the document into its own struct field, under its JSON name.

use serde_json::{json, Map, Value};

use super::super::read;
use super::super::shape::{Kind, Object, Shape};
use super::RawConfig;

/// A value of `kind` that passes stage 1, with every field of every object.
fn sample(kind: Kind) -> Value {
    match kind {
        Kind::Str => json!("x"),
        Kind::Bool => json!(true),
        Kind::U64 | Kind::U32 | Kind::Number | Kind::Any => json!(1),
        Kind::Duration => json!("1s"),
        Kind::Obj(shape) | Kind::StrOrObj(shape) | Kind::NumOrObj(shape) => full(shape),
        Kind::Arr(item) => json!([sample(*item)]),
    }
}

fn full(shape: &Shape) -> Value {
    Value::Object(shape.fields.iter().map(|f| (f.name.to_owned(), sample(f.kind))).collect::<Map<_, _>>())
}

/// Every object shape within `kind`, depth first.
fn shapes(kind: Kind, out: &mut Vec<&'static Shape>) {
    match kind {
        Kind::Obj(shape) | Kind::StrOrObj(shape) | Kind::NumOrObj(shape) => {
            out.push(shape);
            shape.fields.iter().for_each(|f| shapes(f.kind, out));
        }
        Kind::Arr(item) => shapes(*item, out),
        _ => {}
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn every_declared_field_is_read_into_its_struct_field() {
    let doc = full(&RawConfig::SHAPE).to_string();
    let raw = read::document::<RawConfig>(doc.as_bytes()).unwrap();
    let shown = format!("{raw:?}");
    assert!(!shown.contains("None"), "a declared field was not read: {shown}");
    // Spot checks that values land in the field of the same name.
    assert_eq!(raw.valkey.cluster_mode.unwrap().seeds, "x");
    let rule = raw.rules.into_iter().next().unwrap();
    assert_eq!(rule.r#match.unwrap().path_regex.as_deref(), Some("x"));
    assert_eq!(rule.hash_tag, Some(1));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn field_names_are_json_names_and_unique() {
    let mut all = Vec::new();
    shapes(Kind::Obj(&RawConfig::SHAPE), &mut all);
    assert!(all.len() > 15, "{}", all.len());
    for shape in all {
        for (i, field) in shape.fields.iter().enumerate() {
            assert!(
                field.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{}",
                field.name
            );
            assert_eq!(shape.index(field.name), Some(i), "{} twice", field.name);
        }
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_misspelt_field_is_unknown() {
    let mut doc = full(&RawConfig::SHAPE);
    let valkey = doc.get_mut("valkey").and_then(Value::as_object_mut).unwrap();
    let value = valkey.remove("max_queue").unwrap();
    valkey.insert("max_queu".into(), value);
    let err = read::document::<RawConfig>(doc.to_string().as_bytes()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "valkey.max_queu: unknown field, expected one of cluster, timeout, key_prefix, max_in_flight, max_batch, \
         max_messages_in_flight, max_queue, invoke, username, password_env, sentinel, cluster_mode"
    );
}
