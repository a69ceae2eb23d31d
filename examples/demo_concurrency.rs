//! `make demo-concurrency`: a concurrency limit on an LLM-style streaming
//! API. Starts Valkey, the slow upstream of the tests (it streams events
//! until told to end, then a usage event) and Envoy with `envoy/envoy.yaml`
//! (Envoy's buffer filter after tollgate, the rule below: at most 2 streams
//! in flight per `x-api-key` AND 1000 tokens per minute, reserving
//! `max_tokens` and settled with the usage of the stream's last event).
//! Opens 2 streams, shows a 3rd refused at once, ends a stream, shows the
//! next admitted, lets a client leave and shows its slot freed, printing
//! Valkey's lease set along the way, and stops.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};
use support::slow::{call, Call, Slow};
use support::upstream::{buffer_after_tollgate, demo_upstream};
use support::{wait_until, Envoy, EnvoyOptions, Response, Valkey};
use tollgate::resp::Value;

const RULE: &str = r#"{
  "valkey": { "cluster": "tollgate_valkey" },
  "rules": [
    {
      "name": "llm.streams",
      "match": { "path": "/v1/chat/completions", "methods": ["POST"] },
      "key": [ { "header": "x-api-key" } ],
      "limits": [ { "limit": 1000, "period": "1m" } ],
      "count": { "reserve": { "body": "max_tokens" }, "cost": { "body": "usage.total_tokens" } },
      "concurrency": { "limit": 2, "lease_ttl": "30s" }
    }
  ]
}"#;
const LEASES: &str = "tollgate:{llm.streams:demo-key}:lease";
const TOKENS: &str = "tollgate:{llm.streams:demo-key}:log";

struct Demo {
    valkey: Valkey,
    slow: Slow,
    envoy: Envoy,
    start: Instant,
}

impl Demo {
    /// A streamed completion named `id` reserving 200 tokens, whose last
    /// event says it used `tokens`; it streams an event every 250 ms until
    /// released (`hold`) or at once ends.
    fn complete(&self, id: &str, tokens: u64, hold: bool) -> Call {
        let tokens = tokens.to_string();
        let mut headers = vec![("x-api-key", "demo-key"), ("content-type", "application/json"), ("x-slow-id", id)];
        headers.extend([("x-slow-sse", "250"), ("x-slow-tokens", tokens.as_str())]);
        if hold {
            headers.push(("x-slow-hold", "1"));
        }
        let body = br#"{"model":"demo","max_tokens":200,"stream":true}"#;
        call(self.envoy.port, "POST", "/v1/chat/completions", &headers, body).unwrap()
    }

    fn ms(&self) -> u128 {
        self.start.elapsed().as_millis()
    }

    /// Prints what a response said, when it came.
    fn show(&self, what: &str, resp: &Response, took: Duration) {
        println!("{:>6} ms  {what}: {} after {} ms", self.ms(), resp.status, took.as_millis());
        for name in ["ratelimit-policy", "ratelimit", "retry-after"] {
            if let Some(value) = resp.header(name) {
                println!("{:>10}{name}: {value}", "");
            }
        }
        if !resp.body.is_empty() {
            println!("{:>10}body: {}", "", resp.body_text().trim_end());
        }
    }

    /// Prints the lease set: each lease and how long until it expires.
    fn leases(&self) {
        let now = self.valkey.time_ms();
        let Value::Array(items) = self.valkey.cmd(&["ZRANGE", LEASES, "0", "-1", "WITHSCORES"]) else { panic!() };
        let text = |v: &Value| String::from_utf8_lossy(v.as_bytes().unwrap()).into_owned();
        let leases: Vec<String> = items
            .chunks(2)
            .map(|p| {
                let expiry = text(&p[1]).parse::<f64>().unwrap() as u64;
                format!("{} (expires in {:.1} s)", text(&p[0]), expiry.saturating_sub(now) as f64 / 1e3)
            })
            .collect();
        println!("{:>6} ms  Valkey {LEASES}: {} lease(s) {leases:?}", self.ms(), leases.len());
    }

    /// Polls the lease set until it holds `n` leases.
    fn until_leases(&self, n: i64) {
        wait_until("the lease set", Duration::from_secs(10), || self.valkey.int(&["ZCARD", LEASES]) == n);
    }
}

