//! The seed's table: one row per request (call, time, status, remaining per
//! window, denied by), read from what a client sees: the status, the
//! `RateLimit` header and the problem+json body. `tollgate simulate` fills it
//! from the responses it builds; `tests/live/operations/cli_simulate.rs` fills it from
//! a real Envoy's responses and must print the same table.

use std::fmt::Write as _;

/// One request's line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Milliseconds since the trace's first request.
    pub offset_ms: u64,
    pub status: u32,
    /// `r=` of each column's policy in the `RateLimit` header, if present.
    pub remaining: Vec<Option<u64>>,
    /// The violated policies of a denial (from its problem+json body), the
    /// shadow-mode report of an admitted request (`shadow: ...`), or how
    /// long a shaped one was held (`held <ms> ms`, from `Server-Timing`).
    pub denied_by: String,
}

impl Row {
    /// The row a client would write down from a response: `columns` are the
    /// policy names shown (`rule/period`).
    pub fn from_response(
        offset_ms: u64,
        status: u32,
        headers: &[(String, String)],
        body: &[u8],
        columns: &[String],
    ) -> Row {
        let ratelimit = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("ratelimit")).map(|(_, v)| v.as_str());
        let remaining = columns.iter().map(|policy| ratelimit.and_then(|h| remaining_of(h, policy))).collect();
        let held = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("server-timing")).and_then(|(_, v)| delay_of(v));
        let denied_by = match held {
            Some(ms) => format!("held {ms} ms"),
            None => violated(body).join(", "),
        };
        Row { offset_ms, status, remaining, denied_by }
    }
}

/// The delay of a shaped request in a `Server-Timing` value
/// (`tollgate-delay;dur=<ms>`).
pub fn delay_of(server_timing: &str) -> Option<u64> {
    server_timing.split(',').find_map(|m| m.trim().strip_prefix("tollgate-delay;dur=")?.parse().ok())
}

/// `r=` of `policy` in a `RateLimit` header value.
pub fn remaining_of(header: &str, policy: &str) -> Option<u64> {
    let quoted = format!("\"{}\"", policy.replace('\\', "\\\\").replace('"', "\\\""));
    header
        .split(", ")
        .find(|item| item.starts_with(&quoted) && item.get(quoted.len()..).is_some_and(|rest| rest.starts_with(';')))
        .and_then(|item| item.split(';').find_map(|p| p.strip_prefix("r=")))
        .and_then(|r| r.parse().ok())
}

/// The `violated-policies` of a problem+json body.
pub fn violated(body: &[u8]) -> Vec<String> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else { return Vec::new() };
    let Some(items) = value.get("violated-policies").and_then(|v| v.as_array()) else { return Vec::new() };
    items.iter().filter_map(|p| p.as_str().map(str::to_owned)).collect()
}

/// Column titles for policy names: `remaining (60s)` when they all belong to
/// one rule, else `remaining (rule/60s)`.
pub fn titles(columns: &[String]) -> Vec<String> {
    let rule = |p: &String| p.rsplit_once('/').map(|(r, _)| r.to_owned()).unwrap_or_default();
    let one_rule = columns.first().is_some_and(|first| columns.iter().all(|c| rule(c) == rule(first)));
    columns
        .iter()
        .map(|c| match (one_rule, c.rsplit_once('/')) {
            (true, Some((_, period))) => format!("remaining ({period})"),
            _ => format!("remaining ({c})"),
        })
        .collect()
}

/// The table, as `make demo` prints it, with the time column added.
pub fn render(columns: &[String], rows: &[Row]) -> String {
    let mut head = vec!["call".to_owned(), "t (ms)".to_owned(), "status".to_owned()];
    head.extend(titles(columns));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let mut line = vec![(i + 1).to_string(), row.offset_ms.to_string(), row.status.to_string()];
            line.extend(row.remaining.iter().map(|r| r.map_or_else(|| "-".to_owned(), |r| r.to_string())));
            line
        })
        .collect();
    let widths: Vec<usize> = head
        .iter()
        .enumerate()
        .map(|(c, h)| {
            cells.iter().filter_map(|l| l.get(c)).map(String::len).chain([h.chars().count()]).max().unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String], last: &str| {
        for (cell, width) in cells.iter().zip(&widths) {
            let _ = write!(out, "{cell:>width$} | ");
        }
        out.push_str(last);
        while out.ends_with(' ') {
            out.pop();
        }
        out.push('\n');
    };
    line(&mut out, &head, "denied by");
    let width = widths.iter().map(|w| w + 3).sum::<usize>() + "denied by".len();
    out.push_str(&"-".repeat(width));
    out.push('\n');
    for (row, cells) in rows.iter().zip(&cells) {
        line(&mut out, cells, &row.denied_by);
    }
    out
}

/// An aligned table: `head`, a rule, then `rows`.
pub fn columns<const N: usize>(head: &[&str; N], rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|c| {
            let cell = |r: &[String; N]| r.get(c).map_or(0, |s| s.chars().count());
            rows.iter().map(cell).chain(head.get(c).map(|h| h.len())).max().unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (cell, w) in cells.iter().zip(&widths) {
            s.push_str(&format!("{cell:<w$}  "));
        }
        format!("{}\n", s.trim_end())
    };
    let mut out = line(head.to_vec());
    out.push_str(&line(widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().iter().map(String::as_str).collect()));
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}
