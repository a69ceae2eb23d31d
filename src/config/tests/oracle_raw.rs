//! The stage-1 reader as it was before `read.rs`: serde derive read
//! through serde_path_to_error, with serde's messages rewritten. Kept as the
//! oracle of `oracle.rs` (host-only): the new reader must give the same
//! result for every document.
//!
//! Frozen: this is the file as first written (commit a0e17ef), a copy of
//! the reader then in production, and is not updated with the reader or the
//! configuration's fields, so that it stays independent evidence.
#![allow(dead_code)]

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Number, Value};

/// A JSON object holding a `T`; anything else (arrays included) is a type
/// error that says "expected an object".
#[derive(Debug)]
#[allow(dead_code)]
pub(super) struct Obj<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjVisitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjVisitor<T> {
            type Value = Obj<T>;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Obj)
            }
        }

        deserializer.deserialize_map(ObjVisitor(PhantomData))
    }
}

/// A JSON string or a JSON object holding a `T` (for fields such as key parts
/// that have a short string form).
#[derive(Debug)]
enum StrOrObj<T> {
    Str(String),
    Obj(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for StrOrObj<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = StrOrObj<T>;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a string or an object")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(StrOrObj::Str(v.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(StrOrObj::Obj)
            }
        }

        deserializer.deserialize_any(V(PhantomData))
    }
}

/// The whole document.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    valkey: Obj<RawValkey>,
    failure_mode: Option<String>,
    rules: Vec<Obj<RawRule>>,
    response: Option<Obj<RawResponse>>,
    shadow: Option<bool>,
    denial_cache: Option<Obj<RawDenialCache>>,
    testing: Option<Obj<RawTesting>>,
}

/// `valkey`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawValkey {
    cluster: String,
    timeout: Option<Value>,
    key_prefix: Option<String>,
    max_in_flight: Option<u64>,
    max_batch: Option<u64>,
    max_queue: Option<u64>,
    username: Option<String>,
    password_env: Option<String>,
    sentinel: Option<Obj<RawSentinel>>,
}

/// `valkey.sentinel`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSentinel {
    cluster: String,
    master_name: String,
    refresh: Option<Value>,
}

/// `denial_cache`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDenialCache {
    max_keys: Option<u64>,
}

/// `rules[i]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: String,
    #[serde(rename = "match")]
    matcher: Option<Obj<RawMatch>>,
    key: Option<Vec<StrOrObj<RawKeyPart>>>,
    limits: Vec<Obj<RawLimit>>,
    algorithm: Option<String>,
    cost: Option<Number>,
    shadow: Option<bool>,
}

/// `rules[i].match`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    path: Option<String>,
    path_prefix: Option<String>,
    path_regex: Option<String>,
    methods: Option<Vec<String>>,
    authority: Option<String>,
    headers: Option<Vec<Obj<RawHeaderMatch>>>,
}

/// `rules[i].match.headers[j]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeaderMatch {
    name: String,
    present: Option<bool>,
    exact: Option<String>,
    prefix: Option<String>,
    regex: Option<String>,
    invert: Option<bool>,
}

/// `rules[i].key[j]` in object form: exactly one source field, plus
/// `on_missing`. (The string forms are `"path"`, `"method"`, `"authority"`.)
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKeyPart {
    header: Option<String>,
    query: Option<String>,
    cookie: Option<String>,
    remote_address: Option<Obj<RawPrefixes>>,
    forwarded_for: Option<Obj<RawForwardedFor>>,
    literal: Option<String>,
    property: Option<Vec<String>>,
    on_missing: Option<StrOrObj<RawOnMissing>>,
}

/// `remote_address`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrefixes {
    v4_prefix: Option<u32>,
    v6_prefix: Option<u32>,
}

/// `forwarded_for`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawForwardedFor {
    trusted_hops: Option<u32>,
    v4_prefix: Option<u32>,
    v6_prefix: Option<u32>,
}

