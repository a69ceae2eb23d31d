//! Which rules apply to a request, and the [`Check`]s the store must decide.
//!
//! The request is seen through [`RequestView`], so this is plain Rust tested on
//! the host; the filter implements the trait over Envoy's headers and
//! attributes.

pub mod extract;
pub mod kept;
mod matching;

pub use matching::matches;

use crate::config::{Concurrency, Config, KeyPart, KeySource, Match, OnMissing, Rule};
use crate::key::KeyBuilder;
use crate::limiter::{Algorithm, Check};
use std::borrow::Cow;
use std::num::NonZeroU64;
use std::rc::Rc;

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
    /// configuration order, each followed by its lease check when the rule
    /// has a concurrency limit ([`Algorithm::Lease`]). Empty: the request
    /// is not limited.
    pub checks: Vec<Check>,
    /// Rules that matched but were skipped because a key part had no value.
    pub skipped: Vec<usize>,
}

/// Whether some rule's `match` holds for `request`: when none does,
/// [`plan`] has nothing to check and nothing to count.
pub fn any_rule_matches(config: &Config, request: &dyn RequestView) -> bool {
    config.rules.iter().any(|rule| matches(&rule.matcher, request))
}

/// What the filter reads of every request, decided at configuration time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reads {
    /// Whether a request no rule matches is left alone without waking the
    /// worker: every rule has a `match` condition, and no header must be
    /// removed from every request (shadow mode, `testing.now_header`).
    pub prefilter: bool,
    /// The request headers the rules may read more than once per request
    /// ([`header_reads`]): a request context keeps their values.
    pub headers_kept: Vec<String>,
}

impl Reads {
    pub fn of(config: &Config) -> Reads {
        let per_request_duty =
            config.shadow || config.rules.iter().any(|r| r.shadow) || config.testing.now_header.is_some();
        let prefilter = !per_request_duty && can_match_none(config);
        let headers_kept =
            header_reads(config, prefilter).into_iter().filter(|(_, times)| *times > 1).map(|(name, _)| name).collect();
        Reads { prefilter, headers_kept }
    }
}

/// Whether [`any_rule_matches`] can be false: every rule has a `match`
/// condition (a rule without one matches every request).
pub fn can_match_none(config: &Config) -> bool {
    config.rules.iter().all(|rule| rule.matcher != Match::default())
}

/// The request headers planning may read, in the order the rules first
/// need them, each with the most times one request may read it: once per
/// rule condition or key part that reads it, conditions twice when
/// `prefilter` (the filter runs [`any_rule_matches`] before [`plan`]).
/// Computed at configuration time, so that a request context keeps the
/// value of a header read more than once instead of asking Envoy again.
pub fn header_reads(config: &Config, prefilter: bool) -> Vec<(String, usize)> {
    let mut reads: Vec<(String, usize)> = Vec::new();
    let mut add = |name: &str, times: usize| match reads.iter_mut().find(|(n, _)| n == name) {
        Some((_, count)) => *count += times,
        None => reads.push((name.to_owned(), times)),
    };
    let condition = if prefilter { 2 } else { 1 };
    for rule in &config.rules {
        let m = &rule.matcher;
        if m.path.is_some() || m.path_prefix.is_some() || m.path_regex.is_some() {
            add(":path", condition);
        }
        if !m.methods.is_empty() {
            add(":method", condition);
        }
        if m.authority.is_some() {
            add(":authority", condition);
        }
        for h in &m.headers {
            add(&h.name, condition);
        }
        for part in &rule.key {
            match &part.source {
                KeySource::Header(name) => add(name, 1),
                KeySource::Query(_) | KeySource::Path => add(":path", 1),
                KeySource::Cookie(_) => add("cookie", 1),
                KeySource::ForwardedFor { .. } => add("x-forwarded-for", 1),
                KeySource::Method => add(":method", 1),
                KeySource::Authority => add(":authority", 1),
                KeySource::RemoteAddress(_) | KeySource::Literal(_) | KeySource::Property(_) => {}
            }
        }
    }
    reads
}

