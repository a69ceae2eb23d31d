//! The slot map of a Valkey Cluster: which master serves each hash slot, read
//! from a node's `CLUSTER SHARDS` reply (or `CLUSTER SLOTS` from a server
//! that lacks it). Replies are untrusted: a master is kept only with an IP
//! literal and a port 1..=65535, and anything else of the wrong shape is an
//! error, never a panic.

use super::cluster::SLOTS;
use crate::resp::Value;
use crate::store::printable;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// No master serves the slot.
const NO_OWNER: u16 = u16::MAX;

/// Which master serves each slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMap {
    /// Per slot, an index into `masters`, or [`NO_OWNER`].
    owners: Vec<u16>,
    masters: Vec<SocketAddr>,
}

impl Default for SlotMap {
    fn default() -> Self {
        SlotMap { owners: vec![NO_OWNER; usize::from(SLOTS)], masters: Vec::new() }
    }
}

impl SlotMap {
    /// Slots `start..=end` are served by `addr`.
    pub fn assign(&mut self, start: u16, end: u16, addr: SocketAddr) {
        let index = self.index_of(addr);
        let (start, end) = (usize::from(start), usize::from(end.min(SLOTS - 1)));
        if let Some(range) = self.owners.get_mut(start..=end) {
            range.fill(index);
        }
    }

    fn index_of(&mut self, addr: SocketAddr) -> u16 {
        match self.masters.iter().position(|m| *m == addr) {
            Some(i) => u16::try_from(i).unwrap_or(NO_OWNER),
            None => {
                self.masters.push(addr);
                u16::try_from(self.masters.len() - 1).unwrap_or(NO_OWNER)
            }
        }
    }

    /// The master of `slot`, if one serves it.
    pub fn owner(&self, slot: u16) -> Option<SocketAddr> {
        let index = *self.owners.get(usize::from(slot))?;
        self.masters.get(usize::from(index)).copied()
    }

    /// `MOVED`: `slot` is served by `addr` from now on.
    pub fn set_owner(&mut self, slot: u16, addr: SocketAddr) {
        self.assign(slot, slot, addr);
    }

    /// Every master the map names.
    pub fn masters(&self) -> &[SocketAddr] {
        &self.masters
    }

    pub fn is_master(&self, addr: SocketAddr) -> bool {
        self.masters.contains(&addr)
    }

    /// Slots some master serves.
    pub fn covered(&self) -> usize {
        self.owners.iter().filter(|o| **o != NO_OWNER).count()
    }
}

impl fmt::Display for SlotMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let masters: Vec<String> = self.masters.iter().map(SocketAddr::to_string).collect();
        write!(f, "{} of {SLOTS} slots on {} masters ({})", self.covered(), masters.len(), masters.join(", "))
    }
}

/// Why a reply gave no slot map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologyError {
    /// The node answered an error (`-NOPERM`, cluster support disabled...).
    ErrorReply(String),
    /// Not the shape of the command's reply, or no slot with a usable master.
    BadReply(String),
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ErrorReply(e) => write!(f, "cluster slot map: error reply: {e}"),
            Self::BadReply(e) => write!(f, "cluster slot map: malformed reply: {e}"),
        }
    }
}

fn bad<T>(why: &str) -> Result<T, TopologyError> {
    Err(TopologyError::BadReply(why.to_string()))
}

/// A flattened map (`key, value, key, value...`, RESP2 or RESP3) as pairs.
fn pairs(value: &Value) -> Option<Vec<(&[u8], &Value)>> {
    let items = value.as_array()?;
    if !items.len().is_multiple_of(2) {
        return None;
    }
    items.chunks(2).map(|kv| Some((kv.first()?.as_bytes()?, kv.get(1)?))).collect()
}

fn field<'a>(pairs: &[(&[u8], &'a Value)], name: &str) -> Option<&'a Value> {
    pairs.iter().find(|(k, _)| *k == name.as_bytes()).map(|(_, v)| *v)
}

/// An integer, sent as one or as its decimal text.
fn number(value: &Value) -> Option<i64> {
    match value {
        Value::Integer(n) => Some(*n),
        other => std::str::from_utf8(other.as_bytes()?).ok()?.parse().ok(),
    }
}

