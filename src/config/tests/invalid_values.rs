//! Unit tests: rejections by validation, with their exact messages.

use super::*;

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn cluster() {
    let cluster = |c: &str| error(&valkey(&format!(r#"{{ "cluster": {} }}"#, js(c))));
    assert_eq!(cluster(""), "valkey.cluster: must not be empty");
    let long = "c".repeat(256);
    assert_eq!(cluster(&long), "valkey.cluster: must be at most 255 bytes (got 256)");
    for (bad, shown) in [("a b", "' '"), ("a\tb", "'\\t'"), ("a\u{7f}", "'\\u{7f}'"), ("a\u{a0}", "'\\u{a0}'")] {
        assert_eq!(
            cluster(bad),
            format!(
                "valkey.cluster: invalid character {shown} in {bad:?}: whitespace and control characters are not allowed"
            )
        );
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn key_prefix_and_rule_names() {
    let prefix = |p: &str| error(&valkey(&format!(r#"{{ "cluster": "c", "key_prefix": {} }}"#, js(p))));
    let name =
        |n: &str| error(&rule(&format!(r#"{{ "name": {}, "limits": [ {{ "limit": 1, "period": 1 }} ] }}"#, js(n))));
    for (check, path) in [(&prefix as &dyn Fn(&str) -> String, "valkey.key_prefix"), (&name, "rules[0].name")] {
        assert_eq!(check(""), format!("{path}: must not be empty"));
        assert_eq!(check(&"a".repeat(65)), format!("{path}: must be at most 64 characters (got 65)"));
        for (bad, shown) in [("a/b", "'/'"), ("a b", "' '"), ("é", "'é'"), ("a{b}", "'{'")] {
            assert_eq!(check(bad), format!("{path}: invalid character {shown} in {bad:?}: {NAME}"));
        }
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn failure_mode_values() {
    let mode = |m: &str| error(&format!(r#"{{ "failure_mode": {m}, {}"#, &valkey(r#"{ "cluster": "c" }"#)[1..]));
    assert_eq!(mode("\"Allow\""), "failure_mode: unknown value \"Allow\", expected one of allow, deny, local");
    assert_eq!(mode("\"\""), "failure_mode: unknown value \"\", expected one of allow, deny, local");
    assert_eq!(mode("true"), "failure_mode: invalid type: boolean `true`, expected a string");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn rules_list() {
    assert_eq!(error(r#"{ "valkey": { "cluster": "c" }, "rules": [] }"#), "rules: must not be empty");
    let r = |name: &str| format!(r#"{{ "name": "{name}", "limits": [ {{ "limit": 1, "period": 1 }} ] }}"#);
    assert_eq!(
        error(&rule(&[r("a"), r("auth.createToken"), r("b"), r("auth.createToken")].join(","))),
        "rules[3].name: duplicate rule name \"auth.createToken\" (also rules[1].name)"
    );
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn match_rules() {
    assert_eq!(error(&matcher(r#"{ "path_prefix": "auth" }"#)), "rules[0].match.path_prefix: must start with '/'");
    assert_eq!(error(&matcher(r#"{ "path_prefix": "" }"#)), "rules[0].match.path_prefix: must start with '/'");
    assert_eq!(error(&matcher(r#"{ "methods": [] }"#)), "rules[0].match.methods: must not be empty");
    for bad in ["", "GE T", "M-SEARCH", "GET1", "É"] {
        assert_eq!(
            error(&matcher(&format!(r#"{{ "methods": ["GET", {}] }}"#, js(bad)))),
            format!("rules[0].match.methods[1]: invalid HTTP method {bad:?}: expected letters only")
        );
    }
    assert_eq!(
        error(&matcher(r#"{ "methods": ["GET", "POST", "get"] }"#)),
        "rules[0].match.methods[2]: duplicate method \"GET\" (also rules[0].match.methods[0])"
    );
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn key_rules() {
    let part = r#"{ "header": "x" }"#;
    let nine = [part; 9].join(",");
    assert_eq!(error(&key(&format!("[{nine}]"))), "rules[0].key: must have at most 8 parts (got 9)");
    assert!(Config::from_json(key(&format!("[{}]", [part; 8].join(","))).as_bytes()).is_ok());
    for bad in ["", ":", "x user", "x:y", "::a", "x\u{e9}", "a\"b", "(x)"] {
        assert_eq!(
            error(&key(&format!(r#"[{{ "header": "ok" }}, {{ "header": {} }}]"#, js(bad)))),
            format!("rules[0].key[1].header: invalid header name {bad:?}: {HEADER}")
        );
    }
    assert_eq!(
        error(&format!(r#"{{ "testing": {{ "now_header": "x now" }}, {}"#, &valkey("{ \"cluster\": \"c\" }")[1..])),
        format!("testing.now_header: invalid header name \"x now\": {HEADER}")
    );
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn limit_values() {
    let limit = |n: &str| error(&limits(&format!(r#"{{ "limit": {n}, "period": 1 }}"#)));
    for zero in ["0", "-1", "-0", "0.0", "-2.5"] {
        assert_eq!(limit(zero), "rules[0].limits[0].limit: must be > 0", "{zero}");
    }
    for big in ["1000000001", "18446744073709551615", "100000000000000000000", "1e10"] {
        assert_eq!(limit(big), "rules[0].limits[0].limit: must be <= 1000000000", "{big}");
    }
    for fraction in ["1.5", "5.0", "1e3"] {
        assert_eq!(limit(fraction), "rules[0].limits[0].limit: must be an integer", "{fraction}");
    }
    assert_eq!(limit("\"20\""), "rules[0].limits[0].limit: invalid type: string \"20\", expected a JSON number");
    assert_eq!(limit("null"), "rules[0].limits[0].limit: invalid type: null, expected a JSON number");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn windows_list() {
    assert_eq!(error(&limits("")), "rules[0].limits: must not be empty");
    let nine: Vec<String> = (1..=9).map(|s| format!(r#"{{ "limit": 1, "period": {s} }}"#)).collect();
    assert_eq!(error(&limits(&nine.join(","))), "rules[0].limits: must have at most 8 windows (got 9)");
    assert_eq!(
        error(&limits(
            r#"{ "limit": 20, "period": "60s" }, { "limit": 5, "period": "3s" }, { "limit": 1, "period": "3s" }"#
        )),
        "rules[0].limits[2].period: same period as rules[0].limits[1].period (3s)"
    );
    assert_eq!(
        error(&limits(r#"{ "limit": 20, "period": "1m" }, { "limit": 5, "period": 60 }"#)),
        "rules[0].limits[1].period: same period as rules[0].limits[0].period (60s = 1m)"
    );
    assert_eq!(
        error(&limits(r#"{ "limit": 20, "period": "1000ms" }, { "limit": 5, "period": "1s" }"#)),
        "rules[0].limits[1].period: same period as rules[0].limits[0].period (1s = 1000ms)"
    );
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn period_values() {
    let p = "rules[0].limits[0].period";
    for zero in ["\"0s\"", "\"0ms\"", "\"00d\"", "0"] {
        assert_eq!(period(zero), format!("{p}: must be > 0"), "{zero}");
    }
    for big in ["\"367d\"", "\"31622400001ms\"", "31622401", "\"99999999999999999999d\"", "18446744073709551615"] {
        assert_eq!(period(big), format!("{p}: must be <= 366d"), "{big}");
    }
    for (json, shown) in [
        ("\"\"", "\"\""),
        ("\"3\"", "\"3\""),
        ("\"3S\"", "\"3S\""),
        ("\"-1s\"", "\"-1s\""),
        ("\"1.5s\"", "\"1.5s\""),
        ("\"3 s\"", "\"3 s\""),
        ("\"3w\"", "\"3w\""),
        ("-1", "-1"),
        ("1.5", "1.5"),
        ("3.0", "3.0"),
        ("true", "true"),
        ("null", "null"),
        ("[3]", "[...]"),
        ("{}", "{...}"),
    ] {
        assert_eq!(period(json), format!("{p}: invalid duration {shown}: {SYNTAX}"), "{json}");
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn timeout_values() {
    let t = "valkey.timeout";
    assert_eq!(timeout("\"0ms\""), format!("{t}: must be > 0"));
    assert_eq!(timeout("0"), format!("{t}: must be > 0"));
    assert_eq!(timeout("\"60001ms\""), format!("{t}: must be <= 60s"));
    assert_eq!(timeout("61"), format!("{t}: must be <= 60s"));
    assert_eq!(timeout("\"2m\""), format!("{t}: must be <= 60s"));
    assert_eq!(timeout("\"99999999999999999999999s\""), format!("{t}: must be <= 60s"));
    assert_eq!(timeout("\"100 ms\""), format!("{t}: invalid duration \"100 ms\": {SYNTAX}"));
    assert_eq!(timeout("false"), format!("{t}: invalid duration false: {SYNTAX}"));
}
