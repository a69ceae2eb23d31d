//! The store-side half of the limiter: the Lua code, built once, and the
//! encoding of [`Check`]s, [`super::Adjustment`]s, [`super::Flush`]es and [`super::LeaseOp`]s
//! into its KEYS/ARGV contracts (stated in the header comments of
//! `prelude.lua`, `adjust.lua`, `flush.lua` and `lease_ops.lua`; the replies
//! are parsed by [`super::reply::parse`], [`super::reply::parse_flush`] and
//! [`super::reply::parse_lease`]).
//!
//! The code is one set of definitions: `prelude.lua`, the four algorithm
//! files and `lease.lua` (the lease sets of concurrency limits), `decide.lua`
//! (which defines `decide(KEYS, ARGV, once)`), `adjust.lua` (`adjust(KEYS,
//! ARGV, once)`), `flush.lua` (`flush(KEYS, ARGV, once)`) and
//! `lease_ops.lua` (`lease(KEYS, ARGV, once)`), so checks of different
//! algorithms, leases included, are decided in one atomic call. It ships
//! two ways, each with four entry points:
//!
//! * **Four scripts** (run by `EVALSHA`/`EVAL`): [`Script::body`], the
//!   definitions then `return decide(KEYS, ARGV, true)`,
//!   [`Script::adjust_body`], the definitions then `return adjust(KEYS, ARGV,
//!   true)`, [`Script::flush_body`] and [`Script::lease_body`] (the same
//!   with `flush`, `lease`). Every call evaluates every definition again
//!   before it runs.
//! * **A function library** ([`Script::library`], loaded by `FUNCTION LOAD`
//!   once per server, run by `FCALL`): the definitions are evaluated once, at
//!   load, and every call only decides, adjusts, flushes or ends and renews
//!   leases. The library and
//!   its decision function are both named [`Script::function`], `tollgate_` +
//!   12 hex digits of the SHA-1 of the library text, so two tollgate versions
//!   sharing a server never replace each other's code (identical code shares
//!   one library); its other functions are [`Script::adjust_function`],
//!   [`Script::flush_function`] and [`Script::lease_function`].
//!
//! Both ways take the same KEYS/ARGV and give the same reply, and write the
//! same data, so versions and invocations can be mixed on one server.
//!
//! # API for the transport
//!
//! * [`limiter()`]: the code, built once per process.
//! * [`encode_call`]`(out, limiter(), how, checks, now_ms)` appends one
//!   command deciding `checks` atomically: [`Invocation::EvalSha`],
//!   [`Invocation::Eval`] (the body) or [`Invocation::FCall`];
//!   [`encode_adjust`] the same for `adjust`, [`encode_flush`] for `flush`,
//!   [`encode_lease`] for `lease`; [`encode_shaped_call`] a shaped decision
//!   (docs/shaping.md). A lease check ([`Algorithm::Lease`]) goes as
//!   `lease=<id>` ([`Check::lease`]) in decisions and adjustments.
//! * [`encode_load`]`(out, limiter())` appends `FUNCTION LOAD REPLACE
//!   <library>`; Valkey answers the library name as a bulk string (see
//!   [`is_loaded`]). `REPLACE` makes concurrent loads by several proxies
//!   harmless: the text of one name never changes.
//! * [`is_missing`]`(reply)`: the reply says the code is not on this server
//!   (`NOSCRIPT` to `EVALSHA`; `ERR Function not found` to `FCALL`, after a
//!   restart without persistence, a `FUNCTION FLUSH`, a failover to a server
//!   that never had it, or the first call). **Such a call did not run**: send
//!   it again as [`Invocation::Eval`] (script), or after [`encode_load`]
//!   (function; the load and the resent call can go in one pipeline, in that
//!   order). Any other error reply did not decide either, but is not cured by
//!   loading; its first word classifies it as before (`WRONGTYPE`, `OOM`,
//!   `READONLY`, `ERR tollgate: ...`). One difference: out of memory under
//!   `noeviction`, `FCALL` is refused with `OOM` before it runs, even for a
//!   request that would be denied, where `EVAL` fails only at its first write.
//! * The reply of a call that ran: [`super::reply::parse`] (a flush's:
//!   [`super::reply::parse_flush`]; a lease call's:
//!   [`super::reply::parse_lease`]).
//!
//! `FCALL` needs Valkey (any version) or Redis 7.0 and later. The smallest ACL
//! (`tests/live/store/script_acl.rs`): `~<key prefix>:* +time +zadd +zcount
//! +zrangebyscore +zremrangebyscore +hmget +hset +pexpire`, plus `+fcall
//! +function|load` for the library, `+evalsha +eval` for the script; shaping
//! `sliding_window` or `fixed_window` also `+hget` (docs/shaping.md); `flush`
//! also `+get +set +zrange` (its syncer sets use `+zadd +zremrangebyscore
//! +pexpire`, granted already); concurrency limits (lease sets) also
//! `+zrem` (`adjust` undoing an admission) and, for `lease`, `+zscore`
//! (their decisions need nothing more). Redis 6
//! answers `FUNCTION LOAD` with `ERR unknown command`: use the script there.