fn main() {
    let valkey = Valkey::start();
    let slow = Slow::start();
    let (port, options) =
        (slow.port, EnvoyOptions { plugin_config: RULE.to_string(), valkey_port: valkey.port, concurrency: 1 });
    let edit = |text: String| {
        buffer_after_tollgate(demo_upstream(text, port))
            .replace("route: { cluster: demo_upstream }", "route: { cluster: demo_upstream, timeout: 0s }")
    };
    let envoy = Envoy::try_start_edited(&options, &edit).unwrap();
    let demo = Demo { valkey, slow, envoy, start: Instant::now() };
    println!("POST /v1/chat/completions as x-api-key: demo-key, streamed (text/event-stream) — rule llm.streams:");
    println!("at most 2 in flight AND 1000 tokens per 1m (reserving max_tokens 200, settled with the usage event)\n");

    let mut open = Vec::new();
    for (id, tokens) in [("stream-1", 120), ("stream-2", 150)] {
        let sent = Instant::now();
        let mut stream = demo.complete(id, tokens, true);
        demo.show(&format!("{id} opens"), &stream.head().unwrap(), sent.elapsed());
        open.push(stream);
    }
    demo.leases();
    let held = demo.valkey.int(&["ZCARD", LEASES]);
    let errors = demo.envoy.stat("wasmcustom.tollgate.store.errors").unwrap_or(0);
    assert_eq!(
        held, 2,
        "2 streams admitted but {held} leases taken ({errors} store errors): the limit is not enforced"
    );

    let sent = Instant::now();
    let third = demo.complete("third", 10, true).finish().unwrap();
    demo.show("a 3rd, while both stream (refused at once, never queued)", &third, sent.elapsed());
    assert_eq!(third.status, 429, "the 3rd is refused");

    // Both stream on; stream-1 ends once its client has read 4 events.
    let events = |raw: &[u8]| raw.windows(7).filter(|w| w == b"\"delta\"").count();
    open[0].read_until(|raw| events(raw) >= 4).unwrap();
    demo.slow.release("stream-1");
    let first = open.remove(0).finish().unwrap();
    let deltas = first.body_text().matches("delta").count();
    println!("{:>6} ms  stream-1 ends: {deltas} deltas, then its usage event (120 tokens) and [DONE]", demo.ms());
    demo.until_leases(1);
    demo.leases();

    let sent = Instant::now();
    let mut next = demo.complete("stream-3", 80, true);
    demo.show("stream-3 opens in the freed slot", &next.head().unwrap(), sent.elapsed());
    demo.leases();
    drop(next);
    println!("{:>6} ms  stream-3's client leaves (closes its connection)", demo.ms());
    demo.until_leases(1);
    demo.leases();

    let sent = Instant::now();
    let quick = demo.complete("stream-4", 40, false).finish().unwrap();
    let quick_head = Response { body: Vec::new(), ..quick };
    demo.show("stream-4 takes the slot stream-3 left, and ends", &quick_head, sent.elapsed());

    demo.slow.release("stream-2");
    open.remove(0).finish().unwrap();
    println!("{:>6} ms  stream-2 ends (150 tokens)", demo.ms());
    demo.until_leases(0);
    demo.leases();
    let settled = || demo.envoy.stat("wasmcustom.tollgate.rule.llm.streams.settled").unwrap_or(0);
    wait_until("the settlements", Duration::from_secs(10), || settled() >= 120 + 150 + 40);
    let stats: Vec<String> = ["taken", "released", "renewed"]
        .iter()
        .map(|s| format!("{s} {}", demo.envoy.stat(&format!("wasmcustom.tollgate.lease.{s}")).unwrap_or(0)))
        .collect();
    println!("\nValkey counts {} tokens this minute: 120 + 150 + 40 used, and stream-3's 200 reserved", {
        demo.valkey.int(&["ZCARD", TOKENS])
    });
    println!("(a response that never came keeps its reservation). Leases: {}.", stats.join(", "));
    println!("The 3rd was refused at once though the budget had room: 2 were in flight. Each slot came back");
    println!("when its stream ended or its client left — not when a TTL ran out (30 s).");
}
