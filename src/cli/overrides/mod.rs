//! `tollgate override set|list|rm`: the per-key override hash of a bucket
//! (design #42): fields `w<period_ms>` (a window's limit in force), `c` (the
//! concurrency limit), `until` (ms since the epoch; absent: no expiry),
//! `at`, `by`, `note`; written in one transaction (`DEL`, `HSET`,
//! `PEXPIREAT until + 60 s`), in the bucket's slot.

pub mod list;
pub use list::list;

use super::args::config;
use super::args::{duration_ms, Args};
use super::bucket;
use super::clock;
use super::failure::emit;
use super::failure::Failure;
use super::store::Client;
use crate::config::Rule;
use crate::limiter::EXACT_PRODUCT_MAX;
use std::io::Write;

/// The largest limit an override may set (the Lua ignores larger ones).
pub const MAX_OVERRIDE_LIMIT: u64 = 1_000_000_000_000;
/// How long the hash outlives its `until` (garbage collection only).
pub const EXPIRY_GRACE_MS: u64 = 60_000;

/// Whether `rule` reads overrides (`"overrides": true` in its configuration):
/// `set` refuses the other rules ([`refuse`]).
pub fn rule_allows_overrides(rule: &Rule) -> bool {
    rule.overrides
}

/// Exit 3 for a rule that does not read overrides.
pub fn refuse(rule: &Rule, allowed: bool) -> Result<(), Failure> {
    if allowed {
        return Ok(());
    }
    Err(Failure::bucket(format!(
        "rule {} does not read overrides: add \"overrides\": true to the rule in the configuration and roll it out \
         first (not with \"sync\")",
        rule.name
    )))
}

/// One field of the hash and the configured value it replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub limit: u64,
    pub configured: u64,
    /// `60s window` or `concurrency`.
    pub label: String,
}

/// The limits `--times`, `--limit` and `--concurrency` give, validated as
/// the Lua validates them.
pub fn fields(rule: &Rule, args: &Args) -> Result<Vec<Field>, Failure> {
    let mut out = Vec::new();
    if let Some(times) = &args.times {
        if !args.limits.is_empty() || args.concurrency.is_some() {
            return Err(Failure::usage("--times multiplies every limit: not with --limit or --concurrency"));
        }
        let (num, den) = factor(times).ok_or_else(|| Failure::usage(format!("--times {times:?}: e.g. 10 or 2.5")))?;
        let scale = |limit: u64| (u128::from(limit) * num / den).min(u128::from(u64::MAX)) as u64;
        for l in &rule.limits {
            out.push(window_field(rule, l.period.ms().get(), scale(l.limit.get()))?);
        }
        if let Some(c) = &rule.concurrency {
            out.push(concurrency_field(rule, scale(c.limit.get()))?);
        }
    }
    for (period, n) in &args.limits {
        let periods: Vec<&str> = rule.limits.iter().map(|l| l.period.label()).collect();
        let unknown = || {
            Failure::bucket(format!("rule {} has no {period} window; its periods: {}", rule.name, periods.join(", ")))
        };
        let ms = duration_ms(period).ok_or_else(unknown)?;
        if !rule.limits.iter().any(|l| l.period.ms().get() == ms) {
            return Err(unknown());
        }
        out.push(window_field(rule, ms, number(n, "--limit")?)?);
    }
    if let Some(n) = &args.concurrency {
        out.push(concurrency_field(rule, number(n, "--concurrency")?)?);
    }
    if out.is_empty() {
        return Err(Failure::usage("give the new limits: --times N, --limit PERIOD=N..., --concurrency N"));
    }
    out.dedup_by(|a, b| a.name == b.name);
    Ok(out)
}

fn number(text: &str, flag: &str) -> Result<u64, Failure> {
    text.parse().map_err(|_| Failure::usage(format!("{flag}: {text:?} is not a whole number")))
}

/// `10`, `2.5`, `0.5` as a fraction.
fn factor(text: &str) -> Option<(u128, u128)> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && frac.is_empty() || frac.len() > 6 {
        return None;
    }
    let all = format!("{whole}{frac}");
    if !all.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let den = 10u128.pow(u32::try_from(frac.len()).ok()?);
    let num: u128 = all.parse().ok()?;
    (num > 0).then_some((num, den))
}

fn window_field(rule: &Rule, period_ms: u64, limit: u64) -> Result<Field, Failure> {
    let window = rule.limits.iter().find(|l| l.period.ms().get() == period_ms);
    let configured = window.map_or(0, |l| l.limit.get());
    let label = format!("{} window", window.map_or_else(|| format!("{period_ms}ms"), |l| l.period.label().to_owned()));
    check_limit(&label, limit)?;
    if rule.algorithm.needs_exact_product() && u128::from(limit) * u128::from(period_ms) > u128::from(EXACT_PRODUCT_MAX)
    {
        return Err(Failure::usage(format!(
            "{label}: {limit} is too large for {} (limit x period_ms must stay <= 2^53)",
            rule.algorithm.name()
        )));
    }
    Ok(Field { name: format!("w{period_ms}"), limit, configured, label })
}

