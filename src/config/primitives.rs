//! The checks every part of validation shares: the error constructor, names,
//! header names, durations, counts and limits. A leaf: it imports no other
//! part of validation, and every part imports it.

use std::num::NonZeroU64;

use serde_json::Number;

use super::duration::{self, DurationError};
use super::error::ConfigError;
use super::raw::{Loose, RawDuration};
use super::{Bounds, MAX_ACCESS_NAME_BYTES, MAX_CLUSTER_BYTES, MAX_LIMIT, MAX_NAME_CHARS};

const NAME_CHARS: &str = "allowed are A-Z, a-z, 0-9, '.', '_', ':' and '-'";
const DURATION_SYNTAX: &str = "expected <digits><unit> with unit ms, s, m, h or d, or an integer number of seconds";
const HEADER_SYNTAX: &str =
    "expected an HTTP token (letters, digits and !#$%&'*+-.^_`|~), optionally after a leading ':'";

pub(crate) fn fail<T>(path: impl Into<String>, message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError::new(path, message))
}

/// An Envoy cluster name: 1..=255 bytes, no whitespace or control characters.
pub(crate) fn envoy_cluster(path: &str, cluster: String) -> Result<String, ConfigError> {
    if cluster.is_empty() {
        return fail(path, "must not be empty");
    }
    no_space(path, &cluster)?;
    if cluster.len() > MAX_CLUSTER_BYTES {
        return fail(path, format!("must be at most {MAX_CLUSTER_BYTES} bytes (got {})", cluster.len()));
    }
    Ok(cluster)
}

/// A name-like value (user, master name): 1..=128 bytes, no whitespace or
/// control characters.
pub(crate) fn token(path: &str, value: String) -> Result<String, ConfigError> {
    if value.is_empty() {
        return fail(path, "must not be empty");
    }
    no_space(path, &value)?;
    if value.len() > MAX_ACCESS_NAME_BYTES {
        return fail(path, format!("must be at most {MAX_ACCESS_NAME_BYTES} bytes (got {})", value.len()));
    }
    Ok(value)
}

fn no_space(path: &str, value: &str) -> Result<(), ConfigError> {
    match value.chars().find(|c| c.is_whitespace() || c.is_control()) {
        Some(c) => fail(
            path,
            format!("invalid character {c:?} in {value:?}: whitespace and control characters are not allowed"),
        ),
        None => Ok(()),
    }
}

/// Rule names and the key prefix: 1..=64 characters from `[A-Za-z0-9._:-]`.
pub(crate) fn name_like(path: &str, value: String) -> Result<String, ConfigError> {
    if value.is_empty() {
        return fail(path, "must not be empty");
    }
    if let Some(c) = value.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))) {
        return fail(path, format!("invalid character {c:?} in {value:?}: {NAME_CHARS}"));
    }
    // Only ASCII is left, so bytes are characters.
    if value.len() > MAX_NAME_CHARS {
        return fail(path, format!("must be at most {MAX_NAME_CHARS} characters (got {})", value.len()));
    }
    Ok(value)
}

/// An environment variable name, `[A-Za-z_][A-Za-z0-9_]*`, at most 128 bytes.
pub(crate) fn env_var_name(path: &str, name: String) -> Result<String, ConfigError> {
    if name.is_empty() {
        return fail(path, "must not be empty");
    }
    let first_ok = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return fail(path, format!("invalid environment variable name {name:?}: expected [A-Za-z_][A-Za-z0-9_]*"));
    }
    if name.len() > MAX_ACCESS_NAME_BYTES {
        return fail(path, format!("must be at most {MAX_ACCESS_NAME_BYTES} bytes (got {})", name.len()));
    }
    Ok(name)
}

/// An HTTP field name (RFC 9110 token), or a pseudo-header (`:` + token);
/// returned lowercased.
pub(crate) fn header_name(path: &str, name: &str) -> Result<String, ConfigError> {
    let body = name.strip_prefix(':').unwrap_or(name);
    let is_tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if body.is_empty() || !body.bytes().all(is_tchar) {
        return fail(path, format!("invalid header name {name:?}: {HEADER_SYNTAX}"));
    }
    Ok(name.to_ascii_lowercase())
}

/// An optional count within `bounds`, `default` when omitted.
pub(crate) fn bounded_count(
    path: &str,
    value: Option<u64>,
    default: usize,
    bounds: Bounds,
) -> Result<usize, ConfigError> {
    let (min, max) = bounds;
    match value {
        None => Ok(default),
        Some(n) if n < min => fail(path, format!("must be >= {min}")),
        Some(n) if n > max => fail(path, format!("must be <= {max}")),
        Some(n) => Ok(usize::try_from(n).unwrap_or(default)),
    }
}

/// A window's limit or a rule's cost: an integer in `1..=MAX_LIMIT`.
pub(crate) fn limit_count(path: &str, number: &Number) -> Result<NonZeroU64, ConfigError> {
    positive_integer(path, number, MAX_LIMIT)
}

/// An integer in `1..=max`.
pub(crate) fn positive_integer(path: &str, number: &Number, max: u64) -> Result<NonZeroU64, ConfigError> {
    if let Some(n) = number.as_u64() {
        return match NonZeroU64::new(n) {
            None => fail(path, "must be > 0"),
            Some(_) if n > max => fail(path, format!("must be <= {max}")),
            Some(n) => Ok(n),
        };
    }
    // Negative integers and every float (serde_json reads integers too large
    // for a u64 as floats).
    match number.as_f64() {
        Some(f) if f <= 0.0 => fail(path, "must be > 0"),
        Some(f) if f > max as f64 => fail(path, format!("must be <= {max}")),
        _ => fail(path, "must be an integer"),
    }
}

/// A duration in `(0, max_ms]` and its label (the string as written, or
/// `"<N>s"` for an integer); `max_label` spells `max_ms` in messages.
pub(crate) fn duration(
    value: &RawDuration,
    path: &str,
    max_ms: u64,
    max_label: &str,
) -> Result<(NonZeroU64, String), ConfigError> {
    let (parsed, label) = match &value.0 {
        Loose::Str(text) => (duration::parse_str(text), text.clone()),
        Loose::Num(n) => match n.as_u64() {
            Some(seconds) => (duration::from_seconds(seconds), format!("{seconds}s")),
            None => return invalid_duration(path, &n.to_string()),
        },
        Loose::Null => return invalid_duration(path, "null"),
        Loose::Bool(b) => return invalid_duration(path, if *b { "true" } else { "false" }),
        Loose::Array => return invalid_duration(path, "[...]"),
        Loose::Object => return invalid_duration(path, "{...}"),
    };
    let ms = match parsed {
        Ok(ms) => ms,
        Err(DurationError::Syntax) => return invalid_duration(path, &format!("{label:?}")),
        Err(DurationError::Overflow) => return fail(path, format!("must be <= {max_label}")),
    };
    match NonZeroU64::new(ms) {
        None => fail(path, "must be > 0"),
        Some(_) if ms > max_ms => fail(path, format!("must be <= {max_label}")),
        Some(ms) => Ok((ms, label)),
    }
}

fn invalid_duration<T>(path: &str, shown: &str) -> Result<T, ConfigError> {
    fail(path, format!("invalid duration {shown}: {DURATION_SYNTAX}"))
}
