//! The shape of the document: every object, its fields in order, and the JSON
//! type each field must have. One table, read twice: [`super::read`] enforces
//! it while parsing (shape errors, with their paths), and the JSON Schema
//! (`schema/tollgate.schema.json`, host-only `super::schema`) is generated
//! from it, so the two cannot disagree on names, types or required fields.
//!
//! Field order matters: it is the order of "expected one of ..." in unknown
//! field errors and the order in which missing fields are reported.

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

const fn req(name: &'static str, kind: Kind) -> Field {
    Field { name, kind, required: true }
}

const fn opt(name: &'static str, kind: Kind) -> Field {
    Field { name, kind, required: false }
}

/// The whole document.
pub(crate) const CONFIG: Shape = Shape {
    fields: &[
        req("valkey", Kind::Obj(&VALKEY)),
        opt("failure_mode", Kind::Str),
        opt("local_limiter", Kind::Obj(&LOCAL_LIMITER)),
        opt("overload", Kind::Str),
        req("rules", Kind::Arr(&RULE_OBJ)),
        opt("response", Kind::Obj(&RESPONSE)),
        opt("shadow", Kind::Bool),
        opt("denial_cache", Kind::Obj(&DENIAL_CACHE)),
        opt("max_body_bytes", Kind::U64),
        opt("testing", Kind::Obj(&TESTING)),
    ],
};

pub(crate) const VALKEY: Shape = Shape {
    fields: &[
        req("cluster", Kind::Str),
        opt("timeout", Kind::Duration),
        opt("key_prefix", Kind::Str),
        opt("max_in_flight", Kind::U64),
        opt("max_batch", Kind::U64),
        opt("max_queue", Kind::U64),
        opt("invoke", Kind::Str),
        opt("username", Kind::Str),
        opt("password_env", Kind::Str),
        opt("sentinel", Kind::Obj(&SENTINEL)),
        opt("cluster_mode", Kind::Obj(&CLUSTER_MODE)),
    ],
};

pub(crate) const SENTINEL: Shape =
    Shape { fields: &[req("cluster", Kind::Str), req("master_name", Kind::Str), opt("refresh", Kind::Duration)] };

pub(crate) const CLUSTER_MODE: Shape = Shape { fields: &[req("seeds", Kind::Str), opt("refresh", Kind::Duration)] };

pub(crate) const DENIAL_CACHE: Shape = Shape { fields: &[opt("max_keys", Kind::U64)] };

pub(crate) const LOCAL_LIMITER: Shape = Shape { fields: &[opt("share", Kind::Number), opt("max_keys", Kind::U64)] };

const RULE_OBJ: Kind = Kind::Obj(&RULE);

pub(crate) const RULE: Shape = Shape {
    fields: &[
        req("name", Kind::Str),
        opt("match", Kind::Obj(&MATCH)),
        opt("key", Kind::Arr(&KEY_PART_ITEM)),
        req("limits", Kind::Arr(&LIMIT_OBJ)),
        opt("algorithm", Kind::Str),
        opt("cost", Kind::Number),
        opt("shadow", Kind::Bool),
        opt("hash_tag", Kind::U64),
        opt("count", Kind::Obj(&COUNT)),
    ],
};

const ANY: Kind = Kind::Any;

/// `rules[].count`: the rule counts what the response says.
pub(crate) const COUNT: Shape = Shape {
    fields: &[
        opt("status", Kind::Arr(&ANY)),
        opt("header", Kind::Obj(&HEADER_MATCH)),
        opt("reserve", Kind::Obj(&RESERVE)),
        opt("cost", Kind::Obj(&COST)),
    ],
};

pub(crate) const RESERVE: Shape = Shape {
    fields: &[
        opt("units", Kind::Number),
        opt("header", Kind::Str),
        opt("body", Kind::Str),
        opt("default", Kind::Number),
    ],
};

pub(crate) const COST: Shape = Shape { fields: &[opt("header", Kind::Str), opt("body", Kind::Str)] };

const STR: Kind = Kind::Str;
const HEADER_MATCH_OBJ: Kind = Kind::Obj(&HEADER_MATCH);

pub(crate) const MATCH: Shape = Shape {
    fields: &[
        opt("path", Kind::Str),
        opt("path_prefix", Kind::Str),
        opt("path_regex", Kind::Str),
        opt("methods", Kind::Arr(&STR)),
        opt("authority", Kind::Str),
        opt("headers", Kind::Arr(&HEADER_MATCH_OBJ)),
    ],
};

pub(crate) const HEADER_MATCH: Shape = Shape {
    fields: &[
        req("name", Kind::Str),
        opt("present", Kind::Bool),
        opt("exact", Kind::Str),
        opt("prefix", Kind::Str),
        opt("regex", Kind::Str),
        opt("invert", Kind::Bool),
    ],
};

const KEY_PART_ITEM: Kind = Kind::StrOrObj(&KEY_PART);

/// A key part in object form (the string forms are `"path"`, `"method"` and
/// `"authority"`).
pub(crate) const KEY_PART: Shape = Shape {
    fields: &[
        opt("header", Kind::Str),
        opt("query", Kind::Str),
        opt("cookie", Kind::Str),
        opt("remote_address", Kind::Obj(&PREFIXES)),
        opt("forwarded_for", Kind::Obj(&FORWARDED_FOR)),
        opt("literal", Kind::Str),
        opt("property", Kind::Arr(&STR)),
        opt("on_missing", Kind::StrOrObj(&ON_MISSING)),
    ],
};

pub(crate) const PREFIXES: Shape = Shape { fields: &[opt("v4_prefix", Kind::U32), opt("v6_prefix", Kind::U32)] };

pub(crate) const FORWARDED_FOR: Shape =
    Shape { fields: &[opt("trusted_hops", Kind::U32), opt("v4_prefix", Kind::U32), opt("v6_prefix", Kind::U32)] };

pub(crate) const ON_MISSING: Shape = Shape { fields: &[req("default", Kind::Str)] };

const LIMIT_OBJ: Kind = Kind::Obj(&LIMIT);

pub(crate) const LIMIT: Shape = Shape { fields: &[req("limit", Kind::Number), req("period", Kind::Duration)] };

pub(crate) const RESPONSE: Shape = Shape {
    fields: &[
        opt("status", Kind::U64),
        opt("headers", Kind::Arr(&STR)),
        opt("body", Kind::Str),
        opt("text", Kind::Str),
        opt("on_allowed", Kind::Bool),
    ],
};

pub(crate) const TESTING: Shape = Shape { fields: &[opt("now_header", Kind::Str)] };
