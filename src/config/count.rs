//! `rules[i].count`: a rule that counts what the response says (only some
//! statuses or responses with some header, a cost the response reports),
//! with an optional reservation on the request that the response settles.
//! How the worker uses it: `src/worker/counting/`.

use std::num::NonZeroU64;

use serde_json::Number;

use super::error::ConfigError;
use super::matching::{header_match, HeaderMatch};
use super::primitives::{fail, header_name, limit_count};
use super::raw::{Loose, RawCost, RawCount, RawReserve};
use super::{Algorithm, Bounds, Limit, MAX_LOG_COST};

/// `max_body_bytes` when omitted: the most bytes of a body read for a
/// reservation or a cost (256 KiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 256 << 10;
/// The bounds of `max_body_bytes` (1 KiB to 16 MiB).
pub const MAX_BODY_BYTES_BOUNDS: Bounds = (1 << 10, 16 << 20);
/// Most segments of a JSON path.
pub const MAX_JSON_PATH_SEGMENTS: usize = 16;
/// Longest JSON path, in bytes.
pub const MAX_JSON_PATH_BYTES: usize = 256;

/// What a rule with `count` records, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Count {
    /// Only responses with one of these statuses count (empty: every one).
    pub status: Vec<StatusRange>,
    /// Only responses whose headers satisfy this count.
    pub header: Option<HeaderMatch>,
    /// What the request records on admission; `None`: nothing (it only
    /// checks that the rule's `cost` fits).
    pub reserve: Option<Reserve>,
    /// Where the response says its cost; `None`: the rule's `cost`.
    pub cost: Option<CostSource>,
}

impl Count {
    /// Whether a response with `status` passes the status condition.
    pub fn counts_status(&self, status: u16) -> bool {
        self.status.is_empty() || self.status.iter().any(|r| r.first <= status && status <= r.last)
    }

    /// The request body is needed for the reservation.
    pub fn reads_request_body(&self) -> bool {
        matches!(self.reserve, Some(Reserve::Body { .. }))
    }
}

/// Statuses `first..=last` (one status: both equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusRange {
    pub first: u16,
    pub last: u16,
}

/// Units recorded on the request, for the response to settle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserve {
    /// A fixed number of units.
    Units(NonZeroU64),
    /// The integer value of a request header (lowercase name); `default`
    /// when it is missing or not an integer.
    Header { name: String, default: NonZeroU64 },
    /// An integer field of the request's JSON body; `default` when the
    /// body is not JSON, lacks it, or is larger than `max_body_bytes`.
    Body { path: JsonPath, default: NonZeroU64 },
}

/// Where the response says what the request cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CostSource {
    /// The integer value of a response header (lowercase name).
    Header(String),
    /// An integer field of the JSON body, or of the last `data:` event of
    /// a `text/event-stream` body that carries it.
    Body(JsonPath),
}

/// A path into a JSON document: object fields separated by `.`, array
/// elements by their index (`usage.total_tokens`, `choices.0.n`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPath {
    text: String,
    segments: Vec<String>,
}

impl JsonPath {
    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

pub(crate) fn count(
    i: usize,
    raw: Option<RawCount>,
    algorithm: Algorithm,
    limits: &[Limit],
) -> Result<Option<Count>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let base = format!("rules[{i}].count");
    let status = match raw.status {
        None => Vec::new(),
        Some(items) if items.is_empty() => {
            return fail(format!("{base}.status"), "must not be empty (leave it out to count every status)")
        }
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(j, item)| status_range(&format!("{base}.status[{j}]"), item))
            .collect::<Result<_, _>>()?,
    };
    let header = match raw.header {
        None => None,
        Some(h) => Some(header_match(&format!("{base}.header"), h)?),
    };
    let reserve = match raw.reserve {
        None => None,
        Some(r) => Some(reserve(&format!("{base}.reserve"), r, algorithm, limits)?),
    };
    let cost = match raw.cost {
        None => None,
        Some(c) => Some(cost(&format!("{base}.cost"), c, algorithm, limits)?),
    };
    Ok(Some(Count { status, header, reserve, cost }))
}

fn shown(value: &Loose) -> String {
    match value {
        Loose::Str(s) => format!("{s:?}"),
        Loose::Num(n) => n.to_string(),
        Loose::Bool(b) => b.to_string(),
        Loose::Null => "null".into(),
        Loose::Array => "an array".into(),
        Loose::Object => "an object".into(),
    }
}

fn status_range(path: &str, item: &Loose) -> Result<StatusRange, ConfigError> {
    let code = |s: &str| -> Option<u16> {
        let n: u16 = s.parse().ok().filter(|_| s.len() == 3 && s.bytes().all(|b| b.is_ascii_digit()))?;
        (100..=599).contains(&n).then_some(n)
    };
    let range = match item {
        Loose::Num(n) => n.as_u64().and_then(|n| code(&n.to_string())).map(|n| StatusRange { first: n, last: n }),
        Loose::Str(s) => match s.split_once('-') {
            Some((a, b)) => {
                code(a).zip(code(b)).map(|(first, last)| StatusRange { first, last }).filter(|r| r.first <= r.last)
            }
            None => code(s).map(|n| StatusRange { first: n, last: n }),
        },
        _ => None,
    };
    range.map_or_else(
        || {
            fail(
                path,
                format!("expected a status code from 100 to 599 or a range such as \"500-599\" (got {})", shown(item)),
            )
        },
        Ok,
    )
}