fn slot(value: &Value) -> Option<u16> {
    u16::try_from(number(value)?).ok().filter(|s| *s < SLOTS)
}

fn port(value: &Value) -> Option<u16> {
    u16::try_from(number(value)?).ok().filter(|p| *p > 0)
}

fn ip(value: &Value) -> Option<IpAddr> {
    std::str::from_utf8(value.as_bytes()?).ok()?.parse().ok()
}

fn error_of(reply: &Value) -> Option<TopologyError> {
    reply.as_error().map(|e| TopologyError::ErrorReply(printable(e, 128)))
}

/// The map in a `CLUSTER SHARDS` reply: per shard, its slot ranges and its
/// nodes; the master is the node with role `master` (an `online` one
/// first), at its `ip` and `port` (`tls-port` when there is no `port`).
pub fn parse_shards(reply: &Value) -> Result<SlotMap, TopologyError> {
    if let Some(e) = error_of(reply) {
        return Err(e);
    }
    let Some(shards) = reply.as_array() else { return bad("expected an array of shards") };
    let mut map = SlotMap::default();
    for shard in shards {
        let Some(shard) = pairs(shard) else { return bad("a shard is not a map") };
        let ranges = field(&shard, "slots").and_then(Value::as_array).unwrap_or_default();
        if !ranges.len().is_multiple_of(2) {
            return bad("odd number of slot bounds");
        }
        let Some(nodes) = field(&shard, "nodes").and_then(Value::as_array) else { return bad("a shard without nodes") };
        let mut master = None;
        for node in nodes {
            let Some(node) = pairs(node) else { return bad("a node is not a map") };
            let role = field(&node, "role").and_then(Value::as_bytes);
            if role != Some(b"master") {
                continue;
            }
            let online = field(&node, "health").and_then(Value::as_bytes) == Some(b"online");
            let port = field(&node, "port").and_then(port).or_else(|| field(&node, "tls-port").and_then(port));
            let addr = field(&node, "ip").and_then(ip).zip(port).map(|(ip, port)| SocketAddr::new(ip, port));
            if master.is_none() || online {
                master = addr.or(master);
            }
        }
        let Some(master) = master else { continue };
        for bounds in ranges.chunks(2) {
            let (Some(start), Some(end)) = (bounds.first().and_then(slot), bounds.get(1).and_then(slot)) else {
                return bad("a slot bound is not a slot");
            };
            if start > end {
                return bad("a slot range ends before it starts");
            }
            map.assign(start, end, master);
        }
    }
    usable(map)
}

/// The map in a `CLUSTER SLOTS` reply: per range `[start, end, master,
/// replicas...]`, each node `[endpoint, port, id, metadata]`; the endpoint
/// must be an IP literal, else the metadata's `ip` is used.
pub fn parse_slots(reply: &Value) -> Result<SlotMap, TopologyError> {
    if let Some(e) = error_of(reply) {
        return Err(e);
    }
    let Some(ranges) = reply.as_array() else { return bad("expected an array of slot ranges") };
    let mut map = SlotMap::default();
    for range in ranges {
        let Some(items) = range.as_array() else { return bad("a slot range is not an array") };
        let (Some(start), Some(end)) = (items.first().and_then(slot), items.get(1).and_then(slot)) else {
            return bad("a slot bound is not a slot");
        };
        if start > end {
            return bad("a slot range ends before it starts");
        }
        let Some(node) = items.get(2).and_then(Value::as_array) else { return bad("a slot range without master") };
        let metadata_ip = || node.get(3).and_then(pairs).and_then(|m| field(&m, "ip").and_then(ip));
        let ip = node.first().and_then(ip).or_else(metadata_ip);
        if let (Some(ip), Some(port)) = (ip, node.get(1).and_then(port)) {
            map.assign(start, end, SocketAddr::new(ip, port));
        }
    }
    usable(map)
}

fn usable(map: SlotMap) -> Result<SlotMap, TopologyError> {
    if map.covered() == 0 {
        return bad("no slot is served by a master with an IP address");
    }
    Ok(map)
}
