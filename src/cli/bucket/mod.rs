//! From `--rule NAME --key part=value...` to the keys of one bucket, built by
//! the filter's own key code ([`crate::key::rule_key`], as planning does);
//! the SCAN pattern of a rule's buckets (`--key-prefix`, `--all-keys`); and a
//! key read back into its rule's parts.
//!
//! A part is named by its source: a header by its name (`x-user-id`, or
//! `header:x-user-id`), `query:NAME`, `cookie:NAME`, `remote_address`,
//! `forwarded_for`, `path`, `method`, `authority`, `property:a.b.c`; a
//! `literal` part needs no value. Values are taken as the filter takes them
//! from a request: an address is masked to the rule's prefix, an authority
//! lowercased, a path without its query.

use super::failure::Failure;
use crate::config::{Config, KeyPart, KeySource, Rule};
use crate::key::{override_key, rule_key, syncers_key};
use crate::limiter::Algorithm;
use crate::plan::extract;

/// How a key part is named on the command line.
pub fn part_label(part: &KeyPart) -> String {
    match &part.source {
        KeySource::Header(h) => h.clone(),
        KeySource::Query(q) => format!("query:{q}"),
        KeySource::Cookie(c) => format!("cookie:{c}"),
        KeySource::RemoteAddress(_) => "remote_address".to_owned(),
        KeySource::ForwardedFor { .. } => "forwarded_for".to_owned(),
        KeySource::Path => "path".to_owned(),
        KeySource::Method => "method".to_owned(),
        KeySource::Authority => "authority".to_owned(),
        KeySource::Literal(_) => "literal".to_owned(),
        KeySource::Property(p) => format!("property:{}", p.join(".")),
    }
}

/// The rule named `name` and its index; exit 3 naming the known rules.
pub fn find_rule<'c>(config: &'c Config, name: &str) -> Result<(usize, &'c Rule), Failure> {
    config.rules.iter().enumerate().find(|(_, r)| r.name == name).ok_or_else(|| {
        let known: Vec<&str> = config.rules.iter().map(|r| r.name.as_str()).collect();
        Failure::bucket(format!("unknown rule {name:?}; the configuration's rules: {}", known.join(", ")))
    })
}

/// What the rule's `key` expects, for error messages.
pub fn expected_parts(rule: &Rule) -> String {
    let wanted: Vec<String> = rule
        .key
        .iter()
        .filter(|p| !matches!(p.source, KeySource::Literal(_)))
        .map(|p| format!("--key {}=VALUE", part_label(p)))
        .collect();
    if wanted.is_empty() {
        format!("rule {} has one bucket (no key parts): give no --key", rule.name)
    } else {
        format!("rule {} is keyed by {}", rule.name, wanted.join(" "))
    }
}

/// The value given for each part of `rule` (in its order) from `pairs`;
/// `None` where a part was not given. Exit 3 for a name the rule's key does
/// not have, or a value the filter could never take.
pub fn assign(rule: &Rule, pairs: &[(String, String)]) -> Result<Vec<Option<Vec<u8>>>, Failure> {
    let mut values: Vec<Option<Vec<u8>>> = vec![None; rule.key.len()];
    for (name, value) in pairs {
        let name = name.strip_prefix("header:").unwrap_or(name).to_ascii_lowercase();
        let slot = rule.key.iter().enumerate().position(|(i, p)| {
            values.get(i).is_some_and(Option::is_none) && part_label(p).to_ascii_lowercase() == name
        });
        let Some((i, part)) = slot.and_then(|i| Some((i, rule.key.get(i)?))) else {
            return Err(Failure::bucket(format!("no key part {name:?} (or given twice); {}", expected_parts(rule))));
        };
        let value = normalized(part, value).map_err(|why| Failure::bucket(format!("--key {name}={value}: {why}")))?;
        if let Some(v) = values.get_mut(i) {
            *v = Some(value);
        }
    }
    Ok(values)
}