/// `on_missing` in object form.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOnMissing {
    default: String,
}

/// `response`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResponse {
    status: Option<u64>,
    headers: Option<Vec<String>>,
    body: Option<String>,
    text: Option<String>,
    on_allowed: Option<bool>,
    filter_state: Option<bool>,
}

/// `rules[i].limits[j]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
    limit: Number,
    period: Value,
}

/// `testing`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTesting {
    now_header: Option<String>,
}

/// One step of a path.
enum Seg {
    Key(String),
    Index(usize),
}

fn render(segs: &[Seg]) -> String {
    let mut out = String::new();
    for seg in segs {
        match seg {
            Seg::Index(index) => out.push_str(&format!("[{index}]")),
            Seg::Key(key) if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Seg::Key(key) => out.push_str(&format!("[{key:?}]")),
        }
    }
    if out.is_empty() {
        out.push_str("(root)");
    }
    out
}

fn bare_message(err: &serde_json::Error) -> String {
    let full = err.to_string();
    if err.line() == 0 {
        return full;
    }
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    match full.strip_suffix(&suffix) {
        Some(bare) => bare.to_owned(),
        None => full,
    }
}

fn syntax(err: &serde_json::Error) -> String {
    format!("(root): invalid JSON at line {} column {}: {}", err.line(), err.column(), bare_message(err))
}

/// The old stage 1: `Ok` when the shape is right, else the error as displayed.
pub(super) fn stage1(bytes: &[u8]) -> Result<(), String> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let result: Result<Obj<RawConfig>, _> = serde_path_to_error::deserialize(&mut deserializer);
    let err = match result {
        Ok(_) => return deserializer.end().map_err(|e| syntax(&e)),
        Err(err) => err,
    };
    let mut segs: Vec<Seg> = err
        .path()
        .iter()
        .map(|seg| match seg {
            serde_path_to_error::Segment::Seq { index } => Seg::Index(*index),
            serde_path_to_error::Segment::Map { key } | serde_path_to_error::Segment::Enum { variant: key } => {
                Seg::Key(key.clone())
            }
            serde_path_to_error::Segment::Unknown => Seg::Key("?".to_owned()),
        })
        .collect();
    let inner = err.into_inner();
    if inner.classify() != serde_json::error::Category::Data {
        return Err(syntax(&inner));
    }
    let message = data_message(&mut segs, &bare_message(&inner));
    Err(format!("{}: {message}", render(&segs)))
}

fn data_message(segs: &mut Vec<Seg>, text: &str) -> String {
    if let Some((field, expected)) =
        text.strip_prefix("unknown field `").and_then(|rest| rest.rsplit_once("`, expected "))
    {
        point_at(segs, field);
        let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        return match names.as_slice() {
            [] => "unknown field, expected no fields".to_owned(),
            [only] => format!("unknown field, expected {only}"),
            many => format!("unknown field, expected one of {}", many.join(", ")),
        };
    }
    for (prefix, message) in [("missing field `", "missing field"), ("duplicate field `", "duplicate field")] {
        if let Some(field) = text.strip_prefix(prefix).and_then(|rest| rest.strip_suffix('`')) {
            point_at(segs, field);
            return message.to_owned();
        }
    }
    if let Some((found, expected)) =
        text.strip_prefix("invalid type: ").and_then(|rest| rest.rsplit_once(", expected "))
    {
        let found = match found {
            "sequence" => "array",
            "map" => "object",
            other => other,
        };
        let expected = match expected {
            "a sequence" => "an array",
            other => other,
        };
        return format!("invalid type: {found}, expected {expected}");
    }
    text.to_owned()
}

fn point_at(segs: &mut Vec<Seg>, field: &str) {
    if !matches!(segs.last(), Some(Seg::Key(last)) if last == field) {
        segs.push(Seg::Key(field.to_owned()));
    }
}