use super::{Algorithm, Check, Window};
use crate::resp::{encode_command, CommandWriter, Value};
use std::sync::OnceLock;

mod entries;
pub use entries::{encode_adjust, encode_flush, encode_lease, encode_peek, encode_shaped_peek};

/// The limiter's code, as scripts and as a function library.
#[derive(Debug)]
pub struct Script {
    /// The script run by `EVAL`: the definitions, then a decision.
    pub body: &'static str,
    /// The SHA-1 of [`Script::body`], as `SCRIPT LOAD` would report it.
    pub sha: String,
    /// The script of `adjust` ([`encode_adjust`]): the definitions, then
    /// an adjustment.
    pub adjust_body: &'static str,
    /// The SHA-1 of [`Script::adjust_body`].
    pub adjust_sha: String,
    /// The script of `flush` ([`encode_flush`]): the definitions, then a
    /// flush.
    pub flush_body: &'static str,
    /// The SHA-1 of [`Script::flush_body`].
    pub flush_sha: String,
    /// The script of `lease` ([`encode_lease`]): the definitions, then
    /// ends and renewals of leases.
    pub lease_body: &'static str,
    /// The SHA-1 of [`Script::lease_body`].
    pub lease_sha: String,
    /// The script of `peek` ([`encode_peek`]): the definitions, then a
    /// dry run of a decision (it writes nothing: `EVAL_RO` may run it).
    pub peek_body: &'static str,
    /// The SHA-1 of [`Script::peek_body`].
    pub peek_sha: String,
    /// The function library for `FUNCTION LOAD`: the same definitions.
    pub library: String,
    /// The name of the library and of its decision function, for `FCALL`.
    pub function: String,
    /// The name of its `adjust` function: [`Script::function`] + `_adjust`.
    pub adjust_function: String,
    /// The name of its `flush` function: [`Script::function`] + `_flush`.
    pub flush_function: String,
    /// The name of its `lease` function: [`Script::function`] + `_lease`.
    pub lease_function: String,
    /// The name of its `peek` function: [`Script::function`] + `_peek`,
    /// registered `no-writes` (so `FCALL_RO` runs it, on replicas too).
    pub peek_function: String,
}

/// Every definition: the algorithms, `decide`, `adjust`, `flush` and `lease`, joined by
/// `build.rs` without their whole-line comments (one copy in the module: the
/// scripts and the library are made from it at run time).
const DEFINITIONS: &str = include_str!(concat!(env!("OUT_DIR"), "/limiter.lua"));

/// What ends the script (every definition, then one decision), the
/// adjustment's script, the flush's and the lease call's.
const DECIDE_TAIL: &str = "return decide(KEYS, ARGV, true)\n";
const ADJUST_TAIL: &str = "return adjust(KEYS, ARGV, true)\n";
const FLUSH_TAIL: &str = "return flush(KEYS, ARGV, true)\n";
const LEASE_TAIL: &str = "return lease(KEYS, ARGV, true)\n";
const PEEK_TAIL: &str = "return peek(KEYS, ARGV, true)\n";

/// The library around the definitions, with `@NAME@` where its name goes.
const LIBRARY_HEAD: &str = "#!lua name=@NAME@\n";
const LIBRARY_TAIL: &str = concat!(
    "redis.register_function('@NAME@', decide)\n",
    "redis.register_function('@NAME@_adjust', adjust)\n",
    "redis.register_function('@NAME@_flush', flush)\n",
    "redis.register_function('@NAME@_lease', lease)\n",
    "redis.register_function{function_name='@NAME@_peek', callback=peek, flags={'no-writes'}}\n",
);

/// The library text with `name`.
fn library(name: &str) -> String {
    format!("{}{DEFINITIONS}{}", LIBRARY_HEAD.replace("@NAME@", name), LIBRARY_TAIL.replace("@NAME@", name))
}

/// A script made once per process and kept for its lifetime.
fn script(tail: &str) -> &'static str {
    Box::leak(format!("{DEFINITIONS}{tail}").into_boxed_str())
}

