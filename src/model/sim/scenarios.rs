//! The three runs of issue #39, measured through Envoy before their fixes,
//! as traces of the simulator: each must stay within its stated bound.

use super::ledger::admissions;
use super::trace::{Input, Leave, Mode, Net, Proxy, Rule, Trace, EPOCH_MS};
use super::world::run;
use crate::limiter::Algorithm;
use crate::worker::{ShapeStat, Stat};

fn request(at: u64, proxy: usize) -> (u64, Input) {
    (at, Input::Request { proxy, worker: 0, key: 0, leave: Leave::Never, used: 1, upstream_ms: None })
}

/// A trace of `rule` on `proxies` of one worker each (their sync
/// intervals: `None` for an exact proxy), a network of 1 to 2 ms,
/// `valkey.timeout` 200 ms; its inputs sorted.
fn trace(seed: u64, rule: Rule, intervals: &[Option<u64>], mut inputs: Vec<(u64, Input)>, until_ms: u64) -> Trace {
    inputs.sort_by_key(|(at, _)| *at);
    let proxies = intervals.iter().map(|&interval_ms| Proxy { workers: 1, interval_ms, max_keys: None }).collect();
    Trace { seed, rule, proxies, net: Net { min_ms: 1, max_ms: 2 }, timeout_ms: 200, inputs, until_ms }
}

/// A synced rule of one window.
fn synced(algorithm: Algorithm, limit: u64, period_ms: u64) -> Rule {
    Rule {
        algorithm,
        windows: vec![(limit, period_ms)],
        mode: Mode::Synced,
        count: None,
        concurrency: None,
        overrides: None,
    }
}

/// Six synced proxies (interval 100 ms), `fixed_window` 100 per
/// `period_ms`: all six send a request per 100 ms for 0.5 s; proxy 0 goes
/// on at 20 a second (`steady` requests); the five others come back at
/// each of `bursts` with 50 each, `gap` ms apart (a burster `7 × gap / 4`
/// after the one before).
fn quiet_then_back(seed: u64, period_ms: u64, steady: u64, bursts: &[u64], gap: u64, until_ms: u64) -> Trace {
    let mut inputs: Vec<(u64, Input)> =
        (0..6).flat_map(|p| (0..5).map(move |i| request(i * 100 + p as u64, p))).collect();
    inputs.extend((0..steady).map(|i| request(500 + i * 50, 0)));
    for &start in bursts {
        let at = move |p: usize, i: u64| start + i * gap + p as u64 * gap * 7 / 4;
        inputs.extend((1..6).flat_map(|p| (0..50u64).map(move |i| request(at(p, i), p))));
    }
    trace(seed, synced(Algorithm::FixedWindow, 100, period_ms), &[Some(100); 6], inputs, until_ms)
}

/// The most a bucket admitted in any span `(t - period_ms, t]` (the
/// ledger of what reached the upstream, at its time).
fn most_in_any_span(trace: &Trace, period_ms: u64) -> u64 {
    let r = run(trace).unwrap();
    let ledger = admissions(&r).into_values().next().unwrap_or_default();
    let mut most = 0;
    for &(t, _) in &ledger {
        let n = ledger.iter().filter(|e| e.0 + period_ms > t && e.0 <= t).map(|e| e.1).sum();
        most = most.max(n);
    }
    most
}

/// Synced `sliding_log`, one worker, one key, 100 per 10 s, interval
/// 100 ms: 10 requests a second for 10 s, then 50 a second for 15 s.
/// Before the fix: 398 in one 10 s span (the log's reset taken as empty).
#[test]
fn a_synced_log_under_a_rate_that_changes() {
    let inputs = (0..100).map(|i| request(i * 100, 0)).chain((0..750).map(|i| request(10_000 + i * 20, 0))).collect();
    let trace = trace(1, synced(Algorithm::SlidingLog, 100, 10_000), &[Some(100)], inputs, 25_000);
    let most = most_in_any_span(&trace, 10_000);
    println!("synced log, rate 10/s then 50/s: at most {most} in any 10 s span");
    // limit + r × (I + d) + N: 50/s × ~0.1 s + 1.
    assert!(most <= 106, "{most}");
    assert!(super::check(&trace).0.is_empty());
}

