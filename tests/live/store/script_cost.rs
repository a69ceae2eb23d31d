//! The Valkey commands one decision issues, per algorithm, window count and
//! path, counted exactly (no timing): thousands of decisions through both
//! invocations (`FCALL` of the library, `EVALSHA` of the script), then
//! `INFO commandstats` call counts divided by the decisions. More work per
//! decision (one more `ZCOUNT`, a `PEXPIRE` too many) fails here at once; the
//! µs it costs are measured by `make bench-script`.
//!
//! Time is injected (so no `TIME`: counts cannot depend on how fast the test
//! runs), except in the rows "server clock", which add exactly one `TIME`.

use crate::support;

use std::collections::BTreeMap;
use support::differential::{check, Path};
use support::valkey_stats::{Conn, Stats};
use support::Valkey;
use tollgate::limiter::script::{encode_load, is_loaded, limiter, Invocation};
use tollgate::limiter::{reply, Algorithm, Check};
use tollgate::resp::encode_command;

const ONE: &[(u64, u64)] = &[(20, 60_000)];
const TWO: &[(u64, u64)] = &[(20, 60_000), (5, 3_000)];
/// Decisions per row and path.
const DECISIONS: u64 = 400;
/// Not at a window boundary: the filling (1-2 ms before) counts in the same
/// aligned windows.
const T0: u64 = 1_800_000_000_500;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    /// The first decision on a key.
    New,
    /// The third decision on a key (two admitted 2 and 1 ms before).
    InUse,
    /// A key already at its smallest limit (filled 1 ms before).
    Denied,
    /// The first decision on a key, with Valkey's clock.
    NewServerClock,
    /// A decision that only checks (`?1`: a rule counted on the response),
    /// on a key in use as in `InUse`: admitted, nothing recorded.
    CheckOnly,
}

fn invocation(path: Path) -> (Invocation, &'static str) {
    match path {
        Path::Script => (Invocation::EvalSha, "evalsha"),
        Path::Function => (Invocation::FCall, "fcall"),
    }
}

/// Runs `DECISIONS` decisions of one row through `path`, each on its own key,
/// and returns the commands issued per decision, by name (the filling
/// decisions are not counted).
fn commands_per_decision(
    conn: &mut Conn,
    path: Path,
    algorithm: Algorithm,
    windows: &[(u64, u64)],
    case: Case,
) -> BTreeMap<String, f64> {
    let (how, verb) = invocation(path);
    let key = |i: u64| format!("sc:{{{path:?}:{algorithm:?}:{}:{case:?}:{i}}}:{}", windows.len(), algorithm.id());
    let rule = |i: u64, cost: u64| vec![check(algorithm, 0, &key(i), windows, cost)];
    let mut fill: Vec<(Vec<Check>, Option<u64>)> = Vec::new();
    for i in 0..DECISIONS {
        match case {
            Case::New | Case::NewServerClock => {}
            Case::InUse | Case::CheckOnly => fill.extend([(rule(i, 1), Some(T0 - 2)), (rule(i, 1), Some(T0 - 1))]),
            Case::Denied => {
                let full = windows.iter().map(|w| w.0).min().unwrap();
                fill.push((rule(i, full), Some(T0 - 1)));
            }
        }
    }
    let now = if case == Case::NewServerClock { None } else { Some(T0) };
    let measured: Vec<(Vec<Check>, Option<u64>)> = (0..DECISIONS)
        .map(|i| {
            let mut checks = rule(i, 1);
            checks.iter_mut().for_each(|c| c.check_only = case == Case::CheckOnly);
            (checks, now)
        })
        .collect();
    for (reply, (checks, _)) in conn.calls(limiter(), how, &fill).iter().zip(&fill) {
        assert!(reply::parse(reply, checks).unwrap().allowed, "{path:?} {algorithm:?} {case:?}: filling");
    }
    let before = Stats::read(conn);
    let replies = conn.calls(limiter(), how, &measured);
    let spent = Stats::read(conn).since(&before);
    for (reply, (checks, _)) in replies.iter().zip(&measured) {
        let decision = reply::parse(reply, checks).unwrap_or_else(|e| panic!("{path:?}: {e}: {reply:?}"));
        assert_eq!(decision.allowed, case != Case::Denied, "{path:?} {algorithm:?} {case:?}");
    }
    assert_eq!(spent.calls(verb), DECISIONS, "{path:?}: one {verb} per decision");
    spent.inner().into_iter().map(|(name, calls)| (name, calls as f64 / DECISIONS as f64)).collect()
}

