use super::*;
use crate::limiter::WindowOutcome;
use wasm_bindgen_test::wasm_bindgen_test;

const LOG: Algorithm = Algorithm::SlidingLog;

fn outcome(limit: u64, period_ms: u64, remaining: u64, reset_ms: u64, retry_ms: u64) -> WindowOutcome {
    WindowOutcome { check: 0, window: 0, limit, period_ms, remaining, reset_ms, retry_ms, overridden: false }
}

/// The seed scenario: 20 per 60 s and 5 per 3 s, the 3 s window denying.
fn seed() -> [WindowOutcome; 2] {
    [outcome(20, 60_000, 15, 56_001, 0), outcome(5, 3_000, 0, 1_234, 1_234)]
}

fn stats(outcomes: &[WindowOutcome; 2]) -> [PolicyStat<'_>; 2] {
    [
        PolicyStat { name: "auth.createToken/60s", outcome: &outcomes[0], algorithm: LOG },
        PolicyStat { name: "auth.createToken/3s", outcome: &outcomes[1], algorithm: LOG },
    ]
}

#[wasm_bindgen_test(unsupported = test)]
fn seed_scenario_problem() {
    let outcomes = seed();
    let stats = stats(&outcomes);
    assert_eq!(
        quota_exceeded(&stats[1..], 1_234, 429),
        concat!(
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","#,
            r#""status":429,"detail":"rate limit exceeded: auth.createToken/3s","#,
            r#""violated-policies":["auth.createToken/3s"],"#,
            r#""windows":[{"policy":"auth.createToken/3s","limit":5,"window_ms":3000,"remaining":0,"retry_after_ms":1234}],"#,
            r#""retry_after":2}"#
        )
    );
    assert_eq!(PROBLEM_CONTENT_TYPE, "application/problem+json");
}

#[wasm_bindgen_test(unsupported = test)]
fn problem_lists_every_denied_window() {
    let outcomes = seed();
    let stats = stats(&outcomes);
    let body: serde_json::Value = serde_json::from_str(&quota_exceeded(&stats, 56_001, 429)).unwrap();
    assert_eq!(body["detail"], "rate limit exceeded: auth.createToken/60s, auth.createToken/3s");
    assert_eq!(body["violated-policies"], serde_json::json!(["auth.createToken/60s", "auth.createToken/3s"]));
    assert_eq!(body["windows"].as_array().unwrap().len(), 2);
    assert_eq!(body["windows"][0]["window_ms"], 60_000);
    assert_eq!(body["retry_after"], 57);

    let empty: serde_json::Value = serde_json::from_str(&quota_exceeded(&[], 0, 429)).unwrap();
    assert_eq!(empty["detail"], "rate limit exceeded");
    assert_eq!(empty["violated-policies"], serde_json::json!([]));
    assert_eq!(empty["windows"], serde_json::json!([]));
    assert_eq!(empty["retry_after"], 0);
    assert_eq!(empty["status"], 429);
}

/// A full concurrency limit names itself, its limit and the time until
/// its earliest lease expires.
#[wasm_bindgen_test(unsupported = test)]
fn a_concurrency_limit_that_denied() {
    let minute = outcome(20, 60_000, 14, 56_001, 0);
    let leases = WindowOutcome { check: 1, ..outcome(2, 30_000, 0, 29_000, 20_500) };
    let stats = [
        PolicyStat { name: "api/1m", outcome: &minute, algorithm: LOG },
        PolicyStat { name: "api/concurrency", outcome: &leases, algorithm: Algorithm::Lease },
    ];
    assert_eq!(
        quota_exceeded(&stats[1..], 20_500, 429),
        concat!(
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","#,
            r#""status":429,"detail":"rate limit exceeded: api/concurrency","#,
            r#""violated-policies":["api/concurrency"],"#,
            r#""windows":[{"policy":"api/concurrency","concurrent":2,"lease_ttl_ms":30000,"remaining":0,"#,
            r#""retry_after_ms":20500}],"retry_after":21}"#
        )
    );
}

/// A window whose limit came from an override shows the limit in force and
/// says so; a concurrency limit too; one without says nothing.
#[wasm_bindgen_test(unsupported = test)]
fn an_overridden_window_says_so_with_the_limit_in_force() {
    let burst = WindowOutcome { overridden: true, ..outcome(50, 3_000, 0, 1_234, 1_234) };
    let leases = WindowOutcome { check: 1, overridden: true, ..outcome(8, 30_000, 0, 29_000, 20_500) };
    let plain = outcome(20, 60_000, 0, 56_001, 56_001);
    let stats = [
        PolicyStat { name: "auth.createToken/3s", outcome: &burst, algorithm: LOG },
        PolicyStat { name: "auth.createToken/concurrency", outcome: &leases, algorithm: Algorithm::Lease },
        PolicyStat { name: "other/60s", outcome: &plain, algorithm: LOG },
    ];
    let body = quota_exceeded(&stats, 56_001, 429);
    assert!(
        body.contains(concat!(
            r#""windows":[{"policy":"auth.createToken/3s","limit":50,"window_ms":3000,"remaining":0,"#,
            r#""retry_after_ms":1234,"override":true},"#,
            r#"{"policy":"auth.createToken/concurrency","concurrent":8,"lease_ttl_ms":30000,"remaining":0,"#,
            r#""retry_after_ms":20500,"override":true},"#,
            r#"{"policy":"other/60s","limit":20,"window_ms":60000,"remaining":0,"retry_after_ms":56001}]"#,
        )),
        "{body}"
    );
    assert_eq!(body, oracle(&stats, 56_001, 429));
}

