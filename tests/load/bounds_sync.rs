//! docs/sync.md's bound, `limit + r × (I + d) + N`, through real Envoys
//! (the built module, V8) and a real Valkey, in the shapes of issue #39's
//! defects (each measured through Envoy before its fix, each replayed in
//! the pure model by src/model/sim/scenarios.rs):
//!
//! - a synced `sliding_log` under a rate that changes, on one worker and on
//!   two (the log's reset is when its oldest entry leaves, not when the log
//!   is empty): the most admitted in any period, by the times the requests
//!   reached the upstream, and Valkey's log holding each admission once;
//! - six workers, five of which go quiet past their horizon and come back
//!   with a burst (their stale views and shares): the admitted per window
//!   aligned to Valkey's clock, and Valkey's count of each window;
//! - two proxies syncing one key every 100 ms and every 1 s (a flush pruned
//!   the syncer set with its caller's horizon): the slow one stays in the
//!   set for its own horizon, and the fast one stops at its share.
//!
//! Each fails against the module built before the fixes (`TOLLGATE_WASM`).

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::load::{Load, Plan, Report, Request};
use support::plugin::{plugin, rule};
use support::timeline::{most_in_any_span, Poller};
use support::upstream::{demo_upstream, Hit, Upstream};
use support::{try_command, wait_until, Envoy, EnvoyOptions, Valkey};
use tollgate::resp::Value;

const LIMIT: u64 = 100;
const LOG: &str = "tollgate:{tenant:t1}:log";
const INTERVAL_MS: u64 = 100;
/// d, a flush's round trip, bounded generously: Valkey runs a flush in
/// microseconds here, and the rest is a busy machine's scheduling.
const D_MS: u64 = 100;

