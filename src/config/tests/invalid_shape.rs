//! Unit tests: rejections by the JSON layer and the shape checks, with their
//! exact messages.

use super::*;

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn json_syntax() {
    assert_eq!(error(""), "(root): invalid JSON at line 1 column 0: EOF while parsing a value");
    assert_eq!(error("{"), "(root): invalid JSON at line 1 column 1: EOF while parsing an object");
    assert_eq!(error("{\n  \"valkey\": ,\n}"), "(root): invalid JSON at line 2 column 13: expected value");
    assert_eq!(
        error(&format!("{} x", limits(r#"{ "limit": 1, "period": 1 }"#))),
        "(root): invalid JSON at line 1 column 107: trailing characters"
    );
    assert!(Config::from_json(b"\xff").is_err());
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn shape_errors() {
    assert_eq!(error("[]"), "(root): invalid type: array, expected an object");
    assert_eq!(error("null"), "(root): invalid type: null, expected an object");
    assert_eq!(error(r#"{ "rules": [] }"#), "valkey: missing field");
    assert_eq!(error(r#"{ "valkey": { "cluster": "c" } }"#), "rules: missing field");
    assert_eq!(error(&valkey("{}")), "valkey.cluster: missing field");
    assert_eq!(error(&valkey(r#"["c"]"#)), "valkey: invalid type: array, expected an object");
    assert_eq!(error(&valkey(r#"{ "cluster": 5 }"#)), "valkey.cluster: invalid type: integer `5`, expected a string");
    assert_eq!(
        error(r#"{ "valkey": { "cluster": "c" }, "rules": {} }"#),
        "rules: invalid type: object, expected an array"
    );
    assert_eq!(error(&limits(r#"[1, "3s"]"#)), "rules[0].limits[0]: invalid type: array, expected an object");
    assert_eq!(error(&rule(r#"{ "limits": [] }"#)), "rules[0].name: missing field");
    assert_eq!(error(&rule(r#"{ "name": "r" }"#)), "rules[0].limits: missing field");
    assert_eq!(error(&limits(r#"{ "limit": 1 }"#)), "rules[0].limits[0].period: missing field");
    assert_eq!(error(&limits(r#"{ "period": 1 }"#)), "rules[0].limits[0].limit: missing field");
    assert_eq!(
        error(&key("[{}]")),
        "rules[0].key[0]: must have exactly one of header, query, cookie, remote_address, forwarded_for, literal, property"
    );
    assert_eq!(
        error(&limits(r#"{ "limit": 1, "limit": 2, "period": 1 }"#)),
        "rules[0].limits[0].limit: duplicate field"
    );
    assert_eq!(
        error(&matcher(r#"{ "methods": "GET" }"#)),
        "rules[0].match.methods: invalid type: string \"GET\", expected an array"
    );
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn unknown_fields() {
    assert_eq!(
        error(&limits(r#"{ "limit": 1, "perod": 1 }"#)),
        "rules[0].limits[0].perod: unknown field, expected one of limit, period"
    );
    assert_eq!(
        error(r#"{ "valkey": { "cluster": "c" }, "rules": [], "version": 1 }"#),
        "version: unknown field, expected one of valkey, failure_mode, local_limiter, overload, rules, response, shadow, denial_cache, max_body_bytes, testing"
    );
    assert_eq!(
        error(&valkey(r#"{ "cluster": "c", "port": 6379 }"#)),
        "valkey.port: unknown field, expected one of cluster, timeout, key_prefix, max_in_flight, max_batch, max_messages_in_flight, max_queue, invoke, username, password_env, sentinel, cluster_mode"
    );
    assert_eq!(
        error(&rule(r#"{ "name": "r", "limit": [] }"#)),
        "rules[0].limit: unknown field, expected one of name, match, key, limits, algorithm, cost, shadow, hash_tag, count, shape, sync, concurrency, overrides"
    );
    assert_eq!(
        error(&matcher(r#"{ "paths": "/" }"#)),
        "rules[0].match.paths: unknown field, expected one of path, path_prefix, path_regex, methods, authority, headers"
    );
    assert_eq!(
        error(&key(r#"[{ "cookies": "sid" }]"#)),
        "rules[0].key[0].cookies: unknown field, expected one of header, query, cookie, remote_address, forwarded_for, literal, property, on_missing"
    );
    assert_eq!(
        error(&format!(r#"{{ "testing": {{ "now": "x" }}, {}"#, &valkey(r#"{ "cluster": "c" }"#)[1..])),
        "testing.now: unknown field, expected now_header"
    );
    assert_eq!(
        error(&limits(r#"{ "limit": 1, "per od": 1 }"#)),
        "rules[0].limits[0][\"per od\"]: unknown field, expected one of limit, period"
    );
}
