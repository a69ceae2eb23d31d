//! The decision in Envoy's access log: `envoy/envoy.yaml`'s access log
//! (written to a file here instead of stdout) names, per request, who
//! decided (the store, the denial cache, the local limiter,
//! `failure_mode`, overload), what the request got, its rule, the window
//! that denied it, what remains and the store's round trip, from the filter
//! state tollgate sets; its 429 and 503 carry response code details naming
//! tollgate and the reason; a per-key override that applied is named. The
//! decision is set when `response.filter_state` asks for it; by default it
//! is not.

use crate::support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use support::load::{self, Plan, Request};
use support::plugin::{plugin, rule, Plugin};
use support::{free_port, wait_until, Envoy, EnvoyOptions, Valkey};

/// An Envoy running `envoy/envoy.yaml` with `config`, its access log in a
/// file of its own.
fn envoy(config: &Plugin, valkey_port: u16, concurrency: u32) -> (Envoy, PathBuf) {
    let log = std::env::temp_dir().join(format!("tollgate-access-{}-{}.log", std::process::id(), free_port()));
    let options = EnvoyOptions { plugin_config: config.json(), valkey_port, concurrency };
    let path = log.display().to_string();
    let envoy = Envoy::try_start_edited(&options, &|text| {
        assert!(text.contains("path: /dev/stdout"), "envoy.yaml logs to stdout");
        text.replace("path: /dev/stdout", &format!("path: {path}"))
    })
    .unwrap();
    (envoy, log)
}

/// Polls the access log (Envoy flushes it every 10 s) until a line of a
/// user whose name starts with `user` contains every one of `parts`;
/// returns it.
fn line(log: &PathBuf, user: &str, parts: &[&str]) -> String {
    let mut found = String::new();
    wait_until(&format!("an access log line of {user} with {parts:?}"), Duration::from_secs(20), || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let hit = text.lines().find(|l| l.contains(&format!(" user={user}")) && parts.iter().all(|p| l.contains(p)));
        found = hit.unwrap_or_default().to_owned();
        hit.is_some()
    });
    eprintln!("{found}");
    found
}

/// A rule of 2 per 10 s, without the decision's filter state.
fn bare() -> Plugin {
    plugin().with(rule("api.calls").header("x-user-id").limit(2, "10s"))
}

