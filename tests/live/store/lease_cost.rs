//! The Valkey commands of the lease sets (`src/limiter/lease.lua`,
//! `lease_ops.lua`), per decision, undo and lease call, counted exactly as
//! `script_cost.rs` counts the windows': many calls through both paths
//! (each on its own key), then `INFO commandstats` divided by the calls.
//! Time is injected (no `TIME`). The counts are the ones the files' headers
//! and docs/algorithms.md state; and every lease call needs no ACL beyond
//! the other algorithms' but `+zrem` (an undo) and `+zscore` (lease ends
//! and renewals).

use crate::support;

use support::differential::{check, lease, Path};
use support::valkey_stats::{Conn, Stats};
use support::Valkey;
use tollgate::limiter::script::{encode_adjust, encode_call, encode_lease, encode_load, limiter, Invocation};
use tollgate::limiter::{Adjustment, Algorithm, Check, LeaseChange, LeaseOp};
use tollgate::resp::{encode_command, Value};

/// Calls per row and path.
const CALLS: u64 = 200;
const T0: u64 = 1_800_000_000_500;

/// What one row measures on key `i`: the calls that fill it first, and the
/// measured call.
type Row = fn(u64, &str) -> (Vec<Call>, Call);

/// A call of the limiter at an injected time.
#[derive(Clone)]
enum Call {
    Decide(Vec<Check>, u64),
    Undo(Check, u64),
    Lease(LeaseOp, u64),
}

impl Call {
    fn encode(&self, out: &mut Vec<u8>, how: Invocation) {
        match self {
            Call::Decide(checks, now) => encode_call(out, limiter(), how, checks, Some(*now)),
            Call::Undo(c, now) => {
                let undo = [Adjustment { check: c.clone(), from: 1, to: 0 }];
                encode_adjust(out, limiter(), how, &undo, *now, Some(*now));
            }
            Call::Lease(op, now) => encode_lease(out, limiter(), how, std::slice::from_ref(op), Some(*now)),
        }
    }
}

/// A lease of set `key` (at most `limit`, 1 s each), request `id`.
fn l(key: &str, limit: u64, id: &str) -> Check {
    lease(0, key, limit, 1_000, id)
}

fn take(key: &str, limit: u64, id: &str, now: u64) -> Call {
    Call::Decide(vec![l(key, limit, id)], now)
}

fn op(key: &str, id: &str, change: LeaseChange, now: u64) -> Call {
    Call::Lease(LeaseOp { key: key.into(), id: id.into(), change }, now)
}

