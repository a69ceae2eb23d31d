//! `rules[i].concurrency`: the values a valid rule gives, and the checks on
//! them (every error message has its fixture in
//! tests/fixtures/config/invalid/concurrency-*).

use super::{error, rule};
use crate::config::{Config, DEFAULT_LEASE_TTL_MS};
use crate::limiter::Window;
use std::num::NonZeroU64;

fn parse(json: &str) -> Config {
    Config::from_json(json.as_bytes()).unwrap_or_else(|e| panic!("{json}\n{e}"))
}

fn with(concurrency: &str) -> String {
    rule(&format!(
        r#"{{ "name": "api", "limits": [ {{ "limit": 10, "period": "1s" }} ], "concurrency": {concurrency} }}"#
    ))
}

fn window(limit: u64, period_ms: u64) -> Window {
    Window { limit: NonZeroU64::new(limit).unwrap(), period_ms: NonZeroU64::new(period_ms).unwrap() }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_number_is_the_limit_with_the_default_lease_ttl() {
    let config = parse(&with("5"));
    let c = config.rules[0].concurrency.clone().unwrap();
    assert_eq!((c.limit.get(), c.lease_ttl_ms.get()), (5, DEFAULT_LEASE_TTL_MS));
    assert_eq!(DEFAULT_LEASE_TTL_MS, 30_000);
    assert_eq!(*c.window, [window(5, 30_000)]);
    assert_eq!(c.policy_name, "api/concurrency");
    assert_eq!(c.policy_item, r#""api/concurrency";q=5;qu="concurrent-requests""#);
    assert_eq!(c.quoted_name, r#""api/concurrency""#);
    // The rule's windows are its own, untouched.
    assert_eq!(config.rules[0].policy_names, ["api/1s"]);
    assert_eq!(*config.rules[0].windows, [window(10, 1_000)]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_object_gives_the_limit_and_the_lease_ttl() {
    for (json, limit, ttl) in [
        (r#"{ "limit": 2, "lease_ttl": "2m" }"#, 2, 120_000),
        (r#"{ "limit": 1000000, "lease_ttl": 1 }"#, 1_000_000, 1_000),
        (r#"{ "limit": 3, "lease_ttl": "1h" }"#, 3, 3_600_000),
        (r#"{ "limit": 3, "lease_ttl": "1000ms" }"#, 3, 1_000),
        (r#"{ "limit": 3, "lease_ttl": null }"#, 3, DEFAULT_LEASE_TTL_MS),
    ] {
        let c = parse(&with(json)).rules[0].concurrency.clone().unwrap();
        assert_eq!((c.limit.get(), c.lease_ttl_ms.get()), (limit, ttl), "{json}");
        assert_eq!(*c.window, [window(limit, ttl)], "{json}");
    }
    assert_eq!(parse(&with("null")).rules[0].concurrency, None);
    let none = parse(&rule(r#"{ "name": "api", "limits": [ { "limit": 10, "period": "1s" } ] }"#));
    assert_eq!(none.rules[0].concurrency, None);
}

/// Shaping and counting on the response go with it; the window is built
/// once and shared, not per request.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn shaped_and_counted_rules_take_it() {
    let config = parse(&rule(
        r#"{ "name": "a", "limits": [ { "limit": 10, "period": "1s" } ], "concurrency": 3,
             "shape": { "max_delay": "1s" }, "count": { "status": ["500-599"] } }"#,
    ));
    let rule = &config.rules[0];
    assert!(rule.shaping.is_some() && rule.count.is_some());
    let c = rule.concurrency.as_ref().unwrap();
    assert_eq!(c.limit.get(), 3);
    let shared = std::rc::Rc::clone(&c.window);
    assert!(std::rc::Rc::ptr_eq(&shared, &config.rules[0].concurrency.as_ref().unwrap().window));
}

/// The messages (their fixtures say the same) and what the reader makes of
/// each JSON type.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn bad_values_name_the_field() {
    let at = "rules[0].concurrency";
    for (json, expected) in [
        ("0", format!("{at}: must be > 0")),
        ("-1", format!("{at}: must be > 0")),
        ("2.5", format!("{at}: must be an integer")),
        ("4.0", format!("{at}: must be an integer")),
        ("1e7", format!("{at}: must be <= 1000000")),
        ("1000001", format!("{at}: must be <= 1000000")),
        ("true", format!("{at}: invalid type: boolean `true`, expected a number or an object")),
        ("[5]", format!("{at}: invalid type: array, expected a number or an object")),
        (r#""5""#, format!("{at}: invalid type: string \"5\", expected a number or an object")),
        ("{}", format!("{at}.limit: missing field")),
        (r#"{ "limit": -3 }"#, format!("{at}.limit: must be > 0")),
        (r#"{ "limit": 5, "limit": 6 }"#, format!("{at}.limit: duplicate field")),
        (r#"{ "limit": 5, "ttl": 1 }"#, format!("{at}.ttl: unknown field, expected one of limit, lease_ttl")),
        (r#"{ "limit": 5, "lease_ttl": "999ms" }"#, format!("{at}.lease_ttl: must be >= 1s")),
        (r#"{ "limit": 5, "lease_ttl": 3601 }"#, format!("{at}.lease_ttl: must be <= 1h")),
        (r#"{ "limit": 5, "lease_ttl": 0 }"#, format!("{at}.lease_ttl: must be > 0")),
        (r#"{ "limit": 5, "lease_ttl": true }"#, format!("{at}.lease_ttl: invalid duration true: {}", super::SYNTAX)),
    ] {
        assert_eq!(error(&with(json)), expected, "{json}");
    }
}

/// `sync` decides on each proxy from its own view: leases taken elsewhere
/// are not in it, so the two are refused together, whatever the order.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn not_with_sync() {
    let json = rule(
        r#"{ "name": "a", "limits": [ { "limit": 10, "period": "1s" } ], "concurrency": { "limit": 3 },
             "sync": { "interval": "100ms" } }"#,
    );
    let message = error(&json);
    assert!(message.starts_with("rules[0].concurrency: does not apply with rules[0].sync: "), "{message}");
    assert!(message.contains("invisible to the others") && message.contains("decided by the store"), "{message}");
    // Every rule is checked: one error per rule.
    let bad = |name: &str| {
        format!(r#"{{ "name": "{name}", "limits": [ {{ "limit": 1, "period": 1 }} ], "concurrency": 0 }}"#)
    };
    let two = format!(r#"{{ "valkey": {{ "cluster": "c" }}, "rules": [ {}, {} ] }}"#, bad("a"), bad("b"));
    let errors = Config::from_json_all(two.as_bytes(), &|_| None).unwrap_err();
    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["rules[0].concurrency: must be > 0", "rules[1].concurrency: must be > 0"]);
}
