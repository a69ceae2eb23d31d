//! Why an operating command (`inspect`, `reset`, `override`) stopped: one
//! line for a person, and the exit status (docs/cli.md, "Exit codes").

use super::store::StoreError;
use std::io::Write;

/// Exit status: a usage error (flags, an unreadable or invalid FILE).
pub const USAGE: i32 = 2;
/// Exit status: an unknown rule, or key parts that do not match the rule's `key`.
pub const NO_SUCH_BUCKET: i32 = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure { code: USAGE, message: message.into() }
    }

    pub fn bucket(message: impl Into<String>) -> Failure {
        Failure { code: NO_SUCH_BUCKET, message: message.into() }
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        Failure { code: e.exit_code(), message: e.message().to_owned() }
    }
}

/// Writes `text` to `out`.
pub fn emit(out: &mut dyn Write, text: &str) -> Result<(), Failure> {
    out.write_all(text.as_bytes()).map_err(|e| Failure { code: 1, message: e.to_string() })
}
