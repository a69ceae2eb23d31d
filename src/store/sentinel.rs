//! Sentinel discovery, the pure part: the lookup command, its reply, and
//! when to ask (time passed in, in ms of the proxy's clock). The worker sends
//! the lookups on its stream to `valkey.sentinel.cluster` and opens its store
//! stream to the master learned here (`x-envoy-original-dst-host`).
//!
//! Only an address a Sentinel reported is ever used: an IP literal and a port
//! (a hostname, from `resolve-hostnames yes`, is rejected), never anything a
//! request carries.
//!
//! ```
//! use tollgate::resp::decode;
//! use tollgate::store::sentinel::{parse_lookup, Change, Discovery};
//!
//! let mut d = Discovery::new(5_000);
//! assert!(d.due(0));
//! d.sent(0);
//! let (reply, _) = decode(b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n", &Default::default()).unwrap();
//! assert_eq!(parse_lookup(&reply).unwrap().to_string(), "127.0.0.1:6380");
//! let change = d.on_reply(parse_lookup(&reply), 3);
//! assert!(matches!(change, Ok(Change::First(_))));
//! assert_eq!(d.master().unwrap().to_string(), "127.0.0.1:6380");
//! assert!(!d.due(4_999) && d.due(5_003));
//! ```

use crate::resp::{encode_command, Value};
use crate::store::printable;
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
    /// The Sentinel could not be reached, or its stream failed or timed out.
    Unavailable(String),
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
            Self::UnknownMaster => f.write_str("sentinel knows no master of that name"),
            Self::ErrorReply(e) => write!(f, "sentinel error reply: {e}"),
            Self::BadReply(e) => write!(f, "sentinel reply malformed: {e}"),
        }
    }
}

/// Longest piece of an untrusted reply kept in an error.
const MAX_TEXT: usize = 128;

fn text(bytes: &[u8]) -> String {
    printable(bytes, MAX_TEXT)
}

/// The master's address from a lookup's reply.
pub fn parse_lookup(reply: &Value) -> Result<SocketAddr, LookupError> {
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
    /// A lookup is in flight (one at a time).
    in_flight: bool,
    /// When the next lookup is due.
    next_at: u64,
    /// When the last lookup was sent.
    last_sent: Option<u64>,
    refresh_ms: u64,
}

impl Discovery {
    /// Nothing known yet: the first lookup is due at once.
    pub fn new(refresh_ms: u64) -> Discovery {
        Discovery { master: None, in_flight: false, next_at: 0, last_sent: None, refresh_ms: refresh_ms.max(1) }
    }

    /// The master last reported (kept when a later lookup fails).
    pub fn master(&self) -> Option<SocketAddr> {
        self.master
    }

    /// A lookup should be sent now.
    pub fn due(&self, now: u64) -> bool {
        !self.in_flight && now >= self.next_at
    }

    /// A lookup was sent.
    pub fn sent(&mut self, now: u64) {
        self.in_flight = true;
        self.last_sent = Some(now);
    }

    /// The lookup could not be sent, or its stream failed: try again after
    /// the minimum interval, keeping the master known so far.
    pub fn failed(&mut self, now: u64) {
        self.in_flight = false;
        self.last_sent = Some(now);
        self.next_at = now.saturating_add(MIN_LOOKUP_INTERVAL_MS);
    }

    /// The master seems gone (a store call failed to connect, timed out or
    /// met a replica): ask again soon, at most once per minimum interval.
    pub fn suspect(&mut self, now: u64) {
        let earliest = self.last_sent.map_or(now, |t| t.saturating_add(MIN_LOOKUP_INTERVAL_MS)).max(now);
        self.next_at = self.next_at.min(earliest);
    }

    /// The lookup's answer. Success schedules the next lookup after
    /// `refresh`; failure after the minimum interval, keeping the master known
    /// so far.
    pub fn on_reply(&mut self, result: Result<SocketAddr, LookupError>, now: u64) -> Result<Change, LookupError> {
        self.in_flight = false;
        match result {
            Ok(addr) => {
                self.next_at = now.saturating_add(self.refresh_ms);
                Ok(match self.master.replace(addr) {
                    None => Change::First(addr),
                    Some(old) if old == addr => Change::Same,
                    Some(old) => Change::Switched { from: old, to: addr },
                })
            }
            Err(e) => {
                self.next_at = now.saturating_add(MIN_LOOKUP_INTERVAL_MS);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests;
