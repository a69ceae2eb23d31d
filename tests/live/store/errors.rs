//! Error replies from a real Valkey, through Envoy: `-READONLY` (a replica),
//! `maxmemory` reached under `noeviction` (`-OOM` for the function, not for
//! the script), `-WRONGTYPE` (a bucket key holding a string) and the code
//! flushed. Each is counted under its own
//! `store.errors.<kind>` stat, follows `failure_mode`, and is logged once per
//! interval per worker, not once per request.

use crate::support;

use std::sync::Arc;
use std::time::Duration;
use support::load::{self, Plan, Report, Request};
use support::plugin::plugin;
use support::{Envoy, EnvoyOptions, Valkey};
use tollgate::resp::Value;

fn config(failure_mode: &str) -> String {
    plugin().timeout("500ms").failure_mode(failure_mode).rule("api", Some("x-user-id"), &[(5, "60s")]).json()
}

/// One worker, so "once per interval per worker" means exactly one line.
fn envoy(valkey_port: u16, failure_mode: &str) -> Envoy {
    Envoy::start(&EnvoyOptions { plugin_config: config(failure_mode), valkey_port, concurrency: 1 })
}

fn as_user(user: &'static str) -> Arc<load::RequestFn> {
    Arc::new(move |_, _| Request::new("GET", "/", &[("x-user-id", user)]))
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

/// 20 requests from 2 threads, none decided.
fn twenty_failing(envoy: &Envoy, user: &'static str, failure_mode: &str) -> Report {
    let report = load::run(envoy.port, Plan::closed(2, 10), as_user(user));
    println!("{}", report.summary(user));
    assert_eq!(report.decided(), 0);
    for s in &report.samples {
        if failure_mode == "allow" {
            assert_eq!(s.status(), Some(200), "{s:?}");
        } else {
            assert_eq!((s.status(), s.header("retry-after")), (Some(503), Some("1")), "{s:?}");
        }
    }
    report
}

/// The kind's stat and the total both count every failed request, no other
/// kind is counted, and the log has exactly one line for the 20 failures.
fn assert_counted_and_logged_once(envoy: &Envoy, kind: &str, code: &str) {
    assert_eq!(stat(envoy, &format!("store.errors.{kind}")), 20);
    assert_eq!(stat(envoy, "store.errors"), 20, "no other kind counted");
    // Envoy writes its log file every 10 s (`--file-flush-interval-msec`): wait
    // for the line; every failure happened before it was flushed.
    support::wait_until("the failure to be logged", Duration::from_secs(30), || {
        envoy.log_text().contains("tollgate: store error reply")
    });
    let log = envoy.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("tollgate: store error reply")).collect();
    assert_eq!(lines.len(), 1, "logged once, not per request: {lines:#?}");
    assert!(lines[0].contains(code), "{}", lines[0]);
}

fn decided(envoy: &Envoy, user: &str) -> bool {
    envoy.request("GET", "/", &[("x-user-id", user)]).header("ratelimit").is_some()
}

#[test]
fn readonly_replica_is_counted_and_follows_allow() {
    let master = Valkey::start();
    let replica = Valkey::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let envoy = envoy(replica.port, "allow");
    twenty_failing(&envoy, "alice", "allow");
    assert_counted_and_logged_once(&envoy, "readonly", "READONLY");
    assert_eq!(stat(&envoy, "failure_mode.allowed"), 20);
    assert_eq!(replica.int(&["DBSIZE"]), 0, "nothing was written");
}

