//! Stage 1: the JSON shape, exactly as written.
//!
//! These structs mirror the document one to one and carry no meaning of their
//! own: every check beyond "this is the right JSON type" happens in
//! [`super::validate`]. Each object is read through [`Obj`], so an object
//! written as a JSON array (which serde's derive would otherwise accept
//! positionally) is a type error, and every struct denies unknown fields.
//!
//! Values whose checks need full control over the error message (durations,
//! the failure mode, limits) are kept loosely typed here
//! ([`serde_json::Value`], [`String`], [`serde_json::Number`]).

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Number, Value};

/// A JSON object holding a `T`; anything else (arrays included) is a type
/// error that says "expected an object".
#[derive(Debug)]
pub(crate) struct Obj<T>(pub(crate) T);

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
pub(crate) enum StrOrObj<T> {
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
pub(crate) struct RawConfig {
    pub(crate) valkey: Obj<RawValkey>,
    pub(crate) failure_mode: Option<String>,
    pub(crate) rules: Vec<Obj<RawRule>>,
    pub(crate) response: Option<Obj<RawResponse>>,
    pub(crate) shadow: Option<bool>,
    pub(crate) denial_cache: Option<Obj<RawDenialCache>>,
    pub(crate) testing: Option<Obj<RawTesting>>,
}

/// `valkey`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawValkey {
    pub(crate) cluster: String,
    pub(crate) timeout: Option<Value>,
    pub(crate) key_prefix: Option<String>,
    pub(crate) max_in_flight: Option<u64>,
    pub(crate) max_batch: Option<u64>,
    pub(crate) max_queue: Option<u64>,
    pub(crate) username: Option<String>,
    pub(crate) password_env: Option<String>,
    pub(crate) sentinel: Option<Obj<RawSentinel>>,
}

/// `valkey.sentinel`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSentinel {
    pub(crate) cluster: String,
    pub(crate) master_name: String,
    pub(crate) refresh: Option<Value>,
}

/// `denial_cache`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDenialCache {
    pub(crate) max_keys: Option<u64>,
}

/// `rules[i]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    pub(crate) name: String,
    #[serde(rename = "match")]
    pub(crate) matcher: Option<Obj<RawMatch>>,
    pub(crate) key: Option<Vec<StrOrObj<RawKeyPart>>>,
    pub(crate) limits: Vec<Obj<RawLimit>>,
    pub(crate) algorithm: Option<String>,
    pub(crate) cost: Option<Number>,
    pub(crate) shadow: Option<bool>,
}

/// `rules[i].match`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMatch {
    pub(crate) path: Option<String>,
    pub(crate) path_prefix: Option<String>,
    pub(crate) path_regex: Option<String>,
    pub(crate) methods: Option<Vec<String>>,
    pub(crate) authority: Option<String>,
    pub(crate) headers: Option<Vec<Obj<RawHeaderMatch>>>,
}

/// `rules[i].match.headers[j]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHeaderMatch {
    pub(crate) name: String,
    pub(crate) present: Option<bool>,
    pub(crate) exact: Option<String>,
    pub(crate) prefix: Option<String>,
    pub(crate) regex: Option<String>,
    pub(crate) invert: Option<bool>,
}

/// `rules[i].key[j]` in object form: exactly one source field, plus
/// `on_missing`. (The string forms are `"path"`, `"method"`, `"authority"`.)
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawKeyPart {
    pub(crate) header: Option<String>,
    pub(crate) query: Option<String>,
    pub(crate) cookie: Option<String>,
    pub(crate) remote_address: Option<Obj<RawPrefixes>>,
    pub(crate) forwarded_for: Option<Obj<RawForwardedFor>>,
    pub(crate) literal: Option<String>,
    pub(crate) property: Option<Vec<String>>,
    pub(crate) on_missing: Option<StrOrObj<RawOnMissing>>,
}

/// `remote_address`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPrefixes {
    pub(crate) v4_prefix: Option<u32>,
    pub(crate) v6_prefix: Option<u32>,
}

/// `forwarded_for`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawForwardedFor {
    pub(crate) trusted_hops: Option<u32>,
    pub(crate) v4_prefix: Option<u32>,
    pub(crate) v6_prefix: Option<u32>,
}

/// `on_missing` in object form.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawOnMissing {
    pub(crate) default: String,
}

/// `response`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawResponse {
    pub(crate) status: Option<u64>,
    pub(crate) headers: Option<Vec<String>>,
    pub(crate) body: Option<String>,
    pub(crate) text: Option<String>,
    pub(crate) on_allowed: Option<bool>,
}

/// `rules[i].limits[j]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimit {
    pub(crate) limit: Number,
    pub(crate) period: Value,
}

/// `testing`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTesting {
    pub(crate) now_header: Option<String>,
}
