//! `tollgate explain FILE`: per rule, in plain words and a table, what it
//! matches, its bucket key, each window (limit, period, rate, burst), which
//! window binds first for a steady and for a bursty client, the Valkey memory
//! of one bucket at full quota, and the headers a client sees. The bursty
//! client and the headers come from the pure model and the filter's own
//! response builders.

use std::io::Write;
use std::path::Path;

use crate::answer::response;
use crate::config::{Config, HeaderCondition, KeySource, Match, OnMissing, Rule};
use crate::key::bucket_key;
use crate::limiter::model::Model;
use crate::limiter::{Algorithm, Check, Window};

/// When the example requests happen: the start of a day, so that aligned
/// windows (`fixed_window`, `sliding_window`) start there too.
const T0: u64 = 20_833 * 86_400_000;
/// Bursts replayed through the model at most (larger ones are described).
const MAX_REPLAYED_BURST: u64 = 10_000;

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
    out.push_str(&format!("           key {}\n\n", key_template(config, rule)));
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
    out.push_str(&format!("  Valkey memory per bucket at full quota: {}\n", memory(rule)));
    out.push_str(&headers(config, index, rule));
    out
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

fn key_template(config: &Config, rule: &Rule) -> String {
    let base = bucket_key(&config.valkey.key_prefix, &rule.name, &[], rule.algorithm.id());
    let parts: String = rule.key.iter().map(|p| format!(":<{}>", source(&p.source))).collect();
    if let Some(tag) = rule.hash_tag.and_then(|i| rule.key.get(i)) {
        let (prefix, suffix) = (&config.valkey.key_prefix, rule.algorithm.id());
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

fn headers(config: &Config, index: usize, rule: &Rule) -> String {
    let check = Check {
        rule: index,
        key: "explain".to_owned(),
        windows: rule.limits.iter().map(|l| Window { limit: l.limit, period_ms: l.period.ms() }).collect(),
        cost: rule.cost,
        algorithm: rule.algorithm,
        check_only: false,
        lease: None,
    };
    let checks = [check];
    let mut model = Model::new();
    let first = model.decide(&checks, T0);
    let mut out = String::from("  a client sees, for a request matching only this rule:\n");
    let admitted = response::allowed_headers(config, &response::policy_names(config, &checks, &first), &first);
    out.push_str("    first request: 200");
    out.push_str(&if admitted.is_empty() { " (no rate-limit headers)\n".to_owned() } else { "\n".to_owned() });
    for (k, v) in admitted {
        out.push_str(&format!("      {k}: {v}\n"));
    }
    let burst = rule.limits.iter().map(|l| l.limit.get() / rule.cost.get()).min().unwrap_or(0);
    if burst >= MAX_REPLAYED_BURST {
        out.push_str(&format!("    (a burst of {burst} is not replayed here)\n"));
        return out;
    }
    for n in 2..=burst + 1 {
        let decision = model.decide(&checks, T0);
        if decision.allowed {
            continue;
        }
        let denied: Vec<String> = response::policy_names(config, &checks, &decision)
            .iter()
            .zip(&decision.windows)
            .filter(|(_, w)| w.denied())
            .map(|(name, _)| (*name).to_owned())
            .collect();
        if rule.shadow || config.shadow {
            out.push_str(&format!(
                "    request {n} at once: 200, shadow mode (would be denied by {})\n",
                denied.join(", ")
            ));
            break;
        }
        let reply = response::denied(config, &response::policy_names(config, &checks, &decision), &decision);
        out.push_str(&format!("    request {n} at once: {} (denied by {})\n", reply.status, denied.join(", ")));
        for (k, v) in &reply.headers {
            out.push_str(&format!("      {k}: {v}\n"));
        }
        if !reply.body.is_empty() {
            out.push_str(&format!("      body: {}\n", String::from_utf8_lossy(&reply.body).trim_end()));
        }
        break;
    }
    out
}
