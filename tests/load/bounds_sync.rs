//! The synced defects of issue #39 through real Envoys and Valkey, over at
//! least two periods, each asserting the bound of docs/sync.md computed
//! from its terms, from what reached the upstream (its arrival times, on
//! the machine's clock, which Valkey's `TIME` reads too) and from what
//! Valkey holds; each failed on the module of 5b7ef49 (the figures are in
//! the closing note): a synced log under a rate that changes; a fixed
//! window on two workers under a rate that changes; six Envoys of which
//! five go quiet and come back with bursts, in two windows; two Envoys of
//! different intervals on one key, neither dropping the other's syncer.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::load::{run, Plan, Request};
use support::plugin::{plugin, rule};
use support::shaping::burst;
use support::upstream::{demo_upstream, Upstream};
use support::{wait_until, Envoy, EnvoyOptions, Valkey};
use tollgate::resp::Value;

/// `I + d`: the interval (100 ms) and a flush's round trip, bounded
/// generously at 100 ms on a loaded machine.
const I_PLUS_D_MS: u64 = 200;

fn config(algorithm: &str, limit: u64, period: &str, interval: &str) -> String {
    let sync = format!(r#""sync": {{ "interval": "{interval}" }}"#);
    plugin()
        .timeout("200ms")
        .with(rule("s").header("x-user-id").algorithm(algorithm).limit(limit, period).field(&sync))
        .json()
}

fn start(valkey: &Valkey, upstream: &Upstream, config: &str, concurrency: u32) -> Envoy {
    let options = EnvoyOptions { plugin_config: config.to_string(), valkey_port: valkey.port, concurrency };
    let port = upstream.port;
    Envoy::try_start_edited(&options, &|text| demo_upstream(text, port)).unwrap()
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// `n` requests for `user`, one per `every`, from `clients` clients
/// (each its own connection per request), to completion.
fn paced(port: u16, user: &str, clients: usize, n: usize, every: Duration) {
    let request = Request::new("GET", "/", &[("x-user-id", user)]);
    run(port, Plan::paced(clients, n / clients, every * clients as u32), Arc::new(move |_, _| request.clone()));
}

/// When each admitted request of `user` reached the upstream, sorted.
fn arrivals(upstream: &Upstream, user: &str) -> Vec<u64> {
    let mut at: Vec<u64> =
        upstream.hits().iter().filter(|h| h.header("x-user-id") == Some(user)).map(|h| h.received_ms as u64).collect();
    at.sort_unstable();
    at
}

/// The most of `times` in any span `(t - period, t]`.
fn most_in_any_span(times: &[u64], period: u64) -> usize {
    let mut start = 0;
    let mut most = 0;
    for (j, &t) in times.iter().enumerate() {
        while times[start] + period <= t {
            start += 1;
        }
        most = most.max(j + 1 - start);
    }
    most
}

fn scores(valkey: &Valkey, key: &str) -> Vec<u64> {
    let Value::Array(items) = valkey.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"]) else { return Vec::new() };
    items.iter().skip(1).step_by(2).map(|s| String::from_utf8_lossy(s.as_bytes().unwrap()).parse().unwrap()).collect()
}

fn hash(valkey: &Valkey, key: &str, field: &str) -> u64 {
    valkey.cmd(&["HGET", key, field]).as_bytes().map_or(0, |b| String::from_utf8_lossy(b).parse().unwrap_or(0))
}

/// Synced `sliding_log`, one worker, one key, 100 per 10 s: 10 requests a
/// second for 10 s, then 50 a second for 15 s. Bound: `L + r × (I + d) +
/// N` = 100 + 50 × 0.2 + 1 = 111 in any 10 s span. Before the fix: 398
/// through Envoy (the log's reset taken as an empty window).
#[test]
fn a_synced_log_under_a_rate_that_changes_stays_within_its_bound() {
    let _alone = support::alone();
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let envoy = start(&valkey, &upstream, &config("sliding_log", 100, "10s", "100ms"), 1);
    paced(envoy.port, "a", 1, 100, Duration::from_millis(100));
    paced(envoy.port, "a", 1, 750, Duration::from_millis(20));
    let at = arrivals(&upstream, "a");
    let most = most_in_any_span(&at, 10_000);
    let bound = 100 + 50 * I_PLUS_D_MS as usize / 1_000 + 1;
    // What Valkey holds of the last 10 s: every admission recorded (at or
    // after it was admitted, within an interval and a flush).
    let end = *at.last().unwrap();
    let admitted_then = at.iter().filter(|&&t| t > end - 10_000 + I_PLUS_D_MS).count();
    let key = "tollgate:{s:a}:log";
    let recorded = || scores(&valkey, key).iter().filter(|&&t| t > end - 10_000).count();
    wait_until("the last admissions recorded", Duration::from_secs(3), || recorded() >= admitted_then);
    println!(
        "synced log, 10/s then 50/s: {} admitted, at most {most} in any 10 s span (bound {bound}); \
         Valkey holds {} for the last 10 s",
        at.len(),
        recorded()
    );
    assert!(most <= bound, "{most} in a 10 s span, bound {bound}");
    assert!(recorded() <= bound, "Valkey: {} in the last 10 s", recorded());
}

/// A variant: synced `fixed_window` 50 per 5 s on two workers, four
/// clients, 5 requests a second for 5 s, then 40 a second for 7.5 s: per
/// aligned window at most 50 + 40 × 0.2 + 2 = 60.
#[test]
fn a_synced_fixed_window_on_two_workers_under_a_rate_that_changes() {
    let _alone = support::alone();
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let envoy = start(&valkey, &upstream, &config("fixed_window", 50, "5s", "100ms"), 2);
    paced(envoy.port, "b", 4, 24, Duration::from_millis(200));
    paced(envoy.port, "b", 4, 300, Duration::from_millis(25));
    let at = arrivals(&upstream, "b");
    let mut per_window = std::collections::BTreeMap::<u64, usize>::new();
    for t in &at {
        *per_window.entry(t / 5_000).or_default() += 1;
    }
    let bound = 50 + 40 * I_PLUS_D_MS as usize / 1_000 + 2;
    let key = "tollgate:{s:b}:fw";
    let (last, end) = (*per_window.keys().last().unwrap(), *at.last().unwrap());
    let admitted_last = at.iter().filter(|&&t| t / 5_000 == last && t + I_PLUS_D_MS <= end).count() as u64;
    let counted = || if hash(&valkey, key, "5000:k") == last { hash(&valkey, key, "5000:c") } else { 0 };
    wait_until("the last window's admissions recorded", Duration::from_secs(3), || {
        counted() >= admitted_last || now_ms() / 5_000 > last
    });
    println!(
        "synced fixed window, 2 workers, 5/s then 40/s: per window {per_window:?} (bound {bound}); Valkey's last {}",
        counted()
    );
    assert!(per_window.values().all(|&n| n <= bound), "{per_window:?}, bound {bound}");
    assert!(counted() <= bound as u64, "Valkey counts {} in the last window", counted());
}

/// Six Envoys of one worker, synced `fixed_window` 100 per 10 s: all six
/// see a request per 100 ms for 0.5 s; Envoy 0 goes on at 20 a second
/// through two windows; the five others go quiet for 2 s, then send a
/// burst of 50 each, in each window. Bound per window: 100 + 20 × 0.2 + 6
/// = 110. Before the fix: 144 in the minute through Envoy (the quiet
/// workers' stale shares).
#[test]
fn six_envoys_five_of_which_go_quiet_and_come_back_stay_within_the_bound() {
    let _alone = support::alone();
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let config = config("fixed_window", 100, "10s", "100ms");
    let envoys: Vec<Envoy> = (0..6).map(|_| start(&valkey, &upstream, &config, 1)).collect();
    let ports: Vec<u16> = envoys.iter().map(|e| e.port).collect();
    // Start at a window's start on Valkey's clock (the machine's).
    wait_until("a window starts", Duration::from_secs(11), || now_ms() % 10_000 < 100);
    let w0 = now_ms() / 10_000;
    let warm: Vec<_> =
        ports.iter().map(|&p| std::thread::spawn(move || paced(p, "c", 1, 5, Duration::from_millis(100)))).collect();
    warm.into_iter().for_each(|t| t.join().unwrap());
    let steady = {
        let p = ports[0];
        std::thread::spawn(move || paced(p, "c", 1, 380, Duration::from_millis(50)))
    };
    for window in [w0, w0 + 1] {
        wait_until("2.5 s into the window", Duration::from_secs(12), || now_ms() >= window * 10_000 + 2_500);
        let bursts: Vec<_> = ports[1..]
            .iter()
            .map(|&p| std::thread::spawn(move || burst(p, "/", &[("x-user-id", "c")], 50, Duration::ZERO)))
            .collect();
        bursts.into_iter().for_each(|t| drop(t.join().unwrap()));
    }
    steady.join().unwrap();
    let at = arrivals(&upstream, "c");
    let per = |w: u64| at.iter().filter(|&&t| t / 10_000 == w).count();
    let bound = 100 + 20 * I_PLUS_D_MS as usize / 1_000 + 6;
    let key = "tollgate:{s:c}:fw";
    let end = *at.last().unwrap();
    let admitted_w1 = at.iter().filter(|&&t| t / 10_000 == w0 + 1 && t + I_PLUS_D_MS <= end).count() as u64;
    let counted = || if hash(&valkey, key, "10000:k") == w0 + 1 { hash(&valkey, key, "10000:c") } else { 0 };
    wait_until("the second window's admissions recorded", Duration::from_secs(3), || {
        counted() >= admitted_w1 || now_ms() / 10_000 > w0 + 1
    });
    println!(
        "6 synced Envoys, five quiet then back with bursts: {} and {} admitted in two windows (bound {bound}); \
         Valkey counts {} in the second",
        per(w0),
        per(w0 + 1),
        counted()
    );
    assert!(per(w0) <= bound && per(w0 + 1) <= bound, "{} {} bound {bound}", per(w0), per(w0 + 1));
    assert!(counted() <= bound as u64, "Valkey: {}", counted());
}

/// Two Envoys on one key, `sync.interval` 100 ms and 1 s (horizons 300 ms
/// and 3 s), both busy: the fast one's flushes every 100 ms never drop the
/// slow one, which flushes every second. Before the fix the store pruned
/// with the caller's horizon: the slow one was out of the set for most of
/// each second, and the fast one took its share.
#[test]
fn a_short_interval_does_not_drop_a_long_one() {
    let _alone = support::alone();
    let valkey = Valkey::start();
    let upstream = Upstream::start();
    let fast = start(&valkey, &upstream, &config("sliding_log", 10_000, "10s", "100ms"), 1);
    let slow = start(&valkey, &upstream, &config("sliding_log", 10_000, "10s", "1s"), 1);
    let drive = |p: u16| std::thread::spawn(move || paced(p, "d", 1, 100, Duration::from_millis(50)));
    let (a, b) = (drive(fast.port), drive(slow.port));
    let set = "tollgate:{s:d}:log:syncers";
    wait_until("both syncers", Duration::from_secs(3), || valkey.int(&["ZCARD", set]) == 2);
    // For 2 s, every 50 ms: both still there.
    let mut seen = Vec::new();
    let until = now_ms() + 2_000;
    while now_ms() < until {
        seen.push(valkey.int(&["ZCARD", set]));
        std::thread::sleep(Duration::from_millis(50));
    }
    a.join().unwrap();
    b.join().unwrap();
    let alone = seen.iter().filter(|&&n| n < 2).count();
    println!("intervals 100 ms and 1 s on one key: {alone} of {} reads of the syncer set found one syncer", seen.len());
    assert_eq!(alone, 0, "the slow syncer was dropped: {seen:?}");
}
