//! Which rules apply to a request, and the [`Check`]s the store must decide.
//!
//! The request is seen through [`RequestView`], so this is plain Rust tested on
//! the host; the filter implements the trait over Envoy's headers and
//! attributes.

pub mod extract;
mod matching;

pub use matching::matches;

use crate::config::{Config, KeySource, OnMissing, Rule};
use crate::key::tagged_bucket_key;
use crate::limiter::{Check, Window};

/// The request attributes rules can match and key on.
pub trait RequestView {
    /// A request header by lowercase name, pseudo-headers (`:method`,
    /// `:path`, `:authority`) included.
    fn header(&self, name: &str) -> Option<Vec<u8>>;

    /// An Envoy attribute by path (`["source", "address"]`, a metadata path).
    fn property(&self, path: &[String]) -> Option<Vec<u8>>;

    /// `:method`.
    fn method(&self) -> Option<Vec<u8>> {
        self.header(":method")
    }

    /// `:path`, including any query string.
    fn path(&self) -> Option<Vec<u8>> {
        self.header(":path")
    }
}

/// What the rules make of one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// One check per rule that matched and has a complete key, in
    /// configuration order. Empty: the request is not limited.
    pub checks: Vec<Check>,
    /// Rules that matched but were skipped because a key part had no value.
    pub skipped: Vec<usize>,
}

/// Plans the store call for `request`.
pub fn plan(config: &Config, request: &dyn RequestView) -> Plan {
    let mut out = Plan::default();
    for (index, rule) in config.rules.iter().enumerate() {
        if !matches(&rule.matcher, request) {
            continue;
        }
        match check_for(config, index, rule, request) {
            Some(check) => out.checks.push(check),
            None => out.skipped.push(index),
        }
    }
    out
}

fn check_for(config: &Config, index: usize, rule: &Rule, request: &dyn RequestView) -> Option<Check> {
    let mut values: Vec<Vec<u8>> = Vec::with_capacity(rule.key.len());
    for part in &rule.key {
        let value = match (source_value(&part.source, request), &part.on_missing) {
            (Some(v), _) => v,
            (None, OnMissing::Default(d)) => d.as_bytes().to_vec(),
            (None, OnMissing::SkipRule) => return None,
        };
        values.push(value);
    }
    let parts: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    Some(Check {
        rule: index,
        // The suffix names the algorithm, so switching a rule's algorithm
        // never reads another algorithm's data.
        key: tagged_bucket_key(&config.valkey.key_prefix, &rule.name, &parts, rule.hash_tag, rule.algorithm.id()),
        windows: rule.limits.iter().map(|l| Window { limit: l.limit, period_ms: l.period.ms() }).collect(),
        cost: rule.cost,
        algorithm: rule.algorithm,
        check_only: false,
    })
}

/// The value of one key source in `request`, if it has one.
pub fn source_value(source: &KeySource, request: &dyn RequestView) -> Option<Vec<u8>> {
    match source {
        KeySource::Header(name) => request.header(name),
        KeySource::Query(name) => extract::query_param(&request.path()?, name),
        KeySource::Cookie(name) => extract::cookie(&request.header("cookie")?, name),
        KeySource::RemoteAddress(prefixes) => {
            let address = request.property(&["source".to_owned(), "address".to_owned()])?;
            Some(extract::masked(extract::parse_ip(&address)?, *prefixes).into_bytes())
        }
        KeySource::ForwardedFor { trusted_hops, prefixes } => {
            let client = extract::forwarded_client(&request.header("x-forwarded-for")?, *trusted_hops)?;
            Some(extract::masked(client, *prefixes).into_bytes())
        }
        KeySource::Path => request.path().map(|p| extract::path_only(&p).to_vec()),
        KeySource::Method => request.method(),
        KeySource::Authority => request.header(":authority").map(|a| a.to_ascii_lowercase()),
        KeySource::Literal(value) => Some(value.as_bytes().to_vec()),
        KeySource::Property(path) => request.property(path),
    }
}

#[cfg(test)]
mod tests;
