//! `tollgate explain FILE`: per rule, in plain words and a table, what it
//! matches, its bucket key, each window (limit, period, rate, burst), which
//! window binds first for a steady and for a bursty client, its concurrency
//! limit, the Valkey memory of one bucket at full quota, and the headers a
//! client sees. The bursty client and the headers come from the pure model
//! and the filter's own response builders ([`headers`]).

use std::io::Write;
use std::num::NonZeroU64;
use std::path::Path;

mod headers;

use crate::config::{Config, HeaderCondition, KeySource, Match, OnMissing, Period, Rule};
use crate::key::bucket_key;
use crate::limiter::Algorithm;
use headers::headers;

pub fn run(path: &Path, out: &mut dyn Write) -> Result<i32, String> {
    let found = super::load(path)?;
    let mut text = String::new();
    let mut status = 0;
    for embedded in &found.configs {
        match super::parse(embedded) {
            Ok(config) => text.push_str(&explain(&embedded.origin, &config)),
            Err(errors) => {
                status = 1;
                text.push_str(&format!("{}\n", embedded.origin));
                for e in errors {
                    text.push_str(&format!("  {}{e}\n", super::LOG_PREFIX));
                }
            }
        }
    }
    out.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    Ok(status)
}

/// The explanation of one configuration.
pub fn explain(origin: &str, config: &Config) -> String {
    let r = &config.response;
    let mut families = Vec::new();
    if r.ratelimit_headers {
        families.push("RateLimit-Policy/RateLimit");
    }
    if r.x_ratelimit_headers {
        families.push("X-RateLimit-*");
    }
    let mut out = format!(
        "{origin}\n  {} rule{}; store cluster {:?}, keys under {:?}, timeout {} ms, failure_mode {}; \
         denials answer {}; headers: {}{}\n",
        config.rules.len(),
        if config.rules.len() == 1 { "" } else { "s" },
        config.valkey.cluster,
        config.valkey.key_prefix,
        config.valkey.timeout.as_millis(),
        match config.failure_mode {
            crate::config::FailureMode::Allow => "allow (requests pass when the store cannot answer)",
            crate::config::FailureMode::Deny => "deny (503 when the store cannot answer)",
            crate::config::FailureMode::Local => "local (each worker limits by itself when the store cannot answer)",
        },
        r.status,
        if families.is_empty() { "none".to_owned() } else { families.join(" and ") },
        if config.shadow { "; SHADOW MODE: nothing is denied" } else { "" },
    );
    for (index, rule) in config.rules.iter().enumerate() {
        out.push('\n');
        out.push_str(&explain_rule(config, index, rule));
    }
    out
}

fn explain_rule(config: &Config, index: usize, rule: &Rule) -> String {
    let cost = rule.cost.get();
    let mut out = format!(
        "rule {} ({}, cost {cost}{})\n",
        rule.name,
        rule.algorithm.name(),
        if rule.shadow { ", shadow: decides and counts but never denies" } else { "" }
    );
    out.push_str(&format!("  matches: {}\n", matches(&rule.matcher)));
    out.push_str(&format!("  bucket:  {}\n", bucket(rule)));
    out.push_str(&format!("           key {}\n\n", key_template(config, rule, rule.algorithm.id())));
    out.push_str(&windows_table(rule));
    let rate = |i: usize| rule.limits.get(i).map(|l| (u128::from(l.limit.get()), u128::from(l.period.ms().get())));
    let steady = (0..rule.limits.len())
        .min_by(|&a, &b| match (rate(a), rate(b)) {
            (Some((la, pa)), Some((lb, pb))) => (la * pb).cmp(&(lb * pa)).then(pb.cmp(&pa)),
            _ => std::cmp::Ordering::Equal,
        })
        .and_then(|i| rule.limits.get(i));
    let bursty = rule.limits.iter().min_by_key(|l| (l.limit.get() / cost, std::cmp::Reverse(l.period.ms())));
    if let (Some(steady), Some(bursty)) = (steady, bursty) {
        out.push_str(&format!(
            "\n  steady client: the {} window binds first (the lowest rate, {} per {})\n",
            steady.period.label(),
            steady.limit,
            steady.period.label()
        ));
        out.push_str(&format!(
            "  bursty client: the {} window binds first ({} request{} at once)\n",
            bursty.period.label(),
            bursty.limit.get() / cost,
            if bursty.limit.get() / cost == 1 { "" } else { "s" }
        ));
    }
    if let Some(s) = rule.shaping {
        out.push_str(&format!(
            "  shaped: a request that does not fit waits for its turn, up to {} ms (later: denied); at most {} of the rule held or being decided per worker\n",
            s.max_delay_ms, s.max_waiting
        ));
    }
    if let Some(c) = concurrency(config, rule) {
        out.push_str(&c);
    }
    out.push_str(&format!("  Valkey memory per bucket at full quota: {}\n", memory(rule)));
    out.push_str(&headers(config, index, rule));
    out
}

