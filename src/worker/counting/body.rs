//! Reading numbers out of bodies, bounded and pure: an integer field of a
//! JSON body (a reservation such as `max_tokens`, a cost such as
//! `usage.total_tokens`), the same field in the last `data:` event of a
//! `text/event-stream` body that carries it, and integer headers.
//!
//! A JSON body is kept until it ends, at most `max_body_bytes`; past that it
//! is dropped and its numbers are unknown (the caller falls back). An event
//! stream is read as it passes: only the current line and event are kept
//! (each at most `max_body_bytes`; a larger one is skipped), and an event is
//! parsed only when its data mentions one of the fields' last names.

use crate::config::JsonPath;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// The integer at `path` in a complete JSON document: objects by field
/// name (the last of repeated names), arrays by index. Read in one pass
/// that keeps nothing but the path's value (no document is built).
pub fn json_field(body: &[u8], path: &JsonPath) -> Option<u64> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let found = Find(path.segments()).deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    found
}

/// Looks for the rest of a path in the value being read.
struct Find<'p>(&'p [String]);

impl<'de> DeserializeSeed<'de> for Find<'_> {
    type Value = Option<u64>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Find<'_> {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_u64<E>(self, n: u64) -> Result<Self::Value, E> {
        Ok(self.0.is_empty().then_some(n))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            match self.0.split_first() {
                Some((first, rest)) if *first == key => found = map.next_value_seed(Find(rest))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let wanted = self.0.split_first().and_then(|(first, rest)| Some((first.parse::<usize>().ok()?, rest)));
        let (mut found, mut i) = (None, 0);
        loop {
            let item = match wanted {
                Some((index, rest)) if index == i => seq.next_element_seed(Find(rest))?.map(|f| found = f),
                _ => seq.next_element::<IgnoredAny>()?.map(|_| ()),
            };
            if item.is_none() {
                return Ok(found);
            }
            i += 1;
        }
    }
}

