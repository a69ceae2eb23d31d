//! Stage 1: reading the JSON document against the shapes of the structs of
//! [`raw`](super::raw) ([`shape`](super::shape)), in one streaming pass over
//! serde_json's parser, into those structs.
//!
//! One generic reader (a `DeserializeSeed` driven by the shapes) replaces a
//! derived deserializer per struct: the module stays small, and the reader
//! knows the path of every value, so shape errors carry it. Errors come in
//! document order, as the parser meets them: a JSON syntax error, an unknown
//! or repeated field, a value of the wrong JSON type, and, at the end of an
//! object, its first missing required field (in field order).

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Number;

use super::error::{from_json_syntax, render, ConfigError, Seg};
use super::node::{Loose, Node};
use super::shape::{Kind, Object, Shape};

/// Reads `bytes` as a document of `T`'s shape, into a `T`.
pub(crate) fn document<T: Object>(bytes: &[u8]) -> Result<T, ConfigError> {
    let reader = Reader::default();
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let seed = Seed { reader: &reader, kind: Kind::Obj(&T::SHAPE), optional: false };
    let root = match seed.deserialize(&mut deserializer) {
        Ok(root) => root,
        Err(err) => return Err(reader.error.take().unwrap_or_else(|| from_json_syntax(&err))),
    };
    deserializer.end().map_err(|err| from_json_syntax(&err))?;
    // The reader checked every node against the shape `T` was declared
    // with, so the conversion cannot fail.
    let unshaped = || ConfigError::new(super::error::ROOT, "invalid configuration");
    match root {
        Some(Node::Obj(fields)) => T::from_fields(fields).ok_or_else(unshaped),
        _ => Err(unshaped()),
    }
}

/// The path being read, and the first shape error (serde's own error only
/// unwinds the parser; the message and path are kept here).
#[derive(Default)]
struct Reader {
    path: RefCell<Vec<Seg>>,
    error: RefCell<Option<ConfigError>>,
}

impl Reader {
    /// Records an error at the current path (plus `field`), and returns the
    /// serde error that stops the parser.
    fn fail<E: serde::de::Error>(&self, field: Option<&str>, message: String) -> E {
        let mut segs = self.path.borrow().clone();
        if let Some(field) = field {
            segs.push(Seg::Key(field.to_owned()));
        }
        *self.error.borrow_mut() = Some(ConfigError::new(render(&segs), message));
        E::custom("invalid configuration")
    }
}

/// How a wrong value is shown in `invalid type: FOUND, expected ...`.
enum Found<'a> {
    Null,
    Bool(bool),
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Str(&'a str),
    Array,
    Object,
}

impl fmt::Display for Found<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Found::Null => f.write_str("null"),
            Found::Bool(b) => write!(f, "boolean `{b}`"),
            Found::Unsigned(n) => write!(f, "integer `{n}`"),
            Found::Signed(n) => write!(f, "integer `{n}`"),
            // serde_json's float spelling, as in its own messages.
            Found::Float(x) => match Number::from_f64(*x) {
                Some(n) => write!(f, "floating point `{n}`"),
                None => f.write_str("floating point"),
            },
            Found::Str(s) => write!(f, "string {s:?}"),
            Found::Array => f.write_str("array"),
            Found::Object => f.write_str("object"),
        }
    }
}

/// Reads one value of `kind`; `Ok(None)` for `null` in an optional field.
#[derive(Clone, Copy)]
struct Seed<'r> {
    reader: &'r Reader,
    kind: Kind,
    optional: bool,
}

