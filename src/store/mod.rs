//! What a store reply means: one script reply to an [`Outcome`], the
//! failures and their kinds, the `AUTH` preamble of a stream, and Sentinel
//! discovery ([`sentinel`]). Pure: the worker pairs replies with requests
//! (in order, on its stream) and hands each one here. Valkey Cluster's slot
//! map and redirections are in [`cluster`].

mod classify;
pub mod cluster;
mod cluster_map;
pub mod sentinel;

pub use classify::FailureKind;

use crate::config::Auth;
use crate::limiter::reply::{self, ReplyError};
use crate::limiter::{Check, Decision};
use crate::resp::{encode_command, DecodeError, Value};
use std::fmt;

/// What one script reply means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The store decided.
    Decided(Decision),
    /// The script is not cached (first call, restart, `SCRIPT FLUSH`):
    /// send the same checks again with
    /// [`Invocation::Eval`](crate::limiter::script::Invocation::Eval).
    NoScript,
    /// The store could not decide; `failure_mode` applies.
    Failed(Failure),
}

/// Why a store call gave no decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The store could not be reached, or the request could not be sent to
    /// it in time (connection refused, no master known yet).
    Unavailable(String),
    /// The request was sent and no reply came within `valkey.timeout`.
    NoResponse,
    /// The stream to the store closed after the request was sent and before
    /// its reply arrived (e.g. the store was killed).
    Lost(String),
    /// The store's bytes are not RESP.
    NotResp(DecodeError),
    /// Valkey answered an error reply, e.g. `READONLY`, `OOM`, `WRONGTYPE`.
    ErrorReply { kind: String, message: String },
    /// The script's reply does not have the contract's shape.
    BadReply(ReplyError),
    /// `NOSCRIPT` again after the script body was sent with `EVAL`.
    NoScriptAfterEval,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unavailable(why) => write!(f, "store unavailable: {why}"),
            Self::NoResponse => f.write_str("store call timed out (no response)"),
            Self::Lost(why) => write!(f, "store connection lost before the reply: {why}"),
            Self::NotResp(e) => write!(f, "store reply is not RESP: {e}"),
            Self::ErrorReply { message, .. } => write!(f, "store error reply: {message}"),
            Self::BadReply(e) => write!(f, "store reply malformed: {e}"),
            Self::NoScriptAfterEval => f.write_str("store answered NOSCRIPT to EVAL"),
        }
    }
}

impl Failure {
    /// Whether the call may have run on the store although no decision came
    /// back: it was sent, and its reply never arrived whole (timeout, a
    /// connection lost, a truncated reply). Such a request may be charged in
    /// every window it asked for; it is never sent again. Every other failure
    /// is known not to have recorded anything: the call was never sent or
    /// never reached the store, or the store answered it.
    pub fn may_have_run(&self) -> bool {
        matches!(self, Failure::NoResponse | Failure::Lost(_) | Failure::NotResp(_))
    }
}

/// Commands that lead every store call (`AUTH`), and how many replies they
/// give: those replies are checked and skipped before the scripts' replies.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Preamble {
    pub bytes: Vec<u8>,
    pub replies: usize,
}

impl fmt::Debug for Preamble {
    /// The bytes may hold a password: never shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Preamble {{ bytes: *** ({} bytes), replies: {} }}", self.bytes.len(), self.replies)
    }
}

impl Preamble {
    /// `AUTH [username] password` when credentials are configured, else nothing.
    pub fn auth(auth: Option<&Auth>) -> Preamble {
        let Some(auth) = auth else { return Preamble::default() };
        let mut bytes = Vec::with_capacity(64);
        let password = auth.password.expose();
        match &auth.username {
            Some(user) => encode_command(&mut bytes, &[b"AUTH", user.as_bytes(), password]),
            None => encode_command(&mut bytes, &[b"AUTH", password]),
        }
        Preamble { bytes, replies: 1 }
    }
}

/// The failure a preamble reply means: an error reply (`-WRONGPASS`,
/// `-NOAUTH`, ...) fails the whole call; anything else (`+OK`) passes.
pub fn preamble_failure(reply: &Value) -> Option<Failure> {
    if !reply.is_error() {
        return None;
    }
    let kind = reply.error_kind().unwrap_or_default().chars().take(MAX_ERROR_TEXT).collect();
    let message = reply.as_error().map(|e| printable(e, MAX_ERROR_TEXT)).unwrap_or_default();
    Some(Failure::ErrorReply { kind, message })
}

/// Longest part of an error reply kept for the log (replies are untrusted).
const MAX_ERROR_TEXT: usize = 256;