/// The commands expected per decision, with injected time.
fn expected(algorithm: Algorithm, windows: usize, case: Case) -> Vec<(&'static str, f64)> {
    let mut e = match (algorithm, case) {
        // Trim, count the longest window (a new key: shorter windows then
        // count nothing without asking), record, expire.
        (Algorithm::SlidingLog, Case::New | Case::NewServerClock) => {
            vec![("zremrangebyscore", 1.0), ("zcount", 1.0), ("zadd", 1.0), ("pexpire", 1.0)]
        }
        // Every window counts the two entries: count each, count the entries
        // at now (members must be unique), record, expire; one oldest entry
        // (shared: both windows count the same entries) for reset.
        (Algorithm::SlidingLog, Case::InUse) => vec![
            ("zremrangebyscore", 1.0),
            ("zcount", windows as f64 + 1.0),
            ("zadd", 1.0),
            ("pexpire", 1.0),
            ("zrangebyscore", 1.0),
        ],
        // Count every window; nothing recorded; one oldest entry for reset.
        (Algorithm::SlidingLog, Case::CheckOnly) => {
            vec![("zremrangebyscore", 1.0), ("zcount", windows as f64), ("zrangebyscore", 1.0)]
        }
        // The denying window waits for its oldest entry (also its reset; the
        // other window counts the same entries).
        (Algorithm::SlidingLog, Case::Denied) => {
            vec![("zremrangebyscore", 1.0), ("zcount", windows as f64), ("zrangebyscore", 1.0)]
        }
        // The hash algorithms: one HMGET for all windows, HSET + PEXPIRE when
        // admitted.
        (_, Case::Denied | Case::CheckOnly) => vec![("hmget", 1.0)],
        (_, _) => vec![("hmget", 1.0), ("hset", 1.0), ("pexpire", 1.0)],
    };
    if case == Case::NewServerClock {
        e.push(("time", 1.0));
    }
    e.sort_by(|a, b| a.0.cmp(b.0));
    e
}

#[test]
fn commands_per_decision_are_exactly_these() {
    let valkey = Valkey::start();
    let mut conn = Conn::connect(valkey.port);
    let mut load = Vec::new();
    encode_load(&mut load, limiter());
    assert!(is_loaded(&conn.pipeline(&load, 1)[0], limiter()));
    let mut script_load = Vec::new();
    encode_command(&mut script_load, &[b"SCRIPT", b"LOAD", limiter().body.as_bytes()]);
    assert!(!conn.pipeline(&script_load, 1)[0].is_error());

    let mut failures = Vec::new();
    for path in Path::ALL {
        for algorithm in Algorithm::ALL {
            for (windows, case) in [
                (ONE, Case::New),
                (TWO, Case::New),
                (TWO, Case::InUse),
                (ONE, Case::Denied),
                (TWO, Case::Denied),
                (TWO, Case::NewServerClock),
                (ONE, Case::CheckOnly),
                (TWO, Case::CheckOnly),
            ] {
                let got = commands_per_decision(&mut conn, path, algorithm, windows, case);
                let got: Vec<(&str, f64)> = got.iter().map(|(k, v)| (k.as_str(), *v)).collect();
                let want = expected(algorithm, windows.len(), case);
                if got != want {
                    failures.push(format!(
                        "{path:?} {algorithm:?} {} windows {case:?}: got {got:?}, expected {want:?}",
                        windows.len()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "commands per decision changed:\n{}", failures.join("\n"));
}
