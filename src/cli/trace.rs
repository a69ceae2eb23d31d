//! Traces for `tollgate simulate`: requests with their time, method, path and
//! headers, as JSON lines or CSV.
//!
//! JSON lines, one request per line (blank lines skipped):
//! `{"time": 1800000000000, "method": "POST", "path": "/auth/token",
//! "headers": {"x-user-id": "alice"}, "address": "10.0.0.1"}`.
//!
//! CSV with a header row `time,method,path[,NAME...]`: every further column
//! is a request header of that name (an empty cell: no such header), except
//! `address`, the client's address (Envoy's `source.address`). Cells may be
//! quoted with `"` (`""` inside for a quote).
//!
//! `time` is in milliseconds since the Unix epoch; the simulation (and a
//! replay through Envoy with `testing.now_header`) takes it as the clock.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::plan::RequestView;

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub time_ms: u64,
    pub method: String,
    pub path: String,
    /// Lowercase names, in trace order.
    pub headers: Vec<(String, String)>,
    /// The client's address (`source.address`), if given.
    pub address: Option<String>,
}

impl RequestView for Request {
    fn header(&self, name: &str) -> Option<Vec<u8>> {
        match name {
            ":method" => Some(self.method.clone().into_bytes()),
            ":path" => Some(self.path.clone().into_bytes()),
            ":authority" => {
                self.headers.iter().find(|(k, _)| k == ":authority" || k == "host").map(|(_, v)| v.clone().into_bytes())
            }
            _ => self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone().into_bytes()),
        }
    }

    fn property(&self, path: &[String]) -> Option<Vec<u8>> {
        match path {
            [a, b] if a == "source" && b == "address" => self.address.clone().map(String::into_bytes),
            _ => None,
        }
    }
}

/// Parses a trace: JSON lines when its first non-blank character is `{`,
/// CSV otherwise.
pub fn parse(text: &str) -> Result<Vec<Request>, String> {
    if text.trim_start().starts_with('{') {
        json_lines(text)
    } else {
        csv(text)
    }
}

fn json_lines(text: &str) -> Result<Vec<Request>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = |what: String| format!("line {}: {what}", n + 1);
        let value: Value = serde_json::from_str(line).map_err(|e| at(e.to_string()))?;
        let Value::Object(map) = value else { return Err(at("expected an object".into())) };
        for key in map.keys() {
            if !matches!(key.as_str(), "time" | "method" | "path" | "headers" | "address") {
                return Err(at(format!("unknown field {key:?}, expected time, method, path, headers, address")));
            }
        }
        let text_field = |name: &str| -> Result<String, String> {
            map.get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| at(format!("{name}: expected a string")))
        };
        let time_ms = map
            .get("time")
            .and_then(Value::as_u64)
            .ok_or_else(|| at("time: expected an integer (ms since the epoch)".into()))?;
        let mut headers = Vec::new();
        match map.get("headers") {
            None | Some(Value::Null) => {}
            Some(Value::Object(h)) => {
                for (k, v) in h {
                    let v = v.as_str().ok_or_else(|| at(format!("headers.{k}: expected a string")))?;
                    headers.push((k.to_ascii_lowercase(), v.to_owned()));
                }
            }
            Some(_) => return Err(at("headers: expected an object".into())),
        }
        let address = match map.get("address") {
            None | Some(Value::Null) => None,
            Some(Value::String(a)) => Some(a.clone()),
            Some(_) => return Err(at("address: expected a string".into())),
        };
        out.push(Request { time_ms, method: text_field("method")?, path: text_field("path")?, headers, address });
    }
    Ok(out)
}

fn csv(text: &str) -> Result<Vec<Request>, String> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((_, head)) = lines.next() else { return Ok(Vec::new()) };
    let names: Vec<String> =
        cells(head).map_err(|e| format!("line 1: {e}"))?.iter().map(|c| c.trim().to_ascii_lowercase()).collect();
    if names.get(..3) != Some(&["time".to_owned(), "method".to_owned(), "path".to_owned()][..]) {
        return Err("line 1: the header row must start with time,method,path".into());
    }
    let mut out = Vec::new();
    for (n, line) in lines {
        let at = |what: String| format!("line {}: {what}", n + 1);
        let row = cells(line).map_err(at)?;
        if row.len() != names.len() {
            return Err(at(format!("{} cells, the header row has {}", row.len(), names.len())));
        }
        let mut by_name: BTreeMap<&str, &str> = BTreeMap::new();
        let mut headers = Vec::new();
        for (name, cell) in names.iter().zip(&row) {
            match name.as_str() {
                "time" | "method" | "path" | "address" => {
                    by_name.insert(name, cell);
                }
                _ if !cell.is_empty() => headers.push((name.clone(), cell.clone())),
                _ => {}
            }
        }
        let get = |k: &str| by_name.get(k).copied().unwrap_or_default();
        let time_ms =
            get("time").trim().parse().map_err(|_| at(format!("time {:?}: expected an integer (ms)", get("time"))))?;
        let address = Some(get("address")).filter(|a| !a.is_empty()).map(str::to_owned);
        out.push(Request { time_ms, method: get("method").to_owned(), path: get("path").to_owned(), headers, address });
    }
    Ok(out)
}

/// The cells of one CSV line.
fn cells(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cell = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cell.push('"');
            }
            (true, '"') => quoted = false,
            (false, '"') if cell.is_empty() => quoted = true,
            (false, ',') => out.push(std::mem::take(&mut cell)),
            (_, c) => cell.push(c),
        }
    }
    if quoted {
        return Err("unterminated quote".into());
    }
    out.push(cell);
    Ok(out)
}
