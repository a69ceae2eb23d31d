use super::*;
mod overrides;

use crate::testing::{outcome as w, seed_decision as decision, seed_setup as setup};

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn admitted_headers_from_configured_items_match_the_formatted_ones() {
    let (config, checks) = setup();
    let mut d = decision(0);
    let names = policy_names(&config, &checks, &d);
    let formatted = allowed_headers(&config, &names, &d);
    assert_eq!(allowed_headers_of(&config, &checks, &d), formatted);
    assert_eq!(formatted[0].1, r#""auth.createToken/60s";q=20;w=60, "auth.createToken/3s";q=5;w=3"#);
    assert_eq!(formatted[1].1, r#""auth.createToken/60s";r=15;t=60, "auth.createToken/3s";r=0;t=3"#);
    // A window that is not its rule's configured one: formatted from it.
    d.windows[1].limit = 7;
    let formatted = allowed_headers(&config, &names, &d);
    assert_eq!(allowed_headers_of(&config, &checks, &d), formatted);
    assert!(formatted[0].1.ends_with(";q=7;w=3"));
    // A check of a rule the configuration does not have: formatted
    // from the policy names ("unknown").
    let stray = [Check { rule: 9, ..checks[0].clone() }];
    let names = policy_names(&config, &stray, &d);
    assert_eq!(names, ["unknown", "unknown"]);
    assert_eq!(allowed_headers_of(&config, &stray, &d), allowed_headers(&config, &names, &d));
    let names = policy_names(&config, &checks, &d);
    // Both families, only X-RateLimit-* headers, or none.
    for response in
        [r#""headers":["ratelimit","x-ratelimit"]"#, r#""headers":["x-ratelimit"]"#, r#""on_allowed":false"#]
    {
        let config = Config::from_json(
            format!(
                r#"{{"valkey":{{"cluster":"c"}},"response":{{{response}}},"rules":[{{"name":"auth.createToken",
                "limits":[{{"limit":20,"period":"60s"}},{{"limit":5,"period":"3s"}}]}}]}}"#
            )
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(allowed_headers_of(&config, &checks, &d), allowed_headers(&config, &names, &d));
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn denial_names_the_violated_window_and_rounds_retry_up() {
    let (config, checks) = setup();
    let d = decision(2_100);
    let reply = denied(&config, &policy_names(&config, &checks, &d), &d);
    assert_eq!((reply.status, reply.details), (429, "tollgate_quota_exceeded"));
    let header = |n: &str| reply.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    assert_eq!(header("retry-after").as_deref(), Some("3"));
    assert_eq!(
        header("ratelimit-policy").as_deref(),
        Some(r#""auth.createToken/60s";q=20;w=60, "auth.createToken/3s";q=5;w=3"#)
    );
    assert_eq!(
        header("ratelimit").as_deref(),
        Some(r#""auth.createToken/60s";r=15;t=60, "auth.createToken/3s";r=0;t=3"#)
    );
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["status"], 429);
    assert_eq!(body["retry_after"], 3);
    assert_eq!(body["type"], "https://iana.org/assignments/http-problem-types#quota-exceeded");
    assert_eq!(body["violated-policies"], serde_json::json!(["auth.createToken/3s"]));
    assert_eq!(body["windows"][0]["policy"], "auth.createToken/3s");
}

/// A violated window that frees a unit long before it is empty (a
/// GCRA, a sliding window): its `t` is the retry, so `Retry-After` is
/// never earlier than the `t` of a violated window.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn retry_after_is_never_earlier_than_a_violated_windows_t() {
    let (config, checks) = setup();
    for (minute, burst, retry_after, ratelimit, x_reset) in [
        (
            w(0, 20, 60_000, 0, 58_000, 1_400),
            w(1, 5, 3_000, 0, 2_500, 600),
            "2",
            "r=0;t=2, \"auth.createToken/3s\";r=0;t=1",
            "2",
        ),
        (
            w(0, 20, 60_000, 3, 58_000, 0),
            w(1, 5, 3_000, 0, 2_500, 600),
            "1",
            "r=3;t=58, \"auth.createToken/3s\";r=0;t=1",
            "1",
        ),
    ] {
        let d = Decision { allowed: false, now_ms: 0, windows: vec![minute, burst], delay_ms: 0 };
        let mut config = config.clone();
        config.response.x_ratelimit_headers = true;
        let reply = denied(&config, &policy_names(&config, &checks, &d), &d);
        let header = |n: &str| reply.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        assert_eq!(header("retry-after").as_deref(), Some(retry_after));
        assert_eq!(header("ratelimit"), Some(format!("\"auth.createToken/60s\";{ratelimit}")));
        assert_eq!(header("x-ratelimit-reset").as_deref(), Some(x_reset));
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn refusals_are_temporary_reduced_capacity() {
    for (reply, detail, details) in [
        (overloaded(), OVERLOADED_DETAIL, "tollgate_overloaded"),
        (store_unavailable(), STORE_UNAVAILABLE_DETAIL, "tollgate_store_unavailable"),
    ] {
        assert_eq!((reply.status, reply.details), (503, details));
        let header = |n: &str| reply.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!((header("retry-after"), header("content-type")), (Some("1"), Some(PROBLEM_CONTENT_TYPE)));
        let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(body["type"], "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity");
        assert_eq!((&body["detail"], &body["violated-policies"]), (&serde_json::json!(detail), &serde_json::json!([])));
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn configured_families_status_and_text_body() {
    let (_, checks) = setup();
    let config = Config::from_json(
        br#"{"valkey":{"cluster":"c"},"rules":[{"name":"auth.createToken",
            "limits":[{"limit":20,"period":"60s"},{"limit":5,"period":"3s"}]}],
            "response":{"status":403,"headers":["x-ratelimit"],"body":"text","text":"slow down","on_allowed":false}}"#,
    )
    .unwrap();
    let d = decision(2_100);
    let reply = denied(&config, &policy_names(&config, &checks, &d), &d);
    assert_eq!(reply.status, 403);
    let names: Vec<&str> = reply.headers.iter().map(|(k, _)| &**k).collect();
    assert_eq!(
        names,
        ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after", "content-type"]
    );
    assert_eq!(reply.headers[0].1, "5, 5;w=3");
    assert_eq!(reply.headers[1].1, "0");
    assert_eq!(reply.headers[2].1, "3");
    assert_eq!(reply.body, b"slow down");
    let d = decision(0);
    assert!(allowed_headers(&config, &policy_names(&config, &checks, &d), &d).is_empty(), "on_allowed: false");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn admitted_requests_get_both_headers() {
    let (config, checks) = setup();
    let d = decision(0);
    let headers = ratelimit_headers(&config, &policy_names(&config, &checks, &d), &d);
    let names: Vec<&str> = headers.iter().map(|(k, _)| k.as_ref()).collect();
    assert_eq!(names, vec!["ratelimit-policy", "ratelimit"]);
}

/// The seed's rule with a concurrency limit of 2 (leases of 30 s), its
/// checks (windows, then the lease set) and a decision over them: the
/// windows as [`decision`] has them, and the lease set with `free` leases,
/// denying for `lease_retry` ms (0: it fits).
fn with_leases(free: u64, lease_retry: u64) -> (Config, Vec<Check>, Decision) {
    let config = crate::testing::plugin()
        .with(crate::testing::rule("auth.createToken").limit(20, "60s").limit(5, "3s").field(r#""concurrency": 2"#))
        .build();
    let (_, mut checks) = setup();
    let lease = crate::testing::check(Algorithm::Lease, 0, "k:lease", &[(2, 30_000)], 1);
    checks.push(lease);
    let mut d = decision(0);
    d.windows.push(WindowOutcome { check: 1, ..w(0, 2, 30_000, free, 29_000, lease_retry) });
    d.allowed = lease_retry == 0;
    (config, checks, d)
}

const LEASE_POLICY: &str = r#""auth.createToken/concurrency";q=2;qu="concurrent-requests""#;

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_admitted_request_sees_its_concurrency_limit_after_the_windows() {
    let (config, checks, d) = with_leases(1, 0);
    let names = policy_names(&config, &checks, &d);
    assert_eq!(names, ["auth.createToken/60s", "auth.createToken/3s", "auth.createToken/concurrency"]);
    let headers = allowed_headers_of(&config, &checks, &d);
    assert_eq!(headers, allowed_headers(&config, &names, &d), "configured items and formatted ones agree");
    assert_eq!(
        headers[0].1,
        format!(r#""auth.createToken/60s";q=20;w=60, "auth.createToken/3s";q=5;w=3, {LEASE_POLICY}"#)
    );
    // One lease free: no `t` (a lease frees when a request ends).
    assert_eq!(
        headers[1].1,
        r#""auth.createToken/60s";r=15;t=60, "auth.createToken/3s";r=0;t=3, "auth.createToken/concurrency";r=1"#
    );
    // A lease window that is not the configured one: formatted from it.
    let mut other = d.clone();
    other.windows[2].limit = 3;
    let formatted = allowed_headers(&config, &names, &other);
    assert_eq!(allowed_headers_of(&config, &checks, &other), formatted);
    assert!(formatted[0].1.ends_with(r#";q=3;qu="concurrent-requests""#), "{}", formatted[0].1);
    // A lease check of a rule without a concurrency limit has no name.
    let (plain, _) = setup();
    assert_eq!(policy_names(&plain, &checks, &d)[2], "unknown");
    assert_eq!(
        allowed_headers_of(&plain, &checks, &d),
        allowed_headers(&plain, &policy_names(&plain, &checks, &d), &d)
    );
}

/// The full lease set denied: its item gets `t` = until its earliest lease
/// expires, which is also `Retry-After` (the windows had room), and the
/// problem names the concurrency limit.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_full_lease_set_denies_until_its_earliest_lease_expires() {
    let (config, checks, mut d) = with_leases(0, 20_500);
    d.windows[1] = w(1, 5, 3_000, 2, 2_500, 0);
    let reply = denied(&config, &policy_names(&config, &checks, &d), &d);
    let header = |n: &str| reply.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    assert_eq!(header("retry-after").as_deref(), Some("21"));
    assert_eq!(
        header("ratelimit").as_deref(),
        Some(
            r#""auth.createToken/60s";r=15;t=60, "auth.createToken/3s";r=2;t=3, "auth.createToken/concurrency";r=0;t=21"#
        )
    );
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["auth.createToken/concurrency"]));
    assert_eq!(
        body["windows"][0],
        serde_json::json!({ "policy": "auth.createToken/concurrency", "concurrent": 2, "lease_ttl_ms": 30_000,
                            "remaining": 0, "retry_after_ms": 20_500 })
    );
    assert_eq!(body["retry_after"], 21);
}

/// A window denied, the lease set had room: the lease item has no `t`,
/// and `Retry-After` is the window's.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_window_denies_while_leases_are_free() {
    let (config, checks, mut d) = with_leases(2, 0);
    d.windows[1].retry_ms = 2_100;
    d.allowed = false;
    let reply = denied(&config, &policy_names(&config, &checks, &d), &d);
    let header = |n: &str| reply.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    assert_eq!(header("retry-after").as_deref(), Some("3"));
    assert!(header("ratelimit")
        .unwrap()
        .ends_with(r#", "auth.createToken/3s";r=0;t=3, "auth.createToken/concurrency";r=2"#));
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["auth.createToken/3s"]));
    // Both at once: the later of the two.
    let (config, checks, mut d) = with_leases(0, 20_500);
    d.windows[1].retry_ms = 2_100;
    let reply = denied(&config, &policy_names(&config, &checks, &d), &d);
    let header = |n: &str| reply.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    assert_eq!(header("retry-after").as_deref(), Some("21"));
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["auth.createToken/3s", "auth.createToken/concurrency"]));
}

/// `X-RateLimit-*` describe the most constrained window, never a
/// concurrency limit (not a rate, no reset), even one with fewer left.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn x_ratelimit_headers_describe_windows_only() {
    let (mut config, checks, mut d) = with_leases(0, 20_500);
    config.response.x_ratelimit_headers = true;
    d.windows[1] = w(1, 5, 3_000, 2, 2_500, 0);
    let reply = denied(&config, &policy_names(&config, &checks, &d), &d);
    let header = |n: &str| reply.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    assert_eq!(header("x-ratelimit-limit").as_deref(), Some("5, 5;w=3"));
    assert_eq!(header("x-ratelimit-remaining").as_deref(), Some("2"));
    assert_eq!(header("retry-after").as_deref(), Some("21"));
    let admitted = allowed_headers_of(&config, &checks, &with_leases(0, 0).2);
    assert!(admitted.contains(&(Cow::Borrowed("x-ratelimit-limit"), "5, 5;w=3".to_owned())), "{admitted:?}");
}

/// A `gcra` window's `t` is when its next unit is back, from its check
/// (configured items) and from its policy name (formatted) alike.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_gcra_windows_t_is_its_next_unit() {
    let config = crate::testing::plugin()
        .with(crate::testing::rule("g").algorithm("gcra").limit(5, "3s").field(r#""concurrency": 1"#))
        .build();
    let checks = [
        crate::testing::check(Algorithm::Gcra, 0, "k", &[(5, 3_000)], 1),
        crate::testing::check(Algorithm::Lease, 0, "k:lease", &[(1, 30_000)], 1),
    ];
    // 2 left, full again in 2.5 s: the third unit is back 1.2 s sooner.
    let d = Decision {
        allowed: true,
        now_ms: 0,
        delay_ms: 0,
        windows: vec![w(0, 5, 3_000, 2, 2_500, 0), WindowOutcome { check: 1, ..w(0, 1, 30_000, 0, 30_000, 0) }],
    };
    let names = policy_names(&config, &checks, &d);
    assert_eq!(algorithm_of(&config, names[0]), Algorithm::Gcra);
    assert_eq!(algorithm_of(&config, names[1]), Algorithm::Lease);
    assert_eq!(algorithm_of(&config, "unknown"), Algorithm::SlidingLog);
    assert_eq!(algorithm_of(&config, "nope/3s"), Algorithm::SlidingLog);
    let headers = allowed_headers_of(&config, &checks, &d);
    assert_eq!(headers, allowed_headers(&config, &names, &d));
    assert_eq!(headers[1].1, r#""g/3s";r=2;t=2, "g/concurrency";r=0"#);
}
