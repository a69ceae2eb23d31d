//! Shaping under a flood (docs/shaping.md): 2,048 connections at once for
//! one key of a rule that shapes with `max_waiting` 64 on 2 workers. Every
//! connection is answered; each admission is a slot recorded in Valkey
//! (none unchecked); the rest are refused, most at arrival without a store
//! call; at most `max_waiting` requests per worker are held or in flight.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use support::shaping::{assert_within, burst, log_entries as entries, rules};
use support::upstream::{demo_upstream, Upstream};
use support::{wait_until, Envoy, EnvoyOptions, Valkey};

fn start(valkey: &Valkey, concurrency: u32, upstream: &Upstream) -> Envoy {
    let options = EnvoyOptions { plugin_config: rules().json(), valkey_port: valkey.port, concurrency };
    let port = upstream.port;
    Envoy::try_start_edited(&options, &|text| demo_upstream(text, port)).unwrap()
}

fn stat(envoy: &Envoy, name: &str) -> u64 {
    envoy.stat(&format!("wasmcustom.tollgate.{name}")).unwrap_or(0)
}

#[test]
fn a_flood_that_wants_to_wait_stays_bounded_and_admits_nothing_unchecked() {
    let _alone = support::alone();
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let envoy = start(&valkey, 2, &upstream);
    // The function library loaded first: a call that meets it missing is
    // sent again, and would count twice in store.requests.
    assert_eq!(support::http(envoy.port, "POST", "/flood/x", &[("x-user-id", "warm-up")]).unwrap().status, 200);
    let sent_before = stat(&envoy, "store.requests");
    let before = envoy.stat("server.memory_allocated").unwrap_or(0);
    // The most Envoy allocated while the flood ran, and the most requests
    // held for their slot at once (both workers).
    let (done, peak, waiting) = (AtomicBool::new(false), AtomicU64::new(0), AtomicU64::new(0));
    let shots = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(envoy.stat("server.memory_allocated").unwrap_or(0), Ordering::Relaxed);
                waiting.fetch_max(stat(&envoy, "shape.waiting"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        // The store answers nothing for the first 500 ms (well within the
        // 2 s timeout): the requests that arrive meanwhile all count against
        // `max_waiting`, however fast this machine lets the flood arrive, so
        // the bound is reached and the rest are refused at arrival.
        valkey.cmd(&["CLIENT", "PAUSE", "500", "ALL"]);
        let shots = burst(envoy.port, "/flood/x", &[("x-user-id", "mallory")], 2_048, Duration::ZERO);
        done.store(true, Ordering::Relaxed);
        shots
    });
    let (peak, waiting) = (peak.into_inner(), waiting.into_inner());
    assert!(waiting <= 2 * 64, "at most max_waiting per worker held: {waiting}");
    let admitted = shots.iter().filter(|s| s.status == 200).count();
    let refused = shots.iter().filter(|s| s.status == 429).count();
    let recorded = entries(&valkey, "tollgate:{flood:mallory}:log");
    assert_eq!(
        admitted + refused,
        2_048,
        "every connection answered: {:?}",
        shots.iter().find(|s| s.status != 200 && s.status != 429)
    );
    assert_eq!(admitted, recorded.len(), "every admission is a recorded slot: none unchecked");
    assert!(admitted <= 15, "5 now, 5 at +1 s, 5 at +2 s at most: {admitted}");
    assert_within(&recorded, 5, 1_000);
    let full = stat(&envoy, "shape.full");
    assert!(full > 0, "refused at arrival beyond max_waiting");
    let sent = stat(&envoy, "store.requests") - sent_before;
    assert!(sent <= 2_048 - full, "{sent} sent to the store, {full} refused without a call");
    eprintln!(
        "flood of 2048: {admitted} admitted, {refused} refused ({full} without a store call), at most {waiting} held; Envoy memory {} KiB before, {} KiB at most during",
        before / 1024,
        peak / 1024
    );
    wait_until("nothing held", Duration::from_secs(3), || envoy.stat("wasmcustom.tollgate.shape.waiting") == Some(0));
}
