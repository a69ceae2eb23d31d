//! `rules[i].overrides`: the flag a valid rule gives, and the refusal with
//! `sync` (its fixture: tests/fixtures/config/invalid/overrides-with-sync).

use super::{error, rule};
use crate::config::Config;

fn parse(json: &str) -> Config {
    Config::from_json(json.as_bytes()).unwrap_or_else(|e| panic!("{json}\n{e}"))
}

fn with(fields: &str) -> String {
    rule(&format!(r#"{{ "name": "api", "limits": [ {{ "limit": 10, "period": "1s" }} ]{fields} }}"#))
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn off_unless_set() {
    assert!(!parse(&with("")).rules[0].overrides);
    assert!(!parse(&with(r#", "overrides": null"#)).rules[0].overrides);
    assert!(!parse(&with(r#", "overrides": false"#)).rules[0].overrides);
    assert!(parse(&with(r#", "overrides": true"#)).rules[0].overrides);
}

/// Shaping, counting and a concurrency limit go with it (the override hash
/// has a field for the lease check's limit).
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn shaped_counted_and_concurrent_rules_take_it() {
    let config = parse(&with(
        r#", "overrides": true, "concurrency": 3, "shape": { "max_delay": "1s" },
             "count": { "status": ["500-599"] }"#,
    ));
    let rule = &config.rules[0];
    assert!(rule.overrides && rule.shaping.is_some() && rule.count.is_some() && rule.concurrency.is_some());
}

/// A synced rule decides on each proxy with its share of the configured
/// limit: refused with `"overrides": true`, whatever the order; `false` is
/// no conflict.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn not_with_sync() {
    let expected = "rules[0].overrides: does not apply with rules[0].sync: a synced rule's proxies count locally \
                    with shares of the configured limit, so an override, read by the store, would not reach them";
    let sync = r#""sync": { "interval": "100ms" }"#;
    assert_eq!(error(&with(&format!(r#", "overrides": true, {sync}"#))), expected);
    assert_eq!(error(&with(&format!(r#", {sync}, "overrides": true"#))), expected);
    let config = parse(&with(&format!(r#", {sync}, "overrides": false"#)));
    assert!(config.rules[0].sync.is_some() && !config.rules[0].overrides);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_boolean_only() {
    for (json, found) in [(r#""yes""#, r#"string "yes""#), ("1", "integer `1`"), ("{}", "object")] {
        assert_eq!(
            error(&with(&format!(r#", "overrides": {json}"#))),
            format!("rules[0].overrides: invalid type: {found}, expected a boolean"),
            "{json}"
        );
    }
}
