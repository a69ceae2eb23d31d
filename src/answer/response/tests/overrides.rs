//! A per-key override (`rules[].overrides`): the store reports the limits
//! in force in each window's outcome, and every header and the body show
//! those, never the configured ones.

use super::*;

/// [`with_leases`] with the bucket's override in force: 200 per 60 s, 50
/// per 3 s and 8 in flight instead of 20, 5 and 2.
fn overridden(free: u64, lease_retry: u64, retry_3s: u64) -> (Config, Vec<Check>, Decision) {
    let (mut config, checks, mut d) = with_leases(free, lease_retry);
    config.response.x_ratelimit_headers = true;
    for (o, limit, remaining) in d.windows.iter_mut().zip([200, 50, 8]).zip([190, 0, free]).map(|((o, l), r)| (o, l, r))
    {
        *o = WindowOutcome { limit, remaining, overridden: true, ..*o };
    }
    d.windows[1].retry_ms = retry_3s;
    d.allowed = lease_retry == 0 && retry_3s == 0;
    (config, checks, d)
}

fn header(headers: &[Header], name: &str) -> Option<String> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_admission_shows_the_limits_in_force() {
    let (config, checks, d) = overridden(3, 0, 0);
    let names = policy_names(&config, &checks, &d);
    let headers = allowed_headers_of(&config, &checks, &d);
    assert_eq!(headers, allowed_headers(&config, &names, &d), "configured items do not serve: formatted");
    assert_eq!(
        header(&headers, "ratelimit-policy").as_deref(),
        Some(concat!(
            r#""auth.createToken/60s";q=200;w=60, "auth.createToken/3s";q=50;w=3, "#,
            r#""auth.createToken/concurrency";q=8;qu="concurrent-requests""#
        ))
    );
    assert_eq!(
        header(&headers, "ratelimit").as_deref(),
        Some(r#""auth.createToken/60s";r=190;t=60, "auth.createToken/3s";r=0;t=3, "auth.createToken/concurrency";r=3"#)
    );
    assert_eq!(header(&headers, "x-ratelimit-limit").as_deref(), Some("50, 50;w=3"));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_denial_shows_the_limits_in_force_and_says_they_are_an_overrides() {
    let (config, checks, d) = overridden(0, 20_500, 2_100);
    let reply = denied(&config, &policy_names(&config, &checks, &d), &d);
    let policy = header(&reply.headers, "ratelimit-policy").unwrap_or_default();
    assert!(policy.contains(";q=200;w=60") && policy.contains(";q=50;w=3") && policy.contains(";q=8;qu="), "{policy}");
    assert_eq!(header(&reply.headers, "retry-after").as_deref(), Some("21"));
    assert_eq!(header(&reply.headers, "x-ratelimit-limit").as_deref(), Some("50, 50;w=3"));
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(
        body["windows"],
        serde_json::json!([
            { "policy": "auth.createToken/3s", "limit": 50, "window_ms": 3_000, "remaining": 0,
              "retry_after_ms": 2_100, "override": true },
            { "policy": "auth.createToken/concurrency", "concurrent": 8, "lease_ttl_ms": 30_000, "remaining": 0,
              "retry_after_ms": 20_500, "override": true },
        ])
    );
    // Without the flag the same numbers carry no `override` member.
    let mut plain = d.clone();
    plain.windows.iter_mut().for_each(|w| w.overridden = false);
    let reply = denied(&config, &policy_names(&config, &checks, &plain), &plain);
    assert!(!String::from_utf8_lossy(&reply.body).contains("override"));
}

/// A `gcra` window's `t` counts emission intervals of the limit in force:
/// 50 left of an override of 100 per second, full in 500 ms, has its next
/// unit in 10 ms (the configured 10 per second would say 0).
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_gcra_windows_t_counts_with_the_limit_in_force() {
    let config = crate::testing::plugin()
        .with(crate::testing::rule("g").algorithm("gcra").limit(10, "1s").field(r#""overrides": true"#))
        .build();
    let checks = [crate::testing::check(Algorithm::Gcra, 0, "k", &[(10, 1_000)], 1)];
    let d = Decision {
        allowed: true,
        now_ms: 0,
        delay_ms: 0,
        windows: vec![WindowOutcome { overridden: true, ..w(0, 100, 1_000, 50, 500, 0) }],
    };
    let headers = allowed_headers_of(&config, &checks, &d);
    assert_eq!(header(&headers, "ratelimit-policy").as_deref(), Some(r#""g/1s";q=100;w=1"#));
    assert_eq!(header(&headers, "ratelimit").as_deref(), Some(r#""g/1s";r=50;t=1"#));
}
