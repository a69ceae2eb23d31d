//! Leases of long requests: an event stream renews its lease as long as it
//! lasts and ends it at its end; a client that leaves ends it too.

use super::*;
use std::time::{Duration, Instant};
use support::slow::Mark;
use support::wait_until;

/// The lease TTL of the stream test, and how long its stream lasts: 3 TTLs.
const TTL_MS: u64 = 2_000;
const STREAM_MS: u64 = 3 * TTL_MS;

/// One read of the lease set while the stream goes on.
struct Sample {
    /// Valkey's clock when read.
    now_ms: u64,
    leases: Vec<(String, u64)>,
    /// When the read was done (after it).
    at: Instant,
}

/// `concurrency` 1 with a 2 s lease TTL, an event stream of 6 s (an event
/// every 100 ms): while it streams, the set holds its one lease, live at
/// every read, its expiry moving forward (renewed every third of the TTL),
/// and every other request is refused, also after the TTL had passed; at
/// its end the lease is gone before the last expiry seen (ended, not
/// expired), and the next request is admitted.
#[test]
fn an_event_stream_keeps_its_lease_for_three_ttls_and_frees_it_at_its_end() {
    let valkey = Valkey::start();
    let slow = Slow::start();
    let envoy = start(&valkey, &slow, &config(&format!(r#"{{ "limit": 1, "lease_ttl": "{}s" }}"#, TTL_MS / 1_000)));
    let stream_ms = STREAM_MS.to_string();
    let headers = with_key("sse", &[("x-slow-sse", "100"), ("x-slow-ms", &stream_ms), ("x-slow-tokens", "42")]);
    let mut stream = call(envoy.port, "POST", "/c/stream", &headers, b"{}").unwrap();
    let head = stream.head().unwrap();
    assert_eq!((head.status, head.header("content-type")), (200, Some("text/event-stream")), "{head:?}");
    println!("the stream's RateLimit-Policy: {:?}", head.header("ratelimit-policy"));
    let started = slow.event("sse", Mark::Start).unwrap();
    let reader = std::thread::spawn(move || stream.finish());

    let (mut samples, mut probes) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_millis(STREAM_MS * 5);
    while slow.event("sse", Mark::End).is_none() {
        assert!(Instant::now() < deadline, "the stream never ended");
        let (now_ms, leases) = (valkey.time_ms(), leases(&valkey));
        samples.push(Sample { now_ms, leases, at: Instant::now() });
        if samples.len() % 10 == 1 {
            let sent = Instant::now();
            let probe = get(envoy.port, &format!("p{}", probes.len()), &[]).unwrap();
            probes.push((probe, sent, Instant::now()));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let end = slow.event("sse", Mark::End).unwrap();
    let body = reader.join().unwrap().unwrap().body_text();
    assert!(body.contains(r#""total_tokens":42"#) && body.ends_with("data: [DONE]\n\n"), "{body}");
    let lasted = end.at - started.at;
    assert!(lasted >= Duration::from_millis(STREAM_MS), "{lasted:?}");

    // While it streamed: one lease, live at every read, renewed.
    let during: Vec<&Sample> = samples.iter().filter(|s| s.at < end.at).collect();
    for s in &during {
        assert_eq!(s.leases.len(), 1, "one lease at {}: {:?}", s.now_ms, s.leases);
        assert!(s.leases[0].1 > s.now_ms, "the lease expired at {} (read at {}): not renewed", s.leases[0].1, s.now_ms);
    }
    let mut expiries: Vec<u64> = during.iter().map(|s| s.leases[0].1).collect();
    assert!(expiries.windows(2).all(|w| w[0] <= w[1]), "an expiry moved back: {expiries:?}");
    expiries.dedup();
    let (first, last) = (expiries[0], *expiries.last().unwrap());
    println!("{} reads over {lasted:?}, {} distinct expiries from {first} to {last}", during.len(), expiries.len());
    assert!(expiries.len() >= 3, "renewed at least twice: {expiries:?}");
    assert!(last >= first + TTL_MS, "renewed past its first TTL: {expiries:?}");

    // Every other request was refused while it streamed, past its first TTL too.
    let refused_during: Vec<_> = probes.iter().filter(|(_, _, answered)| *answered < end.at).collect();
    for (probe, _, _) in &refused_during {
        assert_refused_by_concurrency(probe, "a request during the stream");
    }
    // (Its first expiry was at most a TTL after it reached the upstream.)
    let past_ttl = started.at + Duration::from_millis(TTL_MS);
    assert!(refused_during.len() >= 3, "{} requests refused during the stream", refused_during.len());
    assert!(refused_during.iter().any(|(_, sent, _)| *sent > past_ttl), "one refused after its first TTL");

    // At its end the lease goes, before the last expiry seen.
    wait_until("the stream's lease ended", Duration::from_secs(10), || zcard(valkey.port) == 0);
    let gone_at = valkey.time_ms();
    println!("lease gone at {gone_at}, {} ms before the last expiry seen", last as i64 - gone_at as i64);
    assert!(gone_at < last, "gone at {gone_at}, the last expiry seen {last}: expired, not ended");
    assert_eq!(get(envoy.port, "next", &[]).unwrap().status, 200, "the next request is admitted");
    let renewed = lease_stat(&[&envoy], "renewed");
    println!("lease stats: taken {}, renewed {renewed}", lease_stat(&[&envoy], "taken"));
    assert!(renewed >= expiries.len() as u64 - 1, "renewed {renewed} times, {} expiries seen", expiries.len());
    assert_eq!(lease_stat(&[&envoy], "taken"), 2);
    wait_until("both released", Duration::from_secs(10), || lease_stat(&[&envoy], "released") == 2);
    assert_eq!((lease_stat(&[&envoy], "expired"), lease_stat(&[&envoy], "failed")), (0, 0));
}

/// `concurrency` 1 (TTL 30 s by default): a request held at the upstream
/// whose client leaves ends its lease (the set empty before its expiry),
/// the upstream sees its connection close, and the next one is admitted.
#[test]
fn a_client_that_leaves_frees_its_lease() {
    let valkey = Valkey::start();
    let slow = Slow::start();
    let envoy = start(&valkey, &slow, &config("1"));
    let client = call(envoy.port, "GET", "/c/gone", &with_key("gone", &[("x-slow-hold", "1")]), b"").unwrap();
    wait_until("it reached the upstream", Duration::from_secs(10), || slow.event("gone", Mark::Start).is_some());
    let held = leases(&valkey);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_refused_by_concurrency(&get(envoy.port, "second", &[]).unwrap(), "a second while it is held");

    drop(client);
    wait_until("its lease ended", Duration::from_secs(10), || zcard(valkey.port) == 0);
    let gone_at = valkey.time_ms();
    println!("lease gone at {gone_at}, {} ms before its expiry", held[0].1 as i64 - gone_at as i64);
    assert!(gone_at < held[0].1, "gone at {gone_at}, its expiry {}: expired, not ended", held[0].1);
    wait_until("the upstream saw it leave", Duration::from_secs(10), || slow.event("gone", Mark::Gone).is_some());
    assert!(slow.event("gone", Mark::End).is_none(), "it was never answered");
    assert_eq!(get(envoy.port, "next", &[]).unwrap().status, 200, "the next request is admitted");
    assert_eq!(lease_stat(&[&envoy], "taken"), 2);
    wait_until("both released", Duration::from_secs(10), || lease_stat(&[&envoy], "released") == 2);
}
