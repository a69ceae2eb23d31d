//! Differential tests, named cases: one behaviour suite run against the pure
//! reference model (`limiter::model`) and against the script in a real
//! Valkey, with injected time, for every algorithm. Every decision,
//! remaining, reset and retry must agree (and the log's entry counts).
//! Every case runs through both invocation paths (the script and the function
//! library, see `support::differential::Path`), each on an empty database.
//! Random traces are in `differential_props.rs`.

use crate::support;

use support::differential::{check, store_decide_via, store_reply, Differential, Path};
use support::Valkey;
use tollgate::limiter::script::{encode_call, limiter};
use tollgate::limiter::Algorithm;

const DAY: u64 = 86_400_000;

fn key(name: &str, algorithm: Algorithm) -> String {
    format!("t:{{{name}}}:{}", algorithm.id())
}

/// Every path with every algorithm; the database is emptied when the path changes.
fn paths_and_algorithms(valkey: &Valkey) -> impl Iterator<Item = (Path, Algorithm)> + '_ {
    Path::ALL.into_iter().flat_map(move |path| {
        valkey.cmd(&["FLUSHALL"]);
        Algorithm::ALL.into_iter().map(move |algorithm| (path, algorithm))
    })
}

#[test]
fn seed_scenario_agrees_for_every_algorithm() {
    let valkey = Valkey::start();
    for (path, algorithm) in paths_and_algorithms(&valkey) {
        let rule = check(algorithm, 0, &key("seed:u", algorithm), &[(20, 60_000), (5, 3_000)], 1);
        let t0 = 1_700_000_000_000;
        let mut diff = Differential::via(&valkey, path);
        let mut admitted = 0;
        for burst in 0..22u64 {
            for call in 0..8 {
                admitted += usize::from(diff.step(std::slice::from_ref(&rule), t0 + burst * 3_005 + call).allowed);
            }
        }
        assert!(admitted >= 20, "{path:?} {algorithm:?}: {admitted}");
    }
}

/// Two windows of equal period (the configuration rejects them; the model
/// and the script must still agree: the smaller limit binds).
#[test]
fn equal_periods() {
    let valkey = Valkey::start();
    for (path, algorithm) in paths_and_algorithms(&valkey) {
        let mut diff = Differential::via(&valkey, path);
        let c = check(algorithm, 0, &key("equal", algorithm), &[(5, 1_000), (3, 1_000), (3, 1_000)], 1);
        let mut allowed = 0;
        for i in 0..6 {
            let d = diff.step(std::slice::from_ref(&c), 10_000 + i);
            allowed += usize::from(d.allowed);
            if !d.allowed {
                let denied: Vec<usize> = d.denied_by().map(|w| w.window).collect();
                assert_eq!(denied, vec![1, 2], "{path:?} {algorithm:?}: the equal smaller limits deny together");
            }
        }
        assert_eq!(allowed, 3, "{path:?} {algorithm:?}: the smaller limit binds, units are counted once");
        diff.step(std::slice::from_ref(&c), 12_500);
    }
}

/// Requests exactly at a window boundary, with cost == limit.
#[test]
fn window_boundary_and_cost_equal_to_limit() {
    let valkey = Valkey::start();
    for (path, algorithm) in paths_and_algorithms(&valkey) {
        let mut diff = Differential::via(&valkey, path);
        let c = check(algorithm, 0, &key("edge", algorithm), &[(3, 1_000)], 3);
        let first = diff.step(std::slice::from_ref(&c), 1_000_000).allowed;
        assert!(first, "{path:?} {algorithm:?}: cost == limit fits an empty window");
        assert!(!diff.step(std::slice::from_ref(&c), 1_000_999).allowed, "{path:?} {algorithm:?}");
        let at_boundary = diff.step(std::slice::from_ref(&c), 1_001_000);
        // The log, gcra and fixed window free the whole window at its end;
        // the sliding counter still weighs the previous window fully there.
        assert_eq!(at_boundary.allowed, algorithm != Algorithm::SlidingWindow, "{path:?} {algorithm:?}");
        diff.step(std::slice::from_ref(&c), 1_001_999);
        diff.step(std::slice::from_ref(&c), 1_002_000);
        diff.step(std::slice::from_ref(&c), 1_003_000);
    }
}

