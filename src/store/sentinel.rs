//! Sentinel discovery, the pure part: the lookup command, its reply, and
//! when to ask (time passed in, in ms of the proxy's clock). The root context
//! sends the lookups through `valkey.sentinel.cluster` and routes store calls
//! to the master learned here (`x-envoy-original-dst-host`).
//!
//! Only an address a Sentinel reported is ever used: an IP literal and a port
//! (a hostname, from `resolve-hostnames yes`, is rejected), never anything a
//! request carries.
//!
//! ```
//! use tollgate::store::sentinel::{parse_lookup, Change, Discovery};
//!
//! let mut d = Discovery::new(5_000);
//! assert!(d.due(0));
//! d.sent(7, 0);
//! let reply = b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n";
//! assert_eq!(parse_lookup(Some("200"), reply).unwrap().to_string(), "127.0.0.1:6380");
//! let change = d.on_reply(7, Some("200"), reply, 3).unwrap();
//! assert!(matches!(change, Ok(Change::First(_))));
//! assert_eq!(d.master().unwrap().to_string(), "127.0.0.1:6380");
//! assert!(!d.due(4_999) && d.due(5_003));
//! ```

use crate::resp::{decode_all, encode_command, DecodeError, Limits, Value};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// Lookups are at least this far apart, however many store calls fail.
pub const MIN_LOOKUP_INTERVAL_MS: u64 = 100;

/// `SENTINEL get-master-addr-by-name <name>`.
pub fn lookup_command(master_name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    encode_command(&mut out, &[b"SENTINEL", b"get-master-addr-by-name", master_name.as_bytes()]);
    out
}

/// Why a lookup gave no master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupError {
    /// The tunnel call failed, timed out (`None` status) or answered non-200.
    Unavailable(String),
    /// The body is not one complete RESP reply.
    NotResp(DecodeError),
    /// A nil reply: the Sentinel monitors no master of that name.
    UnknownMaster,
    /// The Sentinel answered an error.
    ErrorReply(String),
    /// Not `[ip, port]` with an IP literal and a port 1..=65535.
    BadReply(String),
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unavailable(why) => write!(f, "sentinel unavailable: {why}"),
            Self::NotResp(e) => write!(f, "sentinel reply is not RESP: {e}"),
            Self::UnknownMaster => f.write_str("sentinel knows no master of that name"),
            Self::ErrorReply(e) => write!(f, "sentinel error reply: {e}"),
            Self::BadReply(e) => write!(f, "sentinel reply malformed: {e}"),
        }
    }
}

/// Longest piece of an untrusted reply kept in an error.
const MAX_TEXT: usize = 128;

fn text(bytes: &[u8]) -> String {
    let head = bytes.get(..MAX_TEXT).unwrap_or(bytes);
    String::from_utf8_lossy(head).chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// The master's address from a lookup call's `:status` and body.
pub fn parse_lookup(status: Option<&str>, body: &[u8]) -> Result<SocketAddr, LookupError> {
    match status {
        Some("200") => {}
        Some(other) => return Err(LookupError::Unavailable(format!("tunnel status {other}"))),
        None => return Err(LookupError::Unavailable("no response".into())),
    }
    let replies = decode_all(body, &Limits::default()).map_err(LookupError::NotResp)?;
    let [reply] = replies.as_slice() else {
        return Err(LookupError::Unavailable(format!("expected 1 reply, got {}", replies.len())));
    };
    match reply {
        Value::Nil => Err(LookupError::UnknownMaster),
        Value::Error(e) => Err(LookupError::ErrorReply(text(e))),
        Value::Array(items) => match items.as_slice() {
            [ip, port] => {
                let (Some(ip), Some(port)) = (ip.as_bytes(), port.as_bytes()) else {
                    return Err(LookupError::BadReply("expected two strings".into()));
                };
                let ip: IpAddr = std::str::from_utf8(ip)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| LookupError::BadReply(format!("not an IP address: {:?}", text(ip))))?;
                let port: u16 = std::str::from_utf8(port)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .filter(|p| *p > 0)
                    .ok_or_else(|| LookupError::BadReply(format!("not a port: {:?}", text(port))))?;
                Ok(SocketAddr::new(ip, port))
            }
            other => Err(LookupError::BadReply(format!("expected 2 elements, got {}", other.len()))),
        },
        _ => Err(LookupError::BadReply("expected an array".into())),
    }
}

/// What a successful lookup changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The first master learned.
    First(SocketAddr),
    /// The master is the one already known.
    Same,
    /// The Sentinels report another master (a failover).
    Switched { from: SocketAddr, to: SocketAddr },
}

/// When to ask the Sentinels, and the master they last reported.
#[derive(Debug, Clone)]
pub struct Discovery {
    master: Option<SocketAddr>,
    /// The token of the lookup in flight (one at a time).
    in_flight: Option<u32>,
    /// When the next lookup is due.
    next_at: u64,
    /// When the last lookup was sent.
    last_sent: Option<u64>,
    refresh_ms: u64,
}

impl Discovery {
    /// Nothing known yet: the first lookup is due at once.
    pub fn new(refresh_ms: u64) -> Discovery {
        Discovery { master: None, in_flight: None, next_at: 0, last_sent: None, refresh_ms: refresh_ms.max(1) }
    }

    /// The master last reported (kept when a later lookup fails).
    pub fn master(&self) -> Option<SocketAddr> {
        self.master
    }

    /// A lookup should be sent now.
    pub fn due(&self, now: u64) -> bool {
        self.in_flight.is_none() && now >= self.next_at
    }

    /// A lookup was dispatched under `token`.
    pub fn sent(&mut self, token: u32, now: u64) {
        self.in_flight = Some(token);
        self.last_sent = Some(now);
    }

    /// The lookup could not be dispatched: try again after the minimum interval.
    pub fn send_failed(&mut self, now: u64) {
        self.in_flight = None;
        self.last_sent = Some(now);
        self.next_at = now.saturating_add(MIN_LOOKUP_INTERVAL_MS);
    }

    /// Whether call `token` is the lookup in flight.
    pub fn is_lookup(&self, token: u32) -> bool {
        self.in_flight == Some(token)
    }

    /// The master seems gone (a store call failed to connect, timed out or
    /// met a replica): ask again soon, at most once per minimum interval.
    pub fn suspect(&mut self, now: u64) {
        let earliest = self.last_sent.map_or(now, |t| t.saturating_add(MIN_LOOKUP_INTERVAL_MS)).max(now);
        self.next_at = self.next_at.min(earliest);
    }

    /// The reply of lookup `token` (`None` if it is not the lookup in flight).
    /// Success schedules the next lookup after `refresh`; failure after the
    /// minimum interval, keeping the master known so far.
    pub fn on_reply(
        &mut self,
        token: u32,
        status: Option<&str>,
        body: &[u8],
        now: u64,
    ) -> Option<Result<Change, LookupError>> {
        if !self.is_lookup(token) {
            return None;
        }
        self.in_flight = None;
        match parse_lookup(status, body) {
            Ok(addr) => {
                self.next_at = now.saturating_add(self.refresh_ms);
                let change = match self.master.replace(addr) {
                    None => Change::First(addr),
                    Some(old) if old == addr => Change::Same,
                    Some(old) => Change::Switched { from: old, to: addr },
                };
                Some(Ok(change))
            }
            Err(e) => {
                self.next_at = now.saturating_add(MIN_LOOKUP_INTERVAL_MS);
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
#[path = "sentinel_tests.rs"]
mod tests;