/// 6 proxies of 1 worker, `fixed_window` 100 per 60 s, interval 100 ms:
/// all six send one request per 100 ms for 0.5 s, one goes on at 20 a
/// second, the other five come back later with a burst of 50 each.
/// Before the fix: 144 in the minute (the quiet workers' stale shares).
#[test]
fn synced_workers_that_go_quiet_and_come_back() {
    let trace = quiet_then_back(2, 60_000, 1_150, &[30_000], 0, 58_000);
    let r = run(&trace).unwrap();
    let in_minute = |from: u64| {
        let admitted = admissions(&r);
        admitted.values().flatten().filter(|(t, _)| *t / 60_000 == from / 60_000).map(|e| e.1).sum::<u64>()
    };
    let minute = in_minute(super::trace::EPOCH_MS);
    println!("6 synced workers, five quiet then back: {minute} admitted in the minute");
    // limit + r × (I + d) + N: 20/s × ~0.1 s + 6.
    assert!(minute <= 108, "{minute}");
    assert!(super::check(&trace).0.is_empty());
}

/// Shaped, 5 per second, `max_delay` 5 s: 10 requests (5 held), the store
/// paused for 600 ms, an 11th request whose client gives up after 100 ms,
/// while its call waits for the store. Before the fix: its turn stayed
/// recorded (11 entries).
#[test]
fn a_shaped_request_whose_client_leaves_while_its_call_is_with_the_store() {
    let shape = Mode::Shaped { max_delay_ms: 5_000, max_waiting: 1_024 };
    let mut inputs: Vec<(u64, Input)> = (0..10).map(|i| request(i, 0)).collect();
    inputs.push((100, Input::Pause { ms: 600 }));
    inputs.push((
        110,
        Input::Request { proxy: 0, worker: 0, key: 0, leave: Leave::After(100), used: 1, upstream_ms: None },
    ));
    let rule = Rule {
        algorithm: Algorithm::SlidingLog,
        windows: vec![(5, 1_000)],
        mode: shape,
        count: None,
        concurrency: None,
        overrides: None,
    };
    let trace = Trace { timeout_ms: 2_000, ..trace(3, rule, &[None], inputs, 3_000) };
    let r = run(&trace).unwrap();
    let key = "tollgate:{api:u0}:log";
    let entries = r.store.model.entry_times(key).len();
    let given_back: u64 = r.nodes.iter().map(|n| n.host.count(Stat::Shape(ShapeStat::GivenBack))).sum();
    println!("shaped, a client gone while the store was paused: {entries} entries, {given_back} given back");
    assert_eq!((entries, given_back), (10, 1));
    assert!(super::check(&trace).0.is_empty());
}

/// The same over two windows of 10 s, the five coming back in each with
/// bursts that arrive over 200 ms, a few ms apart: each rejoins the bucket
/// while the others do. Joins are noted at once and shares given half an
/// interval later, so every share is computed with the six syncers. Before
/// (each worker noted only at its first read, a quarter interval after
/// its first request): 121 and 134 admitted, shares of 29, 18, 13, 11, 9.
#[test]
fn synced_workers_that_rejoin_together_share_what_remains() {
    let trace = quiet_then_back(4, 10_000, 380, &[2_500, 12_500], 4, 20_000);
    let r = run(&trace).unwrap();
    let admitted = admissions(&r);
    let per = |w: u64| -> u64 {
        admitted.values().flatten().filter(|(t, _)| (t - super::trace::EPOCH_MS) / 10_000 == w).map(|e| e.1).sum()
    };
    println!("6 synced workers, five rejoining with bursts in two windows: {} and {}", per(0), per(1));
    // limit + r × (I + d) + N: 20/s × ~0.1 s + 6.
    assert!(per(0) <= 108 && per(1) <= 108, "{} {}", per(0), per(1));
    assert!(super::check(&trace).0.is_empty());
}

/// A request for user 0 to proxy `proxy` that the upstream takes
/// `upstream_ms` with.
fn lasting(at: u64, proxy: usize, upstream_ms: u64) -> (u64, Input) {
    (at, Input::Request { proxy, worker: 0, key: 0, leave: Leave::Never, used: 1, upstream_ms: Some(upstream_ms) })
}

/// Concurrency 2 with leases of 1 s (windows that never bind), two
/// proxies: one request of 5 s on proxy 0 at 100 ms, and on proxy 1 pairs
/// of 30 ms requests every 50 ms for 6 s; `kill`: proxy 0 dies then.
fn long_beside_short(seed: u64, kill: Option<u64>) -> Trace {
    let rule = Rule {
        algorithm: Algorithm::SlidingLog,
        windows: vec![(1_000, 1_000)],
        mode: Mode::Exact,
        count: None,
        concurrency: Some((2, 1_000)),
        overrides: None,
    };
    let mut inputs = vec![lasting(100, 0, 5_000)];
    inputs.extend((0..120).flat_map(|i| [lasting(i * 50, 1, 30), lasting(i * 50, 1, 30)]));
    inputs.extend(kill.map(|at| (at, Input::Kill { proxy: 0, worker: 0, ms: 10_000 })));
    trace(seed, rule, &[None, None], inputs, 6_000)
}

