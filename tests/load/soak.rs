//! The soak: steady load through a real Envoy for `SOAK_SECONDS` (600 by
//! default), sampling Envoy's memory and the decisions awaiting replies. Ignored by
//! `make test`; `make soak` runs it (`scripts/soak.sh`).

use crate::support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::admin_get;
use support::load::{Load, Plan, Request};
use support::plugin::plugin;
use support::{Envoy, EnvoyOptions, Valkey};

fn config() -> String {
    plugin().timeout("100ms").failure_mode("allow").rule("soak", Some("x-user-id"), &[(15, "10s"), (5, "1s")]).json()
}

/// Requests per second, over all threads.
const RATE: u64 = 200;
const THREADS: usize = 2;

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches(" kB").parse().unwrap()
}

/// `allocated` from Envoy's `/memory` (tcmalloc's view of Envoy's own heap).
fn heap_allocated(admin: u16) -> u64 {
    let body = admin_get(admin, "/memory").unwrap().body;
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    json["allocated"].as_str().unwrap().parse().unwrap()
}

#[test]
#[ignore = "10 minutes: run with `make soak`"]
fn soak_steady_load_keeps_memory_flat_and_nothing_pending() {
    let _alone = support::alone();
    let seconds: u64 = std::env::var("SOAK_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(600);
    let valkey = Valkey::start();
    let envoy = Envoy::start(&EnvoyOptions { plugin_config: config(), valkey_port: valkey.port, concurrency: 2 });
    let pid = envoy.pid().unwrap();
    let counts: Arc<[AtomicU64; 4]> = Arc::new(Default::default()); // 200, 429, other, errors
    let counted = Arc::clone(&counts);
    let count = Arc::new(move |_: usize, _: usize, r: Option<&support::Response>| {
        let slot = match r.map(|r| r.status) {
            Some(200) => 0,
            Some(429) => 1,
            Some(_) => 2,
            None => 3,
        };
        counted[slot].fetch_add(1, Ordering::Relaxed);
    });
    // 100 users, each asking twice a second: the 10s window denies a quarter.
    let user = |t: usize, i: usize| format!("user-{}", (i * THREADS + t) % 100);
    let request = Arc::new(move |t: usize, i: usize| Request::new("GET", "/", &[("x-user-id", &user(t, i))]));
    let interval = Duration::from_micros(1_000_000 * THREADS as u64 / RATE);
    let plan = Plan { keep: false, ..Plan::paced(THREADS, usize::MAX, interval) }.on_answer(count);
    let load = Load::start(envoy.port, plan, request);

    println!(
        "t_s,requests,ok,limited,other,errors,rss_kib,heap_bytes,decisions_in_flight,downstream_active,store_errors"
    );
    let start = Instant::now();
    let mut samples = Vec::new();
    while start.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_secs(10).min(Duration::from_secs(seconds)));
        let c: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let pending = envoy.stat("wasmcustom.tollgate.stream.in_flight").unwrap_or(0);
        let active = envoy.stat("http.demo.downstream_rq_active").unwrap_or(0);
        let errors = envoy.stat("wasmcustom.tollgate.store.errors").unwrap_or(0);
        let (rss, heap) = (rss_kib(pid), heap_allocated(envoy.admin_port));
        let t = start.elapsed().as_secs();
        println!(
            "{t},{},{},{},{},{},{rss},{heap},{pending},{active},{errors}",
            c.iter().sum::<u64>(),
            c[0],
            c[1],
            c[2],
            c[3]
        );
        samples.push((t, rss, heap, pending));
    }
    load.stop();
    let c: Vec<u64> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    assert!(c[0] > 0 && c[1] > 0, "both admitted and limited requests: {c:?}");
    assert_eq!((c[2], c[3]), (0, 0), "no other status, no error: {c:?}");
    assert_eq!(envoy.stat("wasmcustom.tollgate.store.errors").unwrap_or(0), 0);
    // Flat: after the first minute of warm-up, RSS grows by less than 5 %.
    let warm: Vec<_> = samples.iter().filter(|s| s.0 >= 60.min(seconds / 2)).collect();
    let (first, last) = (warm.first().unwrap(), warm.last().unwrap());
    let max_pending = samples.iter().map(|s| s.3).max().unwrap_or(0);
    println!(
        "soak: {seconds} s, {} requests; RSS {} KiB -> {} KiB, heap {} -> {} bytes after warm-up; decisions in flight at most {max_pending}",
        c.iter().sum::<u64>(),
        first.1,
        last.1,
        first.2,
        last.2
    );
    assert!(last.1 * 100 <= first.1 * 105, "RSS grew from {} to {} KiB", first.1, last.1);
    assert!(max_pending <= THREADS as u64, "decisions in flight bounded by the clients in flight: {max_pending}");
}
