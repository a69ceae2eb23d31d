//! The shape reader (`read.rs`) against the serde-derive reader it replaced
//! (`oracle_raw.rs`, frozen as it was first written, a copy of the reader
//! then in production): on documents made by mutating a document that uses
//! every field (wrong JSON types, unknown, repeated and missing fields,
//! truncation), both must accept the same documents and give the same error,
//! path and message, byte for byte.
//!
//! The oracle knows the fields of its day only, so the reader is driven here
//! by the same fields declared the new way (`oracle_shape.rs`); both files
//! stay as they are when the configuration grows. What this checks is the
//! reader itself; that the configuration's own declarations are read into
//! their struct fields is checked in `raw/tests.rs`.

use proptest::prelude::*;

use super::super::read;
use super::{oracle_raw, oracle_shape};

/// A JSON value whose objects may repeat keys; `Raw` is written as is.
#[derive(Debug, Clone)]
enum J {
    Obj(Vec<(String, J)>),
    Arr(Vec<J>),
    Raw(&'static str),
    Str(String),
}

fn write(j: &J, out: &mut String) {
    match j {
        J::Obj(members) => {
            out.push('{');
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push(':');
                write(v, out);
            }
            out.push('}');
        }
        J::Arr(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(v, out);
            }
            out.push(']');
        }
        J::Raw(text) => out.push_str(text),
        J::Str(s) => out.push_str(&serde_json::to_string(s).unwrap()),
    }
}

/// A valid document with every field of every object the oracle knows.
fn full() -> J {
    let doc = r#"{ "valkey": { "cluster": "c", "timeout": "100ms", "key_prefix": "p", "max_in_flight": 4,
          "max_batch": 64, "max_queue": 10, "username": "u", "password_env": "PW",
          "sentinel": { "cluster": "s", "master_name": "m", "refresh": 5 } },
      "failure_mode": "deny",
      "rules": [ { "name": "r", "algorithm": "gcra", "cost": 1, "shadow": false,
          "match": { "path": "/a", "path_prefix": "/", "path_regex": "/.*", "methods": ["GET"], "authority": "h",
                     "headers": [ { "name": "x", "present": true, "exact": "e", "prefix": "p", "regex": "r", "invert": true } ] },
          "key": [ "path", { "header": "h", "query": "q", "cookie": "c", "literal": "l", "property": ["a", "b"],
                             "remote_address": { "v4_prefix": 24, "v6_prefix": 64 },
                             "forwarded_for": { "trusted_hops": 1, "v4_prefix": 24, "v6_prefix": 64 },
                             "on_missing": { "default": "d" } }, { "header": "h", "on_missing": "skip_rule" } ],
          "limits": [ { "limit": 20, "period": "60s" }, { "limit": 5, "period": 3 } ] } ],
      "response": { "status": 429, "headers": ["ratelimit"], "body": "text", "text": "t", "on_allowed": true,
                    "filter_state": true },
      "shadow": true, "denial_cache": { "max_keys": 5 }, "testing": { "now_header": "x-now" } }"#;
    from_value(&serde_json::from_str(doc).unwrap())
}

fn from_value(v: &serde_json::Value) -> J {
    match v {
        serde_json::Value::Object(m) => J::Obj(m.iter().map(|(k, v)| (k.clone(), from_value(v))).collect()),
        serde_json::Value::Array(a) => J::Arr(a.iter().map(from_value).collect()),
        serde_json::Value::String(s) => J::Str(s.clone()),
        other => J::Raw(Box::leak(other.to_string().into_boxed_str())),
    }
}

const VALUES: &[&str] = &[
    "null",
    "true",
    "false",
    "0",
    "5",
    "-1",
    "-0",
    "1.5",
    "1e3",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "1e400",
    "\"\"",
    "\"x\"",
    "\"3s\"",
    "[]",
    "[1]",
    "[\"a\"]",
    "[{}]",
    "{}",
    "{\"a\":1}",
    "[[[]]]",
    "{\"header\":\"h\"}",
    "{\"limit\":1,\"period\":1}",
    "\"\\u00e9\\n\"",
];

/// Every node of `j`, as a path of child positions.
fn nodes(j: &J, at: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
    out.push(at.clone());
    let children: Vec<&J> = match j {
        J::Obj(m) => m.iter().map(|(_, v)| v).collect(),
        J::Arr(a) => a.iter().collect(),
        _ => vec![],
    };
    for (i, child) in children.into_iter().enumerate() {
        at.push(i);
        nodes(child, at, out);
        at.pop();
    }
}

fn node_mut<'a>(j: &'a mut J, path: &[usize]) -> &'a mut J {
    let Some((first, rest)) = path.split_first() else { return j };
    match j {
        J::Obj(m) => node_mut(&mut m[*first].1, rest),
        J::Arr(a) => node_mut(&mut a[*first], rest),
        _ => j,
    }
}

/// Applies mutation `kind` at the `pick`-th node, with `value` at hand.
fn mutate(doc: &mut J, kind: u8, pick: usize, value: usize, name: usize) {
    let mut all = Vec::new();
    nodes(doc, &mut Vec::new(), &mut all);
    let path = &all[pick % all.len()];
    let node = node_mut(doc, path);
    let keys = ["x", "limit", "name", "cluster", "valkey", "default", "per od", ""];
    match (kind % 5, node) {
        (0, node) => *node = J::Raw(VALUES[value % VALUES.len()]),
        (1, J::Obj(m)) if !m.is_empty() => {
            m.remove(value % m.len());
        }
        (2, J::Obj(m)) if !m.is_empty() => {
            let copy = m[value % m.len()].clone();
            m.push(copy);
        }
        (3, J::Obj(m)) => m.insert(value % (m.len() + 1), (keys[name % keys.len()].into(), J::Raw("1"))),
        (4, J::Arr(a)) => a.push(J::Raw(VALUES[value % VALUES.len()])),
        (_, node) => *node = J::Arr(vec![node.clone()]),
    }
}

fn new_stage1(bytes: &[u8]) -> Result<(), String> {
    read::document::<oracle_shape::RawConfig>(bytes).map(|_| ()).map_err(|e| e.to_string())
}

#[test]
fn the_valid_document_passes_both() {
    let mut text = String::new();
    write(&full(), &mut text);
    assert_eq!(oracle_raw::stage1(text.as_bytes()), Ok(()));
    assert_eq!(new_stage1(text.as_bytes()), Ok(()));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn same_result_as_the_serde_derive_reader(
        mutations in prop::collection::vec((any::<u8>(), any::<usize>(), any::<usize>(), any::<usize>()), 1..4),
        cut in prop::option::weighted(0.1, any::<usize>()),
    ) {
        let mut doc = full();
        for (kind, pick, value, name) in mutations {
            mutate(&mut doc, kind, pick, value, name);
        }
        let mut text = String::new();
        write(&doc, &mut text);
        if let Some(cut) = cut {
            let mut at = cut % (text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.truncate(at);
        }
        prop_assert_eq!(new_stage1(text.as_bytes()), oracle_raw::stage1(text.as_bytes()), "{}", text);
    }
}