/// What the rule's concurrency limit does and costs, if it has one.
fn concurrency(config: &Config, rule: &Rule) -> Option<String> {
    let c = rule.concurrency.as_ref()?;
    let ttl = Period::from_millis(c.lease_ttl_ms);
    let renew = Period::from_millis(NonZeroU64::new(c.lease_ttl_ms.get() / 6).unwrap_or(NonZeroU64::MIN));
    let shaped = if rule.shaping.is_some() { " (shape never waits for a lease)" } else { "" };
    Some(format!(
        "  concurrency: at most {} request{} in flight per bucket (policy {})\n\
         \x20          each admitted request holds a lease until it ends: one sorted-set entry in\n\
         \x20          {} (the bucket's slot); the worker renews its leases\n\
         \x20          every {renew} (a sixth of the {ttl} lease TTL), so a killed proxy's leases count {ttl} at most\n\
         \x20          a full set denies at once{shaped}, Retry-After until its earliest lease expires\n\
         \x20          (a bound: a request that ends frees its lease sooner)\n",
        c.limit,
        if c.limit.get() == 1 { "" } else { "s" },
        c.policy_name,
        key_template(config, rule, Algorithm::Lease.id()),
    ))
}

fn matches(m: &Match) -> String {
    let mut words = Vec::new();
    words.push(if m.methods.is_empty() {
        "requests".to_owned()
    } else {
        format!("{} requests", m.methods.join(" or "))
    });
    if let Some(a) = &m.authority {
        words.push(format!("to {a}"));
    }
    let mut conditions = Vec::new();
    if let Some(p) = &m.path {
        conditions.push(format!("whose path is {p:?}"));
    }
    if let Some(p) = &m.path_prefix {
        conditions.push(format!("whose path starts with {p:?}"));
    }
    if let Some(p) = &m.path_regex {
        conditions.push(format!("whose path matches /{}/", p.source()));
    }
    for h in &m.headers {
        let (yes, no) = match &h.condition {
            HeaderCondition::Present(true) => ("present".to_owned(), "absent".to_owned()),
            HeaderCondition::Present(false) => ("absent".to_owned(), "present".to_owned()),
            HeaderCondition::Exact(v) => (format!("equal to {v:?}"), format!("absent or not equal to {v:?}")),
            HeaderCondition::Prefix(v) => {
                (format!("starting with {v:?}"), format!("absent or not starting with {v:?}"))
            }
            HeaderCondition::Regex(p) => {
                (format!("matching /{}/", p.source()), format!("absent or not matching /{}/", p.source()))
            }
        };
        conditions.push(format!("with header {} {}", h.name, if h.invert { no } else { yes }));
    }
    if conditions.is_empty() && m.methods.is_empty() && m.authority.is_none() {
        return "every request".to_owned();
    }
    words.extend(conditions);
    words.join(" ")
}

fn source(s: &KeySource) -> String {
    match s {
        KeySource::Header(h) => format!("header {h}"),
        KeySource::Query(q) => format!("query parameter {q}"),
        KeySource::Cookie(c) => format!("cookie {c}"),
        KeySource::RemoteAddress(p) => format!("client address (/{} for IPv4, /{} for IPv6)", p.v4, p.v6),
        KeySource::ForwardedFor { trusted_hops, prefixes } => format!(
            "x-forwarded-for client, {trusted_hops} trusted hop(s) skipped (/{} for IPv4, /{} for IPv6)",
            prefixes.v4, prefixes.v6
        ),
        KeySource::Path => "path".to_owned(),
        KeySource::Method => "method".to_owned(),
        KeySource::Authority => "authority".to_owned(),
        KeySource::Literal(v) => format!("the literal {v:?}"),
        KeySource::Property(p) => format!("attribute {}", p.join(".")),
    }
}

