//! Unit tests: documents that parse, defaults and parsed values.

use std::num::NonZeroU64;
use std::time::Duration;

use crate::config::*;

const EXAMPLE: &str = r#"{
  "valkey": { "cluster": "tollgate_valkey", "timeout": "100ms", "key_prefix": "tollgate" },
  "failure_mode": "allow",
  "rules": [
    {
      "name": "auth.createToken",
      "match": { "path_prefix": "/auth/token", "methods": ["POST"] },
      "key": [ { "header": "x-user-id" } ],
      "limits": [ { "limit": 20, "period": "60s" }, { "limit": 5, "period": "3s" } ]
    }
  ],
  "testing": { "now_header": "x-tollgate-test-now-ms" }
}"#;

fn parse(json: &str) -> Config {
    match Config::from_json(json.as_bytes()) {
        Ok(config) => config,
        Err(err) => panic!("{json}\n=> {err}"),
    }
}

/// A one-rule document whose only window has the given period (JSON text).
fn with_period(period: &str) -> Period {
    let config = parse(&format!(
        r#"{{ "valkey": {{ "cluster": "c" }}, "rules": [ {{ "name": "r", "limits": [ {{ "limit": 1, "period": {period} }} ] }} ] }}"#
    ));
    config.rules[0].limits[0].period.clone()
}

