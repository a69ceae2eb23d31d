//! `tollgate override list FILE [--rule R] --store ADDR [--json]`: every
//! override hash of the configuration's rules (one `SCAN` of
//! `<prefix>:*:ovr` on every master), read back into its rule, key parts
//! and limits.

use super::super::args::config;
use super::super::args::Args;
use super::super::bucket::{self, decode, display_part, part_label};
use super::super::clock;
use super::super::failure::emit;
use super::super::failure::Failure;
use super::super::store::Client;
use super::super::table::columns;
use crate::config::{Config, Period, Rule};
use crate::key::OVERRIDE_SUFFIX;
use crate::resp::Value;
use serde_json::{json, Map, Value as Json};
use std::io::Write;
use std::num::NonZeroU64;

/// One override found.
struct Found<'c> {
    rule: &'c Rule,
    key: String,
    parts: Vec<(String, String)>,
    fields: Vec<(String, String)>,
}

pub fn list(args: &Args, out: &mut dyn Write) -> Result<(), Failure> {
    let config = config(args)?;
    let rules: Vec<&Rule> = match &args.rule {
        Some(name) => vec![bucket::find_rule(&config, name)?.1],
        None => config.rules.iter().collect(),
    };
    let mut client = Client::connect(&args.address()?)?;
    let prefix = &config.valkey.key_prefix;
    let mut found = Vec::new();
    for key in client.scan(&format!("{prefix}:*:{OVERRIDE_SUFFIX}"))? {
        let Some((rule, d)) = rules.iter().find_map(|r| Some((*r, decode(prefix, r, &key)?))) else { continue };
        if d.suffix != OVERRIDE_SUFFIX {
            continue;
        }
        let reply = client.call(&key, &[b"HGETALL", key.as_bytes()], "HGETALL")?;
        let items = reply.as_array().unwrap_or_default();
        let text = |v: &Value| String::from_utf8_lossy(v.as_bytes().unwrap_or_default()).into_owned();
        let fields = items.chunks(2).filter_map(|c| Some((text(c.first()?), text(c.get(1)?)))).collect();
        let parts = rule.key.iter().zip(&d.parts).map(|(p, v)| (part_label(p), display_part(v))).collect();
        found.push(Found { rule, key, parts, fields });
    }
    let order = |r: &Rule| config.rules.iter().position(|c| c.name == r.name);
    found.sort_by(|a, b| (order(a.rule), &a.parts).cmp(&(order(b.rule), &b.parts)));
    let now = clock::now_ms();
    let text = if args.json { json_text(&config, &found, now) } else { table(&config, &found, now) };
    emit(out, &text)
}

fn field<'a>(f: &'a Found, name: &str) -> Option<&'a str> {
    f.fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The window fields as `(label, limit)`: `60s`, or `concurrency`.
fn limits(f: &Found) -> Vec<(String, String)> {
    f.fields
        .iter()
        .filter_map(|(k, v)| {
            if k == "c" {
                return Some(("concurrency".to_owned(), v.clone()));
            }
            let ms: u64 = k.strip_prefix('w')?.parse().ok()?;
            let label = f.rule.limits.iter().find(|l| l.period.ms().get() == ms).map_or_else(
                || format!("{} (no such window)", Period::from_millis(NonZeroU64::new(ms).unwrap_or(NonZeroU64::MIN))),
                |l| l.period.label().to_owned(),
            );
            Some((label, v.clone()))
        })
        .collect()
}

fn until_text(f: &Found, now: u64) -> String {
    match field(f, "until").and_then(|u| u.parse::<u64>().ok()) {
        None => "never".to_owned(),
        Some(u) if u <= now => format!("{} (expired)", clock::rfc3339(u)),
        Some(u) => clock::rfc3339(u),
    }
}

fn table(config: &Config, found: &[Found], now: u64) -> String {
    let head = ["rule", "key", "limits", "until", "set", "by", "note"];
    let rows: Vec<[String; 7]> = found
        .iter()
        .map(|f| {
            let parts: Vec<String> = f.parts.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let limits: Vec<String> = limits(f).iter().map(|(k, v)| format!("{k}={v}")).collect();
            let at = field(f, "at").and_then(|a| a.parse().ok()).map_or_else(String::new, clock::rfc3339);
            [
                f.rule.name.clone(),
                parts.join(" "),
                limits.join(" "),
                until_text(f, now),
                at,
                field(f, "by").unwrap_or_default().to_owned(),
                field(f, "note").unwrap_or_default().to_owned(),
            ]
        })
        .collect();
    let mut out = columns(&head, &rows);
    out.push_str(&format!(
        "{} override{} (keys under {:?})\n",
        found.len(),
        if found.len() == 1 { "" } else { "s" },
        config.valkey.key_prefix
    ));
    out
}

fn json_text(config: &Config, found: &[Found], now: u64) -> String {
    let items: Vec<Json> = found
        .iter()
        .map(|f| {
            let parts: Map<String, Json> = f.parts.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
            let limits: Map<String, Json> =
                limits(f).into_iter().map(|(k, v)| (k, v.parse::<u64>().map_or(json!(v), |n| json!(n)))).collect();
            let until = field(f, "until").and_then(|u| u.parse::<u64>().ok());
            json!({
                "rule": f.rule.name,
                "key": parts,
                "store_key": f.key,
                "limits": limits,
                "until_ms": until,
                "until": until.map(clock::rfc3339),
                "expired": until.is_some_and(|u| u <= now),
                "at_ms": field(f, "at").and_then(|a| a.parse::<u64>().ok()),
                "by": field(f, "by"),
                "note": field(f, "note"),
            })
        })
        .collect();
    let doc = json!({ "key_prefix": config.valkey.key_prefix, "overrides": items });
    format!("{}\n", serde_json::to_string_pretty(&doc).unwrap_or_default())
}
