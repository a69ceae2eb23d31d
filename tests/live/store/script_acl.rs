//! The smallest ACL each invocation path needs: every command the limiter
//! runs, plus `EVALSHA` and `EVAL` (the script) or `FCALL` and
//! `FUNCTION LOAD` (the function library). With it, every algorithm decides
//! (admitted and denied) from an empty server; without any one entry, a call
//! fails for want of permission.

use crate::support;

use support::differential::{check, decide_on, Path};
use support::valkey_stats::Conn;
use support::Valkey;
use tollgate::limiter::{reply, Algorithm};
use tollgate::resp::Value;

/// The commands the limiter runs (all algorithms).
const COMMANDS: &[&str] =
    &["+time", "+zadd", "+zcount", "+zrangebyscore", "+zremrangebyscore", "+hmget", "+hset", "+pexpire"];

fn invoking(path: Path) -> &'static [&'static str] {
    match path {
        Path::Script => &["+evalsha", "+eval"],
        Path::Function => &["+fcall", "+function|load"],
    }
}

/// Creates user `limiter` with `~tollgate:*` and `grants`, on an empty server
/// without scripts or functions, and returns a connection authenticated as it.
fn limiter_user(valkey: &Valkey, grants: &[&str]) -> Conn {
    for reset in [&["FLUSHALL"][..], &["SCRIPT", "FLUSH"], &["FUNCTION", "FLUSH"], &["ACL", "DELUSER", "limiter"]] {
        valkey.cmd(reset);
    }
    let mut setuser = vec!["ACL", "SETUSER", "limiter", "reset", "on", ">limiter-pw", "~tollgate:*"];
    setuser.extend_from_slice(grants);
    assert_eq!(valkey.cmd(&setuser), Value::Simple(b"OK".to_vec()));
    let mut conn = Conn::connect(valkey.port);
    assert_eq!(conn.cmd(&["AUTH", "limiter", "limiter-pw"]), Value::Simple(b"OK".to_vec()));
    conn
}

/// For every algorithm: an admission, then a denial (2 windows). The first
/// error reply, if any.
fn decide_every_algorithm(conn: &mut Conn, path: Path) -> Option<String> {
    for algorithm in Algorithm::ALL {
        let key = format!("tollgate:{{acl}}:{}", algorithm.id());
        for (cost, allowed) in [(5, true), (1, false)] {
            let checks = [check(algorithm, 0, &key, &[(20, 60_000), (5, 3_000)], cost)];
            let reply = decide_on(conn, path, &checks, None);
            if let Some(error) = reply.as_error() {
                return Some(String::from_utf8_lossy(error).into_owned());
            }
            let decision = reply::parse(&reply, &checks).unwrap();
            assert_eq!(decision.allowed, allowed, "{path:?} {algorithm:?} cost {cost}");
        }
    }
    None
}

#[test]
fn each_path_needs_exactly_its_acl() {
    let valkey = Valkey::start();
    for path in Path::ALL {
        let acl: Vec<&str> = COMMANDS.iter().chain(invoking(path)).copied().collect();
        let mut conn = limiter_user(&valkey, &acl);
        assert_eq!(decide_every_algorithm(&mut conn, path), None, "{path:?} with {acl:?}");
        for missing in &acl {
            let fewer: Vec<&str> = acl.iter().filter(|g| g != &missing).copied().collect();
            let mut conn = limiter_user(&valkey, &fewer);
            let error = decide_every_algorithm(&mut conn, path);
            let error = error.unwrap_or_else(|| panic!("{path:?}: decided without {missing}"));
            // `NOPERM` for the invocation itself; for a command the code runs,
            // `ERR ACL failure in script: ... no permissions` (Valkey) or
            // `ERR The user executing the script can't run this command` (Redis 7).
            let refused = error.contains("no permissions") || error.contains("can't run this command");
            assert!(refused, "{path:?} without {missing}: {error}");
        }
    }
}