fn nz(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn example_parses_to_expected_values() {
    let config = parse(EXAMPLE);
    let expected = Config {
        valkey: ValkeyConfig {
            cluster: "tollgate_valkey".into(),
            timeout: Duration::from_millis(100),
            key_prefix: "tollgate".into(),
            max_in_flight: 256,
            max_batch: 64,
            max_messages_in_flight: 1,
            max_queue: 4096,
            invoke: Invoke::Fcall,
            auth: None,
            sentinel: None,
            cluster_mode: None,
        },
        failure_mode: FailureMode::Allow,
        local_limiter: LocalLimiterConfig::default(),
        overload: Overload::Reject,
        rules: vec![Rule {
            name: "auth.createToken".into(),
            matcher: Match {
                path_prefix: Some("/auth/token".into()),
                methods: vec!["POST".into()],
                ..Match::default()
            },
            key: vec![KeyPart::header("x-user-id")],
            limits: vec![
                Limit { limit: nz(20), period: Period::from_millis(nz(60_000)) },
                Limit { limit: nz(5), period: Period::from_millis(nz(3_000)) },
            ],
            algorithm: Algorithm::SlidingLog,
            cost: nz(1),
            shadow: false,
            hash_tag: None,
            count: None,
            shaping: None,
            sync: None,
            policy_names: vec!["auth.createToken/60s".into(), "auth.createToken/3s".into()],
            policy_items: vec![r#""auth.createToken/60s";q=20;w=60"#.into(), r#""auth.createToken/3s";q=5;w=3"#.into()],
            key_name: crate::key::KeyName::new("auth.createToken"),
            windows: vec![
                Window { limit: NonZeroU64::new(20).unwrap(), period_ms: NonZeroU64::new(60_000).unwrap() },
                Window { limit: NonZeroU64::new(5).unwrap(), period_ms: NonZeroU64::new(3_000).unwrap() },
            ]
            .into(),
            quoted_names: vec![r#""auth.createToken/60s""#.into(), r#""auth.createToken/3s""#.into()],
            concurrency: None,
            overrides: false,
        }],
        response: ResponseConfig::default(),
        shadow: false,
        denial_cache_keys: 10_000,
        max_body_bytes: 256 << 10,
        testing: Testing { now_header: Some("x-tollgate-test-now-ms".into()) },
    };
    // "60s" is spelled as written, not as from_millis would ("1m").
    assert_eq!(config.rules[0].limits[0].period.label(), "60s");
    assert_eq!(config.rules[0].limits[0].period.ms(), nz(60_000));
    let mut config = config;
    config.rules[0].limits[0].period = Period::from_millis(nz(60_000));
    assert_eq!(config, expected);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn minimal_document_gets_defaults() {
    let config = parse(
        r#"{ "valkey": { "cluster": "c" }, "rules": [ { "name": "all", "limits": [ { "limit": 1, "period": "1s" } ] } ] }"#,
    );
    assert_eq!(config.valkey.cluster, "c");
    assert_eq!(config.valkey.timeout, Duration::from_millis(DEFAULT_TIMEOUT_MS));
    assert_eq!(config.valkey.timeout, Duration::from_millis(100));
    assert_eq!(config.valkey.key_prefix, "tollgate");
    assert_eq!(config.failure_mode, FailureMode::Allow);
    assert_eq!(config.testing, Testing { now_header: None });
    let rule = &config.rules[0];
    assert_eq!(rule.matcher, Match::default());
    assert_eq!(rule.matcher.path_prefix, None);
    assert!(rule.matcher.methods.is_empty());
    assert!(rule.key.is_empty());
    assert_eq!(rule.limits.len(), 1);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn nulls_mean_omitted() {
    let config = parse(
        r#"{ "valkey": { "cluster": "c", "timeout": null, "key_prefix": null }, "failure_mode": null,
             "rules": [ { "name": "r", "match": null, "key": null, "limits": [ { "limit": 1, "period": 1 } ] } ],
             "testing": null }"#,
    );
    assert_eq!(config.valkey.timeout, Duration::from_millis(100));
    assert_eq!(config.valkey.key_prefix, "tollgate");
    assert_eq!(config.failure_mode, FailureMode::Allow);
    assert_eq!(config.rules[0].matcher, Match::default());
    assert!(config.rules[0].key.is_empty());
    assert_eq!(config.testing, Testing::default());
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn failure_modes() {
    let doc = |mode: &str| {
        format!(
            r#"{{ "valkey": {{ "cluster": "c" }}, "failure_mode": "{mode}", "rules": [ {{ "name": "r", "limits": [ {{ "limit": 1, "period": 1 }} ] }} ] }}"#
        )
    };
    assert_eq!(parse(&doc("allow")).failure_mode, FailureMode::Allow);
    assert_eq!(parse(&doc("deny")).failure_mode, FailureMode::Deny);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn valkey_values() {
    let config = parse(
        r#"{ "valkey": { "cluster": "outbound|6379||valkey.svc", "timeout": "60s", "key_prefix": "a.B_c:d-0" },
             "rules": [ { "name": "r", "limits": [ { "limit": 1, "period": 1 } ] } ] }"#,
    );
    assert_eq!(config.valkey.cluster, "outbound|6379||valkey.svc");
    assert_eq!(config.valkey.timeout, Duration::from_secs(60));
    assert_eq!(config.valkey.key_prefix, "a.B_c:d-0");
    for (timeout, ms) in [("\"1ms\"", 1), ("2", 2_000), ("\"1m\"", 60_000), ("60", 60_000)] {
        let config = parse(&format!(
            r#"{{ "valkey": {{ "cluster": "c", "timeout": {timeout} }}, "rules": [ {{ "name": "r", "limits": [ {{ "limit": 1, "period": 1 }} ] }} ] }}"#
        ));
        assert_eq!(config.valkey.timeout, Duration::from_millis(ms), "{timeout}");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn period_values_and_labels() {
    for (json, ms, label) in [
        ("\"250ms\"", 250, "250ms"),
        ("\"3s\"", 3_000, "3s"),
        ("\"60s\"", 60_000, "60s"),
        ("\"1m\"", 60_000, "1m"),
        ("\"10m\"", 600_000, "10m"),
        ("\"1h\"", 3_600_000, "1h"),
        ("\"1d\"", 86_400_000, "1d"),
        ("\"366d\"", MAX_PERIOD_MS, "366d"),
        ("\"01s\"", 1_000, "01s"),
        ("3", 3_000, "3s"),
        ("60", 60_000, "60s"),
        ("86400", 86_400_000, "86400s"),
        ("31622400", MAX_PERIOD_MS, "31622400s"),
    ] {
        let period = with_period(json);
        assert_eq!(period.ms().get(), ms, "{json}");
        assert_eq!(period.label(), label, "{json}");
        assert_eq!(period.to_string(), label, "{json}");
        assert_eq!(period.duration(), Duration::from_millis(ms), "{json}");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn period_from_millis() {
    let period = Period::from_millis(nz(3_000));
    assert_eq!(period.ms(), nz(3_000));
    assert_eq!(period.label(), "3s");
    assert_eq!(Period::from_millis(nz(250)).label(), "250ms");
    assert_eq!(Period::from_millis(nz(3_600_000)).label(), "1h");
    assert_eq!(with_period("\"3s\""), period);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn limits_at_the_bounds() {
    // Every window can bind: limits grow with the period, but slower than it.
    let config = parse(
        r#"{ "valkey": { "cluster": "c" }, "rules": [ { "name": "r", "limits": [
             { "limit": 1, "period": "1ms" }, { "limit": 1000000000, "period": "366d" },
             { "limit": 5, "period": "10ms" }, { "limit": 40, "period": "100ms" },
             { "limit": 300, "period": "1s" }, { "limit": 2000, "period": "10s" },
             { "limit": 10000, "period": "100s" }, { "limit": 50000, "period": "1000s" } ] } ] }"#,
    );
    let limits = &config.rules[0].limits;
    assert_eq!(limits.len(), MAX_WINDOWS);
    assert_eq!(limits[0].limit, nz(1));
    assert_eq!(limits[1].limit, nz(MAX_LIMIT));
    let order: Vec<u64> = limits.iter().map(|l| l.period.ms().get()).collect();
    assert_eq!(order, [1, MAX_PERIOD_MS, 10, 100, 1_000, 10_000, 100_000, 1_000_000]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn match_and_key_are_normalised() {
    let config = parse(
        r#"{ "valkey": { "cluster": "c" }, "rules": [ { "name": "r",
             "match": { "methods": ["get", "Post", "PATCH", "PROPFIND"] },
             "key": [ { "header": "X-User-ID" }, { "header": ":Authority" }, { "header": "a!#$%&'*+-.^_`|~9" } ],
             "limits": [ { "limit": 1, "period": 1 } ] } ],
             "testing": { "now_header": "X-Now" } }"#,
    );
    let rule = &config.rules[0];
    assert_eq!(rule.matcher.path_prefix, None);
    assert_eq!(rule.matcher.methods, ["GET", "POST", "PATCH", "PROPFIND"]);
    assert_eq!(
        rule.key,
        [KeyPart::header("x-user-id"), KeyPart::header(":authority"), KeyPart::header("a!#$%&'*+-.^_`|~9"),]
    );
    assert_eq!(config.testing.now_header.as_deref(), Some("x-now"));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn empty_key_and_path_only_match() {
    let config = parse(
        r#"{ "valkey": { "cluster": "c" }, "rules": [
             { "name": "a", "match": { "path_prefix": "/" }, "key": [], "limits": [ { "limit": 1, "period": 1 } ] },
             { "name": "b", "match": {}, "limits": [ { "limit": 1, "period": 1 } ] } ],
             "testing": {} }"#,
    );
    assert_eq!(config.rules[0].matcher.path_prefix.as_deref(), Some("/"));
    assert!(config.rules[0].matcher.methods.is_empty());
    assert!(config.rules[0].key.is_empty());
    assert_eq!(config.rules[1].matcher, Match::default());
    assert_eq!(config.testing.now_header, None);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn names_at_the_bounds_and_many_rules() {
    let long = "a".repeat(MAX_NAME_CHARS);
    let cluster = "c".repeat(MAX_CLUSTER_BYTES);
    let config = parse(&format!(
        r#"{{ "valkey": {{ "cluster": "{cluster}", "key_prefix": "{long}" }}, "rules": [
             {{ "name": "{long}", "limits": [ {{ "limit": 1, "period": 1 }} ] }},
             {{ "name": "Auth.createToken", "limits": [ {{ "limit": 1, "period": 1 }} ] }},
             {{ "name": "auth.createToken", "limits": [ {{ "limit": 1, "period": 1 }} ] }} ] }}"#
    ));
    assert_eq!(config.valkey.cluster, cluster);
    assert_eq!(config.valkey.key_prefix, long);
    let names: Vec<&str> = config.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, [long.as_str(), "Auth.createToken", "auth.createToken"]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn whitespace_around_the_document_is_fine() {
    let config = parse(&format!("\n\t {EXAMPLE} \r\n"));
    assert_eq!(config.rules.len(), 1);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn local_limiter_and_overload() {
    let config = Config::from_json(include_bytes!("../../../tests/fixtures/config/valid/local-limiter.json")).unwrap();
    assert_eq!(config.failure_mode, FailureMode::Local);
    assert_eq!(config.local_limiter, LocalLimiterConfig { share_ppm: 250_000, max_keys: 5_000 });
    assert_eq!(config.overload, Overload::Reject);
    let allow = Config::from_json(
        br#"{ "valkey": { "cluster": "c" }, "failure_mode": "local", "overload": "allow",
              "rules": [ { "name": "r", "limits": [ { "limit": 1, "period": 1 } ] } ] }"#,
    )
    .unwrap();
    assert_eq!((allow.overload, allow.local_limiter), (Overload::Allow, LocalLimiterConfig::default()));
    assert_eq!(LocalLimiterConfig::default().share_ppm, 100_000, "a tenth of each limit");
}
