//! The store stream and the local denial cache, through a real Envoy and
//! Valkey: concurrent requests share each worker's one stream (one Valkey
//! connection per worker, however many decisions), known denials are
//! answered without a store call, the queue is bounded and every request
//! keeps its own timeout.

use crate::support;

use std::time::{Duration, Instant};
use support::{wait_until, Envoy, EnvoyOptions, Valkey};

fn options(port: u16, rules: &str, extra: &str, concurrency: u32) -> EnvoyOptions {
    EnvoyOptions {
        plugin_config: format!(
            r#"{{ "valkey": {{ "cluster": "tollgate_valkey" {extra} }},
                 "testing": {{ "now_header": "x-now" }}, "rules": {rules} }}"#
        ),
        valkey_port: port,
        concurrency,
    }
}

/// `INFO stats` field of a Valkey.
fn info(valkey: &Valkey, field: &str) -> u64 {
    let text = match valkey.cmd(&["INFO", "stats"]) {
        tollgate::resp::Value::Bulk(b) => String::from_utf8(b).unwrap(),
        other => panic!("{other:?}"),
    };
    text.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))?.trim().parse().ok()).unwrap()
}

/// Sends `n` requests at once from `n` threads; returns their statuses.
fn burst(envoy: &Envoy, n: usize, header: impl Fn(usize) -> String) -> Vec<u16> {
    let port = envoy.port;
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let user = header(i);
            std::thread::spawn(move || support::http(port, "GET", "/", &[("x-user", &user)]).unwrap().status)
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Clients connected to Valkey, by `CLIENT LIST` (minus the one asking).
fn clients(valkey: &Valkey) -> usize {
    match valkey.cmd(&["CLIENT", "LIST"]) {
        tollgate::resp::Value::Bulk(b) => String::from_utf8_lossy(&b).lines().count() - 1,
        other => panic!("{other:?}"),
    }
}

#[test]
fn concurrent_requests_share_one_stream_and_one_connection_per_worker() {
    let valkey = Valkey::start();
    let rules =
        r#"[ { "name": "u", "key": [ { "header": "x-user" } ], "limits": [ { "limit": 1000, "period": "1m" } ] } ]"#;
    let envoy = Envoy::start(&options(valkey.port, rules, r#", "timeout": "2s""#, 2));
    // Each worker opens its stream with its first request.
    wait_until("both workers' streams", Duration::from_secs(10), || {
        envoy.request("GET", "/", &[("x-user", "warm-up")]);
        envoy.stat("wasmcustom.tollgate.stream.opens") == Some(2)
    });
    let requests_before = envoy.stat("wasmcustom.tollgate.store.requests").unwrap();
    let connections_before = info(&valkey, "total_connections_received");
    let mut statuses = Vec::new();
    for round in 0..4 {
        statuses.extend(burst(&envoy, 48, |i| format!("user-{round}-{i}")));
    }
    assert!(statuses.iter().all(|&s| s == 200), "{statuses:?}");
    let requests = envoy.stat("wasmcustom.tollgate.store.requests").unwrap() - requests_before;
    let messages = envoy.stat("wasmcustom.tollgate.store.messages").unwrap();
    // Minus one: the INFO that reads the counter is a connection too.
    let connections = info(&valkey, "total_connections_received") - connections_before - 1;
    assert_eq!(requests, 192, "every decision went through the store");
    assert_eq!(connections, 0, "no connection per call: every decision rode a worker's stream");
    assert_eq!(clients(&valkey), 2, "one connection per worker");
    assert_eq!(envoy.stat("wasmcustom.tollgate.stream.opens"), Some(2));
    assert_eq!(valkey.int(&["DBSIZE"]), 193, "each request was decided in its own bucket");
    // Gauges are reported from the worker's tick, at most 5 ms late.
    wait_until("nothing left awaiting a reply", Duration::from_secs(2), || {
        envoy.stat("wasmcustom.tollgate.stream.in_flight") == Some(0)
    });
    println!("{requests} decisions in {messages} messages on 2 streams, 0 new connections");
}

#[test]
fn known_denials_are_answered_without_a_store_call_until_they_could_fit() {
    let valkey = Valkey::start();
    let rules =
        r#"[ { "name": "one", "key": [ { "header": "x-user" } ], "limits": [ { "limit": 1, "period": "10s" } ] } ]"#;
    let envoy = Envoy::start(&options(valkey.port, rules, r#", "timeout": "2s""#, 1));
    let t0 = 1_800_000_000_000u64;
    let at = |ms: u64| (t0 + ms).to_string();
    let get = |user: &str, ms: u64| envoy.request("GET", "/", &[("x-user", user), ("x-now", &at(ms))]);
    assert_eq!(get("a", 0).status, 200);
    let first_denial = get("a", 1_000);
    assert_eq!(first_denial.status, 429);
    assert_eq!(first_denial.header("retry-after"), Some("9"));
    let commands_before = info(&valkey, "total_commands_processed");
    for i in 0..20 {
        let resp = get("a", 2_000 + i);
        assert_eq!(resp.status, 429);
        assert_eq!(resp.header("retry-after"), Some("8"), "retry counts down from the cached answer");
        assert!(resp.header("ratelimit").is_some_and(|h| h.contains("r=0")));
    }
    assert_eq!(info(&valkey, "total_commands_processed") - commands_before, 1, "only this INFO reached Valkey");
    assert_eq!(envoy.stat("wasmcustom.tollgate.cache.hits"), Some(20));
    assert_eq!(envoy.stat("wasmcustom.tollgate.rule.one.denied"), Some(21));
    // Another user is not affected, and at t0 + 10 s the store decides again.
    assert_eq!(get("b", 2_000).status, 200);
    assert_eq!(get("a", 10_000).status, 200);
    assert_eq!(valkey.int(&["ZCARD", "tollgate:{one:a}:log"]), 1, "the old entry left, the new one counts");
}

/// A store that accepts connections and never answers (the thread holds
/// them until the test process ends).
fn blackhole() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let held: Vec<_> = listener.incoming().take(256).collect();
        drop(held);
    });
    port
}

/// Six requests at once on a store that never answers, one decision in
/// flight at a time: the five queued behind the first do not wait their
/// turn (each sent in turn and timed out in turn, the last would take six
/// timeouts). Asserted as what happened, not as a time: only the first was
/// ever sent, on the only stream, and every request was answered by
/// `failure_mode` through the first's stall or its own deadline. The times
/// are printed; ten times the timeout is a hang detector.
#[test]
fn every_queued_request_keeps_its_own_timeout() {
    let port = blackhole();
    let rules =
        r#"[ { "name": "u", "key": [ { "header": "x-user" } ], "limits": [ { "limit": 10, "period": "1m" } ] } ]"#;
    let extra = r#", "timeout": "200ms", "max_in_flight": 1"#;
    let timeout = Duration::from_millis(200);
    let envoy = Envoy::start(&options(port, rules, extra, 1));
    let start = Instant::now();
    let port = envoy.port;
    let handles: Vec<_> = (0..6)
        .map(|i| {
            std::thread::spawn(move || {
                let sent = Instant::now();
                let status = support::http(port, "GET", "/", &[("x-user", &format!("u{i}"))]).unwrap().status;
                (status, sent.elapsed())
            })
        })
        .collect();
    let mut slowest = Duration::ZERO;
    for h in handles {
        let (status, took) = h.join().unwrap();
        assert_eq!(status, 200, "failure_mode allow");
        slowest = slowest.max(took);
    }
    println!(
        "6 requests, 1 in flight, a blackholed store: the slowest answered in {slowest:?}, all in {:?}",
        start.elapsed()
    );
    let stat = |name: &str| envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0);
    assert_eq!(stat("failure_mode.allowed"), 6);
    assert_eq!((stat("store.requests"), stat("stream.opens")), (1, 1), "only the first was sent: none waited its turn");
    assert_eq!(stat("store.errors.timeout") + stat("store.errors.unavailable"), 6);
    assert!(slowest < support::hang_bound(timeout), "a request hung: {slowest:?}");
}

/// A full queue: the first request's decision hangs in the blackhole, and
/// the next five find no room. Returns the Envoy and the five answers.
fn full_queue(overload: &str) -> (Envoy, Vec<support::Response>) {
    let port = blackhole();
    let rules =
        r#"[ { "name": "u", "key": [ { "header": "x-user" } ], "limits": [ { "limit": 10, "period": "1m" } ] } ]"#;
    let extra = r#", "timeout": "2s", "max_queue": 0, "max_in_flight": 1"#;
    let options = options(port, rules, extra, 1);
    let mut config: serde_json::Value = serde_json::from_str(&options.plugin_config).unwrap();
    config["failure_mode"] = "allow".into();
    config["overload"] = overload.into();
    let envoy = Envoy::start(&EnvoyOptions { plugin_config: config.to_string(), ..options });
    let port = envoy.port;
    // The first request's decision hangs in the blackhole (in flight for 2 s) ...
    let first = std::thread::spawn(move || support::http(port, "GET", "/", &[("x-user", "first")]).unwrap());
    wait_until("the first decision sent", Duration::from_secs(5), || {
        envoy.stat("wasmcustom.tollgate.store.requests") == Some(1)
    });
    // ... so with no room on the stream and no queue, the next ones are
    // answered at once by `overload`, never by failure_mode: each before the
    // first's answer (its timeout), so none waited for room on the stream.
    let answers = (0..5)
        .map(|i| {
            let sent = Instant::now();
            let resp = envoy.request("GET", "/", &[("x-user", &format!("u{i}"))]);
            println!("overloaded request {i} answered in {:?}", sent.elapsed());
            assert!(!first.is_finished(), "not queued: answered while the first still waits for the store");
            resp
        })
        .collect();
    assert_eq!(envoy.stat("wasmcustom.tollgate.overloaded"), Some(5));
    assert_eq!(envoy.stat("wasmcustom.tollgate.store.requests"), Some(1), "none of the five was sent");
    assert_eq!(envoy.stat("wasmcustom.tollgate.failure_mode.allowed"), Some(0));
    let first = first.join().unwrap();
    assert_eq!((first.status, first.header("ratelimit")), (200, None), "the first: failure_mode after 2 s");
    assert_eq!(envoy.stat("wasmcustom.tollgate.store.errors.timeout"), Some(1));
    (envoy, answers)
}

#[test]
fn a_full_queue_refuses_explicitly_and_is_counted() {
    let (_envoy, answers) = full_queue("reject");
    for resp in answers {
        assert_eq!(resp.status, 503);
        let body: serde_json::Value = serde_json::from_slice(&resp.body).unwrap();
        assert_eq!(body["type"], "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity");
        assert_eq!(body["detail"], "rate limiter overloaded");
        assert_eq!(resp.header("content-type"), Some("application/problem+json"));
        assert_eq!(resp.header("retry-after"), Some("1"));
    }
}

#[test]
fn overload_allow_lets_the_excess_through_unchecked_and_counts_it() {
    let (_envoy, answers) = full_queue("allow");
    for resp in answers {
        assert_eq!((resp.status, resp.header("ratelimit")), (200, None), "admitted unchecked, as asked");
    }
}