/// The commands one call issues: (name, calls), by name.
type Commands = Vec<(&'static str, u64)>;

/// Each row: its name, what it runs, and the commands per measured call.
fn rows() -> Vec<(&'static str, Row, Commands)> {
    vec![
        (
            "admitted, empty set",
            |_, k| (vec![], take(k, 3, "m", T0)),
            vec![("pexpire", 1), ("zadd", 1), ("zrangebyscore", 1)],
        ),
        (
            "admitted, one live",
            |_, k| (vec![take(k, 3, "a", T0 - 1)], take(k, 3, "m", T0)),
            vec![("pexpire", 1), ("zadd", 1), ("zcount", 1), ("zrangebyscore", 1)],
        ),
        (
            "admitted, two live",
            |_, k| (vec![take(k, 3, "a", T0 - 2), take(k, 3, "b", T0 - 1)], take(k, 3, "m", T0)),
            vec![("pexpire", 1), ("zadd", 1), ("zcount", 1), ("zrangebyscore", 2)],
        ),
        (
            "admitted, one expired",
            |_, k| (vec![take(k, 3, "a", T0 - 1_000)], take(k, 3, "m", T0)),
            vec![("pexpire", 1), ("zadd", 1), ("zcount", 1), ("zrangebyscore", 1), ("zremrangebyscore", 1)],
        ),
        (
            "denied, limit 1",
            |_, k| (vec![take(k, 1, "a", T0 - 1)], take(k, 1, "m", T0)),
            vec![("zcount", 1), ("zrangebyscore", 1)],
        ),
        (
            "denied, limit 2",
            |_, k| (vec![take(k, 2, "a", T0 - 2), take(k, 2, "b", T0 - 1)], take(k, 2, "m", T0)),
            vec![("zcount", 1), ("zrangebyscore", 2)],
        ),
        (
            "admitted with a gcra window, empty set",
            |i, k| {
                (
                    vec![],
                    Call::Decide(
                        vec![l(k, 3, "m"), check(Algorithm::Gcra, 1, &format!("lc:{{g{i}}}:gcra"), &[(5, 1_000)], 1)],
                        T0,
                    ),
                )
            },
            vec![("hmget", 1), ("hset", 1), ("pexpire", 2), ("zadd", 1), ("zrangebyscore", 1)],
        ),
        (
            "undone, the only lease",
            |_, k| (vec![take(k, 3, "m", T0 - 1)], Call::Undo(l(k, 3, "m"), T0)),
            vec![("zcount", 1), ("zrangebyscore", 1), ("zrem", 1)],
        ),
        (
            "ended",
            |_, k| (vec![take(k, 3, "m", T0 - 1)], op(k, "m", LeaseChange::End, T0)),
            vec![("zrem", 1), ("zscore", 1)],
        ),
        (
            "renewed, the latest",
            |_, k| (vec![take(k, 3, "m", T0 - 1)], op(k, "m", LeaseChange::Renew { ttl_ms: 1_000 }, T0)),
            vec![("pexpire", 1), ("zadd", 1), ("zcount", 1), ("zscore", 1)],
        ),
        (
            "renewed, another later",
            |_, k| {
                let fill = vec![take(k, 3, "m", T0 - 900), take(k, 3, "b", T0 - 1)];
                (fill, op(k, "m", LeaseChange::Renew { ttl_ms: 500 }, T0))
            },
            vec![("zadd", 1), ("zcount", 1), ("zscore", 1)],
        ),
        (
            "renewed, expired",
            |_, k| (vec![take(k, 3, "m", T0 - 1_000)], op(k, "m", LeaseChange::Renew { ttl_ms: 1_000 }, T0)),
            vec![("zrem", 1), ("zscore", 1)],
        ),
    ]
}

/// The commands one measured call of `row` issues through `path`, by name.
fn commands_per_call(conn: &mut Conn, path: Path, name: &str, row: Row) -> Vec<(String, u64)> {
    let how = path.invocations()[0];
    let (mut fill, mut measured) = ((Vec::new(), 0), (Vec::new(), 0));
    for i in 0..CALLS {
        let (filling, call) = row(i, &format!("lc:{{{path:?}:{name}:{i}}}:lease"));
        for f in filling {
            f.encode(&mut fill.0, how);
            fill.1 += 1;
        }
        call.encode(&mut measured.0, how);
        measured.1 += 1;
    }
    if fill.1 > 0 {
        assert!(conn.pipeline(&fill.0, fill.1).iter().all(|r| !r.is_error()), "{path:?} {name}: filling");
    }
    let before = Stats::read(conn);
    let replies = conn.pipeline(&measured.0, measured.1);
    let spent = Stats::read(conn).since(&before);
    assert!(replies.iter().all(|r| !r.is_error()), "{path:?} {name}: {:?}", replies.first());
    spent
        .inner()
        .into_iter()
        .map(|(command, calls)| {
            assert_eq!(calls % CALLS, 0, "{path:?} {name}: {calls} {command} in {CALLS} calls");
            (command, calls / CALLS)
        })
        .collect()
}

#[test]
fn lease_commands_are_exactly_these() {
    let valkey = Valkey::start();
    let mut conn = Conn::connect(valkey.port);
    let mut load = Vec::new();
    encode_load(&mut load, limiter());
    assert!(!conn.pipeline(&load, 1)[0].is_error());
    for body in [limiter().body, limiter().adjust_body, limiter().lease_body] {
        let mut script_load = Vec::new();
        encode_command(&mut script_load, &[b"SCRIPT", b"LOAD", body.as_bytes()]);
        assert!(!conn.pipeline(&script_load, 1)[0].is_error());
    }
    let mut failures = Vec::new();
    for path in Path::ALL {
        for (name, row, want) in rows() {
            let got = commands_per_call(&mut conn, path, name, row);
            let want: Vec<(String, u64)> = want.into_iter().map(|(c, n)| (c.to_string(), n)).collect();
            if got != want {
                failures.push(format!("{path:?} {name}: got {got:?}, expected {want:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "lease commands changed:\n{}", failures.join("\n"));
}

/// Decisions with leases need no ACL beyond the other algorithms'; an undo
/// also `+zrem`, the lease call `+zscore +zrem`.
#[test]
fn leases_need_only_zrem_and_zscore_more() {
    let valkey = Valkey::start();
    let base = ["+time", "+zadd", "+zcount", "+zrangebyscore", "+zremrangebyscore", "+hmget", "+hset", "+pexpire"];
    let user = |extra: &[&str]| {
        valkey.cmd(&["ACL", "DELUSER", "leases"]);
        let mut setuser = vec!["ACL", "SETUSER", "leases", "reset", "on", ">pw", "~tollgate:*", "+fcall"];
        setuser.extend(base.iter().chain(extra));
        assert_eq!(valkey.cmd(&setuser), Value::Simple(b"OK".to_vec()));
        let mut conn = Conn::connect(valkey.port);
        assert_eq!(conn.cmd(&["AUTH", "leases", "pw"]), Value::Simple(b"OK".to_vec()));
        conn
    };
    let mut load = Vec::new();
    encode_load(&mut load, limiter());
    assert!(!Conn::connect(valkey.port).pipeline(&load, 1)[0].is_error());
    let key = "tollgate:{acl}:lease";
    let run = |conn: &mut Conn, call: Call| {
        let mut out = Vec::new();
        call.encode(&mut out, Invocation::FCall);
        conn.pipeline(&out, 1).remove(0)
    };
    let mut conn = user(&[]);
    for (i, now) in [(0, T0), (1, T0 + 1), (2, T0 + 1_500)] {
        let reply = run(&mut conn, take(key, 1, &format!("r{i}"), now));
        assert!(!reply.is_error(), "a decision with the base ACL: {reply:?}");
    }
    // Each call on a set holding lease r2 (taken again before each try).
    for (extra, call) in [
        (&["+zrem"][..], Call::Undo(l(key, 1, "r2"), T0 + 1_500)),
        (&["+zscore", "+zrem"][..], op(key, "r2", LeaseChange::End, T0 + 1_500)),
    ] {
        for missing in extra {
            let fewer: Vec<&str> = extra.iter().filter(|g| g != &missing).copied().collect();
            assert!(!run(&mut user(&[]), take(key, 1, "r2", T0 + 1_500)).is_error());
            let error = run(&mut user(&fewer), call.clone());
            assert!(error.is_error(), "{missing} is needed: {error:?}");
        }
        assert!(!run(&mut user(&[]), take(key, 1, "r2", T0 + 1_500)).is_error());
        assert!(!run(&mut user(extra), call).is_error(), "{extra:?} is enough");
    }
}
