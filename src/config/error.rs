//! [`ConfigError`], the rendering of paths, and JSON syntax errors.

use std::fmt;

/// The path of errors about the document as a whole (invalid JSON, not an
/// object).
pub(crate) const ROOT: &str = "(root)";

/// Why a configuration was rejected: where (a path such as
/// `rules[0].limits[1].period`, or `(root)`) and what.
///
/// `Display` renders `path: message`. Every message is listed in the table in
/// the [`config`](super) module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    path: String,
    message: String,
}

impl ConfigError {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into() }
    }

    /// Where the error is: `valkey.timeout`, `rules[2].name`,
    /// `rules[0].limits[1].period`, `(root)`, ...
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What is wrong, without the path: `must be > 0`, `missing field`, ...
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// One step of a path.
#[derive(Debug, Clone)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

/// Renders a path: `rules[0].limits[1].period`; keys that are not plain
/// identifiers are quoted (`rules[0]["per od"]`); the empty path is `(root)`.
pub(crate) fn render(segs: &[Seg]) -> String {
    let mut out = String::new();
    for seg in segs {
        match seg {
            Seg::Index(index) => out.push_str(&format!("[{index}]")),
            Seg::Key(key) if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Seg::Key(key) => out.push_str(&format!("[{key:?}]")),
        }
    }
    if out.is_empty() {
        out.push_str(ROOT);
    }
    out
}

/// serde_json's message without its ` at line L column C` suffix.
fn bare_message(err: &serde_json::Error) -> String {
    let full = err.to_string();
    if err.line() == 0 {
        return full;
    }
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    match full.strip_suffix(&suffix) {
        Some(bare) => bare.to_owned(),
        None => full,
    }
}

/// An error of the JSON layer itself (syntax, truncated input, trailing
/// characters): reported at `(root)` with its position.
pub(crate) fn from_json_syntax(err: &serde_json::Error) -> ConfigError {
    ConfigError::new(
        ROOT,
        format!("invalid JSON at line {} column {}: {}", err.line(), err.column(), bare_message(err)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn display_and_accessors() {
        let err = ConfigError::new("rules[0].name", "must not be empty");
        assert_eq!(err.to_string(), "rules[0].name: must not be empty");
        assert_eq!(err.path(), "rules[0].name");
        assert_eq!(err.message(), "must not be empty");
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn paths() {
        assert_eq!(render(&[]), "(root)");
        let segs = [
            Seg::Key("rules".into()),
            Seg::Index(0),
            Seg::Key("limits".into()),
            Seg::Index(1),
            Seg::Key("period".into()),
        ];
        assert_eq!(render(&segs), "rules[0].limits[1].period");
        let odd = [Seg::Key("valkey".into()), Seg::Key("time out".into())];
        assert_eq!(render(&odd), "valkey[\"time out\"]");
        assert_eq!(render(&[Seg::Key(String::new())]), "[\"\"]");
    }
}
