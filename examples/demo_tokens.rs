//! `make demo-tokens`: a token budget counted on the response. Starts
//! Valkey, the demo upstream of the tests (it answers with the usage a
//! request asks for) and Envoy with `envoy/envoy.yaml` (Envoy's buffer
//! filter after tollgate, the rule below), sends completions for one tenant
//! reserving `max_tokens`, prints what Valkey holds after each settlement,
//! and stops.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};
use support::upstream::{buffer_after_tollgate, demo_upstream, Upstream};
use support::{http_body, Envoy, EnvoyOptions, Response, Valkey};

const RULE: &str = r#"{
  "valkey": { "cluster": "tollgate_valkey" },
  "rules": [
    {
      "name": "llm.tokens",
      "match": { "path": "/v1/chat/completions", "methods": ["POST"] },
      "key": [ { "header": "x-tenant" } ],
      "limits": [ { "limit": 1000, "period": "1m" }, { "limit": 100, "period": "3s" } ],
      "count": { "reserve": { "body": "max_tokens" }, "cost": { "body": "usage.total_tokens" } }
    }
  ]
}"#;
const KEY: &str = "tollgate:{llm.tokens:acme}:log";

fn denied_by(resp: &Response) -> String {
    if resp.status != 429 {
        return String::new();
    }
    let body: serde_json::Value = serde_json::from_slice(&resp.body).unwrap_or_default();
    body["violated-policies"]
        .as_array()
        .map(|v| v.iter().filter_map(|p| p.as_str()).collect::<Vec<_>>().join(", "))
        .unwrap_or_default()
}

/// Tokens Valkey counts for the tenant in the last `period_ms`.
fn counted(valkey: &Valkey, period_ms: u64) -> u64 {
    let time = valkey.cmd(&["TIME"]);
    let parts: Vec<u64> = time
        .as_array()
        .unwrap()
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes().unwrap()).parse().unwrap())
        .collect();
    let now_ms = parts[0] * 1000 + parts[1] / 1000;
    let from = format!("({}", now_ms - period_ms);
    valkey.int(&["ZCOUNT", KEY, &from, "+inf"]) as u64
}

fn main() {
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let port = upstream.port;
    let options = EnvoyOptions { plugin_config: RULE.to_string(), valkey_port: valkey.port, concurrency: 1 };
    let envoy = Envoy::try_start_edited(&options, &|text| buffer_after_tollgate(demo_upstream(text, port))).unwrap();
    let settled = || envoy.stat("wasmcustom.tollgate.rule.llm.tokens.settled").unwrap_or(0);

    println!("POST /v1/chat/completions as x-tenant: acme — rule llm.tokens: 1000 tokens per 1m AND 100 per 3s,");
    println!("reserving max_tokens of the request, settled with usage.total_tokens of the response\n");
    println!(
        "{:>4} | {:>10} | {:>6} | {:>4} | {:>9} | {:>9} | denied by",
        "call", "max_tokens", "status", "used", "left (1m)", "left (3s)"
    );
    println!("{}", "-".repeat(70));
    // (max_tokens, tokens the upstream says it used, as an event stream)
    let calls = [(60, 25, false), (60, 40, false), (60, 40, false), (30, 30, false), (10, 10, false), (5, 5, true)];
    let mut used_total = Vec::new();
    let mut denied = Vec::new();
    for (call, (max_tokens, used, stream)) in calls.into_iter().enumerate() {
        let used_s = used.to_string();
        let demo = if stream { "x-demo-sse" } else { "x-demo-usage" };
        let headers = [("x-tenant", "acme"), ("content-type", "application/json"), (demo, used_s.as_str())];
        let body = format!(r#"{{"model":"demo","max_tokens":{max_tokens},"stream":{stream}}}"#);
        let before = settled();
        let resp = http_body(envoy.port, "POST", "/v1/chat/completions", &headers, body.as_bytes()).unwrap();
        if resp.status == 200 {
            used_total.push(used);
            let start = Instant::now();
            while settled() < before + used && start.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if resp.status == 429 {
            denied.push((call + 1).to_string());
        }
        let shown = if resp.status == 200 { used_s.clone() } else { "-".into() };
        println!(
            "{:>4} | {:>10} | {:>6} | {:>4} | {:>9} | {:>9} | {}",
            format!("{}{}", call + 1, if stream { "*" } else { "" }),
            max_tokens,
            resp.status,
            shown,
            1000 - counted(&valkey, 60_000),
            100 - counted(&valkey, 3_000),
            denied_by(&resp)
        );
    }
    let held = valkey.int(&["ZCARD", KEY]);
    let sum: Vec<String> = used_total.iter().map(u64::to_string).collect();
    println!("\n* an event stream: its last event with usage settled it.");
    println!(
        "Valkey holds {held} tokens for acme: what the admitted calls used ({}), not what they reserved.",
        sum.join(" + ")
    );
    let calls = if denied.len() == 1 { "call" } else { "calls" };
    println!("Denied: {calls} {}, whose reservation did not fit what the windows had left.", denied.join(" and "));
}