/// 1 ms and 1 day periods in one rule, and very long gaps after which every
/// key has expired (the harness deletes keys whose TTL ran out; the model
/// keeps its stale state, so agreement shows stale state reads as empty).
#[test]
fn one_ms_and_one_day_periods_and_long_gaps() {
    let valkey = Valkey::start();
    for (path, algorithm) in paths_and_algorithms(&valkey) {
        let mut diff = Differential::via(&valkey, path);
        let c = check(algorithm, 0, &key("extremes", algorithm), &[(1_000, DAY), (1, 1)], 1);
        let one = check(algorithm, 1, &key("one-ms", algorithm), &[(1, 1)], 1);
        let t0 = 1_000_000;
        for (dt, both) in [(0, false), (0, false), (1, false), (1, true), (2, true), (DAY - 1, true), (DAY, true)] {
            let checks = if both { vec![c.clone(), one.clone()] } else { vec![c.clone()] };
            diff.step(&checks, t0 + dt);
        }
        let expired_before = diff.expired;
        for gap in [30 * DAY, 400 * DAY] {
            let d = diff.step(&[c.clone(), one.clone()], t0 + gap);
            assert!(d.allowed, "{path:?} {algorithm:?}: after {gap} ms everything is free");
            assert_eq!(d.windows[0].remaining, 999, "{path:?} {algorithm:?}");
        }
        assert!(diff.expired > expired_before, "{path:?} {algorithm:?}: keys expired during the gaps");
    }
}

/// Rules of all four algorithms in one call: a denial anywhere changes no
/// key at all.
#[test]
fn mixed_algorithms_are_all_or_nothing() {
    let valkey = Valkey::start();
    let t = 5_000_000;
    let open: Vec<_> =
        Algorithm::ALL.iter().enumerate().map(|(i, &a)| check(a, i, &key("open", a), &[(100, 60_000)], 2)).collect();
    for (path, tight_alg) in paths_and_algorithms(&valkey) {
        valkey.cmd(&["FLUSHALL"]);
        let mut diff = Differential::via(&valkey, path);
        let mut checks = open.clone();
        checks.push(check(tight_alg, 9, &key("tight", tight_alg), &[(1, 60_000)], 1));
        assert!(diff.step(&checks, t).allowed);
        let dump = |keys: &[String]| -> Vec<String> {
            keys.iter().map(|k| format!("{:?}", valkey.cmd(&["DUMP", k]))).collect()
        };
        let open_keys: Vec<String> = open.iter().map(|c| c.key.clone()).collect();
        let before = dump(&open_keys);
        for i in 1..=5 {
            let d = diff.step(&checks, t + i);
            assert!(!d.allowed);
            assert_eq!(d.denied_by().map(|w| w.check).collect::<Vec<_>>(), vec![4], "{path:?} {tight_alg:?}");
            assert!(d.windows[..4].iter().all(|w| w.remaining == 98), "{path:?} {tight_alg:?}: {d:?}");
        }
        assert_eq!(dump(&open_keys), before, "{path:?} {tight_alg:?}: denied calls changed no key");
    }
}

#[test]
fn keys_expire_after_their_ttl_with_the_server_clock() {
    let valkey = Valkey::start();
    for (path, algorithm) in paths_and_algorithms(&valkey) {
        let c = check(algorithm, 0, &key("ttl", algorithm), &[(5, 3_000), (20, 60_000)], 1);
        assert!(store_decide_via(&valkey, path, std::slice::from_ref(&c), None).allowed);
        let ttl = valkey.int(&["PTTL", &c.key]);
        let expected = support::differential::ttl_ms(&c) as i64;
        assert!(
            (expected - 1_000..=expected).contains(&ttl),
            "{path:?} {algorithm:?}: PTTL {ttl}, expected {expected}"
        );
    }
}

#[test]
fn bad_arguments_are_error_replies() {
    let valkey = Valkey::start();
    let c = check(Algorithm::Gcra, 0, "t:{bad}:gcra", &[(1, 1_000)], 1);
    for path in Path::ALL {
        // Loaded first (by a well-formed call on another key), so that the
        // error comes from the limiter's own checks.
        let other = check(Algorithm::Gcra, 0, "t:{other}:gcra", &[(1, 1_000)], 1);
        assert!(!store_reply(valkey.port, path, &[other], Some(1)).is_error());
        let mut body = Vec::new();
        encode_call(&mut body, limiter(), path.invocations()[1], std::slice::from_ref(&c), Some(1));
        // Replace the algorithm id with an unknown one.
        let text = String::from_utf8(body).unwrap();
        let reply =
            support::differential::raw_call(valkey.port, text.replace("$4\r\ngcra\r\n", "$4\r\nxxxx\r\n").as_bytes());
        let message = String::from_utf8_lossy(reply.as_error().unwrap()).into_owned();
        assert!(message.contains("tollgate: unknown algorithm for key 1"), "{path:?}: {message}");
        // Replace the window's period with one that is not a number.
        let reply =
            support::differential::raw_call(valkey.port, text.replace("$4\r\n1000\r\n", "$4\r\nxbad\r\n").as_bytes());
        let message = String::from_utf8_lossy(reply.as_error().unwrap()).into_owned();
        assert!(message.contains("tollgate: bad window 1 for key 1"), "{path:?}: {message}");
        // A well-formed call still works afterwards.
        assert!(store_decide_via(&valkey, path, std::slice::from_ref(&c), Some(1)).allowed, "{path:?}");
        valkey.cmd(&["FLUSHALL"]);
    }
}
