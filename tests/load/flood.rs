//! Floods through a real Envoy and Valkey: 2,048 keep-alive clients, a new
//! user (so a store decision) on every request. A busy proxy is not an
//! outage: the store decides (at least 99 %), anything beyond the worker's
//! bounds is refused explicitly and counted, and nothing is admitted
//! unchecked by `failure_mode`. The healthy flood runs the seed's rule,
//! then the same open to per-key overrides (each decision also reads the
//! key's override, no denial cached); the killed store's rule is open to
//! them too.
//!
//! `TOLLGATE_FLOOD_SECONDS` sets each flood's length (default 5 s in
//! `make test`; `make flood` runs 20 s).

use crate::support;

use std::sync::Arc;
use std::time::Duration;
use support::load::{raise_fd_limit, Class, Load, Plan, Request, Tally};
use support::{wait_until, Envoy, EnvoyOptions, Valkey};

const CONNECTIONS: usize = 2_048;

fn seconds() -> u64 {
    std::env::var("TOLLGATE_FLOOD_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5)
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

/// The seed's rule; `overrides`: open to per-key overrides (every decision
/// also reads the key's override hash, and no denial is cached).
fn config(overrides: bool) -> String {
    format!(
        r#"{{
  "valkey": {{ "cluster": "tollgate_valkey", "timeout": "100ms" }},
  "failure_mode": "allow",
  "rules": [ {{ "name": "api", "key": [ {{ "header": "x-user-id" }} ], "overrides": {overrides}, "limits": [ {{ "limit": 20, "period": "60s" }}, {{ "limit": 5, "period": "3s" }} ] }} ]
}}"#
    )
}

/// Floods `envoy` with a new user per request for `seconds`.
fn flood(envoy: &Envoy, tag: &'static str, seconds: u64) -> Arc<Tally> {
    let request =
        Arc::new(move |t: usize, i: usize| Request::new("GET", "/", &[("x-user-id", &format!("{tag}{t}-{i}"))]));
    let flood = Load::start(envoy.port, Plan::flood(CONNECTIONS, 1_000_000), request);
    wait_until("the flood's duration", Duration::from_secs(seconds + 10), || {
        flood.started.elapsed() >= Duration::from_secs(seconds)
    });
    flood.stop().tally
}

#[test]
fn a_flood_on_a_healthy_store_is_decided_by_the_store_and_never_admitted_unchecked() {
    let _alone = support::alone();
    raise_fd_limit();
    let seconds = seconds();
    for (workers, overrides) in [(1, false), (2, false), (2, true)] {
        let valkey = Valkey::start();
        let plugin_config = config(overrides);
        let envoy = Envoy::start(&EnvoyOptions { plugin_config, valkey_port: valkey.port, concurrency: workers });
        let tally = flood(&envoy, "f", seconds);
        let total = tally.total();
        println!(
            "flood, {CONNECTIONS} connections, {workers} worker(s), overrides {overrides}, {seconds} s: {}; store.requests {}, overloaded {}, \
             failure_mode {}, resets {}",
            tally.summary(),
            stat(&envoy, "store.requests"),
            stat(&envoy, "overloaded"),
            stat(&envoy, "failure_mode.allowed"),
            stat(&envoy, "stream.resets.stalled") + stat(&envoy, "stream.resets.closed"),
        );
        assert!(total > CONNECTIONS as u64, "the flood ran: {total} answers");
        assert_eq!(tally.count(Class::FailureMode), 0, "nothing admitted unchecked");
        assert_eq!(stat(&envoy, "failure_mode.allowed"), 0);
        assert_eq!(tally.count(Class::Other), 0, "every request answered");
        assert_eq!(stat(&envoy, "overloaded"), tally.count(Class::Overloaded), "every refusal counted");
        assert!(tally.count(Class::Decided) * 100 >= total * 99, "at least 99 % decided by the store");
        support::wait_until("nothing left in flight", Duration::from_secs(10), || {
            stat(&envoy, "stream.in_flight") == 0 && envoy.stat("http.demo.downstream_rq_active") == Some(0)
        });
    }
}

const USERS: usize = 1000;
const LIMIT: u64 = 100;
const WORKERS: u32 = 2;

fn local_config() -> String {
    format!(
        r#"{{
  "valkey": {{ "cluster": "tollgate_valkey", "timeout": "100ms" }},
  "failure_mode": "local",
  "local_limiter": {{ "share": 0.1 }},
  "rules": [ {{ "name": "api", "key": [ {{ "header": "x-user-id" }} ], "overrides": true, "limits": [ {{ "limit": {LIMIT}, "period": "1h" }} ] }} ]
}}"#
    )
}

/// Requests the store decided so far: every outcome of rule `api` but the
/// local limiter's and the denial cache's (both also count as rule
/// outcomes), read in one admin call. Only a store reply moves it.
fn store_decided(envoy: &Envoy) -> u64 {
    let path =
        r"/stats?filter=^wasmcustom\.tollgate\.(rule\.api\.(allowed|denied)|local\.(allowed|denied)|cache\.hits)$";
    let body = support::admin_get(envoy.admin_port, path).map(|r| r.body_text()).unwrap_or_default();
    let value = |name: &str| -> u64 {
        let name = format!("wasmcustom.tollgate.{name}: ");
        body.lines().find_map(|l| l.strip_prefix(&name)?.trim().parse().ok()).unwrap_or(0)
    };
    let ruled = value("rule.api.allowed") + value("rule.api.denied");
    ruled.saturating_sub(value("local.allowed") + value("local.denied") + value("cache.hits"))
}

