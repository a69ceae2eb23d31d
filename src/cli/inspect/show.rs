//! What `inspect` prints: a table like the other commands', or JSON.

use super::super::clock::rfc3339;
use super::super::table::columns;
use super::{Bucket, Raw};
use crate::answer::response;
use crate::config::Config;
use crate::limiter::{Check, Decision};
use serde_json::{json, Value as Json};

fn secs(ms: u64) -> String {
    match ms {
        0 => "now".to_owned(),
        ms if ms < 10_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms => format!("{} s", ms.div_ceil(1000)),
    }
}

/// The next request's verdict and the headers the filter would send.
fn verdict(config: &Config, checks: &[Check], d: &Decision) -> (String, Vec<(String, String)>, String) {
    let names = response::policy_names(config, checks, d);
    if d.allowed {
        let turn = if d.delay_ms > 0 { format!(", held {} for its turn", secs(d.delay_ms)) } else { String::new() };
        return (format!("admitted{turn}"), owned(response::allowed_headers(config, &names, d)), String::new());
    }
    let denied: Vec<&str> = names.iter().zip(&d.windows).filter(|(_, w)| w.denied()).map(|(n, _)| *n).collect();
    let reply = response::denied(config, &names, d);
    let body = String::from_utf8_lossy(&reply.body).trim_end().to_owned();
    let what = format!("denied ({}) by {}, retry in {}", reply.status, denied.join(", "), secs(d.retry_after_ms()));
    (what, owned(reply.headers), body)
}

fn owned(headers: Vec<(std::borrow::Cow<'_, str>, String)>) -> Vec<(String, String)> {
    headers.into_iter().map(|(k, v)| (k.into_owned(), v)).collect()
}

pub fn text(config: &Config, bucket: &Bucket, checks: &[Check], raw: &Raw, d: Option<&Decision>, now: u64) -> String {
    let mut out = format!("bucket {}\n  key {}", bucket.describe(), bucket.window_key());
    out.push_str(&match raw.window_ttl_ms {
        -2 => " (absent: nothing counted)\n".to_owned(),
        -1 => " (no expiry)\n".to_owned(),
        ttl => format!(" (expires in {})\n", secs(u64::try_from(ttl).unwrap_or(0))),
    });
    if let Some(d) = d {
        let names = response::policy_names(config, checks, d);
        let head = ["window", "limit", "used", "remaining", "resets in", "denies"];
        let rows: Vec<[String; 6]> = names
            .iter()
            .zip(&d.windows)
            .map(|(name, w)| {
                let configured = checks.get(w.check).and_then(|c| c.windows.get(w.window)).map_or(0, |x| x.limit.get());
                let limit = if w.overridden {
                    format!("{} (override; configured {configured})", w.limit)
                } else {
                    w.limit.to_string()
                };
                [
                    (*name).to_owned(),
                    limit,
                    w.limit.saturating_sub(w.remaining).to_string(),
                    w.remaining.to_string(),
                    secs(w.reset_ms),
                    if w.denied() { format!("yes, retry in {}", secs(w.retry_ms)) } else { "no".to_owned() },
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&columns(&head, &rows));
        let (what, headers, body) = verdict(config, checks, d);
        out.push_str(&format!("\nnext request: {what}\n"));
        for (k, v) in headers {
            out.push_str(&format!("  {k}: {v}\n"));
        }
        if !body.is_empty() {
            out.push_str(&format!("  body: {body}\n"));
        }
    }
    if let (Some(leases), Some(c)) = (&raw.leases, &bucket.rule.concurrency) {
        out.push_str(&format!(
            "\nleases in flight: {} of {} ({})\n",
            leases.len(),
            c.limit,
            bucket.lease_key().unwrap_or_default()
        ));
        for (id, exp) in leases {
            let state = if *exp <= now { "expired" } else { "live" };
            out.push_str(&format!("  {id}  expires {} ({state})\n", rfc3339(*exp)));
        }
    }
    if let Some(syncers) = &raw.syncers {
        out.push_str(&format!("\nsyncers: {} (their flushes count in the windows above)\n", syncers.len()));
        for (name, exp) in syncers {
            out.push_str(&format!("  {name}  active until {}\n", rfc3339(*exp)));
        }
    }
    if raw.override_fields.is_empty() {
        out.push_str(&format!("\noverride: none ({})\n", bucket.override_key()));
    } else {
        let fields: Vec<String> = raw.override_fields.iter().map(|(k, v)| override_field(bucket, k, v, now)).collect();
        out.push_str(&format!("\noverride: {} ({})\n", fields.join(" "), bucket.override_key()));
    }
    out
}

/// One field of the override hash as a person reads it.
fn override_field(bucket: &Bucket, name: &str, value: &str, now: u64) -> String {
    let ms = value.parse::<u64>().ok();
    match (name, ms) {
        ("until", Some(u)) if u <= now => format!("until={} (expired)", rfc3339(u)),
        ("until" | "at", Some(t)) => format!("{name}={}", rfc3339(t)),
        ("c", _) => format!("concurrency={value}"),
        _ => {
            let window = name.strip_prefix('w').and_then(|p| p.parse::<u64>().ok()).and_then(|p| {
                bucket.rule.limits.iter().find(|l| l.period.ms().get() == p).map(|l| l.period.label().to_owned())
            });
            match window {
                Some(label) => format!("{label}={value}"),
                None => format!("{name}={value:?}"),
            }
        }
    }
}

pub fn json(config: &Config, bucket: &Bucket, checks: &[Check], raw: &Raw, d: Option<&Decision>, now: u64) -> String {
    let pairs = |v: &Vec<(String, u64)>| -> Json {
        v.iter().map(|(k, e)| json!({ "id": k, "expires_ms": e, "expired": *e <= now })).collect()
    };
    let windows: Json = d.map_or(Json::Null, |d| {
        let names = response::policy_names(config, checks, d);
        names
            .iter()
            .zip(&d.windows)
            .map(|(n, w)| {
                json!({ "policy": n, "limit": w.limit, "overridden": w.overridden, "period_ms": w.period_ms,
                        "remaining": w.remaining, "reset_ms": w.reset_ms, "retry_ms": w.retry_ms })
            })
            .collect()
    });
    let next = d.map_or(Json::Null, |d| {
        let (what, headers, body) = verdict(config, checks, d);
        let headers: serde_json::Map<String, Json> = headers.into_iter().map(|(k, v)| (k, json!(v))).collect();
        json!({ "allowed": d.allowed, "summary": what, "delay_ms": d.delay_ms, "retry_ms": d.retry_after_ms(),
                "headers": headers, "body": (!body.is_empty()).then_some(body) })
    });
    let fields: serde_json::Map<String, Json> =
        raw.override_fields.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    let doc = json!({
        "rule": bucket.rule.name,
        "key": bucket.describe(),
        "store_key": bucket.window_key(),
        "window_ttl_ms": raw.window_ttl_ms,
        "now_ms": d.map_or(now, |d| d.now_ms),
        "windows": windows,
        "next_request": next,
        "leases": raw.leases.as_ref().map(pairs),
        "lease_key": bucket.lease_key(),
        "syncers": raw.syncers.as_ref().map(pairs),
        "override_key": bucket.override_key(),
        "override": fields,
    });
    format!("{}\n", serde_json::to_string_pretty(&doc).unwrap_or_default())
}