/// The transactional multi-window limiter, every algorithm in one call.
pub fn limiter() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        let hash = sha1_smol::Sha1::from(library("@NAME@")).hexdigest();
        let function = format!("tollgate_{}", hash.get(..12).unwrap_or(&hash));
        let (body, adjust_body) = (script(DECIDE_TAIL), script(ADJUST_TAIL));
        let (flush_body, lease_body) = (script(FLUSH_TAIL), script(LEASE_TAIL));
        let peek_body = script(PEEK_TAIL);
        Script {
            body,
            sha: sha1_smol::Sha1::from(body).hexdigest(),
            adjust_body,
            adjust_sha: sha1_smol::Sha1::from(adjust_body).hexdigest(),
            flush_body,
            flush_sha: sha1_smol::Sha1::from(flush_body).hexdigest(),
            lease_body,
            lease_sha: sha1_smol::Sha1::from(lease_body).hexdigest(),
            peek_body,
            peek_sha: sha1_smol::Sha1::from(peek_body).hexdigest(),
            library: library(&function),
            adjust_function: format!("{function}_adjust"),
            flush_function: format!("{function}_flush"),
            lease_function: format!("{function}_lease"),
            peek_function: format!("{function}_peek"),
            function,
        }
    })
}

/// How the code is invoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invocation {
    /// The script by its SHA (`NOSCRIPT` until the server has seen it).
    EvalSha,
    /// The script with its body (what answers `NOSCRIPT`).
    Eval,
    /// The library's function (`ERR Function not found` until loaded).
    FCall,
}

/// Appends one `EVALSHA`/`EVAL`/`FCALL` command deciding all `checks`
/// atomically (a [`Check::check_only`] sends its cost as `?<cost>`).
/// `now_ms` overrides the server clock (tests only; `None` = Valkey
/// `TIME`).
pub fn encode_call(out: &mut Vec<u8>, script: &Script, how: Invocation, checks: &[Check], now_ms: Option<u64>) {
    encode_decide(out, (script, Decide::Decide), how, checks, None, now_ms);
}

/// [`encode_call`] for a shaped call (docs/shaping.md): the request may wait
/// up to `max_delay_ms` for its turn (`~<max_delay_ms>` after the time).
pub fn encode_shaped_call(
    out: &mut Vec<u8>,
    script: &Script,
    how: Invocation,
    checks: &[Check],
    max_delay_ms: u64,
    now_ms: Option<u64>,
) {
    encode_decide(out, (script, Decide::Decide), how, checks, Some((max_delay_ms, 0)), now_ms);
}

/// [`encode_shaped_call`] with a floor: the turn is at least `floor_ms`
/// from the store's now (`~<max_delay_ms>:<floor_ms>`; a floor of 0 is
/// written as the plain shaped call). A request held across cluster slots
/// (docs/shaping.md, "Across slots").
pub fn encode_floored_call(
    out: &mut Vec<u8>,
    script: &Script,
    how: Invocation,
    checks: &[Check],
    (max_delay_ms, floor_ms): (u64, u64),
    now_ms: Option<u64>,
) {
    encode_decide(out, (script, Decide::Decide), how, checks, Some((max_delay_ms, floor_ms)), now_ms);
}

/// Which entry point a decision's KEYS/ARGV go to: `decide` or its dry
/// run, `peek`.
#[derive(Clone, Copy)]
pub(super) enum Decide {
    Decide,
    Peek,
}

pub(super) fn encode_decide(
    out: &mut Vec<u8>,
    (script, entry): (&Script, Decide),
    how: Invocation,
    checks: &[Check],
    shape: Option<(u64, u64)>,
    now_ms: Option<u64>,
) {
    let (verb, target) = match entry {
        Decide::Decide => invoked(how, (&script.sha, script.body, &script.function)),
        Decide::Peek => invoked(how, (&script.peek_sha, script.peek_body, &script.peek_function)),
    };
    let windows: usize = checks.iter().map(|c| c.windows.len()).sum();
    let marked = marked(checks.iter());
    let args = 4 + usize::from(shape.is_some()) + checks.len() * 4 + marked + windows * 2;
    out.reserve(
        target.len()
            + 64
            + checks.iter().map(|c| c.key.len() + 24 + lease_len(c) + override_len(c)).sum::<usize>()
            + windows * 48,
    );
    let mut w = CommandWriter::new(out, args);
    w.bulk(verb);
    w.bulk(target);
    w.decimal(b"", (checks.len() + marked) as u64);
    for check in checks {
        w.bulk(check.key.as_bytes());
    }
    write_override_keys(&mut w, checks.iter());
    now(&mut w, now_ms);
    match shape {
        Some((max_delay, 0)) => w.decimal(b"~", max_delay),
        Some((max_delay, floor)) => w.bulk(format!("~{max_delay}:{floor}").as_bytes()),
        None => {}
    }
    for check in checks {
        write_algorithm(&mut w, check);
        w.decimal(if check.check_only { b"?" } else { b"" }, check.cost.get());
        write_windows(&mut w, &check.windows);
    }
}

