//! The shape of the document: every object, its fields in order, and the JSON
//! type each field must have. The shapes are not written by hand: the
//! [`objects!`] macro derives each one from the struct that receives the
//! object (`super::raw`), so a field's name is written once, as a Rust field
//! name, and stage 2 can only read fields that exist (a wrong name does not
//! compile). The shape is read twice: [`super::read`] enforces it while
//! parsing (shape errors, with their paths), and the JSON Schema
//! (`schema/tollgate.schema.json`, host-only `super::schema`) is generated
//! from it, so the two cannot disagree on names, types or required fields.
//!
//! Field order matters: it is the order of "expected one of ..." in unknown
//! field errors and the order in which missing fields are reported.

use serde_json::Number;

use super::node::{Loose, Node};

/// The JSON type a field must have.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// A string.
    Str,
    /// `true` or `false`.
    Bool,
    /// A non-negative integer that fits a `u64`.
    U64,
    /// A non-negative integer that fits a `u32`.
    U32,
    /// Any JSON number (checked later, so that the message can say why).
    Number,
    /// A duration: any JSON value, read later by `primitives::duration`.
    Duration,
    /// Any JSON value, read later (a status code or a range of them).
    Any,
    /// An object of this shape.
    Obj(&'static Shape),
    /// A string, or an object of this shape.
    StrOrObj(&'static Shape),
    /// Any JSON number (checked later), or an object of this shape.
    NumOrObj(&'static Shape),
    /// An array of this kind.
    Arr(&'static Kind),
}

impl Kind {
    /// What the messages say was expected (`invalid type: ..., expected X`).
    pub(crate) fn expected(self) -> &'static str {
        match self {
            Kind::Str => "a string",
            Kind::Bool => "a boolean",
            Kind::U64 => "u64",
            Kind::U32 => "u32",
            Kind::Number => "a JSON number",
            Kind::Duration => "a duration",
            Kind::Any => "any value",
            Kind::Obj(_) => "an object",
            Kind::StrOrObj(_) => "a string or an object",
            Kind::NumOrObj(_) => "a number or an object",
            Kind::Arr(_) => "an array",
        }
    }
}

/// One field of an object.
#[derive(Debug)]
pub(crate) struct Field {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    /// Required fields must be present (and not `null`, unless a duration);
    /// an optional field given as `null` is the same as leaving it out.
    pub(crate) required: bool,
}

/// An object: its fields, in documentation order. No other field is allowed.
#[derive(Debug)]
pub(crate) struct Shape {
    pub(crate) fields: &'static [Field],
}

impl Shape {
    /// The index of field `name`.
    pub(crate) fn index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }
}

/// A type a field is read into: the JSON kind the reader checks, whether the
/// field is required, and the value of a node that passed the check.
pub(crate) trait Shaped: Sized {
    const KIND: Kind;
    /// `Option<T>` fields are optional, every other field is required.
    const REQUIRED: bool = true;

    /// The value of a node of kind [`Self::KIND`] (`None` only if the reader
    /// broke its own shape).
    fn from_node(node: Node) -> Option<Self>;

    /// The value of a field: its node, or `None` when it was left out.
    fn from_field(field: Option<Node>) -> Option<Self> {
        Self::from_node(field?)
    }

    /// The value of `field`, taken out of it (one call per field type, not
    /// per field: the code stays small).
    fn take(field: Option<&mut Option<Node>>) -> Option<Self> {
        Self::from_field(field.and_then(Option::take))
    }
}

/// A struct read from a JSON object, declared with [`objects!`].
pub(crate) trait Object: Sized {
    const SHAPE: Shape;

    /// The struct from the object's fields, in shape order.
    fn from_fields(fields: Vec<Option<Node>>) -> Option<Self>;
}

impl<T: Shaped> Shaped for Option<T> {
    const KIND: Kind = T::KIND;
    const REQUIRED: bool = false;

    fn from_node(node: Node) -> Option<Self> {
        T::from_node(node).map(Some)
    }

    /// Never `None` (a node of another kind, which the reader never gives,
    /// reads as absent): only required fields can fail an object, which
    /// keeps the module smaller.
    fn from_field(field: Option<Node>) -> Option<Self> {
        Some(field.and_then(T::from_node))
    }
}

impl<T: Shaped> Shaped for Vec<T> {
    const KIND: Kind = Kind::Arr(&T::KIND);

    fn from_node(node: Node) -> Option<Self> {
        let Node::Arr(items) = node else { return None };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(T::from_node(item)?);
        }
        Some(out)
    }
}

/// A field that is a string or an object (`rules[].key[]`, `on_missing`).
#[derive(Debug)]
pub(crate) enum StrOrObj<T> {
    Str(String),
    Obj(T),
}

impl<T: Object> Shaped for StrOrObj<T> {
    const KIND: Kind = Kind::StrOrObj(&T::SHAPE);

