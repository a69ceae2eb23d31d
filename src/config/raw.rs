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

/// The whole document.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub(crate) valkey: Obj<RawValkey>,
    pub(crate) failure_mode: Option<String>,
    pub(crate) rules: Vec<Obj<RawRule>>,
    pub(crate) testing: Option<Obj<RawTesting>>,
}

/// `valkey`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawValkey {
    pub(crate) cluster: String,
    pub(crate) timeout: Option<Value>,
    pub(crate) key_prefix: Option<String>,
}

/// `rules[i]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    pub(crate) name: String,
    #[serde(rename = "match")]
    pub(crate) matcher: Option<Obj<RawMatch>>,
    pub(crate) key: Option<Vec<Obj<RawKeyPart>>>,
    pub(crate) limits: Vec<Obj<RawLimit>>,
    pub(crate) algorithm: Option<String>,
    pub(crate) cost: Option<Number>,
}

/// `rules[i].match`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMatch {
    pub(crate) path_prefix: Option<String>,
    pub(crate) methods: Option<Vec<String>>,
}

/// `rules[i].key[j]`. Later versions may add other kinds of part as other
/// fields of this object.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawKeyPart {
    pub(crate) header: String,
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
