//! Rules people write, through a real Envoy and Valkey: every key part (a JWT
//! claim via jwt_authn, masked IPv4/IPv6 clients), every match condition, both
//! header families, shadow mode and the metrics after a known sequence.

use crate::support;

use support::plugin::{plugin, rule, Plugin};
use support::{repo_root, Envoy, EnvoyOptions, Extras, Response, Valkey};

fn options(valkey: &Valkey, config: Plugin) -> EnvoyOptions {
    EnvoyOptions { plugin_config: config.json(), valkey_port: valkey.port, concurrency: 1 }
}

/// One rule per key part, each on its own path, each 1 per minute.
fn key_rules() -> Plugin {
    let on = |name: &str, path: &str, part: &str| {
        rule(name).matching(&format!(r#""path": "{path}""#)).key(part).limit(1, "1m")
    };
    let jwt_sub =
        r#"{ "property": ["metadata", "filter_metadata", "envoy.filters.http.jwt_authn", "payload", "sub"] }"#;
    plugin()
        .with(on("q", "/q", r#"{ "query": "api_key" }"#))
        .with(on("c", "/c", r#"{ "cookie": "session" }"#))
        .with(on("ip", "/ip", r#"{ "remote_address": { "v4_prefix": 24, "v6_prefix": 64 } }"#))
        .with(on("xff", "/xff", r#"{ "forwarded_for": { "trusted_hops": 1 } }"#))
        .with(rule("p").path_prefix("/p/").key(r#""path""#).limit(1, "1m"))
        .with(on("m", "/m", r#""method""#))
        .with(on("a", "/a", r#""authority""#))
        .with(
            on("lit", "/lit", r#"{ "literal": "tenant-a" }"#)
                .key(r#"{ "header": "x-api-key", "on_missing": { "default": "anonymous" } }"#),
        )
        .with(on("jwt", "/jwt", jwt_sub))
}

fn jwt_filter() -> String {
    let jwks = std::fs::read_to_string(repo_root().join("tests/fixtures/jwt/jwks.json")).unwrap();
    format!(
        r#"- name: envoy.filters.http.jwt_authn
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication
    providers:
      test:
        issuer: https://issuer.tollgate.test
        audiences: [tollgate]
        local_jwks: {{ inline_string: '{jwks}' }}
        payload_in_metadata: payload
    rules:
      - match: {{ prefix: "/" }}
        requires: {{ requires_any: {{ requirements: [ {{ provider_name: test }}, {{ allow_missing: {{}} }} ] }} }}"#
    )
}

fn jwt(user: &str) -> String {
    let token = std::fs::read_to_string(repo_root().join(format!("tests/fixtures/jwt/{user}.jwt"))).unwrap();
    format!("Bearer {}", token.trim())
}

/// First request of a bucket passes, the second in the same bucket is denied.
fn first_passes_second_denied(envoy: &Envoy, method: &str, path: &str, headers: &[(&str, &str)], what: &str) {
    assert_eq!(envoy.request(method, path, headers).status, 200, "{what}: first request");
    assert_eq!(envoy.request(method, path, headers).status, 429, "{what}: second request, same bucket");
}

fn keys(valkey: &Valkey) -> Vec<String> {
    let tollgate::resp::Value::Array(items) = valkey.cmd(&["KEYS", "*"]) else { panic!("KEYS") };
    let mut keys: Vec<String> =
        items.iter().map(|v| String::from_utf8(v.as_bytes().unwrap().to_vec()).unwrap()).collect();
    keys.sort();
    keys
}

#[test]
fn every_key_part_through_envoy() {
    let valkey = Valkey::start();
    let extras = Extras { http_filters_before: Some(jwt_filter()), ipv6: false };
    let envoy = Envoy::start_extras(&options(&valkey, key_rules()), &extras);

    first_passes_second_denied(&envoy, "GET", "/q?api_key=K1", &[], "query");
    assert_eq!(envoy.request("GET", "/q?x=1&api_key=K2", &[]).status, 200, "another api key");
    assert_eq!(envoy.request("GET", "/q", &[]).header("ratelimit"), None, "no api key: rule skipped");

    first_passes_second_denied(&envoy, "GET", "/c", &[("cookie", "a=1; session=S1")], "cookie");
    assert_eq!(envoy.request("GET", "/c", &[("cookie", "session=S2")]).status, 200);

    first_passes_second_denied(&envoy, "GET", "/ip", &[], "remote address");
    first_passes_second_denied(&envoy, "GET", "/xff", &[("x-forwarded-for", "203.0.113.9, 10.0.0.1")], "xff");
    // The same client behind another trusted proxy is the same bucket.
    assert_eq!(envoy.request("GET", "/xff", &[("x-forwarded-for", "203.0.113.9, 10.0.0.2")]).status, 429);

    first_passes_second_denied(&envoy, "GET", "/p/1?x=1", &[], "path");
    assert_eq!(envoy.request("GET", "/p/2", &[]).status, 200, "another path");
    first_passes_second_denied(&envoy, "GET", "/m", &[], "method");
    assert_eq!(envoy.request("PUT", "/m", &[]).status, 200, "another method");
    first_passes_second_denied(&envoy, "GET", "/a", &[("host", "One.example")], "authority");
    assert_eq!(envoy.request("GET", "/a", &[("host", "one.EXAMPLE")]).status, 429, "case-insensitive");
    first_passes_second_denied(&envoy, "GET", "/lit", &[], "literal + default");
    assert_eq!(envoy.request("GET", "/lit", &[("x-api-key", "k")]).status, 200);

    first_passes_second_denied(&envoy, "GET", "/jwt", &[("authorization", &jwt("alice"))], "jwt sub");
    assert_eq!(envoy.request("GET", "/jwt", &[("authorization", &jwt("bob"))]).status, 200, "another subject");
    assert_eq!(envoy.request("GET", "/jwt", &[]).header("ratelimit"), None, "no token: rule skipped");

    let keys = keys(&valkey);
    for expected in [
        "tollgate:{q:K1}:log",
        "tollgate:{c:S1}:log",
        "tollgate:{ip:127.0.0.0%2F24}:log",
        "tollgate:{xff:203.0.113.9%2F32}:log",
        "tollgate:{p:%2Fp%2F1}:log",
        "tollgate:{m:GET}:log",
        "tollgate:{a:one.example}:log",
        "tollgate:{lit:tenant-a:anonymous}:log",
        "tollgate:{jwt:alice}:log",
        "tollgate:{jwt:bob}:log",
    ] {
        assert!(keys.iter().any(|k| k == expected), "{expected} not in {keys:?}");
    }
}

#[test]
fn ipv6_clients_are_masked_to_their_prefix() {
    let valkey = Valkey::start();
    let envoy = Envoy::start_extras(&options(&valkey, key_rules()), &Extras { http_filters_before: None, ipv6: true });
    first_passes_second_denied(&envoy, "GET", "/ip", &[], "remote address over IPv6");
    assert_eq!(keys(&valkey), ["tollgate:{ip:%3A%3A%2F64}:log"], "::1 masked to ::/64");
}

/// The policies of the rules that matched, from `RateLimit-Policy`.
fn matched(resp: &Response) -> Vec<String> {
    resp.header("ratelimit-policy")
        .map(|h| h.split(", ").map(|i| i.split(';').next().unwrap().trim_matches('"').replace("/1m", "")).collect())
        .unwrap_or_default()
}

#[test]
fn every_match_condition_through_envoy() {
    let valkey = Valkey::start();
    let when = |name: &str, condition: &str| rule(name).matching(condition).limit(100, "1m");
    let config = plugin()
        .with(when("exact", r#""path": "/a""#))
        .with(when("prefix", r#""path_prefix": "/api/""#))
        .with(when("regex", r#""path_regex": "/api/v[0-9]+/items""#))
        .with(when("post", r#""methods": ["POST", "PUT"]"#))
        .with(when("host", r#""authority": "api.example.com""#))
        .with(when("present", r#""headers": [ { "name": "x-api-key", "present": true } ]"#))
        .with(when("hexact", r#""headers": [ { "name": "x-plan", "exact": "free" } ]"#))
        .with(when("hprefix", r#""headers": [ { "name": "user-agent", "prefix": "curl/" } ]"#))
        .with(when("hregex", r#""headers": [ { "name": "x-plan", "regex": "(free|trial)" } ]"#))
        .with(when("notfree", r#""headers": [ { "name": "x-plan", "exact": "free", "invert": true } ]"#));
    let envoy = Envoy::start(&options(&valkey, config));
    let m = |method: &str, path: &str, headers: &[(&str, &str)]| matched(&envoy.request(method, path, headers));
    assert_eq!(m("GET", "/a?x=1", &[]), ["exact", "notfree"]);
    assert_eq!(m("GET", "/api/v2/items", &[]), ["prefix", "regex", "notfree"]);
    assert_eq!(m("GET", "/api/v2/items/7", &[]), ["prefix", "notfree"], "regex matches the whole path");
    assert_eq!(m("PUT", "/x", &[("host", "API.example.com")]), ["post", "host", "notfree"]);
    assert_eq!(
        m("GET", "/x", &[("x-api-key", "k"), ("x-plan", "free"), ("user-agent", "curl/8.5")]),
        ["present", "hexact", "hprefix", "hregex"]
    );
    assert_eq!(m("GET", "/x", &[("x-plan", "trial")]), ["hregex", "notfree"]);
    assert_eq!(m("DELETE", "/nothing", &[("x-plan", "free")]), ["hexact", "hregex"]);
}

#[test]
fn both_header_families_and_a_custom_denial() {
    let valkey = Valkey::start();
    let with_response = |response: &str| plugin().rule("r", None, &[(2, "10s"), (1, "1s")]).top(response);
    let response = r#""response": { "status": 403, "headers": ["ratelimit", "x-ratelimit"], "body": "text", "text": "slow down\n" }"#;
    let envoy = Envoy::start(&options(&valkey, with_response(response)));
    let ok = envoy.request("GET", "/", &[]);
    assert_eq!(ok.status, 200);
    assert_eq!(ok.header("ratelimit"), Some(r#""r/10s";r=1;t=10, "r/1s";r=0;t=1"#));
    assert_eq!(ok.header("x-ratelimit-limit"), Some("1, 1;w=1"), "the most constrained window");
    assert_eq!(ok.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(ok.header("x-ratelimit-reset"), Some("1"));
    let denied = envoy.request("GET", "/", &[]);
    assert_eq!(denied.status, 403);
    assert_eq!(denied.body_text(), "slow down\n");
    assert!(denied.header("retry-after").is_some());
    assert_eq!(denied.header("x-ratelimit-remaining"), Some("0"));
    assert!(denied.header("ratelimit-policy").is_some());

    // Only X-RateLimit, nothing on admitted responses, no body.
    let valkey2 = Valkey::start();
    let response = r#""response": { "headers": ["x-ratelimit"], "body": "none", "on_allowed": false }"#;
    let envoy = Envoy::start(&options(&valkey2, with_response(response)));
    let ok = envoy.request("GET", "/", &[]);
    assert_eq!((ok.header("x-ratelimit-limit"), ok.header("ratelimit")), (None, None));
    let denied = envoy.request("GET", "/", &[]);
    assert_eq!(denied.status, 429);
    assert_eq!(denied.body_text(), "");
    assert_eq!(denied.header("ratelimit"), None);
    assert!(denied.header("x-ratelimit-limit").is_some() && denied.header("retry-after").is_some());
}

#[test]
fn shadow_rules_decide_and_count_but_never_deny() {
    let valkey = Valkey::start();
    let config = plugin().with(rule("trial").field(r#""shadow": true"#).header("x-user").limit(1, "1m")).rule(
        "site",
        None,
        &[(100, "1m")],
    );
    let envoy = Envoy::start(&options(&valkey, config));
    let first = envoy.request("GET", "/", &[("x-user", "u"), ("x-tollgate-shadow-denied", "forged")]);
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-upstream-saw-shadow-denied"), None, "a client cannot forge the report");
    let second = envoy.request("GET", "/", &[("x-user", "u")]);
    assert_eq!(second.status, 200, "shadow: not denied");
    assert_eq!(second.header("x-upstream-saw-shadow-denied"), Some("trial/1m"), "the upstream is told");
    // Consumed exactly as an enforced denial would: nothing anywhere.
    assert_eq!(valkey.int(&["ZCARD", "tollgate:{trial:u}:log"]), 1);
    assert_eq!(valkey.int(&["ZCARD", "tollgate:{site}:log"]), 1);
    assert_eq!(envoy.stat("wasmcustom.tollgate.rule.trial.shadow_denied"), Some(1));
    assert_eq!(envoy.stat("wasmcustom.tollgate.rule.trial.denied"), Some(0));

    // Global shadow: the enforced rule of a shadow filter does not deny either.
    let valkey2 = Valkey::start();
    let envoy = Envoy::start(&options(&valkey2, plugin().rule("one", None, &[(1, "1m")]).shadow(true)));
    assert_eq!(envoy.request("GET", "/", &[]).status, 200);
    let resp = envoy.request("GET", "/", &[]);
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("x-upstream-saw-shadow-denied"), Some("one/1m"));
    assert_eq!(envoy.stat("wasmcustom.tollgate.rule.one.shadow_denied"), Some(1));
}

#[test]
fn metrics_after_a_known_sequence() {
    let mut valkey = Valkey::start();
    let envoy = Envoy::start(&options(&valkey, plugin().rule("auth", Some("x-user"), &[(5, "1m")])));
    for _ in 0..7 {
        envoy.request("GET", "/", &[("x-user", "alice")]);
    }
    envoy.request("GET", "/", &[]);
    valkey.stop();
    assert_eq!(envoy.request("GET", "/", &[("x-user", "bob")]).status, 200, "failure_mode allow");
    let stat = |name: &str| envoy.stat(&format!("wasmcustom.tollgate.{name}"));
    assert_eq!(stat("rule.auth.allowed"), Some(5));
    assert_eq!(stat("rule.auth.denied"), Some(2));
    assert_eq!(stat("rule.auth.skipped"), Some(1));
    assert_eq!(stat("rule.auth.shadow_denied"), Some(0));
    assert_eq!(stat("store.errors"), Some(1));
    assert_eq!(stat("failure_mode.allowed"), Some(1));
    assert_eq!(stat("failure_mode.denied"), Some(0));
    let prometheus = support::http(envoy.admin_port, "GET", "/stats/prometheus", &[]).unwrap().body_text();
    assert!(prometheus.contains("tollgate_rule_auth_allowed{} 5"), "prometheus names as documented");
}
