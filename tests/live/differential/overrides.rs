//! Per-key overrides (src/limiter/overrides.lua) and the dry run, peek,
//! against the model (`limiter::model::overrides`) in a real Valkey,
//! through both paths, with injected time. Every reply must equal the
//! model's; a peek must leave every key byte for byte as it was.

use crate::support;

use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use support::differential::{check, lease, Differential, Path};
use support::props::{limit, rule, runner, GAPS};
use support::Valkey;
use tollgate::key::override_key;
use tollgate::limiter::model::overrides::Override;
use tollgate::limiter::{Adjustment, Algorithm, Check};

const T: u64 = 1_800_000_000_000;

/// `c` marked: it reads its bucket's override key.
fn marked(mut c: Check) -> Check {
    c.override_key = Some(override_key(&c.key).into());
    c
}

fn ovr(c: &Check) -> String {
    override_key(&c.key)
}

fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(f, v)| (f.to_string(), v.to_string())).collect()
}

/// Every path and algorithm, on an emptied database.
fn each(valkey: &Valkey, mut run: impl FnMut(&mut Differential<'_>, Path, Algorithm)) {
    for path in Path::ALL {
        for algorithm in Algorithm::ALL {
            valkey.cmd(&["FLUSHALL"]);
            let mut d = Differential::via(valkey, path);
            run(&mut d, path, algorithm);
        }
    }
}

/// An override of 10× one window lets exactly 10× through that key; the
/// other window, and an unmarked rule, keep their limits.
#[test]
fn ten_times_on_one_window() {
    let valkey = Valkey::start();
    each(&valkey, |d, path, algorithm| {
        let key = |n: &str| format!("o:{{{n}}}:{}", algorithm.id());
        let c = marked(check(algorithm, 0, &key("alice"), &[(2, 60_000), (100, 3_600_000)], 1));
        let other = check(algorithm, 0, &key("bob"), &[(2, 60_000), (100, 3_600_000)], 1);
        d.set_override(&ovr(&c), &Override { limits: vec![(60_000, 20)], ..Override::default() });
        let mut admitted = 0;
        for i in 0..30 {
            let r = d.step(std::slice::from_ref(&c), T + i);
            admitted += usize::from(r.allowed);
            let marked: Vec<bool> = r.windows.iter().map(|w| w.overridden).collect();
            assert_eq!(marked, [true, false], "{path:?} {algorithm:?}: the 1 h window as configured");
            assert_eq!((r.windows[0].limit, r.windows[1].limit), (20, 100), "{path:?} {algorithm:?}");
        }
        assert_eq!(admitted, 20, "{path:?} {algorithm:?}: 10 × 2");
        let others = (0..30).filter(|i| d.step(std::slice::from_ref(&other), T + i).allowed).count();
        assert_eq!(others, 2, "{path:?} {algorithm:?}: the configured limit");
        // Rules of both kinds in one call.
        d.step(&[c.clone(), other.clone()], T + 61_000);
    });
}

/// `until` in the past or reached exactly at now: not applied; later: applied.
#[test]
fn until_is_the_calls_clock() {
    let valkey = Valkey::start();
    each(&valkey, |d, path, algorithm| {
        let c = marked(check(algorithm, 0, &format!("u:{{a}}:{}", algorithm.id()), &[(1, 1_000)], 1));
        for (until, applies) in [(T - 1, false), (T, false), (T + 1, true)] {
            let o = Override { limits: vec![(1_000, 7)], until: Some(until), ..Override::default() };
            d.set_override(&ovr(&c), &o);
            let r = d.peek(std::slice::from_ref(&c), None, T);
            assert_eq!((r.windows[0].overridden, r.windows[0].limit), (applies, if applies { 7 } else { 1 }));
            let r = d.step(std::slice::from_ref(&c), T);
            assert_eq!(r.windows[0].overridden, applies, "{path:?} {algorithm:?} until {until}");
        }
        d.step(std::slice::from_ref(&c), T + 1);
    });
}

/// Fields the Lua cannot use are ignored (the window keeps its limit); an
/// unusable `until` ends the whole override; other fields are not read.
#[test]
fn invalid_fields_are_ignored() {
    let valkey = Valkey::start();
    let exact = (tollgate::limiter::EXACT_PRODUCT_MAX / 60_000).to_string();
    let product = (tollgate::limiter::EXACT_PRODUCT_MAX / 60_000 + 1).to_string();
    each(&valkey, |d, path, algorithm| {
        let c = marked(check(algorithm, 0, &format!("i:{{a}}:{}", algorithm.id()), &[(3, 60_000)], 1));
        let mut t = T;
        for bad in ["0", "-1", "abc", "", "1e3", "007", " 9", "9.0", "1000000000001", &product] {
            d.set_override_fields(&ovr(&c), &fields(&[("w60000", bad), ("at", "1"), ("note", "x")]));
            let r = d.step(std::slice::from_ref(&c), t);
            let applied = bad == product && !algorithm.needs_exact_product();
            assert_eq!(r.windows[0].overridden, applied, "{path:?} {algorithm:?} {bad:?}");
            t += 100_000;
        }
        for until in ["soon", "-5", "", "99999999999999999"] {
            d.set_override_fields(&ovr(&c), &fields(&[("w60000", "9"), ("until", until)]));
            let r = d.step(std::slice::from_ref(&c), t);
            assert!(!r.windows[0].overridden, "{path:?} {algorithm:?} until {until:?}");
            t += 1;
        }
        // The largest limits: 10^12, or limit * period = 2^53 at most.
        let top = if algorithm.needs_exact_product() { exact.as_str() } else { "1000000000000" };
        d.set_override_fields(&ovr(&c), &fields(&[("w60000", top), ("c", "5"), ("w1000", "1")]));
        assert_eq!(d.step(std::slice::from_ref(&c), t).windows[0].limit.to_string(), top, "{path:?}");
        d.set_override_fields(&ovr(&c), &fields(&[("w1000", "5")]));
        assert!(!d.step(std::slice::from_ref(&c), t + 1).windows[0].overridden, "no field of its period");
    });
}

/// A lease check reads `c`; a rule's window and lease checks share one
/// override key (KEYS repeat it, read once).
#[test]
fn lease_checks_and_a_shared_override_key() {
    let valkey = Valkey::start();
    each(&valkey, |d, path, algorithm| {
        let window = marked(check(algorithm, 0, &format!("l:{{a}}:{}", algorithm.id()), &[(2, 1_000)], 1));
        let o = Override { limits: vec![(1_000, 4)], concurrency: Some(3), until: Some(T + 5_000) };
        d.set_override(&ovr(&window), &o);
        let mut admitted = 0;
        for i in 0..6u64 {
            let lease_check = marked(lease(0, "l:{a}:lease", 1, 10_000, &format!("r{i}")));
            assert_eq!(ovr(&lease_check), ovr(&window));
            let r = d.step(&[window.clone(), lease_check], T + i);
            admitted += usize::from(r.allowed);
            assert_eq!((r.windows[0].limit, r.windows[1].limit), (4, 3), "{path:?} {algorithm:?}");
        }
        assert_eq!(admitted, 3, "{path:?} {algorithm:?}: three leases");
        // The override expires: the configured limits again.
        let lease_check = marked(lease(0, "l:{a}:lease", 1, 10_000, "late"));
        let r = d.step(&[window.clone(), lease_check], T + 5_000);
        assert!(!r.allowed && r.windows.iter().all(|w| !w.overridden), "{path:?} {algorithm:?}");
    });
}

/// adjust carries the marker: charges and refunds under the limits in
/// force (the log's extra charge bounded by the override's limit).
#[test]
fn adjust_under_an_override() {
    let valkey = Valkey::start();
    each(&valkey, |d, _, algorithm| {
        let c = marked(check(algorithm, 0, &format!("a:{{a}}:{}", algorithm.id()), &[(3, 1_000), (10, 60_000)], 2));
        let l = marked(lease(1, "a:{a}:lease", 1, 5_000, "r1"));
        d.set_override(&ovr(&c), &Override { limits: vec![(1_000, 30)], ..Override::default() });
        d.set_override(&ovr(&l), &Override { concurrency: Some(2), ..Override::default() });
        d.step(&[c.clone(), l.clone()], T);
        let change = |check: &Check, from, to| Adjustment { check: check.clone(), from, to };
        d.adjust(&[change(&c, 2, 0), change(&l, 1, 0)], T, T + 1);
        d.step(std::slice::from_ref(&c), T + 2);
        d.adjust(&[change(&c, 2, 500)], T + 2, T + 3);
        d.step(std::slice::from_ref(&c), T + 4);
        d.set_override_fields(&ovr(&c), &[]);
        d.adjust(&[change(&c, 0, 4)], T + 4, T + 5);
        d.step(std::slice::from_ref(&c), T + 1_500);
    });
}

/// peek answers as the model's dry run, and as decide at the same time
/// would on allowed, retry and delay; it leaves every key as it was: with
/// expired log entries and leases still stored, shaped, marked or not.
#[test]
fn peek_is_a_dry_run() {
    let valkey = Valkey::start();
    each(&valkey, |d, path, algorithm| {
        let c = check(algorithm, 0, &format!("p:{{a}}:{}", algorithm.id()), &[(3, 1_000), (5, 3_000)], 1);
        let m = marked(check(algorithm, 1, &format!("p:{{b}}:{}", algorithm.id()), &[(2, 1_000)], 1));
        d.set_override(&ovr(&m), &Override { limits: vec![(1_000, 3)], ..Override::default() });
        let leases = |i: u64| marked(lease(2, "p:{c}:lease", 2, 1_000, &format!("r{i}")));
        let mut t = T;
        for i in 0..40u64 {
            t += [0, 1, 137, 500, 999, 2_000][(i % 6) as usize];
            let checks = if i % 3 == 0 { vec![c.clone()] } else { vec![c.clone(), m.clone(), leases(i)] };
            let shape = (i % 4 == 1).then_some((700, i % 8 / 2 * 10));
            let peeked = d.peek(&checks, shape, t);
            let decided = match shape {
                Some((max_delay, floor)) => d.step_floored(&checks, max_delay, floor, t),
                None => d.step(&checks, t),
            };
            assert_eq!(peeked.allowed, decided.allowed, "{path:?} {algorithm:?} step {i}");
            assert_eq!(peeked.delay_ms, decided.delay_ms, "{path:?} {algorithm:?} step {i}");
            let retries = |r: &tollgate::limiter::Decision| r.windows.iter().map(|w| w.retry_ms).collect::<Vec<_>>();
            assert_eq!(retries(&peeked), retries(&decided), "{path:?} {algorithm:?} step {i}");
            // Right after: the state as decided, still unchanged by a peek.
            d.peek(&checks, shape, t);
        }
    });
}

/// What a random trace does at a step.
#[derive(Debug, Clone)]
enum Act {
    /// Decide (shaped with this max_delay when given) the rules of the mask.
    Decide(u8, Option<u64>),
    /// Peek at them (shaped when given).
    Peek(u8, Option<u64>),
    /// Override rule i: a limit per window (None: keep), `until` relative
    /// to now (None: no expiry).
    Set(usize, Vec<Option<u64>>, Option<i64>),
    /// Remove rule i's override.
    Remove(usize),
}

fn act() -> impl Strategy<Value = Act> {
    let shape = prop::option::of(prop::sample::select(vec![0u64, 50, 1_000]));
    prop_oneof![
        4 => (1..8u8, shape.clone()).prop_map(|(m, s)| Act::Decide(m, s)),
        2 => (1..8u8, shape).prop_map(|(m, s)| Act::Peek(m, s)),
        1 => (0..3usize, prop::collection::vec(prop::option::of(limit()), 3), prop::option::of(-100i64..5_000))
            .prop_map(|(i, l, u)| Act::Set(i, l, u)),
        1 => (0..3usize).prop_map(Act::Remove),
    ]
}

/// Random traces of marked rules of every algorithm: decisions (shaped
/// or not), peeks, overrides set (some windows, some expiring) and
/// removed. Every reply must be the model's; no peek changes a key.
#[test]
fn random_traces_with_overrides_and_peeks_agree() {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let valkey = Valkey::start();
    let steps = prop::collection::vec((prop::sample::select(GAPS.to_vec()), act()), 1..40);
    let strategy = (prop::collection::vec(rule(), 3), steps);
    let result = runner(48, file!()).run(&strategy, |(rules, steps)| {
        for path in Path::ALL {
            let case = CASE.fetch_add(1, Ordering::Relaxed);
            let checks: Vec<Check> = rules
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    marked(check(
                        r.algorithm,
                        i,
                        &format!("r:{{c{case}:{i}}}:{}", r.algorithm.id()),
                        &r.windows,
                        r.cost,
                    ))
                })
                .collect();
            let mut d = Differential::via(&valkey, path);
            let mut now = T;
            for (gap, act) in &steps {
                now += gap;
                let chosen = |mask: u8| -> Vec<Check> {
                    checks.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| c.clone()).collect()
                };
                match act {
                    Act::Decide(mask, None) => drop(d.step(&chosen(*mask), now)),
                    Act::Decide(mask, Some(delay)) => drop(d.step_shaped(&chosen(*mask), *delay, now)),
                    Act::Peek(mask, shape) => drop(d.peek(&chosen(*mask), shape.map(|s| (s, 0)), now)),
                    Act::Set(i, limits, until) => {
                        let c = &checks[*i];
                        let limits = c
                            .windows
                            .iter()
                            .zip(limits)
                            .filter_map(|(w, l)| Some((w.period_ms.get(), (*l)?)))
                            .collect();
                        let until = until.map(|u| now.saturating_add_signed(u));
                        d.set_override(&ovr(c), &Override { limits, concurrency: None, until });
                    }
                    Act::Remove(i) => d.set_override_fields(&ovr(&checks[*i]), &[]),
                }
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A marked check without its override key in KEYS (or an extra key) is
/// refused before anything is read or written.
#[test]
fn keys_not_matching_the_markers_are_refused() {
    let valkey = Valkey::start();
    let c = marked(check(Algorithm::Gcra, 0, "k:{a}:gcra", &[(2, 1_000)], 1));
    for path in Path::ALL {
        // Loaded first, so that the error is the limiter's.
        let other = check(Algorithm::Gcra, 0, "k:{b}:gcra", &[(2, 1_000)], 1);
        assert!(!support::differential::store_reply(valkey.port, path, &[other], Some(T)).is_error());
        valkey.cmd(&["FLUSHDB"]);
        let mut body = Vec::new();
        tollgate::limiter::script::encode_call(
            &mut body,
            tollgate::limiter::script::limiter(),
            path.invocations()[1],
            std::slice::from_ref(&c),
            Some(T),
        );
        let (tollgate::resp::Value::Array(items), _) = tollgate::resp::decode(&body, &Default::default()).unwrap()
        else {
            panic!()
        };
        let args: Vec<Vec<u8>> = items.iter().map(|v| v.as_bytes().unwrap().to_vec()).collect();
        assert_eq!((args[2].as_slice(), args[4].as_slice()), (&b"2"[..], &b"k:{a}:ovr"[..]));
        let mut fewer = args.clone();
        fewer.remove(4);
        fewer[2] = b"1".to_vec();
        let mut more = args.clone();
        more.insert(4, b"k:{a}:x".to_vec());
        more[2] = b"3".to_vec();
        for sent in [fewer, more] {
            let sent: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
            let reply = support::try_command(valkey.port, &sent).unwrap();
            let text = reply.as_error().map(|t| String::from_utf8_lossy(t).into_owned()).unwrap_or_default();
            assert!(text.starts_with("ERR tollgate: argument count does not match KEYS"), "{path:?}: {reply:?}");
        }
    }
    assert_eq!(valkey.int(&["DBSIZE"]), 0);
}