/// Fills Valkey up to `maxmemory` (`noeviction`) so that it refuses writes,
/// and keeps it there: returns the limit set.
fn fill(valkey: &Valkey) -> u64 {
    let chunk = "x".repeat(64 * 1024);
    let oom = |key: &str| {
        matches!(support::try_command(valkey.port, &[b"SET", key.as_bytes(), chunk.as_bytes()]),
                 Ok(Value::Error(e)) if e.starts_with(b"OOM"))
    };
    assert!((0..200).any(|i| oom(&format!("fill:{i}"))), "Valkey reached maxmemory");
    // A failed write frees its buffers and leaves Valkey just under the limit;
    // lower the limit below what is used so that it stays full.
    let limit = used_memory(valkey) - 256 * 1024;
    valkey.cmd(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    assert!(oom("one-more"), "Valkey refuses writes");
    limit
}

fn used_memory(valkey: &Valkey) -> u64 {
    valkey.info_stat("memory", "used_memory").unwrap().trim().parse().unwrap()
}

/// Valkey out of memory under `noeviction` (`invoke: fcall`, the default):
/// it refuses the limiter's function as it refuses any write (`-OOM`, before
/// anything runs), so every request gets `failure_mode`, counted as `oom`,
/// and nothing is written past `maxmemory`. Once memory is freed, decisions
/// resume.
#[test]
fn out_of_memory_valkey_refuses_the_function_and_failure_mode_decides() {
    let valkey = Valkey::start_with(&["--maxmemory", "3mb", "--maxmemory-policy", "noeviction"]);
    let envoy = envoy(valkey.port, "deny");
    assert!(decided(&envoy, "alice"), "the library is loaded and one entry written");
    fill(&valkey);
    twenty_failing(&envoy, "alice", "deny");
    assert_counted_and_logged_once(&envoy, "oom", "OOM");
    assert_eq!(valkey.int(&["ZCARD", "tollgate:{api:alice}:log"]), 1, "nothing written while full");
    valkey.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    assert!(decided(&envoy, "alice"), "decided again once Valkey has room");
}

/// The same under `invoke: evalsha`: Valkey does not refuse the script, whose
/// first write is a trim (`ZREMRANGEBYSCORE`, not a `denyoom` command), and a
/// script that has written is allowed to finish, so the later `ZADD` passes
/// too. Decisions go on, exactly; memory grows past `maxmemory` by the entries
/// admitted meanwhile.
#[test]
fn out_of_memory_valkey_still_runs_the_script() {
    let valkey = Valkey::start_with(&["--maxmemory", "3mb", "--maxmemory-policy", "noeviction"]);
    let config = plugin()
        .timeout("500ms")
        .failure_mode("deny")
        .valkey(r#""invoke": "evalsha""#)
        .rule("api", Some("x-user-id"), &[(5, "60s")])
        .json();
    let envoy = Envoy::start(&EnvoyOptions { plugin_config: config, valkey_port: valkey.port, concurrency: 1 });
    let limit = fill(&valkey);
    let report = load::run(envoy.port, Plan::closed(2, 10), as_user("alice"));
    println!("{}", report.summary("out of memory, evalsha"));
    assert_eq!(report.decided(), 20, "every request decided");
    assert_eq!((report.count(200), report.count(429)), (5, 15));
    assert_eq!(stat(&envoy, "store.errors"), 0);
    assert_eq!(valkey.int(&["ZCARD", "tollgate:{api:alice}:log"]), 5);
    assert!(used_memory(&valkey) > limit, "still over maxmemory");
}

#[test]
fn wrongtype_key_is_counted_and_other_buckets_keep_working() {
    let valkey = Valkey::start();
    let envoy = envoy(valkey.port, "allow");
    let key = "tollgate:{api:mallory}:log";
    valkey.cmd(&["SET", key, "not a sorted set"]);
    twenty_failing(&envoy, "mallory", "allow");
    assert_counted_and_logged_once(&envoy, "wrongtype", "WRONGTYPE");
    assert!(decided(&envoy, "bob"), "other buckets are unaffected");
    valkey.cmd(&["DEL", key]);
    assert!(decided(&envoy, "mallory"), "decided again once the key is gone");
}

#[test]
fn noscript_is_reloaded_and_not_a_failure() {
    let valkey = Valkey::start();
    let envoy = envoy(valkey.port, "deny");
    for call in 1..=6 {
        valkey.cmd(&["FUNCTION", "FLUSH"]);
        valkey.cmd(&["SCRIPT", "FLUSH"]);
        let resp = envoy.request("GET", "/", &[("x-user-id", "alice")]);
        assert_eq!(resp.status, if call <= 5 { 200 } else { 429 }, "call {call}");
    }
    assert_eq!(stat(&envoy, "store.errors"), 0);
    assert_eq!(stat(&envoy, "store.errors.noscript"), 0);
}