/// Valkey killed in the middle of a flood, with `failure_mode: local`: each
/// worker limits by itself meanwhile, every user stays within the limit plus
/// the documented bound (workers × proxies × ceil(share × limit) per period),
/// and once Valkey is back (from its AOF, so its counts survive) the store
/// decides requests again by itself, after a worker's reconnect backoff (at
/// most 800 ms): recovery is the first request the store decided after the
/// restart, not the first call sent to it. Its time is printed; ten
/// backoffs are a hang detector (a flood on a busy machine can stretch the
/// return past a second).
#[test]
fn a_store_killed_in_a_flood_is_stood_in_for_by_the_local_limiter() {
    let _alone = support::alone();
    raise_fd_limit();
    let mut valkey = Valkey::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let envoy =
        Envoy::start(&EnvoyOptions { plugin_config: local_config(), valkey_port: valkey.port, concurrency: WORKERS });
    let admitted: Arc<Vec<std::sync::atomic::AtomicU64>> = Arc::new((0..USERS).map(|_| Default::default()).collect());
    let user = |t: usize, i: usize| (t * 7 + i) % USERS;
    let counts = admitted.clone();
    // Denials, local or not, carry the rate-limit headers and the problem body.
    let bare_denials = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let bare = bare_denials.clone();
    let on_answer = Arc::new(move |t: usize, i: usize, r: Option<&support::Response>| {
        if r.is_some_and(|r| {
            r.status == 429
                && (r.header("ratelimit").is_none() || r.header("content-type") != Some("application/problem+json"))
        }) {
            bare.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if r.is_some_and(|r| r.status == 200 && r.header("ratelimit").is_some()) {
            counts[user(t, i)].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let request =
        Arc::new(move |t: usize, i: usize| Request::new("GET", "/", &[("x-user-id", &format!("u{}", user(t, i)))]));
    let flood = Load::start(envoy.port, Plan::flood(512, 1_000_000).on_answer(on_answer), request);
    let phase = |what: &str, until: Duration| {
        wait_until(what, until + Duration::from_secs(10), || flood.started.elapsed() >= until)
    };
    phase("the store deciding", Duration::from_secs(2));
    valkey.stop(); // SIGKILL, mid-flood
    phase("the local limiter deciding", Duration::from_secs(5));
    let local_allowed = stat(&envoy, "local.allowed");
    let store_requests = stat(&envoy, "store.requests");
    // The store decides nothing while it is down; the counters are read one
    // after another, so the baseline is the highest of a few readings.
    let decided_before = (0..5).map(|_| store_decided(&envoy)).max().unwrap();
    valkey.restart(); // from its AOF: the store's counts survive
    let restarted = std::time::Instant::now();
    let (mut sent_after, mut decided_after) = (None, None);
    let backoff = Duration::from_millis(800);
    wait_until("a request decided by the store", support::hang_bound(backoff), || {
        if sent_after.is_none() && stat(&envoy, "store.requests") > store_requests {
            sent_after = Some(restarted.elapsed());
        }
        if store_decided(&envoy) > decided_before {
            decided_after = Some(restarted.elapsed());
        }
        decided_after.is_some()
    });
    let back_after = decided_after.unwrap();
    let sent_after = sent_after.unwrap_or(back_after);
    phase("the store deciding again", Duration::from_secs(7));
    let tally = flood.stop().tally;

    let bound = LIMIT + u64::from(WORKERS) * LIMIT.div_ceil(10);
    let most = admitted.iter().map(|c| c.load(std::sync::atomic::Ordering::Relaxed)).max().unwrap();
    let stored: Vec<i64> = (0..USERS).map(|u| valkey.int(&["ZCARD", &format!("tollgate:{{api:u{u}}}:log")])).collect();
    println!(
        "Valkey killed under a 512-connection flood, failure_mode local (share 0.1), {WORKERS} workers: {}; \
         local admitted {local_allowed}, denied {}; first call sent to the store {sent_after:?} after the restart, \
         first request decided by the store {back_after:?} after it; \
         most admitted for one user {most} (limit {LIMIT}, bound {bound}); most stored {}",
        tally.summary(),
        stat(&envoy, "local.denied"),
        stored.iter().max().unwrap(),
    );
    assert!(local_allowed > 0 && stat(&envoy, "local.denied") > 0, "the local limiter decided, and denied");
    assert_eq!(stat(&envoy, "failure_mode.allowed"), 0, "nothing admitted unchecked");
    assert_eq!(tally.count(Class::Other), 0, "every request answered");
    assert_eq!(bare_denials.load(std::sync::atomic::Ordering::Relaxed), 0, "every 429 has headers and body");
    assert!(most <= bound, "a user got {most} admissions, beyond {bound}");
    assert!(stored.iter().all(|n| *n as u64 <= LIMIT), "the store itself never went over the limit");
    // What the local limiter admitted was flushed to the store once it was
    // back (docs/sync.md): no user admitted more than the store counts.
    let missing: Vec<usize> =
        (0..USERS).filter(|&u| (stored[u] as u64) < admitted[u].load(std::sync::atomic::Ordering::Relaxed)).collect();
    assert!(missing.is_empty(), "users whose admissions the store lacks: {missing:?}");
    assert!(back_after < support::hang_bound(backoff), "the store decided again {back_after:?} after the restart");
}