/// `value` as the filter would have read it for `part`.
fn normalized(part: &KeyPart, value: &str) -> Result<Vec<u8>, String> {
    match &part.source {
        KeySource::RemoteAddress(prefixes) | KeySource::ForwardedFor { prefixes, .. } => {
            let (ip, bits) = match value.split_once('/') {
                Some((ip, bits)) => (ip, Some(bits)),
                None => (value, None),
            };
            let ip = extract::parse_ip(ip.as_bytes()).ok_or("not an IP address")?;
            let masked = extract::masked(ip, *prefixes);
            match bits {
                Some(bits) if !masked.ends_with(&format!("/{bits}")) => {
                    Err(format!("the rule keys on {masked} (its prefix length), not /{bits}"))
                }
                _ => Ok(masked.into_bytes()),
            }
        }
        KeySource::Authority => Ok(value.to_ascii_lowercase().into_bytes()),
        KeySource::Path => Ok(extract::path_only(value.as_bytes()).to_vec()),
        KeySource::Literal(l) if l != value => Err(format!("the part is the literal {l:?}")),
        _ => Ok(value.as_bytes().to_vec()),
    }
}

/// One bucket of one rule.
#[derive(Debug, Clone)]
pub struct Bucket<'c> {
    pub index: usize,
    pub rule: &'c Rule,
    prefix: &'c str,
    parts: Vec<Vec<u8>>,
}

/// The bucket of `--rule name --key pairs`: every part of the rule's key
/// named exactly once (a literal part may be left out).
pub fn resolve<'c>(config: &'c Config, name: &str, pairs: &[(String, String)]) -> Result<Bucket<'c>, Failure> {
    let (index, rule) = find_rule(config, name)?;
    let values = assign(rule, pairs)?;
    let mut parts = Vec::with_capacity(values.len());
    for (part, value) in rule.key.iter().zip(values) {
        match (value, &part.source) {
            (Some(v), _) => parts.push(v),
            (None, KeySource::Literal(l)) => parts.push(l.as_bytes().to_vec()),
            (None, _) => {
                return Err(Failure::bucket(format!(
                    "missing --key {}=VALUE; {}",
                    part_label(part),
                    expected_parts(rule)
                )))
            }
        }
    }
    Ok(Bucket { index, rule, prefix: &config.valkey.key_prefix, parts })
}

impl Bucket<'_> {
    /// The bucket's key ending in `suffix`, as planning builds it.
    pub fn key(&self, suffix: &str) -> String {
        let parts: Vec<&[u8]> = self.parts.iter().map(Vec::as_slice).collect();
        rule_key(self.prefix, &self.rule.key_name, &parts, self.rule.hash_tag, suffix)
    }

    /// The key of the rule's windows (its algorithm's suffix).
    pub fn window_key(&self) -> String {
        self.key(self.rule.algorithm.id())
    }

    /// The lease set of a rule with a concurrency limit.
    pub fn lease_key(&self) -> Option<String> {
        self.rule.concurrency.as_ref().map(|_| self.key(Algorithm::Lease.id()))
    }

    pub fn override_key(&self) -> String {
        override_key(&self.window_key())
    }

    /// What a reset deletes: the key of every algorithm (a rule that changed
    /// algorithm left the old one's) and its syncer set; the lease set too
    /// with `leases`. Never the override.
    pub fn reset_keys(&self, leases: bool) -> Vec<String> {
        let mut keys = Vec::new();
        for algorithm in Algorithm::ALL {
            let key = self.key(algorithm.id());
            keys.push(syncers_key(&key));
            keys.push(key);
        }
        keys.extend(self.lease_key().filter(|_| leases));
        keys
    }

    /// The parts as given (for messages).
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .rule
            .key
            .iter()
            .zip(&self.parts)
            .map(|(p, v)| format!("{}={}", part_label(p), String::from_utf8_lossy(v)))
            .collect();
        format!("{} {}", self.rule.name, parts.join(" ")).trim_end().to_owned()
    }
}

mod scan;
pub use scan::{decode, display_part, encoded_part, pattern, Constraint, Decoded};
