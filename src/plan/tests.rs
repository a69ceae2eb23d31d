use super::*;
use std::collections::HashMap;

#[derive(Default)]
struct Req {
    headers: HashMap<String, Vec<u8>>,
    properties: HashMap<Vec<String>, Vec<u8>>,
}

impl Req {
    fn new(method: &str, path: &str) -> Req {
        Req::default().with(":method", method).with(":path", path).with(":authority", "api.example.com")
    }

    fn with(mut self, name: &str, value: &str) -> Req {
        self.headers.insert(name.to_owned(), value.as_bytes().to_vec());
        self
    }

    fn prop(mut self, path: &[&str], value: &str) -> Req {
        self.properties.insert(path.iter().map(|s| s.to_string()).collect(), value.as_bytes().to_vec());
        self
    }
}

impl RequestView for Req {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        self.headers.get(name).cloned()
    }
    fn property(&self, path: &[String]) -> Option<Vec<u8>> {
        self.properties.get(path).cloned()
    }
}

fn config(rules: &str) -> Config {
    let json = format!(r#"{{ "valkey": {{ "cluster": "c" }}, "rules": {rules} }}"#);
    Config::from_json(json.as_bytes()).unwrap()
}

fn seed() -> Config {
    config(
        r#"[
        { "name": "auth.createToken",
          "match": { "path_prefix": "/auth/token", "methods": ["POST"] },
          "key": [ { "header": "x-user-id" } ],
          "limits": [ { "limit": 20, "period": "60s" }, { "limit": 5, "period": "3s" } ] },
        { "name": "global", "limits": [ { "limit": 1000, "period": 1 } ] }
      ]"#,
    )
}

fn rules(c: &Config, r: &Req) -> Vec<usize> {
    plan(c, r).checks.iter().map(|c| c.rule).collect()
}

