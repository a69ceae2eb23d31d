//! Classification of store failures into a fixed set of kinds, so that the
//! filter can count each kind under its own stat without the number of stat
//! handles depending on what a server (or an attacker in the path) sends.
//!
//! ```
//! use tollgate::store::{Failure, FailureKind};
//!
//! let readonly = Failure::ErrorReply { kind: "READONLY".into(), message: "READONLY replica".into() };
//! assert_eq!(readonly.kind(), FailureKind::ReadOnly);
//! assert_eq!(readonly.kind().name(), "readonly");
//! assert!(readonly.kind().is_transient());
//! // Any error code outside the fixed set is counted as `other`.
//! let odd = Failure::ErrorReply { kind: "WHATEVER".into(), message: "WHATEVER".into() };
//! assert_eq!(odd.kind(), FailureKind::Other);
//! assert_eq!(FailureKind::ALL.len(), 12);
//! ```

use super::Failure;

/// The kind of a store failure: one stat `tollgate.store.errors.<name>` each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The store could not be reached (connection refused, no master known,
    /// the stream could not be opened), or its stream closed before the
    /// request's reply arrived.
    Unavailable,
    /// The request was sent and no reply came within `valkey.timeout`.
    Timeout,
    /// The store's bytes are not RESP (or exceed the decoder limits).
    NotResp,
    /// A RESP reply that does not have the script's reply shape.
    BadReply,
    /// `-READONLY`: the server is a replica (e.g. during a failover).
    ReadOnly,
    /// `-OOM`: `maxmemory` reached under the `noeviction` policy.
    Oom,
    /// `-NOSCRIPT` even after sending the script body with `EVAL`.
    NoScript,
    /// `-WRONGTYPE`: a bucket key holds a value of another type.
    WrongType,
    /// `-BUSY`, `-LOADING`, `-MASTERDOWN`, `-TRYAGAIN`, `-CLUSTERDOWN`: the
    /// server is temporarily unable to run scripts.
    Busy,
    /// `-NOAUTH`, `-WRONGPASS`, `-NOPERM`: the store refuses our credentials.
    Auth,
    /// `-ERR`: a script error (e.g. the script's own argument checks).
    Script,
    /// Any other error code.
    Other,
}

impl FailureKind {
    /// Every kind, in stat definition order.
    pub const ALL: [FailureKind; 12] = [
        FailureKind::Unavailable,
        FailureKind::Timeout,
        FailureKind::NotResp,
        FailureKind::BadReply,
        FailureKind::ReadOnly,
        FailureKind::Oom,
        FailureKind::NoScript,
        FailureKind::WrongType,
        FailureKind::Busy,
        FailureKind::Auth,
        FailureKind::Script,
        FailureKind::Other,
    ];

    /// The stat name suffix: `tollgate.store.errors.<name>`.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Unavailable => "unavailable",
            FailureKind::Timeout => "timeout",
            FailureKind::NotResp => "not_resp",
            FailureKind::BadReply => "bad_reply",
            FailureKind::ReadOnly => "readonly",
            FailureKind::Oom => "oom",
            FailureKind::NoScript => "noscript",
            FailureKind::WrongType => "wrongtype",
            FailureKind::Busy => "busy",
            FailureKind::Auth => "auth",
            FailureKind::Script => "script",
            FailureKind::Other => "other",
        }
    }

    /// The position of this kind in [`FailureKind::ALL`].
    pub fn index(self) -> usize {
        FailureKind::ALL.iter().position(|&k| k == self).unwrap_or(FailureKind::ALL.len().saturating_sub(1))
    }

    /// True when the condition is expected to clear by itself (outage,
    /// failover, memory freed, server busy); false when it needs an operator
    /// (wrong key type, bad credentials, a script error, a malformed reply).
    /// Both follow `failure_mode`: a request never waits for an operator.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            FailureKind::Unavailable
                | FailureKind::Timeout
                | FailureKind::ReadOnly
                | FailureKind::Oom
                | FailureKind::NoScript
                | FailureKind::Busy
        )
    }

    /// The kind of a RESP error code (the first word of an error reply).
    pub fn of_error_code(code: &str) -> FailureKind {
        match code {
            "READONLY" => FailureKind::ReadOnly,
            "OOM" => FailureKind::Oom,
            "NOSCRIPT" => FailureKind::NoScript,
            "WRONGTYPE" => FailureKind::WrongType,
            "BUSY" | "LOADING" | "MASTERDOWN" | "TRYAGAIN" | "CLUSTERDOWN" => FailureKind::Busy,
            "NOAUTH" | "WRONGPASS" | "NOPERM" => FailureKind::Auth,
            "ERR" => FailureKind::Script,
            _ => FailureKind::Other,
        }
    }
}