fn bucket(rule: &Rule) -> String {
    if rule.key.is_empty() {
        return "one bucket shared by every matching request".to_owned();
    }
    let parts: Vec<String> = rule
        .key
        .iter()
        .map(|part| match &part.on_missing {
            OnMissing::SkipRule => source(&part.source),
            OnMissing::Default(d) => format!("{} (default {d:?})", source(&part.source)),
        })
        .collect();
    let skips = match rule.key.iter().filter(|p| p.on_missing == OnMissing::SkipRule).count() {
        0 => "",
        1 if rule.key.len() == 1 => "; a request without it skips the rule",
        _ => "; a request without one of them skips the rule",
    };
    format!("one per value of {}{skips}", parts.join(" + "))
}

/// The key of the rule's buckets ending in `suffix` (its algorithm's id,
/// or the lease set's), with a `<source>` for each part.
fn key_template(config: &Config, rule: &Rule, suffix: &str) -> String {
    let base = bucket_key(&config.valkey.key_prefix, &rule.name, &[], suffix);
    let parts: String = rule.key.iter().map(|p| format!(":<{}>", source(&p.source))).collect();
    if let Some(tag) = rule.hash_tag.and_then(|i| rule.key.get(i)) {
        let prefix = &config.valkey.key_prefix;
        return format!("{prefix}:{{<{}>}}:{}{parts}:{suffix}", source(&tag.source), rule.name);
    }
    match base.rfind("}:") {
        Some(at) => format!("{}{parts}{}", base.get(..at).unwrap_or_default(), base.get(at..).unwrap_or_default()),
        None => base,
    }
}

/// `x` with at most three significant digits.
fn short(x: f64) -> String {
    let digits = if x >= 100.0 {
        0
    } else if x >= 10.0 {
        1
    } else if x >= 1.0 {
        2
    } else {
        3
    };
    let text = format!("{x:.digits$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

fn windows_table(rule: &Rule) -> String {
    let cost = rule.cost.get();
    let rows: Vec<[String; 5]> = rule
        .limits
        .iter()
        .zip(&rule.policy_names)
        .map(|(l, policy)| {
            let per_s = l.limit.get() as f64 * 1000.0 / l.period.ms().get() as f64;
            let burst = l.limit.get() / cost;
            [
                policy.clone(),
                l.limit.to_string(),
                format!("{} ms", l.period.ms()),
                format!("{}/s = {}/min", short(per_s), short(per_s * 60.0)),
                format!("{burst} request{}", if burst == 1 { "" } else { "s" }),
            ]
        })
        .collect();
    let head = ["window (policy)", "limit", "period", "sustained rate", "burst"];
    let widths: Vec<usize> = head
        .iter()
        .enumerate()
        .map(|(c, h)| {
            rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).chain([h.len()]).max().unwrap_or(0)
        })
        .collect();
    let line = |cells: [&str; 5]| {
        let mut s = String::from("  ");
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            s.push_str(&if i == 1 { format!("{cell:>w$}") } else { format!("{cell:<w$}") });
            s.push_str(if i < 4 { " | " } else { "" });
        }
        format!("{}\n", s.trim_end())
    };
    let mut out = line(head);
    out.push_str(&format!("  {}\n", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("-+-")));
    for [a, b, c, d, e] in &rows {
        out.push_str(&line([a, b, c, d, e]));
    }
    out
}

fn memory(rule: &Rule) -> String {
    let windows = memory_of_windows(rule);
    match &rule.concurrency {
        Some(c) => {
            format!("{windows}; and its lease set, one sorted-set entry per request in flight: up to {}", c.limit)
        }
        None => windows,
    }
}

fn memory_of_windows(rule: &Rule) -> String {
    let windows = rule.limits.len();
    match rule.algorithm {
        Algorithm::SlidingLog => {
            let longest = rule.limits.iter().max_by_key(|l| l.period.ms());
            let entries = longest.map_or(0, |l| l.limit.get() / rule.cost.get() * rule.cost.get());
            // docs/algorithms.md: 624 bytes for 20 entries (a listpack, up to
            // 128 entries), 46936 bytes for 600 (a skiplist).
            let per_entry = if entries <= 128 { 31 } else { 78 };
            format!(
                "one sorted-set entry per admitted unit of the longest window: up to {entries} entries, about {} bytes",
                entries * per_entry
            )
        }
        Algorithm::Gcra => format!("a hash of {} fields (2 per window), about 160 bytes for two windows", 2 * windows),
        Algorithm::SlidingWindow => {
            format!("a hash of {} fields (3 per window), about 160 bytes for two windows", 3 * windows)
        }
        Algorithm::FixedWindow => {
            format!("a hash of {} fields (2 per window), about 144 bytes for two windows", 2 * windows)
        }
        Algorithm::Lease => "one sorted-set entry per request in flight".to_owned(),
    }
}
