//! Valkey Cluster, the pure part: the hash slot of a key, the commands that
//! read the slot map and the map they give ([`SlotMap`]), the redirections a
//! master answers (`MOVED`, `ASK`), and when to read the map again
//! ([`Refresh`]; time passed in, in ms of the proxy's clock). The worker
//! sends the map requests on its stream to `valkey.cluster_mode.seeds` and
//! opens one store stream per master (`x-envoy-original-dst-host`).
//!
//! Only an address a cluster node reported is ever used: an IP literal and a
//! port (a hostname endpoint is not followed), never anything a request
//! carries.
//!
//! ```
//! use tollgate::store::cluster::{key_slot, parse_redirect, Redirect};
//! use tollgate::resp::Value;
//!
//! assert_eq!(key_slot(b"123456789"), 0x31C3 % 16384);
//! // Only the hash tag counts: every key of one bucket shares a slot.
//! assert_eq!(key_slot(b"tollgate:{auth:alice}:log"), key_slot(b"auth:alice"));
//! let moved = Value::Error(b"MOVED 3999 127.0.0.1:6381".to_vec());
//! let Some(Ok(Redirect::Moved { slot, addr })) = parse_redirect(&moved, None) else { panic!() };
//! assert_eq!((slot, addr.to_string().as_str()), (3999, "127.0.0.1:6381"));
//! ```

pub use super::cluster_map::{parse_shards, parse_slots, SlotMap, TopologyError};

use crate::resp::{encode_command, Value};
use crate::store::printable;
use std::net::{IpAddr, SocketAddr};

/// Hash slots of a cluster.
pub const SLOTS: u16 = 16_384;
/// Map requests are at least this far apart, however many calls fail.
pub const MIN_REFRESH_INTERVAL_MS: u64 = 100;

/// The CRC16 of Valkey Cluster (XMODEM: polynomial 0x1021, initial value 0),
/// one table entry per byte value. Built at compile time, where an index out
/// of bounds is a compile error.
#[allow(clippy::indexing_slicing)]
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC16/XMODEM of `bytes`.
pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| {
        let index = usize::from(((crc >> 8) as u8) ^ b);
        (crc << 8) ^ CRC16_TABLE.get(index).copied().unwrap_or(0)
    })
}

/// The part of `key` that is hashed: what lies between the first `{` and the
/// first `}` after it, when that is not empty; else the whole key.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else { return key };
    let rest = key.get(open + 1..).unwrap_or_default();
    match rest.iter().position(|&b| b == b'}') {
        Some(close) if close > 0 => rest.get(..close).unwrap_or(key),
        _ => key,
    }
}

/// The hash slot of `key`, 0 to 16383.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOTS
}

/// The one slot all of `keys` hash to, or `None` when they span several
/// (or there are none).
pub fn common_slot<'a>(mut keys: impl Iterator<Item = &'a [u8]>) -> Option<u16> {
    let first = key_slot(keys.next()?);
    keys.all(|k| key_slot(k) == first).then_some(first)
}

/// `CLUSTER SHARDS` (Valkey, Redis 7 and later).
pub fn shards_command() -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    encode_command(&mut out, &[b"CLUSTER", b"SHARDS"]);
    out
}

/// `CLUSTER SLOTS`, for a server that does not know `CLUSTER SHARDS`.
pub fn slots_command() -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    encode_command(&mut out, &[b"CLUSTER", b"SLOTS"]);
    out
}

/// `ASKING`: the next command on the connection may use a slot being
/// imported.
pub fn asking_command() -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    encode_command(&mut out, &[b"ASKING"]);
    out
}

/// Whether an error reply to `CLUSTER SHARDS` means the server does not
/// know the subcommand (Redis before 7): ask `CLUSTER SLOTS` instead.
pub fn shards_unknown(reply: &Value) -> bool {
    let Some(e) = reply.as_error() else { return false };
    let text = String::from_utf8_lossy(e).to_ascii_lowercase();
    text.starts_with("err") && text.contains("unknown subcommand")
}

/// A redirection a cluster node answered instead of running a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirect {
    /// The slot is served by `addr` for good: update the map, send it there.
    Moved { slot: u16, addr: SocketAddr },
    /// The slot is being moved to `addr`: send this call there once, after
    /// `ASKING`, without changing the map.
    Ask { slot: u16, addr: SocketAddr },
}

/// The redirection in an error reply (`MOVED <slot> <ip>:<port>`, `ASK ...`),
/// `None` for any other reply; `Err` when it is a redirection that cannot be
/// followed (a hostname, a bad slot or port). An empty host (`:6380`) means
/// the host of the node that answered, `here` (when known).
pub fn parse_redirect(reply: &Value, here: Option<IpAddr>) -> Option<Result<Redirect, String>> {
    let e = reply.as_error()?;
    let text = std::str::from_utf8(e).ok()?;
    let mut words = text.split_ascii_whitespace();
    let kind = words.next()?;
    if kind != "MOVED" && kind != "ASK" {
        return None;
    }
    let bad = || format!("unusable redirection {:?}", printable(e, 128));
    let slot: Option<u16> = words.next().and_then(|s| s.parse().ok()).filter(|s| *s < SLOTS);
    let addr = words.next().and_then(|a| parse_addr(a, here));
    let (Some(slot), Some(addr)) = (slot, addr) else { return Some(Err(bad())) };
    Some(Ok(if kind == "MOVED" { Redirect::Moved { slot, addr } } else { Redirect::Ask { slot, addr } }))
}

/// `ip:port` (IPv6 without brackets too, as nodes write it); an empty host is
/// `here`. A hostname gives `None`.
fn parse_addr(text: &str, here: Option<IpAddr>) -> Option<SocketAddr> {
    let (host, port) = text.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip = if host.is_empty() { here? } else { host.parse().ok()? };
    Some(SocketAddr::new(ip, port))
}

/// When to read the slot map: at once at first, then every `refresh`, and
/// soon (at most every [`MIN_REFRESH_INTERVAL_MS`]) after a redirection or a
/// failure that suggests the map changed.
#[derive(Debug, Clone)]
pub struct Refresh {
    in_flight: bool,
    next_at: u64,
    last_sent: Option<u64>,
    every_ms: u64,
}

impl Refresh {
    pub fn new(every_ms: u64) -> Refresh {
        Refresh { in_flight: false, next_at: 0, last_sent: None, every_ms: every_ms.max(1) }
    }

    /// A request for the map should be sent now.
    pub fn due(&self, now: u64) -> bool {
        !self.in_flight && now >= self.next_at
    }

    pub fn sent(&mut self, now: u64) {
        self.in_flight = true;
        self.last_sent = Some(now);
    }

    /// The map came: the next one after `refresh`.
    pub fn answered(&mut self, now: u64) {
        self.in_flight = false;
        self.next_at = now.saturating_add(self.every_ms);
    }

    /// The request failed (or was answered with an error): again after the
    /// minimum interval.
    pub fn failed(&mut self, now: u64) {
        self.in_flight = false;
        self.last_sent = Some(now);
        self.next_at = now.saturating_add(MIN_REFRESH_INTERVAL_MS);
    }

    /// The map seems stale (`MOVED`, `CLUSTERDOWN`, a master unreachable):
    /// ask again soon, at most once per minimum interval.
    pub fn suspect(&mut self, now: u64) {
        let earliest = self.last_sent.map_or(now, |t| t.saturating_add(MIN_REFRESH_INTERVAL_MS)).max(now);
        self.next_at = self.next_at.min(earliest);
    }
}

#[cfg(test)]
mod tests;