fn config(algorithm: &str, period: &str, interval: &str) -> String {
    let sync = format!(r#""sync": {{ "interval": "{interval}" }}"#);
    let tenant = rule("tenant").header("x-tenant").algorithm(algorithm).limit(LIMIT, period).field(&sync);
    plugin().timeout("200ms").with(tenant).json()
}

/// An Envoy of `workers` workers whose admitted requests go to `upstream`.
fn envoy(valkey: &Valkey, upstream: &Upstream, config: &str, workers: u32) -> Envoy {
    let options = EnvoyOptions { plugin_config: config.to_string(), valkey_port: valkey.port, concurrency: workers };
    let port = upstream.port;
    Envoy::try_start_edited(&options, &|text| demo_upstream(text, port)).unwrap()
}

/// `n` requests for tenant t1 from each of `clients` keep-alive clients,
/// every `pace` (none: one after another), marked `x-from: from`.
fn send(envoy: &Envoy, from: &str, clients: usize, n: usize, pace: Option<Duration>) -> Load {
    let from = from.to_string();
    let request = move |_: usize, _: usize| Request::new("GET", "/", &[("x-tenant", "t1"), ("x-from", &from)]);
    Load::start(envoy.port, Plan { pace, ..Plan::keep_alive(clients, n) }, Arc::new(request))
}

fn every(ms: u64) -> Option<Duration> {
    Some(Duration::from_millis(ms))
}

/// Requests admitted (200 with a RateLimit header).
fn admitted_by(reports: &[&Report]) -> usize {
    reports.iter().flat_map(|r| &r.samples).filter(|s| s.status() == Some(200) && s.decided()).count()
}

/// Whether `ready` holds within `timeout`, polled every 20 ms.
fn settles(timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// The upstream's requests once `n` have arrived (at most 5 s after the
/// run): their arrival times (ms, Valkey's clock), sorted, and senders.
fn arrivals(upstream: &Upstream, n: usize) -> Vec<(u64, String)> {
    settles(Duration::from_secs(5), || upstream.hits().len() >= n);
    let mut hits: Vec<(u64, String)> =
        upstream.hits().iter().map(|h: &Hit| (h.at_ms(), h.header("x-from").unwrap_or("").to_string())).collect();
    hits.sort();
    hits
}

/// docs/sync.md's bound: `limit + r × (I + d) + N` (`r` per second,
/// `I + d` in ms, the product rounded up).
fn bound(rate: u64, i_plus_d_ms: u64, workers: u64) -> u64 {
    LIMIT + (rate * i_plus_d_ms).div_ceil(1000) + workers
}

fn number(v: &Value) -> u64 {
    let text = String::from_utf8_lossy(v.as_bytes().unwrap_or_default()).into_owned();
    text.parse::<f64>().unwrap_or_else(|_| panic!("not a number: {v:?}")) as u64
}

/// Every entry the log held while read (member -> score), read every
/// 500 ms: an entry stays at least a period (10 s).
fn log_reader(port: u16) -> Poller<BTreeMap<String, u64>> {
    Poller::start(Duration::from_millis(500), move |seen: &mut BTreeMap<String, u64>| {
        let read = try_command(port, &[b"ZRANGE", LOG.as_bytes(), b"0", b"-1", b"WITHSCORES"]);
        if let Ok(Value::Array(items)) = read {
            for pair in items.chunks(2) {
                seen.insert(String::from_utf8_lossy(pair[0].as_bytes().unwrap()).into_owned(), number(&pair[1]));
            }
        }
    })
}

/// Asserts a synced log's run at `rate` (its fast phase) on `workers`
/// within the bound, by the upstream's times and by Valkey's, and the log
/// holding each of the `admitted` requests once.
fn check_log_run(
    what: &str,
    admitted: usize,
    upstream: &Upstream,
    log: Poller<BTreeMap<String, u64>>,
    rate: u64,
    workers: u64,
) {
    let hits = arrivals(upstream, admitted);
    let times: Vec<u64> = hits.iter().map(|h| h.0).collect();
    // The last flushes land within a few intervals; the reader reads again.
    settles(Duration::from_secs(5), || log.with(|seen| seen.len() >= admitted));
    log.read_again(2); // read after it: nothing more lands
    let mut entries: Vec<u64> = log.stop().into_values().collect();
    entries.sort_unstable();
    // An admission's entry is written by the flush after it: the k-th
    // entry's time less the k-th arrival is, on one worker, how long its
    // flush took to reach Valkey: I + d is measured, the most of them. On
    // two workers the matching is not known and that most is only a lower
    // bound of it: there I + d is taken no less than I + 100 ms.
    let lag = entries.iter().zip(&times).map(|(&e, &a)| e.saturating_sub(a)).max().unwrap_or(0);
    let i_plus_d = lag.max(INTERVAL_MS + if workers == 1 { 0 } else { D_MS });
    let allowed = bound(rate, i_plus_d, workers);
    let (most, end) = most_in_any_span(&times, 10_000);
    // A 10 s span of flush times holds admissions of at most 10 s + I + d.
    let allowed_store = allowed + (rate * i_plus_d).div_ceil(1000);
    let (most_store, _) = most_in_any_span(&entries, 10_000);
    let from = |who: &str| hits.iter().filter(|h| h.1 == who).count();
    println!(
        "{what}: {admitted} admitted ({} from a, {} from b), {} at the upstream; most in any 10 s span {most} \
         (ending {} ms after the first arrival), bound {allowed} = {LIMIT} + {rate}/s x {i_plus_d} ms + {workers} \
         (flush lag at most {lag} ms); Valkey's log held {} entries, most in any 10 s span {most_store} \
         (bound {allowed_store})",
        from("a"),
        from("b"),
        hits.len(),
        end - times.first().copied().unwrap_or(end),
        entries.len(),
    );
    assert!(admitted as u64 >= 2 * LIMIT, "the run admitted over two periods: {admitted}");
    assert_eq!(hits.len(), admitted, "each admitted request reached the upstream once");
    assert!(most as u64 <= allowed, "{most} admitted in one 10 s span: over the bound {allowed}");
    assert_eq!(entries.len(), admitted, "Valkey's log recorded each admitted request once");
    assert!(most_store as u64 <= allowed_store, "Valkey's log holds {most_store} in one 10 s span");
}

/// Issue #39's D1: one worker, 10 requests a second for 10 s, then 50 a
/// second for 15 s. Before the fix: 398 in one 10 s span (the issue's run;
/// how many depends on where in the interval the oldest entry leaves).
#[test]
fn a_synced_log_under_a_rate_that_changes_stays_within_the_bound() {
    let _alone = support::alone();
    let (valkey, upstream) = (Valkey::start(), Upstream::start());
    let envoy = envoy(&valkey, &upstream, &config("sliding_log", "10s", "100ms"), 1);
    let log = log_reader(valkey.port);
    let started = Instant::now();
    let slow = send(&envoy, "a", 1, 100, every(100)).join();
    let fast = send(&envoy, "a", 1, 750, every(20)).join();
    println!("{} and {} (10/s, then 50/s for {:?})", slow.summary("10/s"), fast.summary("50/s"), started.elapsed());
    check_log_run("synced log, 1 worker, 10/s then 50/s", admitted_by(&[&slow, &fast]), &upstream, log, 50, 1);
}

/// D1 on two workers (two Envoys): one at 10 a second for 25 s, the other
/// joining after 10 s at 40 a second (together 10, then 50 a second).
#[test]
fn two_workers_joining_as_the_rate_changes_stay_within_the_bound() {
    let _alone = support::alone();
    let (valkey, upstream) = (Valkey::start(), Upstream::start());
    let config = config("sliding_log", "10s", "100ms");
    let (a, b) = (envoy(&valkey, &upstream, &config, 1), envoy(&valkey, &upstream, &config, 1));
    let log = log_reader(valkey.port);
    let steady = send(&a, "a", 1, 250, every(100));
    let started = steady.started;
    wait_until("10 s of the first one alone", Duration::from_secs(30), || started.elapsed() >= Duration::from_secs(10));
    let joined = send(&b, "b", 1, 600, every(25)).join();
    let steady = steady.join();
    println!("{}; {}", steady.summary("a, 10/s for 25 s"), joined.summary("b, 40/s from 10 s"));
    check_log_run("synced log, 2 workers, 10/s then 50/s", admitted_by(&[&steady, &joined]), &upstream, log, 50, 2);
}

/// Issue #39's D2, its minute made 10 s: 6 Envoys of one worker,
/// `fixed_window` 100 per 10 s. From just after a window starts (Valkey's
/// clock), all six send one request every 100 ms for 0.5 s; the first goes
/// on at 20 a second into the next window; the five others are quiet for
/// 4.5 s (fifteen of their horizons), then send 50 each at once. Before
/// the fix: 144 in the minute.
#[test]
fn synced_workers_that_go_quiet_and_come_back_stay_within_the_bound() {
    const PERIOD_MS: u64 = 10_000;
    let _alone = support::alone();
    let (valkey, upstream) = (Valkey::start(), Upstream::start());
    let config = config("fixed_window", "10s", "100ms");
    let envoys: Vec<Envoy> = (0..6).map(|_| envoy(&valkey, &upstream, &config, 1)).collect();
    // Valkey's count of each window as the run moves it: the window's
    // index -> its count at the last read while it was the current one.
    let port = valkey.port;
    let counts = Poller::start(Duration::from_millis(20), move |seen: &mut BTreeMap<u64, u64>| {
        let fields: [&[u8]; 4] = [b"HMGET", b"tollgate:{tenant:t1}:fw", b"10000:k", b"10000:c"];
        if let Ok(Value::Array(v)) = try_command(port, &fields) {
            if let (Some(k), Some(c)) = (v[0].as_bytes(), v[1].as_bytes()) {
                seen.insert(number(&Value::Bulk(k.to_vec())), number(&Value::Bulk(c.to_vec())));
            }
        }
    });
    let first = valkey.time_ms() / PERIOD_MS + 1;
    let at = |ms: u64| {
        let t = first * PERIOD_MS + ms;
        wait_until("the run's next phase", Duration::from_millis(2 * PERIOD_MS), || valkey.time_ms() >= t);
    };
    at(20);
    let warm: Vec<Load> = envoys.iter().enumerate().map(|(i, e)| send(e, &i.to_string(), 1, 5, every(100))).collect();
    let warm: Vec<Report> = warm.into_iter().map(Load::join).collect();
    // 230 at 50 ms: until about 2 s into the next window.
    let steady = send(&envoys[0], "0", 1, 230, every(50));
    at(5_000);
    let bursts: Vec<Load> =
        envoys[1..].iter().enumerate().map(|(i, e)| send(e, &(i + 1).to_string(), 10, 5, None)).collect();
    let bursts: Vec<Report> = bursts.into_iter().map(Load::join).collect();
    let steady = steady.join();
    let reports: Vec<&Report> = warm.iter().chain(&bursts).chain([&steady]).collect();
    let admitted = admitted_by(&reports);
    let hits = arrivals(&upstream, admitted);
    let mut by_window: BTreeMap<u64, u64> = BTreeMap::new();
    for (t, _) in &hits {
        *by_window.entry(t / PERIOD_MS).or_default() += 1;
    }
    let last = by_window.keys().last().copied().unwrap_or(first);
    let in_last = by_window.get(&last).copied().unwrap_or(0);
    // The last flushes land well before the last window ends.
    settles(Duration::from_secs(5), || counts.with(|c| c.get(&last).copied().unwrap_or(0) >= in_last));
    counts.read_again(2); // read after it: nothing more lands
    let stored = counts.stop();
    // Valkey counts a flushed admission in the window of its flush, up to
    // I + d later: none came near a window's end (the first window's
    // quota was gone seconds before it ended).
    let before_end = |k: u64| hits.iter().filter(|h| h.0 / PERIOD_MS == k).map(|h| (k + 1) * PERIOD_MS - h.0).min();
    let allowed = bound(20, INTERVAL_MS + D_MS, 6);
    let from_quiet: usize = bursts.iter().map(|r| admitted_by(&[r])).sum();
    // Per window (1 = the first): admitted (upstream), Valkey's count, how
    // long before its end the last admission came (ms).
    let windows: Vec<_> = by_window
        .iter()
        .map(|(&k, &n)| (k + 1 - first, n, stored.get(&k).copied(), before_end(k).unwrap_or(0)))
        .collect();
    println!(
        "6 synced workers, five quiet 4.5 s then 50 each: {admitted} admitted ({from_quiet} of the 250 of the bursts), \
         {} at the upstream; per 10 s window (admitted, Valkey's count, last admission before its end in ms): \
         {windows:?}; bound {allowed} = {LIMIT} + 20/s x {} ms + 6",
        hits.len(),
        INTERVAL_MS + D_MS,
    );
    assert_eq!(hits.len(), admitted, "each admitted request reached the upstream once");
    assert!(by_window.len() >= 2 && by_window.contains_key(&first), "the run covered two windows: {by_window:?}");
    for &(i, n, counted, _) in &windows {
        assert!(n <= allowed, "window {i}: {n} admitted, over the bound {allowed}");
        assert_eq!(counted, Some(n), "Valkey counts window {i} as admitted into it");
    }
}

/// A syncer set read at once with Valkey's clock.
#[derive(Debug)]
struct Snapshot {
    now_ms: u64,
    members: Vec<(String, u64)>,
}

impl Snapshot {
    fn score(&self, name: &str) -> Option<u64> {
        self.members.iter().find(|m| m.0 == name).map(|m| m.1)
    }
}

fn snapshot(port: u16, set: &str) -> Option<Snapshot> {
    let script = "return {redis.call('TIME'), redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')}";
    let reply = try_command(port, &[b"EVAL", script.as_bytes(), b"1", set.as_bytes()]).ok()?;
    let [time, members] = reply.as_array()? else { return None };
    let time = time.as_array()?;
    let now_ms = number(&time[0]) * 1000 + number(&time[1]) / 1000;
    let members = members.as_array()?.chunks(2);
    Some(Snapshot {
        now_ms,
        members: members.map(|p| (String::from_utf8_lossy(p[0].as_bytes().unwrap()).into(), number(&p[1]))).collect(),
    })
}

/// `name`'s flushes as the snapshots saw them: (the last snapshot before
/// it, the first after it, the score it gave).
fn flushes(snaps: &[Snapshot], name: &str) -> Vec<(u64, u64, u64)> {
    let pairs = snaps.windows(2).filter_map(|w| match (w[0].score(name), w[1].score(name)) {
        (before, Some(score)) if before != Some(score) => Some((w[0].now_ms, w[1].now_ms, score)),
        _ => None,
    });
    pairs.collect()
}

/// Issue #39's D6: two Envoys on one key, `sync.interval` 100 ms and 1 s
/// (horizons 300 ms and 3 s). Before the fix the fast one's flushes pruned
/// the set with their own horizon: the slow one was gone 300 ms after each
/// of its flushes, and the fast one, alone, took all that remained.
#[test]
fn a_fast_syncer_keeps_a_slow_one_for_its_own_horizon() {
    const SLOW_HORIZON_MS: u64 = 3_000;
    let _alone = support::alone();
    let (valkey, upstream) = (Valkey::start(), Upstream::start());
    let fast = envoy(&valkey, &upstream, &config("sliding_log", "60s", "100ms"), 1);
    let slow = envoy(&valkey, &upstream, &config("sliding_log", "60s", "1s"), 1);
    let port = valkey.port;
    let set = Poller::start(Duration::from_millis(20), move |snaps: &mut Vec<Snapshot>| {
        snaps.extend(snapshot(port, &format!("{LOG}:syncers")));
    });
    let last = |f: &dyn Fn(&Snapshot) -> bool| set.with(|s| s.last().is_some_and(f));
    let fast_trickle = send(&fast, "fast", 1, 400, every(100));
    wait_until("the fast one a syncer", Duration::from_secs(5), || last(&|s| s.members.len() == 1));
    let fast_name = set.with(|s| s.last().unwrap().members[0].0.clone());
    let slow_trickle = send(&slow, "slow", 1, 100, every(300));
    wait_until("both syncers", Duration::from_secs(5), || last(&|s| s.members.len() == 2));
    let slow_name = set.with(|s| s.last().unwrap().members.iter().find(|m| m.0 != fast_name).unwrap().0.clone());
    // The slow one's second flush, then 400 ms: the fast one has synced
    // since with the slow one's last flush over 300 ms old.
    wait_until("a second flush of the slow one", Duration::from_secs(5), || {
        set.with(|s| flushes(s, &slow_name).len() >= 2)
    });
    let seen = set.with(|s| flushes(s, &slow_name).last().unwrap().1);
    wait_until("400 ms after it", Duration::from_secs(5), || valkey.time_ms() >= seen + 400);
    let counted = valkey.int(&["ZCOUNT", LOG, &(valkey.time_ms() - 60_000).to_string(), "+inf"]) as u64;
    let burst = support::load::run(
        fast.port,
        Plan::keep_alive(1, 150),
        Arc::new(|_, _| Request::new("GET", "/", &[("x-tenant", "t1")])),
    );
    let denied_at = burst.samples.iter().position(|s| s.status() == Some(429));
    let denial = denied_at.map(|i| &burst.samples[i]);
    let left = denial.map(|d| support::remaining(d.response.as_ref().unwrap())[0].1);
    let retry = denial.and_then(|d| d.header("retry-after")).and_then(|r| r.parse::<u64>().ok());
    // The slow one flushes once more, then stops.
    let before = set.with(|s| flushes(s, &slow_name).len());
    wait_until("its next flush", Duration::from_secs(5), || set.with(|s| flushes(s, &slow_name).len() > before));
    slow_trickle.stop();
    wait_until("the slow one to leave the set", Duration::from_secs(10), || {
        set.with(|s| {
            s.last().is_some_and(|x| {
                x.score(&slow_name).is_none() && flushes(s, &slow_name).last().is_some_and(|f| x.now_ms > f.1)
            })
        })
    });
    fast_trickle.stop();
    let snaps = set.stop();
    let seen_flushes = flushes(&snaps, &slow_name);
    // Every snapshot within the slow one's horizon of one of its flushes
    // (from the first snapshot showing it to 3 s after the last one
    // without it) holds the slow one.
    let within = |s: &Snapshot| seen_flushes.iter().any(|f| f.1 <= s.now_ms && s.now_ms < f.0 + SLOW_HORIZON_MS);
    let held: Vec<&Snapshot> = snaps.iter().filter(|s| within(s)).collect();
    let missing = held.iter().filter(|s| s.score(&slow_name).is_none()).count();
    // Each flush's score is its syncer's expiry: its time plus its horizon.
    let scored = seen_flushes.iter().filter(|f| f.0 + SLOW_HORIZON_MS <= f.2 && f.2 <= f.1 + SLOW_HORIZON_MS).count();
    println!(
        "syncers at 100 ms and 1 s: {} snapshots of the set; within 3 s of one of the slow one's {} flushes: {}, \
         the slow one missing from {missing}; {scored} of its scores its flush + 3 s. The fast one's burst with \
         {} of {LIMIT} counted: {} admitted before its first denial (remaining {left:?}, Retry-After {retry:?} s)",
        snaps.len(),
        seen_flushes.len(),
        held.len(),
        counted,
        denied_at.unwrap_or(burst.samples.len()),
    );
    assert_eq!(missing, 0, "the slow one stays in the set for its own horizon after each flush");
    assert_eq!(scored, seen_flushes.len(), "a syncer's score is its own expiry");
    assert!(left.is_some_and(|r| r >= 1), "the fast one stopped at its share, the slow one's part left: {left:?}");
    assert!(retry.is_some_and(|r| r <= 1), "and waits for its next sync, not the window: {retry:?}");
    assert!(seen_flushes.len() >= 4, "the slow one flushed every second: {seen_flushes:?}");
}