/// A header value that is a non-negative integer (surrounding blanks
/// allowed), else `None`.
pub fn integer(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?.trim_matches(|c| c == ' ' || c == '\t');
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Reads a response body for the numbers at some paths.
#[derive(Debug)]
pub struct BodyReader {
    sse: bool,
    max: usize,
    /// `Some(path)` per number wanted (a `None` entry wants nothing).
    paths: Vec<Option<JsonPath>>,
    /// JSON: the body so far. Event stream: the current line.
    buf: Vec<u8>,
    /// Event stream: the data of the current event.
    event: Vec<u8>,
    /// The current line or event (stream), or the body (JSON), passed `max`.
    skipping: bool,
    /// Something passed `max` and was not read.
    too_large: bool,
    found: Vec<Option<u64>>,
}

impl BodyReader {
    /// A reader of an event stream (`sse`) or of a JSON body.
    pub fn new(sse: bool, max: usize, paths: Vec<Option<JsonPath>>) -> BodyReader {
        let found = vec![None; paths.len()];
        BodyReader { sse, max, paths, buf: Vec::new(), event: Vec::new(), skipping: false, too_large: false, found }
    }

    /// The next bytes of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        if !self.sse {
            if self.skipping {
                return;
            }
            if self.buf.len().saturating_add(chunk.len()) > self.max {
                self.buf = Vec::new();
                self.skipping = true;
                self.too_large = true;
            } else {
                self.buf.extend_from_slice(chunk);
            }
            return;
        }
        let mut rest = chunk;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            let (line, next) = rest.split_at(at);
            self.push_line(line);
            let line = std::mem::take(&mut self.buf);
            let skipped = std::mem::replace(&mut self.skipping, false);
            if !skipped {
                self.line(line.strip_suffix(b"\r").unwrap_or(&line));
            }
            rest = next.get(1..).unwrap_or_default();
        }
        self.push_line(rest);
    }

    /// Adds bytes to the current line, unless it is too long.
    fn push_line(&mut self, bytes: &[u8]) {
        if self.skipping {
            return;
        }
        if self.buf.len().saturating_add(bytes.len()) > self.max {
            self.buf.clear();
            self.skipping = true;
            self.too_large = true;
            // The event this line belongs to is incomplete: dropped.
            self.event.clear();
        } else {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// One whole line of an event stream.
    fn line(&mut self, line: &[u8]) {
        if line.is_empty() {
            self.dispatch();
            return;
        }
        let Some(data) = line.strip_prefix(b"data:") else { return };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        if self.event.len().saturating_add(data.len()).saturating_add(1) > self.max {
            self.event.clear();
            self.too_large = true;
            return;
        }
        if !self.event.is_empty() {
            self.event.push(b'\n');
        }
        self.event.extend_from_slice(data);
    }

    /// The end of an event: the numbers it carries replace earlier ones.
    fn dispatch(&mut self) {
        let event = std::mem::take(&mut self.event);
        if event.is_empty() {
            return;
        }
        let mentions = |p: &JsonPath| p.segments().last().is_some_and(|name| contains(&event, name.as_bytes()));
        if !self.paths.iter().flatten().any(mentions) {
            return;
        }
        for (found, path) in self.found.iter_mut().zip(&self.paths) {
            if let Some(n) = path.as_ref().and_then(|p| json_field(&event, p)) {
                *found = Some(n);
            }
        }
    }

    /// The body ended: each number found (`None`: not found), and whether
    /// something was too large to be read.
    pub fn finish(mut self) -> (Vec<Option<u64>>, bool) {
        if self.sse {
            if !self.skipping && !self.buf.is_empty() {
                let line = std::mem::take(&mut self.buf);
                self.line(&line);
            }
            self.dispatch();
        } else if !self.skipping {
            for (found, path) in self.found.iter_mut().zip(&self.paths) {
                *found = path.as_ref().and_then(|p| json_field(&self.buf, p));
            }
        }
        (self.found, self.too_large)
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// The JSON path of a rule's `count.cost.body`.
    fn path(text: &str) -> JsonPath {
        let json = format!(
            r#"{{ "valkey": {{ "cluster": "c" }}, "rules": [ {{ "name": "r", "limits": [ {{ "limit": 9, "period": 1 }} ],
                 "count": {{ "cost": {{ "body": "{text}" }} }} }} ] }}"#
        );
        match Config::from_json(json.as_bytes()).unwrap().rules[0].count.clone().unwrap().cost {
            Some(crate::config::CostSource::Body(p)) => p,
            other => panic!("{other:?}"),
        }
    }

    fn read(sse: bool, max: usize, chunks: &[&[u8]], paths: &[&str]) -> (Vec<Option<u64>>, bool) {
        let mut r = BodyReader::new(sse, max, paths.iter().map(|p| Some(path(p))).collect());
        for chunk in chunks {
            r.feed(chunk);
        }
        r.finish()
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn fields_of_json_documents() {
        let doc = br#"{"usage":{"total_tokens":42,"f":1.5,"neg":-1,"s":"7"},"c":[{"n":1},{"n":7,"x":[1,{"y":2}]}],"d":3,"d":4}"#;
        assert_eq!(json_field(doc, &path("usage.total_tokens")), Some(42));
        assert_eq!(json_field(doc, &path("c.1.n")), Some(7));
        assert_eq!(json_field(doc, &path("c.1.x.1.y")), Some(2));
        assert_eq!(json_field(doc, &path("d")), Some(4), "the last of repeated names");
        for missing in ["usage.f", "usage.neg", "usage.s", "usage", "c.2.n", "c.x", "usage.total_tokens.x", "nope"] {
            assert_eq!(json_field(doc, &path(missing)), None, "{missing}");
        }
        assert_eq!(json_field(br#"{"n": 1} trailing"#, &path("n")), None, "not one document");
        assert_eq!(json_field(br#"{"max_tokens": 300}"#, &path("max_tokens")), Some(300));
        assert_eq!(json_field(br#"{"max_tokens": 30"#, &path("max_tokens")), None, "truncated");
        assert_eq!(
            [b"12".as_slice(), b" 7\t", b"", b"-1", b"1.0", b"x", b"99999999999999999999"].map(integer),
            [Some(12), Some(7), None, None, None, None, None]
        );
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn a_json_body_in_chunks_within_the_bound_and_past_it() {
        let body = br#"{"id":"x","usage":{"prompt_tokens":5,"total_tokens":35}}"#;
        let (a, b) = body.split_at(20);
        assert_eq!(
            read(false, 1024, &[a, b], &["usage.total_tokens", "usage.prompt_tokens"]),
            (vec![Some(35), Some(5)], false)
        );
        assert_eq!(
            read(false, body.len(), &[a, b], &["usage.total_tokens"]),
            (vec![Some(35)], false),
            "exactly the bound"
        );
        assert_eq!(read(false, body.len() - 1, &[a, b], &["usage.total_tokens"]), (vec![None], true));
        assert_eq!(read(false, 1024, &[b"not json"], &["usage.total_tokens"]), (vec![None], false));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn the_last_event_that_carries_the_field_wins() {
        let stream: &[u8] = b"data: {\"delta\":\"he\"}\n\ndata: {\"usage\":{\"total_tokens\":10}}\n\n\
            : a comment\nevent: x\ndata: {\"delta\":\"llo\"}\r\n\r\ndata: {\"usage\":\r\ndata: {\"total_tokens\":23}}\r\n\r\ndata: [DONE]\n\n";
        // Whole, and one byte at a time.
        assert_eq!(read(true, 1024, &[stream], &["usage.total_tokens"]), (vec![Some(23)], false));
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(read(true, 1024, &bytes, &["usage.total_tokens"]), (vec![Some(23)], false));
        // A stream that ends without the blank line still has its last event.
        assert_eq!(
            read(true, 1024, &[b"data: {\"usage\":{\"total_tokens\":4}}"], &["usage.total_tokens"]),
            (vec![Some(4)], false)
        );
        assert_eq!(read(true, 1024, &[b"data: [DONE]\n\n"], &["usage.total_tokens"]), (vec![None], false));
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn an_event_past_the_bound_is_skipped_and_reported() {
        let big = format!("data: {{\"usage\":{{\"total_tokens\":99}},\"pad\":\"{}\"}}\n\n", "x".repeat(200));
        let small = b"data: {\"usage\":{\"total_tokens\":5}}\n\n";
        assert_eq!(read(true, 100, &[small, big.as_bytes()], &["usage.total_tokens"]), (vec![Some(5)], true));
        assert_eq!(read(true, 100, &[big.as_bytes(), small], &["usage.total_tokens"]), (vec![Some(5)], true));
        // Long events made of short lines are bounded too.
        let lines = "data: 12345\n".repeat(40);
        assert_eq!(read(true, 100, &[lines.as_bytes(), b"\n", small], &["usage.total_tokens"]), (vec![Some(5)], true));
    }
}
