//! `rules[i].key`: where the parts of a rule's bucket key come from.

use super::error::ConfigError;
use super::primitives::{fail, header_name};
use super::raw::{RawKeyPart, StrOrObj};

/// Most key parts in one rule.
pub const MAX_KEY_PARTS: usize = 8;
/// Longest `literal` or `default` value, in bytes.
pub const MAX_LITERAL_BYTES: usize = 256;
/// Most segments of a `property` path.
pub const MAX_PROPERTY_SEGMENTS: usize = 16;

/// One component of a rule's bucket key: where its value comes from, and what
/// happens when the request has no such value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPart {
    pub source: KeySource,
    pub on_missing: OnMissing,
}

impl KeyPart {
    /// A request header part that skips the rule when absent.
    pub fn header(name: &str) -> KeyPart {
        KeyPart { source: KeySource::Header(name.to_ascii_lowercase()), on_missing: OnMissing::SkipRule }
    }
}

/// Where a key part's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A request header (lowercase name; pseudo-headers allowed).
    Header(String),
    /// A query-string parameter of `:path` (first occurrence, percent-decoded).
    Query(String),
    /// A cookie of the `cookie` header(s).
    Cookie(String),
    /// The downstream peer address (Envoy's `source.address`), masked to a
    /// network prefix: `1.2.3.0/24`, `2001:db8::/64`.
    RemoteAddress(Prefixes),
    /// The client address from `x-forwarded-for`: skipping `trusted_hops`
    /// entries from the right, then masked like [`KeySource::RemoteAddress`].
    ForwardedFor { trusted_hops: u32, prefixes: Prefixes },
    /// The request path without its query string.
    Path,
    /// The request method.
    Method,
    /// The `:authority`, lowercased.
    Authority,
    /// A fixed value.
    Literal(String),
    /// Any Envoy attribute by path, e.g. `["metadata", "filter_metadata",
    /// "envoy.filters.http.jwt_authn", "payload", "sub"]` or `["xds", "route_name"]`.
    Property(Vec<String>),
}

/// How many leading bits of a client address identify it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefixes {
    /// 0..=32, default 32 (the whole address).
    pub v4: u8,
    /// 0..=128, default 128 (the whole address).
    pub v6: u8,
}

impl Default for Prefixes {
    fn default() -> Self {
        Prefixes { v4: 32, v6: 128 }
    }
}

/// What happens when a key part has no value in a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnMissing {
    /// The rule does not apply to the request (the default).
    SkipRule,
    /// This value stands in.
    Default(String),
}

pub(crate) fn key(i: usize, raw: Option<Vec<RawKeyPart>>) -> Result<Vec<KeyPart>, ConfigError> {
    let parts = raw.unwrap_or_default();
    if parts.len() > MAX_KEY_PARTS {
        return fail(
            format!("rules[{i}].key"),
            format!("must have at most {MAX_KEY_PARTS} parts (got {})", parts.len()),
        );
    }
    parts.into_iter().enumerate().map(|(j, part)| key_part(&format!("rules[{i}].key[{j}]"), part)).collect()
}

const NAMED: &str = "expected one of \"path\", \"method\", \"authority\" or an object";
const SOURCES: &str = "header, query, cookie, remote_address, forwarded_for, literal, property";

fn key_part(path: &str, raw: RawKeyPart) -> Result<KeyPart, ConfigError> {
    let part = match raw {
        StrOrObj::Str(name) => {
            let source = match name.as_str() {
                "path" => KeySource::Path,
                "method" => KeySource::Method,
                "authority" => KeySource::Authority,
                other => return fail(path, format!("unknown key part {other:?}: {NAMED}")),
            };
            return Ok(KeyPart { source, on_missing: OnMissing::SkipRule });
        }
        StrOrObj::Obj(part) => part,
    };
    let mut sources: Vec<KeySource> = Vec::new();
    if let Some(name) = &part.header {
        sources.push(KeySource::Header(header_name(&format!("{path}.header"), name)?));
    }
    if let Some(name) = part.query {
        sources.push(KeySource::Query(non_empty(&format!("{path}.query"), name)?));
    }
    if let Some(name) = part.cookie {
        sources.push(KeySource::Cookie(non_empty(&format!("{path}.cookie"), name)?));
    }
    if let Some(p) = part.remote_address {
        sources.push(KeySource::RemoteAddress(prefixes(&format!("{path}.remote_address"), p.v4_prefix, p.v6_prefix)?));
    }
    if let Some(f) = part.forwarded_for {
        let base = format!("{path}.forwarded_for");
        let trusted_hops = match f.trusted_hops {
            None => 0,
            Some(n) if n <= 32 => n,
            Some(_) => return fail(format!("{base}.trusted_hops"), "must be <= 32"),
        };
        sources.push(KeySource::ForwardedFor { trusted_hops, prefixes: prefixes(&base, f.v4_prefix, f.v6_prefix)? });
    }
    if let Some(value) = part.literal {
        sources.push(KeySource::Literal(bounded(&format!("{path}.literal"), value)?));
    }
    if let Some(segments) = part.property {
        sources.push(KeySource::Property(property(&format!("{path}.property"), segments)?));
    }
    let source = match sources.len() {
        1 => sources.pop(),
        _ => None,
    };
    let Some(source) = source else {
        return fail(path, format!("must have exactly one of {SOURCES}"));
    };
    let on_missing = match part.on_missing {
        None => OnMissing::SkipRule,
        Some(StrOrObj::Str(s)) if s == "skip_rule" => OnMissing::SkipRule,
        Some(StrOrObj::Str(s)) => {
            return fail(
                format!("{path}.on_missing"),
                format!("unknown value {s:?}, expected \"skip_rule\" or {{\"default\": VALUE}}"),
            )
        }
        Some(StrOrObj::Obj(d)) => OnMissing::Default(bounded(&format!("{path}.on_missing.default"), d.default)?),
    };
    Ok(KeyPart { source, on_missing })
}

fn non_empty(path: &str, value: String) -> Result<String, ConfigError> {
    if value.is_empty() {
        return fail(path, "must not be empty");
    }
    bounded(path, value)
}

fn bounded(path: &str, value: String) -> Result<String, ConfigError> {
    if value.len() > MAX_LITERAL_BYTES {
        return fail(path, format!("must be at most {MAX_LITERAL_BYTES} bytes (got {})", value.len()));
    }
    Ok(value)
}

fn prefixes(path: &str, v4_prefix: Option<u32>, v6_prefix: Option<u32>) -> Result<Prefixes, ConfigError> {
    let bits = |value: Option<u32>, max: u8, field: &str| -> Result<u8, ConfigError> {
        match value.map(u8::try_from) {
            None => Ok(max),
            Some(Ok(n)) if n <= max => Ok(n),
            Some(_) => fail(format!("{path}.{field}"), format!("must be <= {max}")),
        }
    };
    Ok(Prefixes { v4: bits(v4_prefix, 32, "v4_prefix")?, v6: bits(v6_prefix, 128, "v6_prefix")? })
}

fn property(path: &str, segments: Vec<String>) -> Result<Vec<String>, ConfigError> {
    if segments.is_empty() {
        return fail(path, "must not be empty");
    }
    if segments.len() > MAX_PROPERTY_SEGMENTS {
        return fail(path, format!("must have at most {MAX_PROPERTY_SEGMENTS} segments (got {})", segments.len()));
    }
    if let Some(j) = segments.iter().position(String::is_empty) {
        return fail(format!("{path}[{j}]"), "must not be empty");
    }
    Ok(segments)
}