/// Plans the store call for `request`.
pub fn plan(config: &Config, request: &dyn RequestView) -> Plan {
    let mut out = Plan::default();
    for (index, rule) in config.rules.iter().enumerate() {
        if !matches(&rule.matcher, request) {
            continue;
        }
        match check_for(config, index, rule, request) {
            Some(check) => {
                let lease = rule.concurrency.as_ref().map(|c| lease_check(&check, c));
                out.checks.push(check);
                out.checks.extend(lease);
            }
            None => out.skipped.push(index),
        }
    }
    out
}

/// The check of a rule's concurrency limit, decided in the same call as
/// the rule's windows (`check`): the bucket's key with the suffix of
/// [`Algorithm::Lease`] instead of the rule's algorithm (the same hash tag,
/// so the same Valkey Cluster slot), its one window, and one lease per
/// request whatever the rule's cost. The worker gives it its lease id. It
/// shares the window check's override key (the same hash, field `c`).
fn lease_check(check: &Check, concurrency: &Concurrency) -> Check {
    let stem = check.key.strip_suffix(check.algorithm.id()).unwrap_or(&check.key);
    let suffix = Algorithm::Lease.id();
    let mut key = String::with_capacity(stem.len().saturating_add(suffix.len()));
    key.push_str(stem);
    key.push_str(suffix);
    Check {
        rule: check.rule,
        key,
        windows: Rc::clone(&concurrency.window),
        cost: NonZeroU64::MIN,
        algorithm: Algorithm::Lease,
        check_only: false,
        lease: None,
        // The rule's override hash serves both checks: one Rc, one key.
        override_key: check.override_key.clone(),
    }
}

fn check_for(config: &Config, index: usize, rule: &Rule, request: &dyn RequestView) -> Option<Check> {
    // The suffix names the algorithm, so switching a rule's algorithm
    // never reads another algorithm's data.
    let (prefix, suffix) = (&config.valkey.key_prefix, rule.algorithm.id());
    // The tag's value is read first: it goes first. Each other value goes
    // into the key as it is read.
    let tag = match rule.hash_tag.and_then(|i| Some((i, rule.key.get(i)?))) {
        Some((i, part)) => Some((i, key_value(part, request)?)),
        None => None,
    };
    let mut key = KeyBuilder::new(prefix, &rule.key_name, (rule.key.len(), tag.as_ref().map(|(_, v)| &**v)), suffix);
    for (j, part) in rule.key.iter().enumerate() {
        match &tag {
            Some((i, value)) if *i == j => key.part(value),
            _ => key.part(&key_value(part, request)?),
        }
    }
    let key = key.finish(suffix);
    // Only a rule with `overrides` pays for its override key.
    let override_key = rule.overrides.then(|| Rc::from(crate::key::override_key(&key)));
    Some(Check {
        rule: index,
        key,
        windows: Rc::clone(&rule.windows),
        cost: rule.cost,
        algorithm: rule.algorithm,
        check_only: false,
        lease: None,
        override_key,
    })
}

/// The value of key part `part` in `request`: its own, its default, or
/// `None` when the rule is skipped without it.
fn key_value<'a>(part: &'a KeyPart, request: &dyn RequestView) -> Option<Cow<'a, [u8]>> {
    match (part_value(&part.source, request), &part.on_missing) {
        (Some(v), _) => Some(v),
        (None, OnMissing::Default(d)) => Some(Cow::Borrowed(d.as_bytes())),
        (None, OnMissing::SkipRule) => None,
    }
}

/// [`source_value`], borrowing a literal instead of copying it.
fn part_value<'a>(source: &'a KeySource, request: &dyn RequestView) -> Option<Cow<'a, [u8]>> {
    match source {
        KeySource::Literal(value) => Some(Cow::Borrowed(value.as_bytes())),
        other => source_value(other, request).map(Cow::Owned),
    }
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