impl Failure {
    /// The kind this failure is counted under.
    pub fn kind(&self) -> FailureKind {
        match self {
            Failure::Unavailable(_) | Failure::Lost(_) => FailureKind::Unavailable,
            Failure::NoResponse => FailureKind::Timeout,
            Failure::NotResp(_) => FailureKind::NotResp,
            Failure::BadReply(_) => FailureKind::BadReply,
            Failure::ErrorReply { kind, .. } => FailureKind::of_error_code(kind),
            Failure::NoScriptAfterEval => FailureKind::NoScript,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::outcome;
    use std::collections::HashSet;

    fn kind_of(reply: &[u8]) -> FailureKind {
        match outcome(reply) {
            crate::store::Outcome::Failed(f) => f.kind(),
            other => panic!("not a failure: {other:?}"),
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn kinds_have_distinct_names_and_indexes() {
        let names: HashSet<_> = FailureKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), FailureKind::ALL.len());
        for (i, k) in FailureKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i);
            assert!(k.name().bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{}", k.name());
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn real_server_error_replies_are_classified() {
        // The exact replies Valkey 9 and Redis 7 send from inside the script.
        for (reply, kind, transient) in [
            (
                &b"-READONLY You can't write against a read only replica. script: on @user_script:1.\r\n"[..],
                FailureKind::ReadOnly,
                true,
            ),
            (
                b"-OOM command not allowed when used memory > 'maxmemory'. script: on @user_script:1.\r\n",
                FailureKind::Oom,
                true,
            ),
            (
                b"-WRONGTYPE Operation against a key holding the wrong kind of value script: on @user_script:1.\r\n",
                FailureKind::WrongType,
                false,
            ),
            (b"-BUSY Redis is busy running a script.\r\n", FailureKind::Busy, true),
            (b"-LOADING Redis is loading the dataset in memory\r\n", FailureKind::Busy, true),
            (b"-MASTERDOWN Link with MASTER is down\r\n", FailureKind::Busy, true),
            (b"-NOAUTH Authentication required.\r\n", FailureKind::Auth, false),
            (b"-WRONGPASS invalid username-password pair\r\n", FailureKind::Auth, false),
            (b"-ERR tollgate: bad now\r\n", FailureKind::Script, false),
            (b"-FOO bar\r\n", FailureKind::Other, false),
            (b"-\r\n", FailureKind::Other, false),
            (b"!9\r\nBUSY busy\r\n", FailureKind::Busy, true),
        ] {
            let got = kind_of(reply);
            assert_eq!(got, kind, "{}", String::from_utf8_lossy(reply));
            assert_eq!(got.is_transient(), transient, "{}", String::from_utf8_lossy(reply));
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn transport_failures_are_classified() {
        assert_eq!(Failure::Unavailable("connection refused".into()).kind(), FailureKind::Unavailable);
        assert_eq!(Failure::Lost("stream closed".into()).kind(), FailureKind::Unavailable);
        assert_eq!(Failure::NoResponse.kind(), FailureKind::Timeout);
        assert_eq!(kind_of(b"<html>"), FailureKind::NotResp);
        assert_eq!(kind_of(b":1\r\n"), FailureKind::BadReply);
        assert_eq!(Failure::NoScriptAfterEval.kind(), FailureKind::NoScript);
        assert!(FailureKind::Timeout.is_transient() && !FailureKind::NotResp.is_transient());
    }
}
