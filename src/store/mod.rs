//! The one seam between the filter and the store: building the RESP pipeline
//! of a store call and interpreting the tunnel's reply.
//!
//! A store call is an HTTP POST through Envoy whose body is a RESP pipeline;
//! the internal tunnel listener forwards it to Valkey as raw TCP and the reply
//! body is Valkey's raw RESP reply. Everything here is pure: the filter only
//! moves bytes. Later pipelines (AUTH, batches of many requests' checks) are
//! built and split here too, so the filter stays unchanged.

mod classify;
pub mod sentinel;

pub use classify::FailureKind;

use crate::config::Auth;
use crate::limiter::reply::{self, ReplyError};
use crate::limiter::script::{encode_call, Invocation, Script};
use crate::limiter::{Check, Decision};
use crate::resp::{decode_all, encode_command, DecodeError, Limits, Value};
use std::fmt;

/// What the filter does with a store call's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The store decided.
    Decided(Decision),
    /// The script is not cached (first call, restart, `SCRIPT FLUSH`):
    /// send the same checks again with [`Invocation::Eval`].
    NoScript,
    /// The store could not decide; `failure_mode` applies.
    Failed(Failure),
}

/// Why a store call gave no decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The tunnel call failed or answered a non-200 status (Valkey unreachable).
    Unavailable(String),
    /// The call ended without any response: `valkey.timeout` ran out.
    NoResponse,
    /// The connection to the store closed after the call was sent and before
    /// every reply arrived (e.g. the store was killed).
    Lost(String),
    /// The body is not a complete RESP reply (e.g. an Envoy error page).
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
    let message = reply.as_error().map(printable).unwrap_or_default();
    Some(Failure::ErrorReply { kind, message })
}

/// The body of the store call deciding `checks` atomically.
pub fn pipeline(script: &Script, how: Invocation, checks: &[Check], now_ms: Option<u64>) -> Vec<u8> {
    let mut body = Vec::with_capacity(256);
    encode_call(&mut body, script, how, checks, now_ms);
    body
}

/// Interprets a tunnel call's reply: `status` is the HTTP `:status` (`None`
/// when the call produced no response), `body` the raw reply bytes.
pub fn interpret(status: Option<&str>, body: &[u8], checks: &[Check]) -> Outcome {
    match status {
        Some("200") => {}
        Some(other) => return Outcome::Failed(Failure::Unavailable(format!("tunnel status {other}"))),
        None => return Outcome::Failed(Failure::NoResponse),
    }
    let replies = match decode_all(body, &Limits::default()) {
        Ok(replies) => replies,
        Err(e) => return Outcome::Failed(Failure::NotResp(e)),
    };
    let [reply] = replies.as_slice() else {
        return Outcome::Failed(Failure::Unavailable(format!("expected 1 reply, got {}", replies.len())));
    };
    interpret_reply(reply, checks)
}

/// Longest part of an error reply kept for the log (replies are untrusted).
const MAX_ERROR_TEXT: usize = 256;

/// At most [`MAX_ERROR_TEXT`] bytes of `bytes`, as text with every control
/// character (a RESP3 bulk error may hold CR/LF) replaced, so that a reply
/// can neither flood nor forge log lines.
fn printable(bytes: &[u8]) -> String {
    let head = bytes.get(..MAX_ERROR_TEXT).unwrap_or(bytes);
    String::from_utf8_lossy(head).chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// Interprets one script reply.
pub fn interpret_reply(reply: &Value, checks: &[Check]) -> Outcome {
    if reply.is_error() {
        let kind = reply.error_kind().unwrap_or_default();
        if kind == "NOSCRIPT" {
            return Outcome::NoScript;
        }
        let message = reply.as_error().map(printable).unwrap_or_default();
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

    fn checks() -> Vec<Check> {
        vec![Check::for_test(0, "k", &[(2, 1_000)], 1)]
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn decides_on_a_well_formed_reply() {
        let out = interpret(Some("200"), b"*5\r\n:1\r\n:42\r\n:1\r\n:1000\r\n:0\r\n", &checks());
        let Outcome::Decided(d) = out else { panic!("{out:?}") };
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
        let out = interpret(Some("200"), b"-NOSCRIPT No matching script.\r\n", &checks());
        assert_eq!(out, Outcome::NoScript);
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn failures_are_classified_not_panicked() {
        let c = checks();
        assert!(matches!(
            interpret(Some("503"), b"upstream connect error", &c),
            Outcome::Failed(Failure::Unavailable(_))
        ));
        assert!(matches!(interpret(None, b"", &c), Outcome::Failed(Failure::NoResponse)));
        assert!(matches!(interpret(Some("200"), b"upstream connect error", &c), Outcome::Failed(Failure::NotResp(_))));
        assert!(matches!(interpret(Some("200"), b"*5\r\n:1\r\n", &c), Outcome::Failed(Failure::NotResp(_))));
        assert!(matches!(interpret(Some("200"), b"", &c), Outcome::Failed(Failure::Unavailable(_))));
        let Outcome::Failed(Failure::ErrorReply { kind, .. }) =
            interpret(Some("200"), b"-READONLY You can't write against a read only replica.\r\n", &c)
        else {
            panic!("not an error reply")
        };
        assert_eq!(kind, "READONLY");
        assert!(matches!(interpret(Some("200"), b":1\r\n", &c), Outcome::Failed(Failure::BadReply(_))));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn only_failures_after_sending_may_have_run() {
        let c = checks();
        let outcome = |status, body: &[u8]| match interpret(status, body, &c) {
            Outcome::Failed(f) => f.may_have_run(),
            other => panic!("not a failure: {other:?}"),
        };
        assert!(outcome(None, b""), "no response: the call may have run");
        assert!(outcome(Some("200"), b"*5\r\n:1\r\n"), "truncated reply");
        assert!(Failure::Lost("expected 2 replies, got 1".into()).may_have_run());
        assert!(!outcome(Some("503"), b"upstream connect error"), "never reached the store");
        assert!(!outcome(Some("200"), b"-READONLY replica\r\n"), "the store answered");
        assert!(!Failure::Unavailable("store call queue full".into()).may_have_run());
        assert!(!Failure::NoScriptAfterEval.may_have_run());
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn error_text_is_bounded_and_printable() {
        let mut reply = b"!2000\r\nOOM ".to_vec();
        reply.extend(std::iter::repeat_n(b'\n', 1996));
        reply.extend_from_slice(b"\r\n");
        let Outcome::Failed(failure @ Failure::ErrorReply { .. }) = interpret(Some("200"), &reply, &checks()) else {
            panic!("not an error reply")
        };
        let text = failure.to_string();
        assert!(text.len() < 300 && !text.contains('\n'), "{text:?}");
        assert_eq!(failure.kind(), FailureKind::Oom);
    }
}
