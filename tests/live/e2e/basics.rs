//! End to end: a real Envoy running the built `tollgate.wasm` against a real
//! Valkey, through the internal-listener tunnel of `envoy/envoy.yaml`.

use crate::support;

use std::time::{Duration, Instant};
use support::plugin::{plugin, rule, seed_rule, Plugin};
use support::{remaining, Envoy, EnvoyOptions, Response, Valkey};

const NOW: &str = "x-tollgate-test-now-ms";
/// The seed plugin's `valkey.timeout`.
const TIMEOUT: Duration = Duration::from_millis(100);
/// A worker's longest reconnect backoff (docs/reliability.md).
const BACKOFF: Duration = Duration::from_millis(800);

/// The seed's rule, with the test clock header enabled.
fn seed_config(failure_mode: &str) -> String {
    seed_plugin(failure_mode).with(seed_rule()).json()
}

/// The seed's rule with its second window (5 per 3s) replaced by `limit`
/// per `period`.
fn seed_config_short_window(limit: u64, period: &str) -> String {
    let seed = rule("auth.createToken").path_prefix("/auth/token").methods(&["POST"]).header("x-user-id");
    seed_plugin("allow").with(seed.limit(20, "60s").limit(limit, period)).json()
}

fn seed_plugin(failure_mode: &str) -> Plugin {
    plugin().timeout("100ms").valkey(r#""key_prefix": "tollgate""#).failure_mode(failure_mode).now_header(NOW)
}

fn start(valkey: &Valkey, config: String, concurrency: u32) -> Envoy {
    Envoy::start(&EnvoyOptions { plugin_config: config, valkey_port: valkey.port, concurrency })
}

fn token(envoy: &Envoy, user: &str, now_ms: u64) -> Response {
    let now = now_ms.to_string();
    envoy.request("POST", "/auth/token", &[("x-user-id", user), (NOW, &now)])
}

const KEY_ALICE: &str = "tollgate:{auth.createToken:alice}:log";

/// The seed article's table, then the minute: 20/60s and 5/3s for one user.
#[test]
fn seed_table_through_envoy() {
    let valkey = Valkey::start();
    let envoy = start(&valkey, seed_config("allow"), 1);
    let t0 = 1_800_000_000_000u64;

    for call in 1..=8u64 {
        let resp = token(&envoy, "alice", t0);
        let r = remaining(&resp);
        assert_eq!(r[0].0, "auth.createToken/60s");
        assert_eq!(r[1].0, "auth.createToken/3s");
        assert_eq!(
            resp.header("ratelimit-policy"),
            Some(r#""auth.createToken/60s";q=20;w=60, "auth.createToken/3s";q=5;w=3"#)
        );
        if call <= 5 {
            assert_eq!(resp.status, 200, "call {call}: {resp:?}");
            assert_eq!(resp.body_text(), "hello from the upstream\n");
            assert_eq!((r[0].1, r[1].1), (20 - call, 5 - call), "call {call}");
        } else {
            assert_eq!(resp.status, 429, "call {call}");
            assert_eq!((r[0].1, r[1].1), (15, 0), "call {call}");
            assert_eq!(resp.header("retry-after"), Some("3"));
            assert_eq!(resp.header("content-type"), Some("application/problem+json"));
            let body: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
            assert_eq!(body["type"], "https://iana.org/assignments/http-problem-types#quota-exceeded");
            assert_eq!(body["violated-policies"], serde_json::json!(["auth.createToken/3s"]));
        }
    }
    assert_eq!(valkey.int(&["ZCARD", KEY_ALICE]), 5, "denied calls consumed nothing");

    // 3 s later (the entries at t0 leave the 3s window at t0 + 3000) calls pass again.
    let resp = token(&envoy, "alice", t0 + 3_000);
    assert_eq!(resp.status, 200);
    assert_eq!(remaining(&resp)[0].1, 14);

    // Over the minute: bursts of 8 calls every 3 s; exactly 20 pass in total.
    let mut passed = 6; // 5 at t0, 1 at t0 + 3000
    let mut denied_by_minute = 0;
    for burst in 1..20u64 {
        let at = t0 + 3_000 * burst + 1;
        for _ in 0..8 {
            let resp = token(&envoy, "alice", at);
            match resp.status {
                200 => passed += 1,
                429 => {
                    let body: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
                    if body["violated-policies"][0] == "auth.createToken/60s" {
                        denied_by_minute += 1;
                    }
                }
                other => panic!("unexpected status {other}"),
            }
        }
    }
    assert_eq!(passed, 20, "exactly 20 calls pass within the minute");
    assert!(denied_by_minute > 0, "once 20 passed, the 60s window denies");
    assert_eq!(valkey.int(&["ZCARD", KEY_ALICE]), 20, "rejections consumed nothing");

    // A minute after the first calls, their five entries have left.
    let resp = token(&envoy, "alice", t0 + 60_000);
    assert_eq!(resp.status, 200);
}

#[test]
fn users_are_independent_and_unmatched_requests_pass_untouched() {
    let valkey = Valkey::start();
    let envoy = start(&valkey, seed_config("allow"), 1);
    let t0 = 1_800_000_000_000u64;
    for _ in 0..5 {
        assert_eq!(token(&envoy, "alice", t0).status, 200);
    }
    assert_eq!(token(&envoy, "alice", t0).status, 429);
    let bob = token(&envoy, "bob", t0);
    assert_eq!(bob.status, 200, "bob has his own bucket");
    assert_eq!(remaining(&bob)[1].1, 4);

    for (method, path, headers) in [
        ("GET", "/auth/token", vec![("x-user-id", "alice")]),
        ("POST", "/other", vec![("x-user-id", "alice")]),
        ("POST", "/auth/token", vec![]),
    ] {
        let resp = envoy.request(method, path, &headers);
        assert_eq!(resp.status, 200, "{method} {path} {headers:?}");
        assert_eq!(resp.header("ratelimit"), None, "untouched: no rate-limit headers");
    }
    assert_eq!(valkey.int(&["DBSIZE"]), 2, "only alice's and bob's buckets exist");
}

/// Two Envoys with two workers each, 200 concurrent requests for one key:
/// exactly the limit is admitted.
#[test]
fn concurrent_requests_through_two_envoys_admit_exactly_the_limit() {
    let valkey = Valkey::start();
    let config = plugin().timeout("2s").failure_mode("deny").rule("burst", Some("x-user-id"), &[(50, "60s")]).json();
    let envoys = [start(&valkey, config.clone(), 2), start(&valkey, config, 2)];
    let ports: Vec<u16> = envoys.iter().map(|e| e.port).collect();
    let handles: Vec<_> = (0..200)
        .map(|i| {
            let port = ports[i % 2];
            std::thread::spawn(move || support::http(port, "GET", "/", &[("x-user-id", "shared")]).unwrap().status)
        })
        .collect();
    let statuses: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    let limited = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!((ok, limited), (50, 150), "statuses: {statuses:?}");
    assert_eq!(valkey.int(&["ZCARD", "tollgate:{burst:shared}:log"]), 50);
}

/// The limiter's code flushed between requests (`FUNCTION FLUSH` under
/// `invoke: fcall`, `SCRIPT FLUSH` under `evalsha`): the worker loads it
/// again (`FUNCTION LOAD`, or `EVAL`), and no request fails.
#[test]
fn code_flushed_between_requests_fails_nothing() {
    for (invoke, flush) in [("fcall", "FUNCTION"), ("evalsha", "SCRIPT")] {
        let valkey = Valkey::start();
        let config = seed_plugin("deny").valkey(&format!(r#""invoke": "{invoke}""#)).with(seed_rule()).json();
        let envoy = start(&valkey, config, 1);
        let t0 = 1_800_000_000_000u64;
        for call in 1..=5u64 {
            valkey.cmd(&[flush, "FLUSH"]);
            let resp = token(&envoy, "alice", t0 + call);
            assert_eq!(resp.status, 200, "{invoke}: call {call}");
            assert_eq!(remaining(&resp)[1].1, 5 - call);
        }
        valkey.cmd(&[flush, "FLUSH"]);
        assert_eq!(token(&envoy, "alice", t0 + 6).status, 429);
        assert_eq!(envoy.stat("wasmcustom.tollgate.store.errors"), Some(0), "{invoke}");
        let calls =
            valkey.info_stat("commandstats", if invoke == "fcall" { "cmdstat_fcall" } else { "cmdstat_evalsha" });
        assert!(calls.as_ref().is_some_and(|c| c.contains("calls=")), "{invoke}: decided by {invoke}: {calls:?}");
    }
}

fn timed(f: impl FnOnce() -> Response) -> (Response, Duration) {
    let start = Instant::now();
    let r = f();
    (r, start.elapsed())
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

/// Valkey stopped: `allow` passes at once, as a failure to reach the store,
/// never by waiting for the timeout; limiting resumes when Valkey is back,
/// without restarting Envoy.
#[test]
fn store_down_with_allow_passes_and_recovers() {
    let mut valkey = Valkey::start();
    let envoy = start(&valkey, seed_config("allow"), 1);
    let t0 = 1_800_000_000_000u64;
    assert_eq!(token(&envoy, "alice", t0).status, 200);
    valkey.stop();
    let mut slowest = Duration::ZERO;
    for _ in 0..10 {
        let (resp, took) = timed(|| token(&envoy, "alice", t0));
        assert_eq!(resp.status, 200);
        assert_eq!(resp.header("ratelimit"), None);
        slowest = slowest.max(took);
    }
    println!("store down (allow): 10 passed undecided, the slowest in {slowest:?}");
    // Why each passed: the store could not be reached (the stream closed,
    // then connections refused), none by waiting out the timeout.
    assert_eq!(stat(&envoy, "failure_mode.allowed"), 10);
    assert_eq!(stat(&envoy, "store.errors"), 10);
    assert_eq!(stat(&envoy, "store.errors.timeout"), 0, "nothing waited for the timeout");
    assert!(slowest < support::hang_bound(TIMEOUT), "a request hung: {slowest:?}");
    valkey.restart();
    // The worker reconnects after its backoff (at most 800 ms); meanwhile
    // failure_mode still applies. The first decided request is the first of
    // five on the new (empty) state. (The time is printed; the deadline only
    // detects a worker that never reconnects.)
    let restarted = Instant::now();
    support::wait_until("limiting to resume", support::hang_bound(BACKOFF), || {
        token(&envoy, "alice", t0).header("ratelimit").is_some()
    });
    println!("limiting resumed {:?} after the restart", restarted.elapsed());
    for _ in 0..4 {
        assert_eq!(token(&envoy, "alice", t0).status, 200);
    }
    assert_eq!(token(&envoy, "alice", t0).status, 429, "limiting resumed on the new state");
}

#[test]
fn store_down_with_deny_answers_503_and_recovers() {
    let mut valkey = Valkey::start();
    let envoy = start(&valkey, seed_config("deny"), 1);
    let t0 = 1_800_000_000_000u64;
    valkey.stop();
    let (resp, took) = timed(|| token(&envoy, "alice", t0));
    assert_eq!(resp.status, 503);
    assert_eq!(resp.header("retry-after"), Some("1"));
    println!("store down (deny): 503 in {took:?}");
    // Refused, not timed out: the request never waited for the store.
    assert_eq!(stat(&envoy, "failure_mode.denied"), 1);
    assert_eq!((stat(&envoy, "store.errors"), stat(&envoy, "store.errors.timeout")), (1, 0));
    assert!(took < support::hang_bound(TIMEOUT), "the request hung: {took:?}");
    // Requests no rule matches never need the store.
    assert_eq!(envoy.request("GET", "/other", &[]).status, 200);
    valkey.restart();
    // After the reconnect backoff (at most 800 ms) the store decides again.
    support::wait_until("limiting to resume", support::hang_bound(BACKOFF), || {
        token(&envoy, "alice", t0).status == 200
    });
    assert!(token(&envoy, "alice", t0).header("ratelimit").is_some());
}

/// A store that accepts connections but never answers (a blackholed port):
/// each request is bounded by `valkey.timeout`, then `failure_mode` applies.
/// Asserted as: not answered before the timeout (a lower bound only a timer
/// firing early can break), answered because of it (`store.errors.timeout`,
/// while the blackhole still holds the connection, so nothing else could
/// end the wait), and not hung (a backstop ten times the timeout); the time
/// taken is printed.
#[test]
fn store_not_answering_is_bounded_by_the_timeout() {
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = blackhole.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        // Accept and hold connections, reading nothing, until the test ends.
        let mut conns = Vec::new();
        for conn in blackhole.incoming().take(3) {
            conns.push(conn);
        }
        conns.len()
    });
    let envoy = Envoy::start(&EnvoyOptions { plugin_config: seed_config("allow"), valkey_port: port, concurrency: 1 });
    let (resp, took) = timed(|| token(&envoy, "alice", 1_800_000_000_000));
    assert_eq!(resp.status, 200, "allow: the request passes");
    println!("blackholed store (allow): answered in {took:?} (timeout {TIMEOUT:?})");
    assert!(took >= TIMEOUT - Duration::from_millis(5), "answered before the timeout: {took:?}");
    assert_eq!((stat(&envoy, "store.errors"), stat(&envoy, "store.errors.timeout")), (1, 1), "ended by the timeout");
    assert!(took < support::hang_bound(TIMEOUT), "the request hung: {took:?}");

    let deny = Envoy::start(&EnvoyOptions { plugin_config: seed_config("deny"), valkey_port: port, concurrency: 1 });
    let (resp, took) = timed(|| token(&deny, "alice", 1_800_000_000_000));
    assert_eq!(resp.status, 503, "deny: 503");
    println!("blackholed store (deny): answered in {took:?} (timeout {TIMEOUT:?})");
    assert!(took >= TIMEOUT - Duration::from_millis(5), "answered before the timeout: {took:?}");
    assert_eq!((stat(&deny, "store.errors"), stat(&deny, "store.errors.timeout")), (1, 1), "ended by the timeout");
    assert!(took < support::hang_bound(TIMEOUT), "the request hung: {took:?}");
    // Unblock the accept loop so the thread ends.
    let _ = std::net::TcpStream::connect(("127.0.0.1", port));
    assert!(held.join().unwrap() >= 2, "both Envoys reached the blackhole");
}

/// A static bootstrap with an invalid plugin configuration: Envoy logs the
/// path-named error and refuses the configuration (as it refuses any invalid
/// static configuration), so the filter never runs with it.
#[test]
fn invalid_static_config_is_refused_with_the_field_path() {
    let valkey = Valkey::start();
    let bad = seed_config_short_window(0, "3s");
    let outcome = Envoy::try_start(&EnvoyOptions { plugin_config: bad, valkey_port: valkey.port, concurrency: 1 });
    let Err(log) = outcome else { panic!("Envoy accepted an invalid plugin configuration") };
    assert!(
        log.contains("tollgate: invalid plugin configuration: rules[0].limits[1].limit: must be > 0"),
        "log:\n{log}"
    );
}

/// Through LDS, an invalid configuration is rejected while Envoy keeps running
/// and keeps limiting with the previous one; a valid one applies live.
#[test]
fn invalid_dynamic_config_is_rejected_and_the_previous_one_keeps_working() {
    let valkey = Valkey::start();
    let mut envoy = Envoy::start_dynamic(&EnvoyOptions {
        plugin_config: seed_config("allow"),
        valkey_port: valkey.port,
        concurrency: 2,
    });
    let t0 = 1_800_000_000_000u64;
    for _ in 0..5 {
        assert_eq!(token(&envoy, "alice", t0).status, 200);
    }
    assert_eq!(token(&envoy, "alice", t0).status, 429);

    let rejected_before = envoy.stat("listener_manager.lds.update_rejected").unwrap_or(0);
    envoy.reload(&seed_config_short_window(5, "0s"));
    support::wait_until("the LDS update to be rejected", Duration::from_secs(20), || {
        envoy.stat("listener_manager.lds.update_rejected").unwrap_or(0) > rejected_before
    });
    assert!(envoy.is_running());
    assert!(envoy.stat("wasmcustom.tollgate.config.errors").unwrap_or(0) >= 1, "the refusal is counted");
    let log = envoy.log_text();
    assert!(
        log.contains("tollgate: invalid plugin configuration: rules[0].limits[1].period: must be > 0"),
        "log:\n{log}"
    );
    let resp = token(&envoy, "alice", t0);
    assert_eq!(resp.status, 429, "the previous configuration still limits");
    assert_eq!(remaining(&token(&envoy, "bob", t0))[1].1, 4);

    // A valid new configuration (10 per 3s) applies to new requests, no restart.
    envoy.reload(&seed_config_short_window(10, "3s"));
    support::wait_until("the new limits to apply", Duration::from_secs(20), || {
        token(&envoy, "carol", t0).header("ratelimit-policy").is_some_and(|p| p.contains("q=10;w=3"))
    });
    let resp = token(&envoy, "alice", t0);
    assert_eq!(resp.status, 200, "alice has room under the new 10/3s window");
    assert_eq!(remaining(&resp)[1].1, 4, "the same bucket: 5 used + 1 now, of 10");
}

/// The harness itself: one process never gets a port twice (an Envoy whose
/// listener and upstream shared one refused its configuration in CI, at
/// about one start in 4,000), and placeholders are replaced in one pass, so a
/// chosen port equal to a later placeholder is not rewritten again.
#[test]
fn harness_ports_are_distinct_and_replaced_in_one_pass() {
    let ports: Vec<u16> = (0..2_000).map(|_| support::free_port()).collect();
    let distinct: std::collections::HashSet<u16> = ports.iter().copied().collect();
    assert_eq!(distinct.len(), ports.len(), "free_port handed out a port twice");
    let text = "a: { port_value: 26379 }\nb: { port_value: 26380 }\nc: { port_value: 263800 }\n";
    let out = support::replace_ports(text, &[(26379, 26380), (26380, 31000)]);
    assert_eq!(out, "a: { port_value: 26380 }\nb: { port_value: 31000 }\nc: { port_value: 263800 }\n");
}
