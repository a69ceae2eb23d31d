//! Concurrency limits (`rules[].concurrency`, issue 41) through real Envoys
//! and a real Valkey, against the slow upstream of `tests/support/slow.rs`
//! (it counts the requests in flight at it): at most N of a rule's requests
//! in flight per key across two Envoys of two workers, every other refused
//! at once; a killed Envoy's leases expire within their TTL; an event
//! stream longer than its lease TTL keeps its lease (renewed) and frees it
//! at its end; a client that leaves frees its lease; a rule counted on the
//! response takes its leases too. The lease set is read
//! from Valkey (`<prefix>:{<rule>:<key>}:lease`, score = expiry ms).
//!
//! Timing is asserted as order (answered before the held ones were
//! released, gone before the last expiry seen) and lower bounds (admitted
//! no earlier than the expiry); an upper bound only as a hang detector.

mod counted;
mod killed;
mod many;
mod streams;

use crate::support;

use std::time::{SystemTime, UNIX_EPOCH};
use support::plugin::{plugin, rule};
use support::slow::{call, Slow};
use support::upstream::demo_upstream;
use support::{remaining, try_command, Envoy, EnvoyOptions, Response, Valkey};
use tollgate::resp::Value;

/// The rule's name and the key (`x-api-key`) every test uses.
const RULE: &str = "conc";
const API_KEY: &str = "k1";

/// The lease set of `RULE` for `API_KEY`.
fn lease_key() -> String {
    format!("tollgate:{{{RULE}:{API_KEY}}}:lease")
}

/// The sliding log of `RULE`'s window for `API_KEY`.
fn log_key() -> String {
    format!("tollgate:{{{RULE}:{API_KEY}}}:log")
}

/// One rule under `/c/`, keyed on `x-api-key`, with a generous window
/// (100,000 per minute) and `concurrency` (its JSON value); a store call may
/// take 2 s, and a failed one denies (a failure never admits past the limit).
fn config(concurrency: &str) -> String {
    let conc = rule(RULE).path_prefix("/c/").header("x-api-key").limit(100_000, "1m");
    plugin().timeout("2s").failure_mode("deny").with(conc.field(&format!(r#""concurrency": {concurrency}"#))).json()
}

/// An Envoy of two workers with `config`, its `demo_upstream` the slow
/// upstream, without a route timeout (a request is held as long as a test says).
fn start(valkey: &Valkey, slow: &Slow, config: &str) -> Envoy {
    let options = EnvoyOptions { plugin_config: config.to_string(), valkey_port: valkey.port, concurrency: 2 };
    let port = slow.port;
    let edit = |text: String| {
        demo_upstream(text, port)
            .replace("route: { cluster: demo_upstream }", "route: { cluster: demo_upstream, timeout: 0s }")
    };
    Envoy::try_start_edited(&options, &edit).unwrap()
}

/// `GET /c/<id>` for `API_KEY` through `port`, named `id` at the upstream,
/// with more `headers` (`x-slow-*`): the whole response.
fn get(port: u16, id: &str, headers: &[(&str, &str)]) -> std::io::Result<Response> {
    call(port, "GET", &format!("/c/{id}"), &with_key(id, headers), b"")?.finish()
}

/// `headers` with the key and the upstream's name for the request.
fn with_key<'a>(id: &'a str, headers: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all = vec![("x-api-key", API_KEY), ("x-slow-id", id)];
    all.extend_from_slice(headers);
    all
}

/// The lease set: `(lease id, expiry ms)`, by expiry.
fn leases(valkey: &Valkey) -> Vec<(String, u64)> {
    let reply = valkey.cmd(&["ZRANGE", &lease_key(), "0", "-1", "WITHSCORES"]);
    scored(&reply)
}

fn scored(reply: &Value) -> Vec<(String, u64)> {
    let items = reply.as_array().unwrap_or_else(|| panic!("ZRANGE gave {reply:?}"));
    let text = |v: &Value| String::from_utf8_lossy(v.as_bytes().unwrap()).into_owned();
    items.chunks(2).map(|p| (text(&p[0]), text(&p[1]).parse::<f64>().unwrap() as u64)).collect()
}

/// ZCARD of the lease set, from a thread that holds only the port.
fn zcard(valkey_port: u16) -> i64 {
    match try_command(valkey_port, &[b"ZCARD", lease_key().as_bytes()]) {
        Ok(Value::Integer(n)) => n,
        other => panic!("ZCARD gave {other:?}"),
    }
}

/// Leases live now (expiry after Valkey's clock).
fn live(valkey: &Valkey) -> i64 {
    let now = valkey.time_ms();
    valkey.int(&["ZCOUNT", &lease_key(), &format!("({now}"), "+inf"])
}

/// `tollgate.lease.<name>` summed over `envoys`.
fn lease_stat(envoys: &[&Envoy], name: &str) -> u64 {
    envoys.iter().map(|e| e.stat(&format!("wasmcustom.tollgate.lease.{name}")).unwrap_or(0)).sum()
}

/// ms since the Unix epoch (the clock of Valkey's `TIME` on this machine).
fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A refusal by the concurrency limit: 429, its `RateLimit-Policy` naming
/// the concurrency item (`qu="concurrent-requests"`), and an item of
/// `RateLimit` with nothing left (the window is far from full, so only the
/// lease set can be at 0).
fn assert_refused_by_concurrency(resp: &Response, what: &str) {
    assert_eq!(resp.status, 429, "{what}: {resp:?}");
    let policy = resp.header("ratelimit-policy").unwrap_or_default();
    assert!(policy.contains(r#"qu="concurrent-requests""#), "{what}: RateLimit-Policy {policy:?}");
    let left = remaining(resp);
    assert!(left.iter().any(|(_, r)| *r == 0), "{what}: no item at 0 in RateLimit {left:?}");
}