impl Seed<'_> {
    fn wrong_type<T, E: serde::de::Error>(self, found: Found<'_>) -> Result<T, E> {
        Err(self.reader.fail(None, format!("invalid type: {found}, expected {}", self.kind.expected())))
    }

    fn wrong_value<T, E: serde::de::Error>(self, found: Found<'_>) -> Result<T, E> {
        Err(self.reader.fail(None, format!("invalid value: {found}, expected {}", self.kind.expected())))
    }

    fn fields<'de, A: MapAccess<'de>>(self, shape: &'static Shape, mut map: A) -> Result<Vec<Option<Node>>, A::Error> {
        let mut values: Vec<Option<Node>> = shape.fields.iter().map(|_| None).collect();
        let mut seen = vec![false; shape.fields.len()];
        while let Some(key) = map.next_key::<String>()? {
            let Some(index) = shape.index(&key) else {
                let names: Vec<&str> = shape.fields.iter().map(|f| f.name).collect();
                let message = match names.as_slice() {
                    [only] => format!("unknown field, expected {only}"),
                    _ => format!("unknown field, expected one of {}", names.join(", ")),
                };
                return Err(self.reader.fail(Some(&key), message));
            };
            let (Some(field), Some(seen)) = (shape.fields.get(index), seen.get_mut(index)) else {
                return Err(self.reader.fail(Some(&key), "unknown field".to_owned()));
            };
            if *seen {
                return Err(self.reader.fail(Some(&key), "duplicate field".to_owned()));
            }
            *seen = true;
            self.reader.path.borrow_mut().push(Seg::Key(key));
            let seed = Seed { reader: self.reader, kind: field.kind, optional: !field.required };
            let node = map.next_value_seed(seed)?;
            self.reader.path.borrow_mut().pop();
            if let Some(value) = values.get_mut(index) {
                *value = node;
            }
        }
        if let Some((field, _)) = shape.fields.iter().zip(&seen).find(|(f, seen)| f.required && !**seen) {
            return Err(self.reader.fail(Some(field.name), "missing field".to_owned()));
        }
        Ok(values)
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Option<Node>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Option<Node>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.kind.expected())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        match self.kind {
            _ if self.optional => Ok(None),
            Kind::Duration | Kind::Any => Ok(Some(Node::Loose(Loose::Null))),
            _ => self.wrong_type(Found::Null),
        }
    }

    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Self::Value, E> {
        match self.kind {
            Kind::Bool => Ok(Some(Node::Bool(b))),
            Kind::Duration | Kind::Any => Ok(Some(Node::Loose(Loose::Bool(b)))),
            _ => self.wrong_type(Found::Bool(b)),
        }
    }

    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
        match self.kind {
            Kind::U32 if u32::try_from(n).is_err() => self.wrong_value(Found::Unsigned(n)),
            Kind::U64 | Kind::U32 | Kind::Number | Kind::NumOrObj(_) => Ok(Some(Node::Num(n.into()))),
            Kind::Duration | Kind::Any => Ok(Some(Node::Loose(Loose::Num(n.into())))),
            _ => self.wrong_type(Found::Unsigned(n)),
        }
    }

    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Self::Value, E> {
        match (self.kind, u64::try_from(n)) {
            (Kind::U64 | Kind::U32, Ok(n)) => self.visit_u64(n),
            (Kind::U64 | Kind::U32, Err(_)) => self.wrong_value(Found::Signed(n)),
            (Kind::Number | Kind::NumOrObj(_), _) => Ok(Some(Node::Num(n.into()))),
            (Kind::Duration | Kind::Any, _) => Ok(Some(Node::Loose(Loose::Num(n.into())))),
            _ => self.wrong_type(Found::Signed(n)),
        }
    }

    fn visit_f64<E: serde::de::Error>(self, x: f64) -> Result<Self::Value, E> {
        match (self.kind, Number::from_f64(x)) {
            (Kind::Number | Kind::NumOrObj(_), Some(n)) => Ok(Some(Node::Num(n))),
            (Kind::Duration | Kind::Any, Some(n)) => Ok(Some(Node::Loose(Loose::Num(n)))),
            (Kind::Duration | Kind::Any, None) => Ok(Some(Node::Loose(Loose::Null))),
            _ => self.wrong_type(Found::Float(x)),
        }
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
        match self.kind {
            Kind::Str | Kind::StrOrObj(_) => Ok(Some(Node::Str(s.to_owned()))),
            Kind::Duration | Kind::Any => Ok(Some(Node::Loose(Loose::Str(s.to_owned())))),
            _ => self.wrong_type(Found::Str(s)),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let element = match self.kind {
            Kind::Arr(element) => *element,
            Kind::Duration | Kind::Any => {
                // Read through the same seed, so serde_json's recursion
                // limit applies to nested values as everywhere else.
                while seq.next_element_seed(self)?.is_some() {}
                return Ok(Some(Node::Loose(Loose::Array)));
            }
            _ => return self.wrong_type(Found::Array),
        };
        let mut items = Vec::new();
        loop {
            self.reader.path.borrow_mut().push(Seg::Index(items.len()));
            let seed = Seed { reader: self.reader, kind: element, optional: false };
            let item = seq.next_element_seed(seed)?;
            self.reader.path.borrow_mut().pop();
            match item {
                Some(Some(node)) => items.push(node),
                Some(None) | None => break,
            }
        }
        Ok(Some(Node::Arr(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        match self.kind {
            Kind::Obj(shape) | Kind::StrOrObj(shape) | Kind::NumOrObj(shape) => {
                Ok(Some(Node::Obj(self.fields(shape, map)?)))
            }
            Kind::Duration | Kind::Any => {
                while map.next_key::<IgnoredAny>()?.is_some() {
                    map.next_value_seed(self)?;
                }
                Ok(Some(Node::Loose(Loose::Object)))
            }
            _ => self.wrong_type(Found::Object),
        }
    }
}