fn concurrency_field(rule: &Rule, limit: u64) -> Result<Field, Failure> {
    let Some(c) = &rule.concurrency else {
        return Err(Failure::bucket(format!("rule {} has no concurrency limit to override", rule.name)));
    };
    check_limit("concurrency", limit)?;
    Ok(Field { name: "c".to_owned(), limit, configured: c.limit.get(), label: "concurrency".to_owned() })
}

fn check_limit(label: &str, limit: u64) -> Result<(), Failure> {
    if !(1..=MAX_OVERRIDE_LIMIT).contains(&limit) {
        return Err(Failure::usage(format!("{label}: the limit must be 1 to 10^12 (got {limit})")));
    }
    Ok(())
}

/// `until` from `--for` or `--until` (ms since the epoch), if given.
fn until(args: &Args, now: u64) -> Result<Option<u64>, Failure> {
    let at = match (&args.for_, &args.until) {
        (Some(_), Some(_)) => return Err(Failure::usage("--for or --until, not both")),
        (Some(d), None) => {
            let ms = duration_ms(d)
                .filter(|ms| *ms > 0)
                .ok_or_else(|| Failure::usage(format!("--for {d:?}: e.g. 1h, 30m, 2d")))?;
            now.saturating_add(ms)
        }
        (None, Some(t)) => clock::parse(t).ok_or_else(|| {
            Failure::usage(format!("--until {t:?}: RFC 3339 (2026-12-04T18:00:00Z) or ms since the epoch"))
        })?,
        (None, None) => return Ok(None),
    };
    if at <= now {
        return Err(Failure::usage(format!("--until {} is in the past", clock::rfc3339(at))));
    }
    Ok(Some(at))
}

pub fn set(args: &Args, out: &mut dyn Write) -> Result<(), Failure> {
    let config = config(args)?;
    let bucket = bucket::resolve(&config, args.rule()?, &args.keys)?;
    refuse(bucket.rule, rule_allows_overrides(bucket.rule))?;
    let fields = fields(bucket.rule, args)?;
    let now = clock::now_ms();
    let until = until(args, now)?;
    let by = args.by.clone().or_else(|| std::env::var("USER").ok()).unwrap_or_else(|| "unknown".to_owned());
    let key = bucket.override_key();
    let mut hset = vec![b"HSET".to_vec(), key.as_bytes().to_vec()];
    let mut push = |f: &str, v: String| {
        hset.push(f.as_bytes().to_vec());
        hset.push(v.into_bytes());
    };
    for f in &fields {
        push(&f.name, f.limit.to_string());
    }
    if let Some(u) = until {
        push("until", u.to_string());
    }
    push("at", now.to_string());
    push("by", by);
    if let Some(note) = &args.note {
        push("note", note.clone());
    }
    let mut commands = vec![vec![b"DEL".to_vec(), key.as_bytes().to_vec()], hset];
    if let Some(u) = until {
        let expire = u.saturating_add(EXPIRY_GRACE_MS).to_string();
        commands.push(vec![b"PEXPIREAT".to_vec(), key.as_bytes().to_vec(), expire.into_bytes()]);
    }
    let mut client = Client::connect(&args.address()?)?;
    client.transaction(&key, &commands, "MULTI/DEL/HSET/PEXPIREAT/EXEC")?;
    let mut text = format!("override set: {}\n", bucket.describe());
    for f in &fields {
        text.push_str(&format!("  {}: {} (configured {})\n", f.label, f.limit, f.configured));
    }
    text.push_str(&match until {
        Some(u) => format!(
            "  until {} (in {})\n",
            clock::rfc3339(u),
            crate::config::Period::from_millis(
                std::num::NonZeroU64::new((u - now).div_ceil(1000) * 1000).unwrap_or(std::num::NonZeroU64::MIN)
            )
        ),
        None => "  no expiry: remove it with `tollgate override rm`\n".to_owned(),
    });
    text.push_str(&format!("  key {key}\n"));
    emit(out, &text)
}

pub fn rm(args: &Args, out: &mut dyn Write) -> Result<(), Failure> {
    let config = config(args)?;
    let bucket = bucket::resolve(&config, args.rule()?, &args.keys)?;
    let key = bucket.override_key();
    let mut client = Client::connect(&args.address()?)?;
    let deleted = client.call(&key, &[b"DEL", key.as_bytes()], "DEL")?;
    let text = match deleted.as_integer() {
        Some(1) => format!("override removed: {} ({key})\n", bucket.describe()),
        _ => format!("no override: {} ({key} does not exist)\n", bucket.describe()),
    };
    emit(out, &text)
}
