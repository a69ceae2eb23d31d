//! Hot reloads of the plugin under load: 20 new configurations through LDS
//! while 8 clients keep sending, each request a new key. Every request is
//! answered and every one is decided by the store (`failure_mode: deny`:
//! nothing passes unchecked), each reload applies (its limit shows in the
//! `RateLimit-Policy` of new requests), and once the old listeners have
//! drained Valkey sees at most one connection per worker again, not one per
//! configuration that ever ran. The rule is open to per-key overrides
//! (every decision reads its key's override too). (A worker opens its stream on its first
//! request, so a worker that got none since the last reload has none.)

use crate::support;

use std::sync::Arc;
use std::time::Duration;
use support::load::{Load, Plan, Request};
use support::plugin::{plugin, rule};
use support::{wait_until, Envoy, EnvoyOptions, Valkey};

const WORKERS: u32 = 2;
const RELOADS: u64 = 20;

fn config(limit: u64) -> String {
    let api = rule("api").header("x-user-id").limit(limit, "1h").field(r#""overrides": true"#);
    plugin().timeout("1s").failure_mode("deny").with(api).json()
}

/// Clients connected to Valkey, by `CLIENT LIST` (minus the one asking).
fn clients(valkey: &Valkey) -> usize {
    match valkey.cmd(&["CLIENT", "LIST"]) {
        tollgate::resp::Value::Bulk(b) => String::from_utf8_lossy(&b).lines().count() - 1,
        other => panic!("{other:?}"),
    }
}

#[test]
fn twenty_hot_reloads_under_load_keep_deciding_and_one_connection_per_worker() {
    let _alone = support::alone();
    let valkey = Valkey::start();
    let envoy = Envoy::start_dynamic(&EnvoyOptions {
        plugin_config: config(1_000),
        valkey_port: valkey.port,
        concurrency: WORKERS,
    });
    let request = Arc::new(|t: usize, i: usize| Request::new("GET", "/", &[("x-user-id", &format!("r-{t}-{i}"))]));
    let load = Load::start(envoy.port, Plan::keep_alive(8, 1_000_000), request);
    wait_until("the load", Duration::from_secs(10), || load.answered() >= 200);
    for n in 1..=RELOADS {
        let limit = 1_000 + n;
        envoy.reload(&config(limit));
        let policy = format!("q={limit};");
        wait_until("the reload to apply", Duration::from_secs(20), || {
            envoy
                .request("GET", "/", &[("x-user-id", &format!("probe-{n}"))])
                .header("ratelimit-policy")
                .is_some_and(|p| p.contains(&policy))
        });
    }
    let report = load.stop();
    let samples = report.samples.len();
    let decided = report.decided();
    let unchecked = report.samples.iter().filter(|s| s.status() == Some(200) && !s.decided()).count();
    let statuses: Vec<Option<u16>> = report.samples.iter().map(|s| s.status()).collect();
    let refused = statuses.iter().filter(|s| **s != Some(200)).count();
    let connections_now = clients(&valkey);
    // The old listeners' filter chains drain; their streams close with them.
    let drained = std::time::Instant::now();
    let streams = || envoy.stat("cluster.tollgate_valkey.http2.streams_active");
    wait_until("at most one Valkey connection per worker", Duration::from_secs(30), || {
        let n = clients(&valkey);
        n <= WORKERS as usize && streams() == Some(n as u64)
    });
    let settled_after = drained.elapsed();
    let (left, closed) = (clients(&valkey), envoy.stat("cluster.tollgate_valkey.http2.tx_reset").unwrap_or(0));
    println!(
        "{RELOADS} hot reloads under load, {WORKERS} workers: {samples} requests, {decided} decided by the store, \
         {unchecked} admitted unchecked, {refused} not 200; Valkey connections right after {connections_now}, \
         {left} (at most one per worker) {settled_after:?} later; {closed} streams closed by Envoy"
    );
    assert!(left >= 1, "the new configuration's stream stays open");
    assert!(
        closed as usize >= connections_now.saturating_sub(left),
        "the retired streams were closed by Envoy, not by Valkey"
    );
    assert!(report.errors().is_empty(), "every request answered: {:?}", report.errors().first());
    assert_eq!(unchecked, 0, "nothing passed unchecked");
    assert_eq!(decided, samples, "every request decided by the store");
}