/// A JSON path: 1 to 16 non-empty segments separated by `.`, at most 256 bytes.
fn json_path(path: &str, text: String) -> Result<JsonPath, ConfigError> {
    let segments: Vec<String> = text.split('.').map(str::to_owned).collect();
    if text.len() > MAX_JSON_PATH_BYTES {
        return fail(path, format!("must be at most {MAX_JSON_PATH_BYTES} bytes (got {})", text.len()));
    }
    if segments.len() > MAX_JSON_PATH_SEGMENTS {
        return fail(path, format!("must have at most {MAX_JSON_PATH_SEGMENTS} segments (got {})", segments.len()));
    }
    if segments.iter().any(String::is_empty) {
        return fail(
            path,
            format!(
                "invalid JSON path {text:?}: expected field names separated by '.' (array elements by their index)"
            ),
        );
    }
    Ok(JsonPath { text, segments })
}

/// Units of a reservation: like a cost, at most every limit (and the log's
/// cap), so that a request reserving them can be admitted.
fn units(path: &str, number: &Number, algorithm: Algorithm, limits: &[Limit]) -> Result<NonZeroU64, ConfigError> {
    let units = limit_count(path, number)?;
    if algorithm == Algorithm::SlidingLog && units.get() > MAX_LOG_COST {
        return fail(path, format!("must be <= {MAX_LOG_COST} for sliding_log, which stores one entry per unit"));
    }
    if let Some((j, limit)) = limits.iter().enumerate().find(|(_, l)| l.limit < units) {
        let rule = path.split('.').next().unwrap_or(path);
        return fail(
            path,
            format!(
                "{units} is larger than {rule}.limits[{j}].limit ({}): no request could ever be admitted",
                limit.limit
            ),
        );
    }
    Ok(units)
}

/// The log stores one entry per unit: units known only per request (a
/// reservation or a cost from a request or response) need small limits.
fn log_limits(path: &str, what: &str, algorithm: Algorithm, limits: &[Limit]) -> Result<(), ConfigError> {
    if algorithm != Algorithm::SlidingLog {
        return Ok(());
    }
    if let Some((j, limit)) = limits.iter().enumerate().find(|(_, l)| l.limit.get() > MAX_LOG_COST) {
        let rule = path.split('.').next().unwrap_or(path);
        return fail(
            path,
            format!(
                "sliding_log stores one entry per unit: {what} needs every limit <= {MAX_LOG_COST} \
                 ({rule}.limits[{j}].limit is {})",
                limit.limit
            ),
        );
    }
    Ok(())
}

fn reserve(path: &str, raw: RawReserve, algorithm: Algorithm, limits: &[Limit]) -> Result<Reserve, ConfigError> {
    if algorithm == Algorithm::Gcra {
        return fail(
            path,
            "gcra cannot give a reservation back once another request was admitted after it (it keeps one \
             arrival time per window): use sliding_log, sliding_window or fixed_window",
        );
    }
    let given = [raw.units.is_some(), raw.header.is_some(), raw.body.is_some()];
    if given.iter().filter(|g| **g).count() != 1 {
        return fail(path, "must have exactly one of units, header, body");
    }
    if let Some(units_given) = &raw.units {
        if raw.default.is_some() {
            return fail(format!("{path}.default"), "applies only with header or body");
        }
        return Ok(Reserve::Units(units(&format!("{path}.units"), units_given, algorithm, limits)?));
    }
    log_limits(path, "a reservation read from the request", algorithm, limits)?;
    let smallest = limits.iter().map(|l| l.limit).min().unwrap_or(NonZeroU64::MIN);
    let default = match &raw.default {
        None => smallest,
        Some(n) => units(&format!("{path}.default"), n, algorithm, limits)?,
    };
    match (raw.header, raw.body) {
        (Some(name), _) => Ok(Reserve::Header { name: header_name(&format!("{path}.header"), &name)?, default }),
        (_, Some(body)) => Ok(Reserve::Body { path: json_path(&format!("{path}.body"), body)?, default }),
        _ => fail(path, "must have exactly one of units, header, body"),
    }
}

fn cost(path: &str, raw: RawCost, algorithm: Algorithm, limits: &[Limit]) -> Result<CostSource, ConfigError> {
    let source = match (raw.header, raw.body) {
        (Some(name), None) => CostSource::Header(header_name(&format!("{path}.header"), &name)?),
        (None, Some(body)) => CostSource::Body(json_path(&format!("{path}.body"), body)?),
        _ => return fail(path, "must have exactly one of header, body"),
    };
    log_limits(path, "a cost read from the response", algorithm, limits)?;
    Ok(source)
}