/// The most requests in flight at once (released, not gone, on a live
/// node), counted from the clients' side, and the first time two of
/// proxy `proxy`'s are in flight together after `after`.
fn in_flight(r: &super::world::Run, proxy: usize, after: u64) -> (usize, Option<u64>) {
    let end = |q: &super::world::Request| {
        let died = r.nodes[q.node].died_at.unwrap_or(u64::MAX);
        q.gone_ms.unwrap_or(u64::MAX).min(died)
    };
    let (mut most, mut two) = (0, None);
    for t in r.requests.values().filter_map(|q| q.released_ms) {
        let live: Vec<_> =
            r.requests.values().filter(|q| q.released_ms.is_some_and(|s| s <= t) && end(q) > t).collect();
        most = most.max(live.len());
        if t > after && two.is_none_or(|w| t < w) && live.iter().filter(|q| r.nodes[q.node].proxy == proxy).count() >= 2
        {
            two = Some(t);
        }
    }
    (most, two)
}

/// The lease of the first request admitted on node 0: its history in the
/// store.
fn first_lease(r: &super::world::Run) -> Vec<(u64, Option<u64>)> {
    let judged = r.nodes[0].host.judged.iter().find(|j| j.answer == crate::worker::Answer::Allowed).unwrap();
    let lease = judged.checks.iter().find(|c| c.algorithm == Algorithm::Lease).unwrap();
    r.leases.history[&(lease.key.clone(), lease.lease.as_deref().unwrap().to_string())].clone()
}

/// A request of 5 s holds one of two leases of 1 s beside short ones: its
/// lease is renewed every third of the TTL or so, never lost, and never
/// more than 2 are in flight.
#[test]
fn a_long_request_keeps_its_lease_beside_short_ones() {
    let trace = long_beside_short(5, None);
    let r = run(&trace).unwrap();
    let history = first_lease(&r);
    let renewals = history.iter().filter(|(_, e)| e.is_some()).count() - 1;
    let (most, _) = in_flight(&r, 1, 0);
    let refused = r.requests.values().filter(|q| q.refused.is_some()).count();
    println!("a 5 s request beside short ones: renewed {renewals} times, at most {most} in flight, {refused} refused");
    assert!(renewals >= 3, "{history:?}");
    assert!(most <= 2 && refused > 0, "{most} {refused}");
    // Its lease is live from its admission to its end.
    let long = r.requests.values().find(|q| q.node == 0).unwrap();
    let (from, to) = (long.released_ms.unwrap(), long.gone_ms.unwrap());
    assert!((from..to).step_by(10).all(|t| super::leases::live_at(&history, t)), "{history:?}");
    assert!(super::check(&trace).0.is_empty(), "{:?}", super::check(&trace).0);
}

/// The same, proxy 0 killed 2.5 s in: its lease keeps its place until it
/// expires, one TTL after its last renewal, and then proxy 1 has both.
#[test]
fn a_dead_proxys_lease_frees_one_ttl_after_its_last_renewal() {
    let killed = 2_500;
    let trace = long_beside_short(6, Some(killed));
    let r = run(&trace).unwrap();
    let history = first_lease(&r);
    let expiry = history.iter().filter_map(|(_, e)| *e).max().unwrap();
    let died = EPOCH_MS + killed;
    let (most, two) = in_flight(&r, 1, died);
    let two = two.unwrap();
    println!(
        "proxy 0 killed at {killed} ms: its lease expired at {} ms, proxy 1 had two in flight at {} ms",
        expiry - EPOCH_MS,
        two - EPOCH_MS
    );
    assert!(expiry <= died + 1_000 && expiry > died, "{history:?}");
    // Not before the lease expired; within a pair's interval and a round
    // trip after.
    assert!(two >= expiry && two <= expiry + 50 + 4 * trace.net.max_ms + 5, "{} {}", two, expiry);
    assert!(most <= 2);
    assert!(super::check(&trace).0.is_empty(), "{:?}", super::check(&trace).0);
}
