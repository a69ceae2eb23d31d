//! The buckets of a rule in the store: the `SCAN ... MATCH` pattern of
//! those whose parts match some values or value prefixes, and a key read
//! back into its parts and suffix (to check what a pattern found, and to
//! show it). Patterns are built by the key code itself, a marker value
//! standing where anything may be, so that they encode exactly as keys do.

use super::super::failure::Failure;
use crate::config::Rule;
use crate::key::{rule_key, KeyName};

/// What a SCAN asks of one part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Constraint {
    Any,
    Exact(Vec<u8>),
    Prefix(Vec<u8>),
}

/// A value no request header carries, whose encoding (`%01%2A%01`) becomes `*`.
const MARK: &[u8] = b"\x01*\x01";
const MARK_ENCODED: &str = "%01%2A%01";

/// The glob of `rule`'s keys under `prefix` whose parts meet `constraints`
/// (one per part) and whose suffix matches `suffix` (a glob: `*`, `ovr`).
pub fn pattern(prefix: &str, rule: &Rule, constraints: &[Constraint], suffix: &str) -> Result<String, Failure> {
    let mut marks = 0;
    let values: Vec<Vec<u8>> = constraints
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let tagged = rule.hash_tag == Some(i);
            match c {
                Constraint::Any => {
                    marks += 1 + usize::from(tagged);
                    MARK.to_vec()
                }
                Constraint::Exact(v) => v.clone(),
                Constraint::Prefix(p) => {
                    marks += 1 + usize::from(tagged);
                    [p.as_slice(), MARK].concat()
                }
            }
        })
        .collect();
    let parts: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    let key = rule_key(prefix, &rule.key_name, &parts, rule.hash_tag, suffix);
    if key.matches(MARK_ENCODED).count() != marks {
        return Err(Failure::bucket(
            "a --key-prefix value is too long to match: values over 64 encoded bytes are hashed in keys",
        ));
    }
    Ok(key.replace(MARK_ENCODED, "*"))
}

/// A key of a rule, read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// Each part as encoded in the key.
    pub parts: Vec<String>,
    /// What follows the parts: the algorithm's id, `lease`, `ovr`, `log:syncers`...
    pub suffix: String,
}

/// `key` read as a key of `rule` under `prefix`, or `None` when it is not one.
pub fn decode(prefix: &str, rule: &Rule, key: &str) -> Option<Decoded> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(":{")?;
    let (tag, after) = rest.split_once('}')?;
    let after = after.strip_prefix(':')?;
    let n = rule.key.len();
    let name = rule.key_name.as_str();
    let tagged = rule.hash_tag.filter(|i| *i < n);
    let (parts, suffix) = match tagged {
        Some(i) => {
            let mut segments = after.splitn(n + 2, ':');
            if segments.next()? != name {
                return None;
            }
            let parts: Vec<String> = segments.by_ref().take(n).map(str::to_owned).collect();
            let suffix = segments.next()?.to_owned();
            let tag_part = parts.get(i)?;
            if !(tag == tag_part || (tag == "%" && tag_part.is_empty())) {
                return None;
            }
            (parts, suffix)
        }
        None => {
            let mut segments = tag.split(':');
            if segments.next()? != name {
                return None;
            }
            (segments.map(str::to_owned).collect(), after.to_owned())
        }
    };
    (parts.len() == n && parts.len() == parts.iter().filter(|p| !p.contains(['{', '}'])).count())
        .then_some(Decoded { parts, suffix })
}

/// `value` encoded as a key part.
pub fn encoded_part(value: &[u8]) -> String {
    let key = rule_key("p", &KeyName::new("r"), &[value], None, "s");
    key.strip_prefix("p:{r:").and_then(|k| k.strip_suffix("}:s")).unwrap_or_default().to_owned()
}

/// An encoded part as a person reads it: percent-decoded, or `#<sha1>` for
/// a value too long to keep (shown as is).
pub fn display_part(encoded: &str) -> String {
    if encoded.starts_with('#') {
        return format!("{encoded} (hashed)");
    }
    crate::cli::store::address::percent_decode(encoded)
}

impl Constraint {
    /// Whether an encoded part meets the constraint.
    pub fn holds(&self, encoded: &str) -> bool {
        match self {
            Constraint::Any => true,
            Constraint::Exact(v) => encoded_part(v) == encoded,
            Constraint::Prefix(p) => !encoded.starts_with('#') && encoded.starts_with(&encoded_part(p)),
        }
    }
}
