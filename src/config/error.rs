//! [`ConfigError`] and the translation of serde's errors into it.

use std::fmt;

use serde_json::error::Category;

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
enum Seg {
    Key(String),
    Index(usize),
}

/// Renders a path: `rules[0].limits[1].period`; keys that are not plain
/// identifiers are quoted (`rules[0]["per od"]`); the empty path is `(root)`.
fn render(segs: &[Seg]) -> String {
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

/// Translates a stage-1 (serde) error into a [`ConfigError`] with a stable
/// path and message.
pub(crate) fn from_serde(err: serde_path_to_error::Error<serde_json::Error>) -> ConfigError {
    let mut segs: Vec<Seg> = err
        .path()
        .iter()
        .map(|seg| match seg {
            serde_path_to_error::Segment::Seq { index } => Seg::Index(*index),
            serde_path_to_error::Segment::Map { key } | serde_path_to_error::Segment::Enum { variant: key } => {
                Seg::Key(key.clone())
            }
            serde_path_to_error::Segment::Unknown => Seg::Key("?".to_owned()),
        })
        .collect();
    let inner = err.into_inner();
    match inner.classify() {
        Category::Data => {}
        Category::Syntax | Category::Eof | Category::Io => return from_json_syntax(&inner),
    }
    let text = bare_message(&inner);
    let message = data_message(&mut segs, &text);
    ConfigError::new(render(&segs), message)
}

/// Rewrites serde's data-error messages into this module's wording, adding
/// the field concerned to `segs` where serde's path stops at its parent.
fn data_message(segs: &mut Vec<Seg>, text: &str) -> String {
    if let Some((field, expected)) =
        text.strip_prefix("unknown field `").and_then(|rest| rest.rsplit_once("`, expected "))
    {
        point_at(segs, field);
        let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        return match names.as_slice() {
            [] => "unknown field, expected no fields".to_owned(),
            [only] => format!("unknown field, expected {only}"),
            many => format!("unknown field, expected one of {}", many.join(", ")),
        };
    }
    if let Some(field) =
        text.strip_prefix("unknown field `").and_then(|rest| rest.strip_suffix("`, there are no fields"))
    {
        point_at(segs, field);
        return "unknown field, expected no fields".to_owned();
    }
    for (prefix, message) in [("missing field `", "missing field"), ("duplicate field `", "duplicate field")] {
        if let Some(field) = text.strip_prefix(prefix).and_then(|rest| rest.strip_suffix('`')) {
            point_at(segs, field);
            return message.to_owned();
        }
    }
    if let Some((found, expected)) =
        text.strip_prefix("invalid type: ").and_then(|rest| rest.rsplit_once(", expected "))
    {
        let found = match found {
            "sequence" => "array",
            "map" => "object",
            other => other,
        };
        let expected = match expected {
            "a sequence" => "an array",
            other => other,
        };
        return format!("invalid type: {found}, expected {expected}");
    }
    text.to_owned()
}

/// Makes the path end at `field` unless it already does.
fn point_at(segs: &mut Vec<Seg>, field: &str) {
    if !matches!(segs.last(), Some(Seg::Key(last)) if last == field) {
        segs.push(Seg::Key(field.to_owned()));
    }
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

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn unknown_field_lists() {
        let mut segs = vec![Seg::Key("a".into())];
        assert_eq!(
            data_message(&mut segs, "unknown field `x`, there are no fields"),
            "unknown field, expected no fields"
        );
        assert_eq!(render(&segs), "a.x");
        let mut segs = vec![];
        assert_eq!(data_message(&mut segs, "unknown field `x`, expected `y`"), "unknown field, expected y");
        assert_eq!(render(&segs), "x");
        let mut segs = vec![Seg::Key("x`, expected `y".into())];
        assert_eq!(
            data_message(&mut segs, "unknown field `x`, expected `y`, expected `a` or `b`"),
            "unknown field, expected one of a, b"
        );
        assert_eq!(render(&segs), "[\"x`, expected `y\"]");
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn other_messages_pass_through() {
        let mut segs = vec![];
        assert_eq!(data_message(&mut segs, "something else"), "something else");
    }
}
