//! The limiter's calls through either invocation path ([`Path`]): the
//! script (`EVALSHA`, `EVAL` when missing) or the function library
//! (`FCALL`, `FUNCTION LOAD` when missing), decoded as the transport does.

use super::super::valkey_stats::Conn;
use super::super::{try_command, Valkey};
use tollgate::limiter::script::{
    encode_adjust, encode_call, encode_floored_call, encode_flush, encode_load, is_loaded, is_missing, limiter,
    Invocation,
};
use tollgate::limiter::{reply, Adjustment, Check, Decision, Flush, FlushReply};
use tollgate::resp::Value;

/// How the limiter is invoked: the script (`EVALSHA`, then `EVAL` when
/// missing) or the function library (`FCALL`, then `FUNCTION LOAD` and
/// `FCALL` again when missing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    Script,
    Function,
}

impl Path {
    pub const ALL: [Path; 2] = [Path::Script, Path::Function];

    /// The first invocation, and the one after loading.
    pub fn invocations(self) -> [Invocation; 2] {
        match self {
            Path::Script => [Invocation::EvalSha, Invocation::Eval],
            Path::Function => [Invocation::FCall, Invocation::FCall],
        }
    }
}

/// The limiter's raw reply to one call through `path` (loading the code when
/// the server says it is missing). `now_ms` `None` means Valkey's clock.
pub fn store_reply(port: u16, path: Path, checks: &[Check], now_ms: Option<u64>) -> Value {
    decide_on(&mut Conn::connect(port), path, checks, now_ms)
}

/// [`store_reply`] on a given connection (e.g. one that has authenticated).
/// A failed load is returned as the reply.
pub fn decide_on(conn: &mut Conn, path: Path, checks: &[Check], now_ms: Option<u64>) -> Value {
    shaped_on(conn, path, checks, None, now_ms)
}

/// [`decide_on`], shaped with `(max_delay_ms, floor_ms)` when given.
pub fn shaped_on(
    conn: &mut Conn,
    path: Path,
    checks: &[Check],
    max_delay_ms: Option<(u64, u64)>,
    now_ms: Option<u64>,
) -> Value {
    let [first, retry] = path.invocations();
    let reply = call(conn, first, checks, max_delay_ms, now_ms);
    if !is_missing(&reply) {
        return reply;
    }
    if path == Path::Function {
        let mut load = Vec::new();
        encode_load(&mut load, limiter());
        let loaded = conn.pipeline(&load, 1).remove(0);
        if !is_loaded(&loaded, limiter()) {
            return loaded;
        }
    }
    let reply = call(conn, retry, checks, max_delay_ms, now_ms);
    assert!(!is_missing(&reply), "{path:?}: still missing after loading: {reply:?}");
    reply
}

/// One decision through `path`.
pub fn store_decide_via(valkey: &Valkey, path: Path, checks: &[Check], now_ms: Option<u64>) -> Decision {
    let reply = store_reply(valkey.port, path, checks, now_ms);
    assert!(!reply.is_error(), "{path:?}: store error: {reply:?}");
    reply::parse(&reply, checks).unwrap_or_else(|e| panic!("{path:?}: {e}: {reply:?}"))
}

/// The limiter through the function library; `now_ms` `None` means Valkey's clock.
pub fn store_decide_at(valkey: &Valkey, checks: &[Check], now_ms: Option<u64>) -> Decision {
    store_decide_via(valkey, Path::Function, checks, now_ms)
}

pub fn store_decide(valkey: &Valkey, checks: &[Check], now_ms: u64) -> Decision {
    store_decide_at(valkey, checks, Some(now_ms))
}

/// One `adjust` through `path` (loading the code when missing): the state
/// after it, as a decision.
pub fn store_adjust_via(
    valkey: &Valkey,
    path: Path,
    adjustments: &[Adjustment],
    at_ms: u64,
    now_ms: Option<u64>,
) -> Decision {
    let reply = encoded_via(valkey, path, |body, how| {
        encode_adjust(body, limiter(), how, adjustments, at_ms, now_ms);
    });
    assert!(!reply.is_error(), "{path:?}: store error: {reply:?}");
    let checks: Vec<Check> = adjustments.iter().map(|a| a.check.clone()).collect();
    reply::parse(&reply, &checks).unwrap_or_else(|e| panic!("{path:?}: {e}: {reply:?}"))
}

/// The reply to one command `encode` writes for an invocation, through
/// `path` (loading the code when missing).
pub fn encoded_via(valkey: &Valkey, path: Path, encode: impl Fn(&mut Vec<u8>, Invocation)) -> Value {
    let mut conn = Conn::connect(valkey.port);
    let encoded = |how| {
        let mut body = Vec::new();
        encode(&mut body, how);
        body
    };
    let [first, retry] = path.invocations();
    let reply = conn.pipeline(&encoded(first), 1).remove(0);
    if !is_missing(&reply) {
        return reply;
    }
    if path == Path::Function {
        let mut load = Vec::new();
        encode_load(&mut load, limiter());
        assert!(is_loaded(&conn.pipeline(&load, 1).remove(0), limiter()));
    }
    conn.pipeline(&encoded(retry), 1).remove(0)
}

/// One `flush` through `path` (loading the code when missing).
pub fn store_flush_via(valkey: &Valkey, path: Path, flush: &Flush, now_ms: Option<u64>) -> FlushReply {
    let reply = encoded_via(valkey, path, |body, how| encode_flush(body, limiter(), how, flush, now_ms));
    assert!(!reply.is_error(), "{path:?}: store error: {reply:?}");
    reply::parse_flush(&reply, &flush.entries).unwrap_or_else(|e| panic!("{path:?}: {e}: {reply:?}"))
}

/// One shaped decision through `path` (docs/shaping.md), `shape` =
/// `(max_delay_ms, floor_ms)`.
pub fn store_shaped_via(
    valkey: &Valkey,
    path: Path,
    checks: &[Check],
    shape: (u64, u64),
    now_ms: Option<u64>,
) -> Decision {
    let reply = shaped_on(&mut Conn::connect(valkey.port), path, checks, Some(shape), now_ms);
    assert!(!reply.is_error(), "{path:?}: store error: {reply:?}");
    reply::parse(&reply, checks).unwrap_or_else(|e| panic!("{path:?}: {e}: {reply:?}"))
}

fn call(conn: &mut Conn, how: Invocation, checks: &[Check], shape: Option<(u64, u64)>, now_ms: Option<u64>) -> Value {
    let mut body = Vec::new();
    match shape {
        Some(shape) => encode_floored_call(&mut body, limiter(), how, checks, shape, now_ms),
        None => encode_call(&mut body, limiter(), how, checks, now_ms),
    }
    conn.pipeline(&body, 1).remove(0)
}

/// Sends one encoded command (re-split into arguments for the test client).
pub fn raw_call(port: u16, body: &[u8]) -> Value {
    let (Value::Array(items), used) = tollgate::resp::decode(body, &Default::default()).unwrap() else {
        panic!("not one command")
    };
    assert_eq!(used, body.len(), "not one command");
    let args: Vec<&[u8]> = items.iter().map(|v| v.as_bytes().unwrap()).collect();
    try_command(port, &args).unwrap()
}