/// How many of `checks` have an override key (are marked `@`).
fn marked<'a>(checks: impl Iterator<Item = &'a Check>) -> usize {
    checks.filter(|c| c.override_key.is_some()).count()
}

/// The override keys of the marked checks, in check order (after every
/// bucket key).
fn write_override_keys<'a>(w: &mut CommandWriter<'_>, checks: impl Iterator<Item = &'a Check>) {
    for key in checks.filter_map(|c| c.override_key.as_deref()) {
        w.bulk(key.as_bytes());
    }
}

/// The bytes a check's override key (and its marker) add, with the key's
/// RESP header.
fn override_len(check: &Check) -> usize {
    check.override_key.as_ref().map_or(0, |k| k.len() + 24)
}

/// A check's algorithm argument: its id, or for a lease check
/// `lease=<id>` (plain `lease` without an id, which the script refuses);
/// prefixed `@` when the check has an override key.
fn write_algorithm(w: &mut CommandWriter<'_>, check: &Check) {
    let mark: &[u8] = if check.override_key.is_some() { b"@" } else { b"" };
    match (check.algorithm, &check.lease) {
        (Algorithm::Lease, Some(id)) => w.bulk_joined(&[mark, b"lease=", id.as_bytes()]),
        (algorithm, _) => w.bulk_joined(&[mark, algorithm.id().as_bytes()]),
    }
}

/// The bytes a check's lease id adds to its algorithm argument.
fn lease_len(check: &Check) -> usize {
    check.lease.as_ref().map_or(0, |id| id.len())
}

/// The command's verb and its first argument for one entry point, given as
/// its script's SHA, the script's body and the function's name.
fn invoked<'a>(how: Invocation, (sha, body, function): (&'a str, &'a str, &'a str)) -> (&'static [u8], &'a [u8]) {
    match how {
        Invocation::EvalSha => (b"EVALSHA", sha.as_bytes()),
        Invocation::Eval => (b"EVAL", body.as_bytes()),
        Invocation::FCall => (b"FCALL", function.as_bytes()),
    }
}

/// The `now` argument: the override's ms, or empty for the store's `TIME`.
fn now(w: &mut CommandWriter<'_>, now_ms: Option<u64>) {
    match now_ms {
        Some(now) => w.decimal(b"", now),
        None => w.bulk(b""),
    }
}

/// A check's windows as every contract takes them: their count, then each
/// window's limit and period in ms.
fn write_windows(w: &mut CommandWriter<'_>, windows: &[Window]) {
    w.decimal(b"", windows.len() as u64);
    for window in windows {
        w.decimal(b"", window.limit.get());
        w.decimal(b"", window.period_ms.get());
    }
}

/// Appends `FUNCTION LOAD REPLACE <library>`.
pub fn encode_load(out: &mut Vec<u8>, script: &Script) {
    encode_command(out, &[b"FUNCTION", b"LOAD", b"REPLACE", script.library.as_bytes()]);
}

/// Whether the reply to [`encode_load`] says the library is loaded (Valkey
/// and Redis answer its name).
pub fn is_loaded(reply: &Value, script: &Script) -> bool {
    matches!(reply, Value::Bulk(name) if name == script.function.as_bytes())
}

/// The reply says this user may not run `FCALL` or `FUNCTION LOAD` (an ACL
/// written for scripts; Redis before 7 answers `unknown command`). Such a
/// call did not run either: the script can take over.
pub fn is_fcall_refused(reply: &Value) -> bool {
    let Some(message) = reply.as_error() else { return false };
    let text = String::from_utf8_lossy(message).to_ascii_lowercase();
    if let Some(name) = text.strip_prefix("err unknown command ") {
        return ["'fcall'", "`fcall`", "'function'", "`function`"].iter().any(|n| name.starts_with(n));
    }
    text.starts_with("noperm")
        && ["run the 'fcall' command", "run the 'function|load' command"].iter().any(|n| text.contains(n))
}

/// Whether an error reply says the script or function is not on this server,
/// so the call did not run and loading it cures the error: `NOSCRIPT ...`
/// (`EVALSHA`), or exactly `ERR Function not found` (`FCALL`; the text Valkey
/// 7.2 to 9 and Redis 7 send).
pub fn is_missing(reply: &Value) -> bool {
    match reply.as_error() {
        Some(message) => reply.error_kind() == Some("NOSCRIPT") || message == b"ERR Function not found",
        None => false,
    }
}

#[cfg(test)]
mod tests;
