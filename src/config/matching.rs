//! `rules[i].match`: which requests a rule applies to.

use super::error::ConfigError;
use super::primitives::{fail, header_name};
use super::raw::{RawHeaderMatch, RawMatch};

/// Request selection of a rule: every condition given must hold. The default
/// matches every request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Match {
    /// The path (without query string) must equal this.
    pub path: Option<String>,
    /// The path (without query string) must start with this.
    pub path_prefix: Option<String>,
    /// The whole path (without query string) must match this regex.
    pub path_regex: Option<Pattern>,
    /// Allowed methods, uppercase and distinct; empty means any method.
    pub methods: Vec<String>,
    /// The `:authority` (host, with port if the request has one) must equal
    /// this, ASCII case-insensitively; stored lowercase.
    pub authority: Option<String>,
    /// Header conditions, all of which must hold.
    pub headers: Vec<HeaderMatch>,
}

/// A compiled regular expression that must match a whole value, remembered
/// with its source (equality compares sources).
#[derive(Debug, Clone)]
pub struct Pattern {
    source: String,
    regex: regex_lite::Regex,
}

impl Pattern {
    /// Compiles `source` anchored at both ends (a whole-value match, like
    /// Envoy's `safe_regex`).
    pub fn new(source: &str) -> Result<Pattern, String> {
        let anchored = format!("^(?:{source})$");
        let regex = regex_lite::RegexBuilder::new(&anchored)
            .size_limit(1 << 20)
            .nest_limit(64)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Pattern { source: source.to_owned(), regex })
    }

    /// The regex as configured (without the added anchors).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the whole `value` matches (non-UTF-8 values never match).
    pub fn is_match(&self, value: &[u8]) -> bool {
        std::str::from_utf8(value).is_ok_and(|v| self.regex.is_match(v))
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Pattern {}

/// One header condition: `{ "name": N, <present|exact|prefix|regex>, "invert": bool }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderMatch {
    /// Lowercase header name (pseudo-headers allowed).
    pub name: String,
    pub condition: HeaderCondition,
    /// Negates the condition.
    pub invert: bool,
}

impl HeaderMatch {
    /// Whether the condition holds for the header's `value` (`None`: absent).
    pub fn holds(&self, value: Option<&[u8]>) -> bool {
        let holds = match (&self.condition, value) {
            (HeaderCondition::Present(expected), v) => v.is_some() == *expected,
            (_, None) => false,
            (HeaderCondition::Exact(e), Some(v)) => v == e.as_bytes(),
            (HeaderCondition::Prefix(p), Some(v)) => v.starts_with(p.as_bytes()),
            (HeaderCondition::Regex(r), Some(v)) => r.is_match(v),
        };
        holds != self.invert
    }
}

/// What a header must satisfy. A condition on the value never holds when the
/// header is absent (before `invert`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderCondition {
    /// `present: true`: the header exists; `present: false`: it does not.
    Present(bool),
    Exact(String),
    Prefix(String),
    Regex(Pattern),
}

/// Most header conditions in one rule.
pub const MAX_HEADER_MATCHES: usize = 16;

pub(crate) fn matcher(i: usize, raw: Option<RawMatch>) -> Result<Match, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Match::default());
    };
    let base = format!("rules[{i}].match");
    for (field, value) in [("path", &raw.path), ("path_prefix", &raw.path_prefix)] {
        if let Some(path) = value {
            if !path.starts_with('/') {
                return fail(format!("{base}.{field}"), "must start with '/'");
            }
        }
    }
    let path_regex = match &raw.path_regex {
        None => None,
        Some(source) => Some(pattern(&format!("{base}.path_regex"), source)?),
    };
    let mut methods: Vec<String> = Vec::new();
    if let Some(list) = raw.methods {
        if list.is_empty() {
            return fail(format!("{base}.methods"), "must not be empty");
        }
        for (j, method) in list.into_iter().enumerate() {
            let path = format!("{base}.methods[{j}]");
            if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
                return fail(path, format!("invalid HTTP method {method:?}: expected letters only"));
            }
            let upper = method.to_ascii_uppercase();
            if let Some(first) = methods.iter().position(|m| *m == upper) {
                return fail(path, format!("duplicate method {upper:?} (also {base}.methods[{first}])"));
            }
            methods.push(upper);
        }
    }
    let authority = match raw.authority {
        Some(a) if a.is_empty() => return fail(format!("{base}.authority"), "must not be empty"),
        other => other.map(|a| a.to_ascii_lowercase()),
    };
    let raw_headers = raw.headers.unwrap_or_default();
    if raw_headers.len() > MAX_HEADER_MATCHES {
        return fail(
            format!("{base}.headers"),
            format!("must have at most {MAX_HEADER_MATCHES} conditions (got {})", raw_headers.len()),
        );
    }
    let headers = raw_headers
        .into_iter()
        .enumerate()
        .map(|(j, h)| header_match(&format!("{base}.headers[{j}]"), h))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Match { path: raw.path, path_prefix: raw.path_prefix, path_regex, methods, authority, headers })
}

fn pattern(path: &str, source: &str) -> Result<Pattern, ConfigError> {
    Pattern::new(source).or_else(|e| {
        let first_line = e.lines().find(|l| !l.trim().is_empty()).unwrap_or("invalid").trim().to_owned();
        fail(path, format!("invalid regex {source:?}: {first_line}"))
    })
}

pub(crate) fn header_match(path: &str, raw: RawHeaderMatch) -> Result<HeaderMatch, ConfigError> {
    let name = header_name(&format!("{path}.name"), &raw.name)?;
    let mut conditions = Vec::new();
    if let Some(p) = raw.present {
        conditions.push(HeaderCondition::Present(p));
    }
    if let Some(v) = raw.exact {
        conditions.push(HeaderCondition::Exact(v));
    }
    if let Some(v) = raw.prefix {
        conditions.push(HeaderCondition::Prefix(v));
    }
    if let Some(v) = &raw.regex {
        conditions.push(HeaderCondition::Regex(pattern(&format!("{path}.regex"), v)?));
    }
    let condition = match conditions.len() {
        1 => conditions.pop(),
        _ => None,
    };
    let Some(condition) = condition else {
        return fail(path, "must have exactly one of present, exact, prefix, regex");
    };
    Ok(HeaderMatch { name, condition, invert: raw.invert.unwrap_or(false) })
}