/// [`bare`], its decisions set for the access log.
fn limited() -> Plugin {
    bare().top(r#""response": { "filter_state": true }"#)
}

#[test]
fn store_cache_and_local_limiter_decisions_are_logged() {
    let mut valkey = Valkey::start();
    let (envoy, log) = envoy(&limited().failure_mode("local"), valkey.port, 1);
    let get = |user: &str| envoy.request("GET", "/", &[("x-user-id", user)]).status;
    assert_eq!([get("alice"), get("alice"), get("alice"), get("alice")], [200, 200, 429, 429]);
    valkey.stop();
    assert_eq!(get("bob"), 200, "the local limiter admits bob");

    let allowed = line(&log, "alice", &[" 200 via_upstream ", "decider=store answer=allowed"]);
    assert!(allowed.contains("rules=api.calls denied_by=- remaining=api.calls/10s:"), "{allowed}");
    let store_ms = allowed.rsplit("store_ms=").next().unwrap().trim();
    assert!(store_ms.parse::<u64>().is_ok(), "the store's round trip in ms: {allowed}");
    line(
        &log,
        "alice",
        &[
            " 429 tollgate_quota_exceeded ",
            "decider=store answer=denied rules=api.calls denied_by=api.calls/10s remaining=api.calls/10s:0 store_ms=",
        ],
    );
    let cached = line(&log, "alice", &[" 429 tollgate_quota_exceeded ", "decider=cache answer=denied"]);
    assert!(cached.ends_with("denied_by=api.calls/10s remaining=api.calls/10s:0 store_ms=-"), "{cached}");
    line(&log, "bob", &[" 200 via_upstream ", "decider=local answer=allowed rules=api.calls", "store_ms=-"]);
}

#[test]
fn failure_mode_decisions_are_logged() {
    let mut valkey = Valkey::start();
    let port = valkey.port;
    valkey.stop();
    let (allow, allow_log) = envoy(&limited().failure_mode("allow"), port, 1);
    let (deny, deny_log) = envoy(&limited().failure_mode("deny"), port, 1);
    assert_eq!(allow.request("GET", "/", &[("x-user-id", "carol")]).status, 200);
    let refused = deny.request("GET", "/", &[("x-user-id", "dave")]);
    assert_eq!(refused.status, 503);
    let let_through = "decider=failure_mode answer=unchecked rules=api.calls denied_by=- remaining=- store_ms=-";
    line(&allow_log, "carol", &[" 200 via_upstream ", let_through]);
    let refusal = "decider=failure_mode answer=refused rules=api.calls denied_by=- remaining=- store_ms=-";
    line(&deny_log, "dave", &[" 503 tollgate_store_unavailable ", refusal]);
}

#[test]
fn overload_refusals_are_logged() {
    let valkey = Valkey::start();
    // One decision in flight per worker and one waiting: eight clients
    // overload it.
    let config = limited().valkey(r#""max_in_flight": 2"#).valkey(r#""max_queue": 1"#);
    let (envoy, log) = envoy(&config, valkey.port, 1);
    wait_until("the store stream", Duration::from_secs(10), || {
        envoy.request("GET", "/", &[("x-user-id", "warm-up")]);
        envoy.stat("wasmcustom.tollgate.stream.opens") == Some(1)
    });
    let request = |t: usize, i: usize| Request::new("GET", "/", &[("x-user-id", &format!("load-{t}-{i}"))]);
    let report = load::run(envoy.port, Plan::keep_alive(8, 40), Arc::new(request));
    assert!(report.count(503) > 0, "{}", report.summary("overload"));
    let refused = line(&log, "load-", &[" 503 tollgate_overloaded ", "decider=overload answer=refused"]);
    assert!(refused.ends_with("rules=api.calls denied_by=- remaining=- store_ms=-"), "{refused}");
}

/// By default (`response.filter_state` off) the filter sets no decision
/// (the log shows `-`), and the answers and response code details are
/// unchanged.
#[test]
fn by_default_the_log_shows_no_decision() {
    let valkey = Valkey::start();
    let (envoy, log) = envoy(&bare(), valkey.port, 1);
    let get = |user: &str| envoy.request("GET", "/", &[("x-user-id", user)]).status;
    assert_eq!([get("erin"), get("erin"), get("erin")], [200, 200, 429]);
    let allowed = line(&log, "erin", &[" 200 via_upstream "]);
    assert!(allowed.ends_with("tollgate: -"), "no decision: {allowed}");
    let denied = line(&log, "erin", &[" 429 tollgate_quota_exceeded "]);
    assert!(denied.ends_with("tollgate: -"), "no decision: {denied}");
}

/// A key whose override applied is named in its record (`override=<rule>`),
/// its 429's problem body marks the window `"override":true` with the
/// limit in force; a key without one logs as before.
#[test]
fn an_override_is_named_in_the_log() {
    let valkey = Valkey::start();
    let config = plugin()
        .with(rule("api.calls").header("x-user-id").limit(2, "10s").field(r#""overrides": true"#))
        .top(r#""response": { "filter_state": true }"#);
    let (envoy, log) = envoy(&config, valkey.port, 1);
    valkey.cmd(&["HSET", "tollgate:{api.calls:carol}:ovr", "w10000", "4"]);
    let get = |user: &str| envoy.request("GET", "/", &[("x-user-id", user)]);
    let statuses: Vec<u16> = (0..5).map(|_| get("carol").status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 429], "4 per 10 s for carol");
    let refused = get("carol");
    let body = String::from_utf8_lossy(&refused.body).into_owned();
    assert!(body.contains(r#""limit":4"#) && body.contains(r#""override":true"#), "{body}");
    assert_eq!(get("dave").status, 200);
    let carol = line(&log, "carol", &[" 200 via_upstream ", "decider=store answer=allowed"]);
    assert!(carol.ends_with(" override=api.calls"), "{carol}");
    line(&log, "carol", &[" 429 tollgate_quota_exceeded ", "denied_by=api.calls/10s", " override=api.calls"]);
    let dave = line(&log, "dave", &[" 200 via_upstream "]);
    assert!(!dave.contains("override="), "{dave}");
}
