//! A token budget through a real Envoy, Valkey and a demo upstream that
//! answers with the usage a test asks for: 1000 tokens per minute AND 100
//! per 3 s per tenant, reserving `max_tokens` from the JSON request body and
//! settling with `usage.total_tokens` from the JSON response body or the
//! last event of an event stream (and a second rule reading both from
//! headers). Under concurrency the admitted reservations never exceed the
//! budget; after settlement Valkey holds exactly the sum of the actual
//! costs; a response that never comes keeps its reservation; a body past
//! `max_body_bytes` costs the reservation. Time is injected.

use crate::support;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;
use support::plugin::{plugin, rule, Plugin};
use support::upstream::{buffer_after_tollgate, demo_upstream, Upstream};
use support::{http_body, remaining, wait_until, Envoy, EnvoyOptions, Response, Valkey};

const NOW: &str = "x-tollgate-now";
const T0: u64 = 1_800_000_000_000;

fn budget() -> Plugin {
    let limits = |r: support::plugin::Rule| r.header("x-tenant").methods(&["POST"]).limit(1000, "1m").limit(100, "3s");
    plugin()
        .now_header(NOW)
        .top(r#""max_body_bytes": 1024"#)
        .with(limits(rule("llm.tokens").path_prefix("/v1/chat/completions")).field(
            r#""count": { "reserve": { "body": "max_tokens" }, "cost": { "body": "usage.total_tokens" } }"#,
        ))
        .with(limits(rule("llm.embeddings").path_prefix("/v1/embeddings")).field(
            r#""count": { "reserve": { "header": "x-max-tokens", "default": 50 }, "cost": { "header": "x-tokens-used" } }"#,
        ))
}

struct Stack {
    valkey: Valkey,
    upstream: Upstream,
    envoy: Envoy,
}

fn stack() -> Stack {
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let options = EnvoyOptions { plugin_config: budget().json(), valkey_port: valkey.port, concurrency: 2 };
    let port = upstream.port;
    let edit = |text| slow_route(buffer_after_tollgate(demo_upstream(text, port)));
    let envoy = Envoy::try_start_edited(&options, &edit).unwrap();
    Stack { valkey, upstream, envoy }
}

/// A route under the completions whose upstream times out after 300 ms.
fn slow_route(text: String) -> String {
    let catch_all = "- match: { prefix: \"/\" }";
    let Some(at) = text.find(catch_all) else { return text };
    let indent = text[..at].rsplit('\n').next().unwrap_or("");
    let route = format!(
        "- match: {{ prefix: \"/v1/chat/completions/slow\" }}\n{indent}  route: {{ cluster: demo_upstream, timeout: 0.3s }}\n{indent}"
    );
    format!("{}{route}{}", &text[..at], &text[at..])
}

fn key(tenant: &str) -> String {
    format!("tollgate:{{llm.tokens:{tenant}}}:log")
}

/// A completion for `tenant` at injected `at`, reserving `max_tokens`, with
/// the demo upstream told what to answer by `demo` headers.
fn complete(port: u16, tenant: &str, max_tokens: u64, at: u64, demo: &[(&str, &str)]) -> Response {
    complete_at(port, "/v1/chat/completions", tenant, max_tokens, at, demo)
}

fn complete_at(port: u16, path: &str, tenant: &str, max_tokens: u64, at: u64, demo: &[(&str, &str)]) -> Response {
    let at = at.to_string();
    let mut headers = vec![("x-tenant", tenant), (NOW, at.as_str()), ("content-type", "application/json")];
    headers.extend_from_slice(demo);
    let body = format!(r#"{{"model":"demo","max_tokens":{max_tokens},"messages":[]}}"#);
    http_body(port, "POST", path, &headers, body.as_bytes()).unwrap()
}

impl Stack {
    fn stat(&self, name: &str) -> u64 {
        self.envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
    }

    /// The tokens the upstream said its admitted requests used.
    fn used(&self, tenant: &str) -> u64 {
        let hits = self.upstream.hits();
        let mine = hits.iter().filter(|h| h.header("x-tenant") == Some(tenant));
        mine.map(|h| h.header("x-demo-usage").or(h.header("x-demo-sse")).unwrap().parse::<u64>().unwrap()).sum()
    }
}

#[test]
fn concurrent_reservations_never_exceed_the_budget_and_settle_to_the_actual_costs() {
    let s = stack();
    let port = s.envoy.port;
    // 40 at once, each reserving 30 of the 100 per 3 s, held upstream.
    let threads: Vec<_> = (0..40u64)
        .map(|i| {
            std::thread::spawn(move || {
                let usage = (5 + i % 20).to_string();
                complete(port, "acme", 30, T0, &[("x-demo-usage", usage.as_str()), ("x-demo-hold", "1")])
            })
        })
        .collect();
    wait_until("37 denials", Duration::from_secs(20), || threads.iter().filter(|t| t.is_finished()).count() == 37);
    assert_eq!(s.upstream.hits().len(), 3, "exactly the reservations that fit 100 reached the upstream");
    assert_eq!(s.upstream.starts(), 3, "the denied ones not even in part");
    assert_eq!(s.valkey.int(&["ZCARD", &key("acme")]), 90, "3 reservations of 30");
    s.upstream.release();
    let statuses: Vec<u16> = threads.into_iter().map(|t| t.join().unwrap().status).collect();
    assert_eq!(
        (statuses.iter().filter(|s| **s == 200).count(), statuses.iter().filter(|s| **s == 429).count()),
        (3, 37)
    );
    let used = s.used("acme");
    wait_until("settled", Duration::from_secs(10), || s.valkey.int(&["ZCARD", &key("acme")]) as u64 == used);
    // Counted when the reply reaches the worker, just after Valkey applied it.
    wait_until("the settlements counted", Duration::from_secs(10), || s.stat("rule.llm.tokens.settled") >= used);
    assert_eq!(s.stat("rule.llm.tokens.settled"), used);
    assert_eq!(s.stat("rule.llm.tokens.refunded"), 90 - used);

    // Then 8 clients in a loop, each request reserving 10 to 40 and using
    // at most that, across 50 s of injected time.
    let clients: Vec<_> = (0..8u64)
        .map(|c| {
            std::thread::spawn(move || {
                for n in 0..15u64 {
                    let max = 10 + (c * 7 + n * 13) % 31;
                    let usage = (1 + (c * 5 + n * 11) % max).to_string();
                    complete(port, "acme", max, T0 + 1_000 + n * 3_300, &[("x-demo-usage", usage.as_str())]);
                }
            })
        })
        .collect();
    clients.into_iter().for_each(|c| c.join().unwrap());
    let used = s.used("acme");
    wait_until("every settlement", Duration::from_secs(10), || s.stat("rule.llm.tokens.settled") == used);
    let stored = s.valkey.int(&["ZCARD", &key("acme")]) as u64;
    println!("{} requests admitted of 160, {used} tokens used, Valkey holds {stored}", s.upstream.hits().len());
    assert_eq!(stored, used, "Valkey holds exactly the sum of the actual costs");
    assert!(used <= 1000, "the minute's budget: {used}");
    assert!(s.upstream.hits().len() > 3 + 8, "the loop admitted requests: {}", s.upstream.hits().len());
    assert_eq!(s.stat("rule.llm.tokens.settle_failed"), 0);
}

#[test]
fn an_event_stream_settles_with_its_last_usage_event_and_headers_settle_before_the_response() {
    let s = stack();
    let r = complete(s.envoy.port, "sse", 50, T0, &[("x-demo-sse", "17")]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert!(r.body_text().contains("\"total_tokens\":17") && r.body_text().ends_with("data: [DONE]\n\n"));
    // The headers left before the body: they count the reservation.
    assert_eq!(remaining(&r), [("llm.tokens/1m".into(), 950), ("llm.tokens/3s".into(), 50)]);
    wait_until("settled", Duration::from_secs(10), || s.valkey.int(&["ZCARD", &key("sse")]) == 17);
    // The next response shows the settled state.
    let next = complete(s.envoy.port, "sse", 10, T0 + 1, &[("x-demo-usage", "10")]);
    assert_eq!(remaining(&next), [("llm.tokens/1m".into(), 973), ("llm.tokens/3s".into(), 73)]);

    // Read from headers, the response waits for its settlement.
    let embed = |max: &str, used: &str| {
        let headers = [("x-tenant", "hdr"), (NOW, "1800000000000"), ("x-max-tokens", max), ("x-demo-header", used)];
        http_body(s.envoy.port, "POST", "/v1/embeddings", &headers, b"{}").unwrap()
    };
    let r = embed("30", "x-tokens-used=12");
    assert_eq!(remaining(&r), [("llm.embeddings/1m".into(), 988), ("llm.embeddings/3s".into(), 88)]);
    assert_eq!(s.valkey.int(&["ZCARD", "tollgate:{llm.embeddings:hdr}:log"]), 12);
    let r = embed("30", "x-tokens-used=45");
    assert_eq!(remaining(&r), [("llm.embeddings/1m".into(), 943), ("llm.embeddings/3s".into(), 43)], "an extra charge");
    assert_eq!(s.stat("rule.llm.embeddings.settled"), 57);
}

#[test]
fn a_response_that_never_comes_keeps_its_reservation() {
    let s = stack();
    // The client goes away while the upstream works.
    let at = T0.to_string();
    let body = r#"{"max_tokens":40}"#;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\nx-tenant: gone\r\n{NOW}: {at}\r\nx-demo-hold: 1\r\n\
         x-demo-usage: 5\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut client = TcpStream::connect(("127.0.0.1", s.envoy.port)).unwrap();
    client.write_all(request.as_bytes()).unwrap();
    wait_until("the upstream has it", Duration::from_secs(10), || s.upstream.hits().len() == 1);
    drop(client);
    wait_until("Envoy saw the reset", Duration::from_secs(10), || {
        s.envoy.stat("http.demo.downstream_cx_destroy_remote_active_rq").unwrap_or(0) == 1
    });
    s.upstream.release();
    // The upstream times out: Envoy answers 504, which says no cost.
    let slow = "/v1/chat/completions/slow";
    let r = complete_at(s.envoy.port, slow, "late", 40, T0, &[("x-demo-hold", "1"), ("x-demo-usage", "5")]);
    assert_eq!(r.status, 504);
    wait_until("the fallback", Duration::from_secs(10), || s.stat("rule.llm.tokens.cost_fallback") == 1);
    s.upstream.release();
    assert_eq!(s.valkey.int(&["ZCARD", &key("gone")]), 40, "the reservation stands");
    assert_eq!(s.valkey.int(&["ZCARD", &key("late")]), 40, "the reservation stands");
    assert_eq!(s.stat("rule.llm.tokens.reserved"), 80);
    assert_eq!(s.stat("rule.llm.tokens.refunded"), 0);
}

#[test]
fn a_body_past_max_body_bytes_costs_the_reservation() {
    let s = stack();
    let r = complete(s.envoy.port, "big", 40, T0, &[("x-demo-usage", "5"), ("x-demo-pad", "5000")]);
    assert_eq!((r.status, r.body.len() > 5_000), (200, true), "the response itself is untouched");
    wait_until("the fallback", Duration::from_secs(10), || s.stat("rule.llm.tokens.cost_fallback") == 1);
    assert_eq!(s.stat("body_too_large"), 1);
    assert_eq!(s.valkey.int(&["ZCARD", &key("big")]), 40, "the reservation stands");
    // A request body past the bound reserves the default: the smallest limit.
    let padded = format!(r#"{{"max_tokens":5,"pad":"{}"}}"#, "x".repeat(2_000));
    let headers = [("x-tenant", "bigreq"), (NOW, "1800000000000"), ("x-demo-usage", "5")];
    let r = http_body(s.envoy.port, "POST", "/v1/chat/completions", &headers, padded.as_bytes()).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(remaining(&r), [("llm.tokens/1m".into(), 900), ("llm.tokens/3s".into(), 0)]);
    assert_eq!(s.stat("body_too_large"), 2);
    wait_until("settled", Duration::from_secs(10), || s.valkey.int(&["ZCARD", &key("bigreq")]) == 5);
}