    fn from_node(node: Node) -> Option<Self> {
        match node {
            Node::Str(s) => Some(StrOrObj::Str(s)),
            Node::Obj(fields) => T::from_fields(fields).map(StrOrObj::Obj),
            _ => None,
        }
    }
}

/// A field that is a number or an object (`rules[].concurrency`).
#[derive(Debug)]
pub(crate) enum NumOrObj<T> {
    Num(Number),
    Obj(T),
}

impl<T: Object> Shaped for NumOrObj<T> {
    const KIND: Kind = Kind::NumOrObj(&T::SHAPE);

    fn from_node(node: Node) -> Option<Self> {
        match node {
            Node::Num(n) => Some(NumOrObj::Num(n)),
            Node::Obj(fields) => T::from_fields(fields).map(NumOrObj::Obj),
            _ => None,
        }
    }
}

/// A duration as written: any JSON value (checked by `primitives::duration`).
#[derive(Debug)]
pub(crate) struct RawDuration(pub(crate) Loose);

impl Shaped for RawDuration {
    const KIND: Kind = Kind::Duration;

    fn from_node(node: Node) -> Option<Self> {
        Loose::from_node(node).map(RawDuration)
    }
}

impl Shaped for Loose {
    const KIND: Kind = Kind::Any;

    fn from_node(node: Node) -> Option<Self> {
        match node {
            Node::Loose(value) => Some(value),
            _ => None,
        }
    }
}

impl Shaped for String {
    const KIND: Kind = Kind::Str;

    fn from_node(node: Node) -> Option<Self> {
        match node {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl Shaped for bool {
    const KIND: Kind = Kind::Bool;

    fn from_node(node: Node) -> Option<Self> {
        match node {
            Node::Bool(b) => Some(b),
            _ => None,
        }
    }
}

impl Shaped for Number {
    const KIND: Kind = Kind::Number;

    fn from_node(node: Node) -> Option<Self> {
        match node {
            Node::Num(n) => Some(n),
            _ => None,
        }
    }
}

impl Shaped for u64 {
    const KIND: Kind = Kind::U64;

    fn from_node(node: Node) -> Option<Self> {
        Number::from_node(node)?.as_u64()
    }
}

impl Shaped for u32 {
    const KIND: Kind = Kind::U32;

    fn from_node(node: Node) -> Option<Self> {
        u32::try_from(u64::from_node(node)?).ok()
    }
}

/// The JSON name of a Rust field name: `r#match` is `match`.
pub(crate) const fn json_name(ident: &'static str) -> &'static str {
    match ident.as_bytes() {
        [b'r', b'#', rest @ ..] => match std::str::from_utf8(rest) {
            Ok(name) => name,
            Err(_) => ident,
        },
        _ => ident,
    }
}

/// Declares structs read from JSON objects: each struct, its [`Shape`] (the
/// field names are the Rust names, `r#` dropped; the kinds and whether a
/// field is required come from the field types through [`Shaped`]) and the
/// reading of its fields, all from one list.
macro_rules! objects {
    ($(
        $(#[$meta:meta])*
        $name:ident { $($(#[$field_meta:meta])* $field:ident: $ty:ty),* $(,)? }
    )*) => {$(
        $(#[$meta])*
        #[derive(Debug)]
        pub(crate) struct $name {
            $($(#[$field_meta])* pub(crate) $field: $ty,)*
        }

        impl $crate::config::shape::Object for $name {
            const SHAPE: $crate::config::shape::Shape = $crate::config::shape::Shape {
                fields: &[$($crate::config::shape::Field {
                    name: $crate::config::shape::json_name(stringify!($field)),
                    kind: <$ty as $crate::config::shape::Shaped>::KIND,
                    required: <$ty as $crate::config::shape::Shaped>::REQUIRED,
                },)*],
            };

            fn from_fields(mut fields: Vec<Option<$crate::config::node::Node>>) -> Option<Self> {
                let mut fields = fields.iter_mut();
                $(let $field = <$ty as $crate::config::shape::Shaped>::take(fields.next());)*
                // One exit for all fields, not one per field: less code.
                match ($($field,)*) {
                    ($(Some($field),)*) => Some($name { $($field,)* }),
                    _ => None,
                }
            }
        }

        impl $crate::config::shape::Shaped for $name {
            const KIND: $crate::config::shape::Kind =
                $crate::config::shape::Kind::Obj(&<$name as $crate::config::shape::Object>::SHAPE);

            fn from_node(node: $crate::config::node::Node) -> Option<Self> {
                match node {
                    $crate::config::node::Node::Obj(fields) => {
                        <$name as $crate::config::shape::Object>::from_fields(fields)
                    }
                    _ => None,
                }
            }
        }
    )*};
}
pub(crate) use objects;
