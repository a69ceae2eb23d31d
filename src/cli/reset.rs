//! `tollgate reset FILE --rule R (--key part=value... | --key-prefix
//! part=prefix... | --all-keys) --store ADDR [--dry-run] [--leases]`: one
//! bucket's windows deleted in one transaction in its slot, or every bucket
//! of the rule whose parts match (SCAN on every master, one `DEL` per
//! bucket). The override stays; the lease set too unless `--leases`.

use super::args::config;
use super::args::Args;
use super::bucket::{self, decode, display_part, part_label, pattern, Constraint};
use super::failure::emit;
use super::failure::Failure;
use super::store::{Client, StoreError};
use crate::config::{Config, Rule};
use crate::key::SYNCERS_SUFFIX;
use crate::limiter::Algorithm;
use crate::resp::Value;
use std::collections::BTreeMap;
use std::io::Write;

pub fn run(args: &Args, out: &mut dyn Write) -> Result<(), Failure> {
    let config = config(args)?;
    let rule_name = args.rule()?;
    if args.key_prefixes.is_empty() && !args.all_keys {
        let bucket =
            bucket::resolve(&config, rule_name, &args.keys).map_err(|f| match f.message.starts_with("missing") {
                true => Failure {
                    message: format!(
                        "{} (every bucket of the rule: --key-prefix PART=PREFIX or --all-keys)",
                        f.message
                    ),
                    ..f
                },
                false => f,
            })?;
        let mut client = Client::connect(&args.address()?)?;
        return one(&mut client, &bucket, args, out);
    }
    let (_, rule) = bucket::find_rule(&config, rule_name)?;
    let constraints = constraints(rule, args)?;
    let mut client = Client::connect(&args.address()?)?;
    many(&mut client, &config, rule, &constraints, args, out)
}

/// One bucket: `MULTI`, `EXISTS` of each key, one `DEL` of them all, `EXEC`.
fn one(client: &mut Client, bucket: &bucket::Bucket, args: &Args, out: &mut dyn Write) -> Result<(), Failure> {
    let keys = bucket.reset_keys(args.leases);
    let anchor = bucket.window_key();
    let mut commands: Vec<Vec<Vec<u8>>> =
        keys.iter().map(|k| vec![b"EXISTS".to_vec(), k.as_bytes().to_vec()]).collect();
    let replies = if args.dry_run {
        client.transaction(&anchor, &commands, "EXISTS")?
    } else {
        let mut del = vec![b"DEL".to_vec()];
        del.extend(keys.iter().map(|k| k.as_bytes().to_vec()));
        commands.push(del);
        client.transaction(&anchor, &commands, "MULTI/EXISTS/DEL/EXEC")?
    };
    let present: Vec<&String> =
        keys.iter().zip(&replies).filter(|(_, r)| r.as_integer() == Some(1)).map(|(k, _)| k).collect();
    let mut text = String::new();
    let verb = if args.dry_run { "would delete" } else { "deleted" };
    for key in &present {
        text.push_str(&format!("{verb} {key}\n"));
    }
    text.push_str(&match present.len() {
        0 => format!("reset: {}: the bucket holds no state{}\n", bucket.describe(), kept_note(bucket.rule, args)),
        n => format!(
            "reset{}: {}: {n} key{} {}{}\n",
            if args.dry_run { " (dry run)" } else { "" },
            bucket.describe(),
            if n == 1 { "" } else { "s" },
            if args.dry_run { "would be deleted" } else { "deleted" },
            kept_note(bucket.rule, args)
        ),
    });
    emit(out, &text)
}

fn kept_note(rule: &Rule, args: &Args) -> &'static str {
    if rule.concurrency.is_some() && !args.leases {
        "; the lease set is kept (--leases deletes it)"
    } else {
        ""
    }
}

/// The constraint on each part of `rule` from `--key` and `--key-prefix`.
fn constraints(rule: &Rule, args: &Args) -> Result<Vec<Constraint>, Failure> {
    let exact = bucket::assign(rule, &args.keys)?;
    let prefixes = bucket::assign(rule, &args.key_prefixes)?;
    rule.key
        .iter()
        .zip(exact.into_iter().zip(prefixes))
        .map(|(part, given)| match given {
            (Some(_), Some(_)) => Err(Failure::bucket(format!("{} given as --key and --key-prefix", part_label(part)))),
            (Some(v), None) => Ok(Constraint::Exact(v)),
            (None, Some(p)) => Ok(Constraint::Prefix(p)),
            (None, None) => Ok(Constraint::Any),
        })
        .collect()
}

/// Whether a key's suffix is one a reset deletes.
fn deleted_suffix(suffix: &str, leases: bool) -> bool {
    let window = |s: &str| Algorithm::ALL.iter().any(|a| a.id() == s);
    window(suffix)
        || suffix.strip_suffix(SYNCERS_SUFFIX).is_some_and(window)
        || (leases && suffix == Algorithm::Lease.id())
}

fn many(
    client: &mut Client,
    config: &Config,
    rule: &Rule,
    constraints: &[Constraint],
    args: &Args,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let prefix = &config.valkey.key_prefix;
    let glob = pattern(prefix, rule, constraints, "*")?;
    let mut buckets: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    for key in client.scan(&glob)? {
        let Some(d) = decode(prefix, rule, &key) else { continue };
        let fits = constraints.iter().zip(&d.parts).all(|(c, p)| c.holds(p));
        if fits && deleted_suffix(&d.suffix, args.leases) {
            buckets.entry(d.parts).or_default().push(key);
        }
    }
    let verb = if args.dry_run { "would delete" } else { "deleted" };
    let mut text = String::new();
    let mut total = 0;
    for (parts, keys) in &buckets {
        let deleted = if args.dry_run { keys.len() } else { del(client, keys)? };
        total += deleted;
        let shown: Vec<String> =
            rule.key.iter().zip(parts).map(|(p, v)| format!("{}={}", part_label(p), display_part(v))).collect();
        text.push_str(&format!("{verb} bucket {} ({}):\n", shown.join(" "), keys.len()));
        for key in keys {
            text.push_str(&format!("  {key}\n"));
        }
    }
    text.push_str(&format!(
        "reset{}: rule {}: {} bucket{}, {total} key{} {} (pattern {glob}){}\n",
        if args.dry_run { " (dry run)" } else { "" },
        rule.name,
        buckets.len(),
        if buckets.len() == 1 { "" } else { "s" },
        if total == 1 { "" } else { "s" },
        if args.dry_run { "would be deleted" } else { "deleted" },
        kept_note(rule, args)
    ));
    emit(out, &text)
}

/// One `DEL` of one bucket's keys (one slot); how many were deleted.
fn del(client: &mut Client, keys: &[String]) -> Result<usize, StoreError> {
    let Some(first) = keys.first() else { return Ok(0) };
    let mut args: Vec<&[u8]> = vec![b"DEL"];
    args.extend(keys.iter().map(|k| k.as_bytes()));
    match client.call(first, &args, "DEL")? {
        Value::Integer(n) => Ok(usize::try_from(n).unwrap_or(0)),
        other => super::store::check(other, "the store", "DEL").map(|_| 0),
    }
}