/// At most `max` bytes of `bytes`, as text with every control character (a
/// RESP3 bulk error may hold CR/LF) replaced, so that an untrusted reply can
/// neither flood nor forge log lines.
pub fn printable(bytes: &[u8], max: usize) -> String {
    let head = bytes.get(..max).unwrap_or(bytes);
    String::from_utf8_lossy(head).chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// Interprets one script reply.
pub fn interpret_reply(reply: &Value, checks: &[Check]) -> Outcome {
    if reply.is_error() {
        if crate::limiter::script::is_missing(reply) {
            return Outcome::NoScript;
        }
        let kind = reply.error_kind().unwrap_or_default();
        let message = reply.as_error().map(|e| printable(e, MAX_ERROR_TEXT)).unwrap_or_default();
        let kind = kind.chars().take(MAX_ERROR_TEXT).collect();
        return Outcome::Failed(Failure::ErrorReply { kind, message });
    }
    match reply::parse(reply, checks) {
        Ok(decision) => Outcome::Decided(decision),
        Err(e) => Outcome::Failed(Failure::BadReply(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::{decode, Limits};

    fn checks() -> Vec<Check> {
        vec![Check::for_test(0, "k", &[(2, 1_000)], 1)]
    }

    /// What the worker makes of these bytes as one reply.
    pub(crate) fn outcome(bytes: &[u8]) -> Outcome {
        match decode(bytes, &Limits::default()) {
            Ok((value, _)) => interpret_reply(&value, &checks()),
            Err(e) => Outcome::Failed(Failure::NotResp(e)),
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn decides_on_a_well_formed_reply() {
        let Outcome::Decided(d) = outcome(b"*5\r\n:1\r\n:42\r\n:1\r\n:1000\r\n:0\r\n") else { panic!("no decision") };
        assert!(d.allowed);
        assert_eq!((d.now_ms, d.windows[0].remaining), (42, 1));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn auth_preamble_names_the_user_and_hides_the_password() {
        use crate::config::Secret;
        assert_eq!(Preamble::auth(None), Preamble::default());
        let pw = Secret::new(b"p4ss".to_vec());
        let plain = Preamble::auth(Some(&Auth { username: None, password: pw.clone() }));
        assert_eq!((plain.bytes.as_slice(), plain.replies), (&b"*2\r\n$4\r\nAUTH\r\n$4\r\np4ss\r\n"[..], 1));
        let acl = Preamble::auth(Some(&Auth { username: Some("lim".into()), password: pw }));
        assert_eq!(acl.bytes, b"*3\r\n$4\r\nAUTH\r\n$3\r\nlim\r\n$4\r\np4ss\r\n");
        assert!(!format!("{acl:?}").contains("p4ss"), "{acl:?}");
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn preamble_errors_are_auth_failures() {
        assert_eq!(preamble_failure(&Value::Simple(b"OK".to_vec())), None);
        for reply in [
            &b"WRONGPASS invalid username-password pair or user is disabled."[..],
            b"NOAUTH Authentication required.",
            b"NOPERM User limiter has no permissions to run the 'evalsha' command",
        ] {
            let failure = preamble_failure(&Value::Error(reply.to_vec())).unwrap();
            assert_eq!(failure.kind(), FailureKind::Auth, "{failure}");
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn noscript_asks_for_eval() {
        assert_eq!(outcome(b"-NOSCRIPT No matching script.\r\n"), Outcome::NoScript);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn failures_are_classified_not_panicked() {
        assert!(matches!(outcome(b"upstream connect error"), Outcome::Failed(Failure::NotResp(_))));
        let Outcome::Failed(Failure::ErrorReply { kind, .. }) =
            outcome(b"-READONLY You can't write against a read only replica.\r\n")
        else {
            panic!("not an error reply")
        };
        assert_eq!(kind, "READONLY");
        assert!(matches!(outcome(b":1\r\n"), Outcome::Failed(Failure::BadReply(_))));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn only_failures_after_sending_may_have_run() {
        assert!(Failure::NoResponse.may_have_run(), "sent, no reply in time");
        assert!(Failure::Lost("stream closed".into()).may_have_run());
        assert!(Failure::NotResp(DecodeError::Incomplete).may_have_run());
        let Outcome::Failed(answered) = outcome(b"-READONLY replica\r\n") else { panic!("not a failure") };
        assert!(!answered.may_have_run(), "the store answered");
        assert!(!Failure::Unavailable("connection refused".into()).may_have_run());
        assert!(!Failure::NoScriptAfterEval.may_have_run());
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn error_text_is_bounded_and_printable() {
        let mut reply = b"!2000\r\nOOM ".to_vec();
        reply.extend(std::iter::repeat_n(b'\n', 1996));
        reply.extend_from_slice(b"\r\n");
        let Outcome::Failed(failure @ Failure::ErrorReply { .. }) = outcome(&reply) else {
            panic!("not an error reply")
        };
        let text = failure.to_string();
        assert!(text.len() < 300 && !text.contains('\n'), "{text:?}");
        assert_eq!(failure.kind(), FailureKind::Oom);
    }
}
