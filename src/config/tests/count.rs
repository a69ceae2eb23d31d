//! `rules[i].count`: the values a valid rule gives, and the checks on them
//! (every error message has its fixture in tests/fixtures/config/invalid/).

use super::rule;
use crate::config::{Algorithm, Config, CostSource, Reserve, StatusRange, DEFAULT_MAX_BODY_BYTES};

fn parse(json: &str) -> Config {
    Config::from_json(json.as_bytes()).unwrap_or_else(|e| panic!("{json}\n{e}"))
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn failed_logins_count_only_their_statuses_and_header() {
    let config = parse(&rule(
        r#"{ "name": "login", "limits": [ { "limit": 5, "period": "3s" } ],
             "count": { "status": [401, "500-503", "429"], "header": { "name": "X-Login", "exact": "failed" } } }"#,
    ));
    let count = config.rules[0].count.clone().unwrap();
    let one = |n| StatusRange { first: n, last: n };
    assert_eq!(count.status, [one(401), StatusRange { first: 500, last: 503 }, one(429)]);
    let counted: Vec<u16> =
        [200, 400, 401, 402, 499, 500, 502, 503, 504].into_iter().filter(|s| count.counts_status(*s)).collect();
    assert_eq!(counted, [401, 500, 502, 503]);
    assert!(count.counts_status(429));
    let header = count.header.unwrap();
    assert_eq!(header.name, "x-login", "names are lowercased");
    assert!(header.holds(Some(b"failed")) && !header.holds(Some(b"ok")) && !header.holds(None));
    assert_eq!((count.reserve, count.cost), (None, None));
    assert_eq!(config.max_body_bytes, DEFAULT_MAX_BODY_BYTES);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_token_budget_reserves_from_the_body_and_reads_its_cost() {
    let config = parse(&rule(
        r#"{ "name": "tokens", "algorithm": "fixed_window",
             "limits": [ { "limit": 1000, "period": "1m" }, { "limit": 100, "period": "3s" } ],
             "count": { "reserve": { "body": "max_tokens" }, "cost": { "body": "usage.total_tokens" } } }"#,
    ));
    let count = config.rules[0].count.clone().unwrap();
    assert!(count.counts_status(599) && count.reads_request_body());
    let Some(Reserve::Body { path, default }) = count.reserve else { panic!("{count:?}") };
    assert_eq!((path.as_str(), default.get()), ("max_tokens", 100), "the default is the smallest limit");
    let Some(CostSource::Body(cost)) = count.cost else { panic!("no cost") };
    assert_eq!(cost.segments(), ["usage", "total_tokens"]);
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn reservations_and_costs_from_headers_and_fixed_units() {
    let config = parse(&rule(
        r#"{ "name": "a", "limits": [ { "limit": 50, "period": "1m" } ], "count": {
               "reserve": { "header": "X-Max-Tokens", "default": 20 }, "cost": { "header": "X-Tokens-Used" } } },
           { "name": "b", "algorithm": "sliding_window", "limits": [ { "limit": 5, "period": "3s" } ],
             "count": { "status": [401], "reserve": { "units": 1 } } },
           { "name": "c", "algorithm": "gcra", "cost": 2, "limits": [ { "limit": 5, "period": "3s" } ],
             "count": { "status": [429] } }"#,
    ));
    let [a, b, c] = [0, 1, 2].map(|i| config.rules[i].count.clone().unwrap());
    assert_eq!(a.reserve, Some(Reserve::Header { name: "x-max-tokens".into(), default: 20.try_into().unwrap() }));
    assert_eq!(a.cost, Some(CostSource::Header("x-tokens-used".into())));
    assert_eq!(b.reserve, Some(Reserve::Units(1.try_into().unwrap())));
    assert!(!b.reads_request_body());
    assert_eq!((config.rules[2].algorithm, config.rules[2].cost.get(), c.reserve), (Algorithm::Gcra, 2, None));
}
