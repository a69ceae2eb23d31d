//! Unit tests of the configuration: shared helpers and the test modules.

mod algorithm;
mod concurrency;
mod count;
mod invalid_shape;
mod invalid_values;
#[cfg(not(target_family = "wasm"))]
mod oracle;
#[cfg(not(target_family = "wasm"))]
mod oracle_raw;
#[cfg(not(target_family = "wasm"))]
mod oracle_shape;
mod overrides;
mod valid;

use super::Config;

pub(super) const SYNTAX: &str = "expected <digits><unit> with unit ms, s, m, h or d, or an integer number of seconds";
pub(super) const HEADER: &str =
    "expected an HTTP token (letters, digits and !#$%&'*+-.^_`|~), optionally after a leading ':'";
pub(super) const NAME: &str = "allowed are A-Z, a-z, 0-9, '.', '_', ':' and '-'";

/// `text` as a JSON string literal.
pub(super) fn js(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

pub(super) fn error(json: &str) -> String {
    match Config::from_json(json.as_bytes()) {
        Ok(config) => panic!("{json}\nparsed unexpectedly: {config:?}"),
        Err(err) => {
            assert_eq!(err.to_string(), format!("{}: {}", err.path(), err.message()));
            err.to_string()
        }
    }
}

/// A document around one rule's JSON.
pub(super) fn rule(body: &str) -> String {
    format!(r#"{{ "valkey": {{ "cluster": "c" }}, "rules": [ {body} ] }}"#)
}

/// A document around one rule with these limits (JSON list contents).
pub(super) fn limits(list: &str) -> String {
    rule(&format!(r#"{{ "name": "r", "limits": [ {list} ] }}"#))
}

/// A document with this `valkey` object.
pub(super) fn valkey(body: &str) -> String {
    format!(r#"{{ "valkey": {body}, "rules": [ {{ "name": "r", "limits": [ {{ "limit": 1, "period": 1 }} ] }} ] }}"#)
}

/// A document around one rule with this `match` object.
pub(super) fn matcher(body: &str) -> String {
    rule(&format!(r#"{{ "name": "r", "match": {body}, "limits": [ {{ "limit": 1, "period": 1 }} ] }}"#))
}

/// A document around one rule with this `key` list.
pub(super) fn key(list: &str) -> String {
    rule(&format!(r#"{{ "name": "r", "key": {list}, "limits": [ {{ "limit": 1, "period": 1 }} ] }}"#))
}

pub(super) fn period(json: &str) -> String {
    error(&limits(&format!(r#"{{ "limit": 1, "period": {json} }}"#)))
}

pub(super) fn timeout(json: &str) -> String {
    error(&valkey(&format!(r#"{{ "cluster": "c", "timeout": {json} }}"#)))
}