fn key_of(rule_json: &str, r: &Req) -> Option<String> {
    let c = config(&format!("[{rule_json}]"));
    plan(&c, r).checks.first().map(|c| c.key.clone())
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn matching_rule_yields_a_keyed_check_with_every_window() {
    let p = plan(&seed(), &Req::new("POST", "/auth/token?x=1").with("x-user-id", "alice"));
    assert_eq!(p.checks.len(), 2);
    assert_eq!(p.checks[0].key, "tollgate:{auth.createToken:alice}:log");
    let windows: Vec<(u64, u64)> = p.checks[0].windows.iter().map(|w| (w.limit.get(), w.period_ms.get())).collect();
    assert_eq!(windows, vec![(20, 60_000), (5, 3_000)]);
    assert_eq!(p.checks[1].key, "tollgate:{global}:log");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn method_path_and_missing_key_each_skip_the_rule() {
    let c = seed();
    assert_eq!(rules(&c, &Req::new("GET", "/auth/token").with("x-user-id", "a")), vec![1]);
    assert_eq!(rules(&c, &Req::new("POST", "/auth/tok").with("x-user-id", "a")), vec![1]);
    assert_eq!(rules(&c, &Req::new("POST", "/x?/auth/token").with("x-user-id", "a")), vec![1]);
    let missing = plan(&c, &Req::new("POST", "/auth/token"));
    assert_eq!(missing.checks.iter().map(|c| c.rule).collect::<Vec<_>>(), vec![1]);
    assert_eq!(missing.skipped, vec![0], "a rule skipped for a missing key part is reported");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn every_match_condition() {
    let c = config(
        r#"[
        { "name": "exact", "match": { "path": "/a" }, "limits": [ { "limit": 1, "period": 1 } ] },
        { "name": "regex", "match": { "path_regex": "/v[0-9]+/items/[^/]+" }, "limits": [ { "limit": 1, "period": 1 } ] },
        { "name": "host", "match": { "authority": "API.example.com" }, "limits": [ { "limit": 1, "period": 1 } ] },
        { "name": "present", "match": { "headers": [ { "name": "x-key", "present": true } ] }, "limits": [ { "limit": 1, "period": 1 } ] },
        { "name": "absent", "match": { "headers": [ { "name": "x-key", "present": false } ] }, "limits": [ { "limit": 1, "period": 1 } ] },
        { "name": "exactv", "match": { "headers": [ { "name": "x-plan", "exact": "free" } ] }, "limits": [ { "limit": 1, "period": 1 } ] },
        { "name": "prefixv", "match": { "headers": [ { "name": "user-agent", "prefix": "curl/" } ] }, "limits": [ { "limit": 1, "period": 1 } ] },
        { "name": "regexv", "match": { "headers": [ { "name": "x-plan", "regex": "fr.e" } ] }, "limits": [ { "limit": 1, "period": 1 } ] },
        { "name": "inverted", "match": { "headers": [ { "name": "x-plan", "exact": "free", "invert": true } ] }, "limits": [ { "limit": 1, "period": 1 } ] }
      ]"#,
    );
    let names = |r: Req| rules(&c, &r).into_iter().map(|i| c.rules[i].name.clone()).collect::<Vec<_>>();
    assert_eq!(names(Req::new("GET", "/a?q=1")), ["exact", "host", "absent", "inverted"]);
    assert_eq!(names(Req::new("GET", "/v2/items/9").with(":authority", "other")), ["regex", "absent", "inverted"]);
    assert_eq!(names(Req::new("GET", "/v2/items/9/x").with(":authority", "other")), ["absent", "inverted"]);
    assert_eq!(
        names(Req::new("GET", "/b").with("x-key", "k").with("x-plan", "free").with("user-agent", "curl/8")),
        ["host", "present", "exactv", "prefixv", "regexv"]
    );
    assert_eq!(names(Req::new("GET", "/b").with("x-plan", "freee")), ["host", "absent", "inverted"]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn every_key_source() {
    let r = Req::new("PUT", "/p/1?api_key=K%201&x=2")
        .with("cookie", "a=1; session=S9")
        .with("x-forwarded-for", "203.0.113.9, 10.0.0.1")
        .with(":authority", "Api.Example.com")
        .prop(&["source", "address"], "192.168.7.42:51000")
        .prop(&["metadata", "filter_metadata", "envoy.filters.http.jwt_authn", "payload", "sub"], "user-7");
    let k = |part: &str| {
        key_of(&format!(r#"{{ "name": "r", "key": [ {part} ], "limits": [ {{ "limit": 1, "period": 1 }} ] }}"#), &r)
    };
    assert_eq!(k(r#"{ "query": "api_key" }"#).as_deref(), Some("tollgate:{r:K%201}:log"));
    assert_eq!(k(r#"{ "cookie": "session" }"#).as_deref(), Some("tollgate:{r:S9}:log"));
    assert_eq!(k(r#"{ "remote_address": { "v4_prefix": 24 } }"#).as_deref(), Some("tollgate:{r:192.168.7.0%2F24}:log"));
    assert_eq!(k(r#"{ "remote_address": {} }"#).as_deref(), Some("tollgate:{r:192.168.7.42%2F32}:log"));
    assert_eq!(
        k(r#"{ "forwarded_for": { "trusted_hops": 1 } }"#).as_deref(),
        Some("tollgate:{r:203.0.113.9%2F32}:log")
    );
    assert_eq!(k(r#""path""#).as_deref(), Some("tollgate:{r:%2Fp%2F1}:log"));
    assert_eq!(k(r#""method""#).as_deref(), Some("tollgate:{r:PUT}:log"));
    assert_eq!(k(r#""authority""#).as_deref(), Some("tollgate:{r:api.example.com}:log"));
    assert_eq!(k(r#"{ "literal": "tenant-a" }"#).as_deref(), Some("tollgate:{r:tenant-a}:log"));
    assert_eq!(
        k(r#"{ "property": ["metadata", "filter_metadata", "envoy.filters.http.jwt_authn", "payload", "sub"] }"#)
            .as_deref(),
        Some("tollgate:{r:user-7}:log")
    );
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn on_missing_default_stands_in_and_skip_rule_skips() {
    let r = Req::new("GET", "/");
    let rule = |on_missing: &str| {
        format!(
            r#"{{ "name": "r", "key": [ {{ "header": "x-api-key", {on_missing} }} ], "limits": [ {{ "limit": 1, "period": 1 }} ] }}"#
        )
    };
    assert_eq!(
        key_of(&rule(r#""on_missing": { "default": "anonymous" }"#), &r).as_deref(),
        Some("tollgate:{r:anonymous}:log")
    );
    assert_eq!(key_of(&rule(r#""on_missing": "skip_rule""#), &r), None);
    let xff = r#"{ "name": "r", "key": [ { "forwarded_for": { "trusted_hops": 5 }, "on_missing": { "default": "none" } } ], "limits": [ { "limit": 1, "period": 1 } ] }"#;
    assert_eq!(key_of(xff, &r.with("x-forwarded-for", "1.2.3.4")).as_deref(), Some("tollgate:{r:none}:log"));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn users_get_distinct_buckets() {
    let c = seed();
    let a = plan(&c, &Req::new("POST", "/auth/token").with("x-user-id", "a"));
    let b = plan(&c, &Req::new("POST", "/auth/token").with("x-user-id", "b"));
    assert_ne!(a.checks[0].key, b.checks[0].key);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn algorithm_and_cost_reach_the_check_and_name_the_key() {
    let c = config(
        r#"[ { "name": "a", "algorithm": "sliding_window", "cost": 3, "limits": [ { "limit": 5, "period": 1 } ] },
             { "name": "b", "limits": [ { "limit": 5, "period": 1 } ] } ]"#,
    );
    let checks = plan(&c, &Req::new("GET", "/")).checks;
    assert_eq!(checks[0].key, "tollgate:{a}:sw");
    assert_eq!((checks[0].algorithm, checks[0].cost.get()), (crate::limiter::Algorithm::SlidingWindow, 3));
    assert_eq!(checks[1].key, "tollgate:{b}:log");
    assert_eq!((checks[1].algorithm, checks[1].cost.get()), (crate::limiter::Algorithm::SlidingLog, 1));
}

/// A request that records which headers were read.
struct Reads {
    inner: Req,
    read: std::cell::RefCell<Vec<String>>,
}

impl RequestView for Reads {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        self.read.borrow_mut().push(name.to_owned());
        self.inner.header(name)
    }
    fn property(&self, path: &[String]) -> Option<Vec<u8>> {
        self.inner.property(path)
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_rule_without_path_conditions_never_reads_the_path() {
    let c = config(
        r#"[ { "name": "u", "key": [ { "header": "x-user-id" } ], "limits": [ { "limit": 1, "period": 1 } ] } ]"#,
    );
    let r = Reads { inner: Req::new("GET", "/").with("x-user-id", "alice"), read: Default::default() };
    assert_eq!(plan(&c, &r).checks.len(), 1);
    assert_eq!(*r.read.borrow(), ["x-user-id"]);
    let r = Reads { inner: Req::new("GET", "/a"), read: Default::default() };
    assert!(!any_rule_matches(
        &config(r#"[ { "name": "p", "match": { "path": "/b" }, "limits": [ { "limit": 1, "period": 1 } ] } ]"#),
        &r
    ));
    assert_eq!(*r.read.borrow(), [":path"]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn the_headers_rules_read_are_known_at_configuration_time() {
    let c = config(
        r#"[
        { "name": "a", "match": { "path_prefix": "/a", "methods": ["GET"], "headers": [ { "name": "x-tier", "exact": "free" } ] },
          "key": [ { "header": "x-user-id" }, { "query": "k" }, { "cookie": "s" } ], "limits": [ { "limit": 1, "period": 1 } ] },
        { "name": "b", "match": { "authority": "API.example.com" },
          "key": [ { "forwarded_for": { "trusted_hops": 1 } }, { "remote_address": {} }, "method", "path" ],
          "limits": [ { "limit": 1, "period": 1 } ] }
      ]"#,
    );
    let reads = |prefilter| {
        let reads = header_reads(&c, prefilter);
        reads.iter().map(|(name, n)| format!("{name} {n}")).collect::<Vec<_>>()
    };
    assert_eq!(
        reads(false),
        [":path 3", ":method 2", "x-tier 1", "x-user-id 1", "cookie 1", ":authority 1", "x-forwarded-for 1"]
    );
    assert_eq!(
        reads(true),
        [":path 4", ":method 3", "x-tier 2", "x-user-id 1", "cookie 1", ":authority 2", "x-forwarded-for 1"]
    );
    assert!(can_match_none(&c));
    assert!(!can_match_none(&seed()), "the seed's global rule matches every request");
    let kept = [":path", ":method", "x-tier", ":authority"].map(String::from).to_vec();
    use crate::plan::Reads as PlanReads;
    assert_eq!(PlanReads::of(&c), PlanReads { prefilter: true, headers_kept: kept });
    assert!(!PlanReads::of(&seed()).prefilter);
    let mut shadowed = c.clone();
    shadowed.shadow = true;
    let reads = PlanReads::of(&shadowed);
    assert!(!reads.prefilter, "shadow mode removes a header from every request");
    assert_eq!(reads.headers_kept, [":path", ":method"], "conditions are then read once each");
    let get = |path: &str| Req::default().with(":method", "GET").with(":path", path);
    assert!(any_rule_matches(&c, &get("/a?x=1").with("x-tier", "free")));
    assert!(!any_rule_matches(&c, &get("/a?x=1").with("x-tier", "paid")));
    assert!(!any_rule_matches(&c, &get("/b")));
    assert!(any_rule_matches(&c, &get("/b").with(":authority", "Api.Example.com")));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn keys_of_every_size_keep_every_part() {
    let mut c =
        config(r#"[ { "name": "k", "key": [ { "literal": "a" } ], "limits": [ { "limit": 1, "period": 1 } ] } ]"#);
    let r = Req::new("GET", "/p").with("x-user-id", "u");
    assert_eq!(plan(&c, &r).checks[0].key, "tollgate:{k:a}:log");
    // More parts than a configuration may have (built in code): all kept.
    for i in 1..10 {
        let source =
            if i % 2 == 0 { KeySource::Literal(format!("l{i}")) } else { KeySource::Header("x-user-id".into()) };
        c.rules[0].key.push(crate::config::KeyPart { source, on_missing: OnMissing::SkipRule });
    }
    assert_eq!(plan(&c, &r).checks[0].key, "tollgate:{k:a:u:l2:u:l4:u:l6:u:l8:u}:log");
    c.rules[0].key.truncate(8);
    assert_eq!(plan(&c, &r).checks[0].key, "tollgate:{k:a:u:l2:u:l4:u:l6:u}:log");
}

/// A rule with a concurrency limit: its window check, then its lease
/// check on the same bucket (suffix `lease`), one lease whatever the cost.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_concurrency_limit_adds_a_lease_check_after_the_rules() {
    use crate::limiter::Algorithm;
    let c = config(
        r#"[ { "name": "api", "key": [ { "header": "x-user-id" } ], "cost": 3, "algorithm": "gcra",
               "limits": [ { "limit": 50, "period": "1m" } ], "concurrency": { "limit": 4, "lease_ttl": "10s" } },
             { "name": "global", "limits": [ { "limit": 1000, "period": 1 } ] } ]"#,
    );
    let checks = plan(&c, &Req::new("GET", "/").with("x-user-id", "alice")).checks;
    let keys: Vec<&str> = checks.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(keys, ["tollgate:{api:alice}:gcra", "tollgate:{api:alice}:lease", "tollgate:{global}:log"]);
    let lease = &checks[1];
    assert_eq!((lease.rule, lease.algorithm, lease.cost.get()), (0, Algorithm::Lease, 1));
    assert_eq!((lease.check_only, lease.lease.as_deref()), (false, None));
    let concurrency = c.rules[0].concurrency.as_ref().unwrap();
    assert!(Rc::ptr_eq(&lease.windows, &concurrency.window), "the rule's window, shared");
    assert_eq!(lease.windows.iter().map(|w| (w.limit.get(), w.period_ms.get())).collect::<Vec<_>>(), [(4, 10_000)]);
    assert_eq!((checks[0].algorithm, checks[0].cost.get()), (Algorithm::Gcra, 3));
    // A missing key part skips the rule: both of its checks.
    let skipped = plan(&c, &Req::new("GET", "/"));
    assert_eq!(skipped.checks.iter().map(|c| c.key.as_str()).collect::<Vec<_>>(), ["tollgate:{global}:log"]);
    assert_eq!(skipped.skipped, [0]);
}

/// The lease set is in the slot of the rule's bucket, whatever the values,
/// the algorithm and the hash tag: one atomic call decides both.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_lease_set_shares_its_buckets_slot() {
    use crate::store::cluster::key_slot;
    let c = config(
        r#"[ { "name": "a", "key": [ { "header": "x-user-id" }, "path" ], "concurrency": 2,
               "limits": [ { "limit": 5, "period": 1 } ] },
             { "name": "b", "key": [ "path", { "header": "x-user-id" } ], "hash_tag": 1, "concurrency": 2,
               "algorithm": "fixed_window", "limits": [ { "limit": 5, "period": 1 } ] } ]"#,
    );
    let mut rng = crate::testing::Rng(0x2545_f491_4f6c_dd1d);
    for _ in 0..200 {
        let user: String = (0..rng.next(90)).map(|_| char::from(b' ' + rng.next(95) as u8)).collect();
        let path = format!("/p/{}", rng.next(1_000_000));
        let checks = plan(&c, &Req::new("GET", &path).with("x-user-id", &user)).checks;
        assert_eq!(checks.len(), 4, "{user:?}");
        for pair in checks.chunks(2) {
            let (bucket, lease) = (&pair[0].key, &pair[1].key);
            assert!(lease.ends_with(":lease"), "{lease}");
            assert_eq!(key_slot(bucket.as_bytes()), key_slot(lease.as_bytes()), "{bucket} {lease}");
        }
        // Tagged by the user alone: the lease set keeps the tag.
        let tag = |key: &str| key.split_once('}').map(|(tag, _)| tag.to_owned());
        assert_eq!(tag(&checks[2].key), tag(&checks[3].key));
    }
}

/// A rule with `overrides`: its window check and its lease check both name
/// the bucket's override hash, one Rc for both, in the bucket's slot; a
/// rule without it names none.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_rule_with_overrides_names_its_override_hash_on_every_check() {
    use crate::store::cluster::key_slot;
    let c = config(
        r#"[ { "name": "api", "key": [ { "header": "x-user-id" } ], "overrides": true, "algorithm": "gcra",
               "limits": [ { "limit": 50, "period": "1m" } ], "concurrency": 4 },
             { "name": "plain", "key": [ { "header": "x-user-id" } ], "limits": [ { "limit": 9, "period": 1 } ] },
             { "name": "off", "overrides": false, "limits": [ { "limit": 9, "period": 1 } ], "concurrency": 1 } ]"#,
    );
    let checks = plan(&c, &Req::new("GET", "/").with("x-user-id", "alice")).checks;
    let keys: Vec<(&str, Option<&str>)> = checks.iter().map(|c| (c.key.as_str(), c.override_key.as_deref())).collect();
    let ovr = Some("tollgate:{api:alice}:ovr");
    assert_eq!(
        keys,
        [
            ("tollgate:{api:alice}:gcra", ovr),
            ("tollgate:{api:alice}:lease", ovr),
            ("tollgate:{plain:alice}:log", None),
            ("tollgate:{off}:log", None),
            ("tollgate:{off}:lease", None),
        ]
    );
    let (window, lease) = (checks[0].override_key.as_ref().unwrap(), checks[1].override_key.as_ref().unwrap());
    assert!(Rc::ptr_eq(window, lease), "one override key for the rule's checks");
    assert_eq!(key_slot(window.as_bytes()), key_slot(checks[0].key.as_bytes()));
    // A hash tag from one part and odd values keep the hash in the slot.
    let c = config(
        r#"[ { "name": "t", "key": [ "path", { "header": "x-user-id" } ], "hash_tag": 1, "overrides": true,
               "limits": [ { "limit": 5, "period": 1 } ] } ]"#,
    );
    for user in ["bob", "a:b}{c", "%3A", ""] {
        let check = plan(&c, &Req::new("GET", "/x:y").with("x-user-id", user)).checks.remove(0);
        let ovr = check.override_key.unwrap();
        assert!(ovr.ends_with(":ovr") && !ovr.ends_with(":log:ovr"), "{ovr}");
        assert_eq!(key_slot(ovr.as_bytes()), key_slot(check.key.as_bytes()), "{ovr}");
    }
}
