//! Hostile and oversized plugin configurations: 1,000 rules of 5 windows,
//! absurd periods, 1 MiB documents. Each is accepted, or rejected with an
//! error naming the field, in bounded time (tests/live/operations/config_limits.rs
//! loads the 1,000-rule configuration in a real Envoy).

use crate::plugin;

use plugin::{plugin, wide_rule};
use std::time::{Duration, Instant};
use tollgate::config::{Config, ConfigError};

/// Generous for a debug build on a busy 2-core machine; the parser takes a
/// few milliseconds for these documents.
const PARSE_BOUND: Duration = Duration::from_secs(3);

fn timed_parse(doc: &str) -> (Result<Config, ConfigError>, Duration) {
    let start = Instant::now();
    let result = Config::from_json(doc.as_bytes());
    (result, start.elapsed())
}

/// Rules `r0`.. `r{n-1}`, then `extra`.
fn wide_rules(n: usize, extra: &[usize]) -> String {
    (0..n).chain(extra.iter().copied()).fold(plugin(), |p, i| p.with(wide_rule(i))).json()
}

#[test]
fn a_thousand_rules_of_five_windows_parse_in_bounded_time() {
    let doc = wide_rules(1000, &[]);
    let (config, took) = timed_parse(&doc);
    println!("1,000 rules x 5 windows ({} bytes): parsed in {took:?}", doc.len());
    let config = config.unwrap();
    assert_eq!(config.rules.len(), 1000);
    assert!(config.rules.iter().all(|r| r.limits.len() == 5));
    assert!(took < PARSE_BOUND, "took {took:?}");
}

#[test]
fn absurd_periods_are_rejected_by_name() {
    for (period, message) in [
        (r#""99999999999999999999999999d""#, "must be <= 366d"),
        (r#""367d""#, "must be <= 366d"),
        ("18446744073709551615", "must be <= 366d"),
        ("1e300", "invalid duration 1e+300"),
        ("-1", "invalid duration -1"),
        (r#""0ms""#, "must be > 0"),
        (r#""1.5s""#, "invalid duration \"1.5s\""),
    ] {
        let doc = plugin()
            .cluster("c")
            .rule_json(&format!(r#"{{ "name": "r", "limits": [ {{ "limit": 1, "period": {period} }} ] }}"#))
            .json();
        let (result, took) = timed_parse(&doc);
        let err = result.err().unwrap_or_else(|| panic!("{period} accepted"));
        assert_eq!(err.path(), "rules[0].limits[0].period", "{period}");
        assert!(err.to_string().contains(message), "{period}: {err}");
        assert!(took < PARSE_BOUND);
    }
}

#[test]
fn one_mebibyte_documents_are_decided_in_bounded_time() {
    const MIB: usize = 1 << 20;
    let valid_rule = r#"{ "name": "r", "limits": [ { "limit": 1, "period": "1s" } ] }"#;
    let cases: Vec<(&str, String, Result<usize, &str>)> = vec![
        (
            "a 1 MiB rule name",
            plugin().cluster("c").rule_json(&format!(r#"{{ "name": "{}", "limits": [] }}"#, "a".repeat(MIB))).json(),
            Err("rules[0].name: must be at most 64 characters (got 1048576)"),
        ),
        (
            "1 MiB of whitespace around a valid document",
            format!("{}{}", " ".repeat(MIB), plugin().rule_json(valid_rule).json()),
            Ok(1),
        ),
        (
            "1 MiB of nested arrays",
            format!(r#"{{ "valkey": {{ "cluster": "c" }}, "rules": {}"#, "[".repeat(MIB)),
            Err("rules[0]: invalid type: array, expected an object"),
        ),
        (
            "a period of 1 MiB of nested arrays (a period may be any JSON value)",
            format!(
                r#"{{ "valkey": {{ "cluster": "c" }}, "rules": [ {{ "name": "r", "limits": [ {{ "limit": 1, "period": {} "#,
                "[".repeat(MIB)
            ),
            Err("(root): invalid JSON at line 1 column 217: recursion limit exceeded"),
        ),
        ("5,000 rules, 1.4 MiB", wide_rules(5000, &[]), Ok(5000)),
        (
            "a 1 MiB cluster name",
            plugin().cluster(&"c".repeat(MIB)).rule_json(valid_rule).json(),
            Err("valkey.cluster: must be at most 255 bytes (got 1048576)"),
        ),
        (
            "a duplicate name at the end of 5,000 rules",
            wide_rules(5000, &[0]),
            Err("rules[5000].name: duplicate rule name \"r0\" (also rules[0].name)"),
        ),
    ];
    for (what, doc, expected) in cases {
        let (result, took) = timed_parse(&doc);
        println!("{what} ({} bytes): {took:?}", doc.len());
        assert!(doc.len() >= MIB, "{what} is at least 1 MiB");
        match (result, expected) {
            (Ok(config), Ok(rules)) => assert_eq!(config.rules.len(), rules, "{what}"),
            (Err(e), Err(message)) => assert_eq!(e.to_string(), message, "{what}"),
            (other, expected) => panic!("{what}: got {:?}, expected {expected:?}", other.map(|c| c.rules.len())),
        }
        assert!(took < PARSE_BOUND, "{what} took {took:?}");
    }
}