#[wasm_bindgen_test(unsupported = test)]
fn problem_escapes_names() {
    let o = outcome(1, 1_000, 0, 10, 10);
    let name = "a\"b\\c\r\n</script>é";
    let body = quota_exceeded(&[PolicyStat { name, outcome: &o, algorithm: LOG }], u64::MAX, 429);
    let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(parsed["violated-policies"][0], name);
    assert_eq!(parsed["windows"][0]["policy"], name);
    assert_eq!(parsed["retry_after"], 18_446_744_073_709_552u64);
    assert!(!body.contains('\r') && !body.contains('\n'));
}

#[wasm_bindgen_test(unsupported = test)]
fn reduced_capacity_has_the_drafts_type_and_no_policy() {
    let body: serde_json::Value = serde_json::from_str(&reduced_capacity("rate limiter \"overloaded\"", 1)).unwrap();
    assert_eq!(
        body,
        serde_json::json!({
            "type": "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
            "title": "Temporary Reduced Capacity",
            "status": 503,
            "detail": "rate limiter \"overloaded\"",
            "violated-policies": [],
            "retry_after": 1,
        })
    );
}

/// The document as serde_json writes it.
#[derive(serde::Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    title: &'static str,
    status: u16,
    detail: String,
    #[serde(rename = "violated-policies")]
    violated_policies: Vec<&'a str>,
    windows: Vec<Window<'a>>,
    retry_after: u64,
}

#[derive(serde::Serialize)]
#[serde(untagged)]
enum Window<'a> {
    Rate {
        policy: &'a str,
        limit: u64,
        window_ms: u64,
        remaining: u64,
        retry_after_ms: u64,
        #[serde(rename = "override", skip_serializing_if = "std::ops::Not::not")]
        overridden: bool,
    },
    Concurrency {
        policy: &'a str,
        concurrent: u64,
        lease_ttl_ms: u64,
        remaining: u64,
        retry_after_ms: u64,
        #[serde(rename = "override", skip_serializing_if = "std::ops::Not::not")]
        overridden: bool,
    },
}

fn oracle(denied: &[PolicyStat<'_>], retry_after_ms: u64, status: u16) -> String {
    let names: Vec<&str> = denied.iter().map(|s| s.name).collect();
    let detail = if names.is_empty() {
        String::from("rate limit exceeded")
    } else {
        format!("rate limit exceeded: {}", names.join(", "))
    };
    let windows = denied
        .iter()
        .map(|s| {
            let (policy, o) = (s.name, s.outcome);
            let (remaining, retry_after_ms, overridden) = (o.remaining, o.retry_ms, o.overridden);
            match s.algorithm {
                Algorithm::Lease => Window::Concurrency {
                    policy,
                    concurrent: o.limit,
                    lease_ttl_ms: o.period_ms,
                    remaining,
                    retry_after_ms,
                    overridden,
                },
                _ => Window::Rate {
                    policy,
                    limit: o.limit,
                    window_ms: o.period_ms,
                    remaining,
                    retry_after_ms,
                    overridden,
                },
            }
        })
        .collect();
    let retry_after = retry_after_secs(retry_after_ms);
    let kind = QUOTA_EXCEEDED;
    let title = "Quota Exceeded";
    serde_json::to_string(&Problem { kind, title, status, detail, violated_policies: names, windows, retry_after })
        .unwrap()
}

#[wasm_bindgen_test(unsupported = test)]
fn problem_is_byte_for_byte_what_serde_json_writes() {
    let names = ["auth.createToken/3s", "a/1d", "", "x\"y\\z\u{1}\té😀", "rule:with-dots.and_1/250ms"];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..500 {
        let n = usize::try_from(next() % 4).unwrap();
        let outcomes: Vec<WindowOutcome> = (0..n)
            .map(|_| {
                let pick = |v: u64| if v.is_multiple_of(3) { v } else { v % 100_000 };
                let o = outcome(pick(next()), pick(next()), pick(next()), pick(next()), pick(next()));
                WindowOutcome { overridden: next().is_multiple_of(2), ..o }
            })
            .collect();
        let stats: Vec<PolicyStat<'_>> = outcomes
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let algorithm = if next().is_multiple_of(3) { Algorithm::Lease } else { LOG };
                PolicyStat { name: names[(round + i) % names.len()], outcome: o, algorithm }
            })
            .collect();
        let (retry, status) = (next() % 10_000_000, [429, 403, 503][round % 3]);
        assert_eq!(quota_exceeded(&stats, retry, status), oracle(&stats, retry, status));
    }
}
