//! Valkey Cluster discovery on a stream of its own: the worker asks
//! `CLUSTER SHARDS` (`CLUSTER SLOTS` from a server without it) through
//! `valkey.cluster_mode.seeds` when [`Refresh`] says it is due (from the
//! worker's first request on, every `refresh`, and soon after a `MOVED`, a
//! `CLUSTERDOWN` or `TRYAGAIN`, or a master that could not be reached), and
//! keeps the slot map it learns. Routing by that map is in
//! [`crate::worker::streams::discovery`].

use crate::config::ClusterModeConfig;
use crate::store::cluster::{
    parse_shards, parse_slots, shards_command, shards_unknown, slots_command, Refresh, SlotMap, TopologyError,
};
use crate::store::{preamble_failure, Failure, Preamble};
use crate::worker::host::Throttle;
use crate::worker::host::{Host, Level, Stat};
use crate::worker::streams::link::{Awaited, Link};
use std::net::SocketAddr;

/// The slot map of one worker, and the stream it is read on.
#[derive(Debug)]
pub struct ClusterLookup {
    seeds: String,
    preamble: Preamble,
    link: Link,
    refresh: Refresh,
    map: Option<SlotMap>,
    /// The seeds do not know `CLUSTER SHARDS` (Redis before 7): ask
    /// `CLUSTER SLOTS`.
    use_slots: bool,
    log: Throttle,
}

impl ClusterLookup {
    pub fn new(config: &ClusterModeConfig, preamble: Preamble) -> ClusterLookup {
        let refresh = u64::try_from(config.refresh.as_millis()).unwrap_or(u64::MAX);
        ClusterLookup {
            seeds: config.seeds.clone(),
            preamble,
            link: Link::default(),
            refresh: Refresh::new(refresh),
            map: None,
            use_slots: false,
            log: Throttle::default(),
        }
    }

    /// The slot map last read (kept when a later read fails).
    pub fn map(&self) -> Option<&SlotMap> {
        self.map.as_ref()
    }

    pub fn token(&self) -> Option<u32> {
        self.link.token()
    }

    /// Whether a read of the map is due at `now_ms`.
    pub fn due(&self, now_ms: u64) -> bool {
        self.refresh.due(now_ms)
    }

    /// Whether a read is outstanding (the worker keeps ticking meanwhile).
    pub fn busy(&self) -> bool {
        self.link.in_flight().0 > 0
    }

    /// The map seems stale: read it again soon.
    pub fn suspect(&mut self, now_ms: u64) {
        self.refresh.suspect(now_ms);
    }

    /// `MOVED`: `slot` is served by `addr` now; the rest of the map is read
    /// again soon.
    pub fn moved(&mut self, slot: u16, addr: SocketAddr, now_ms: u64) {
        if let Some(map) = &mut self.map {
            map.set_owner(slot, addr);
        }
        self.refresh.suspect(now_ms);
    }

    /// Sends a read of the map if one is due; from the worker's own
    /// callbacks only (it may open the stream). `AUTH`, when configured,
    /// goes first on every stream.
    pub fn lookup(&mut self, host: &mut dyn Host, now_ms: u64, timeout_ms: u64) {
        self.link.tick();
        if self.link.stalled(now_ms, timeout_ms, timeout_ms) {
            if let Some(token) = self.link.token() {
                host.cancel(token);
            }
            self.fail(host, "no answer within the timeout".into(), now_ms);
        }
        if !self.refresh.due(now_ms) {
            return;
        }
        let mut message = Vec::new();
        let mut preamble = 0;
        if self.link.token().is_none() {
            if !self.link.may_open(now_ms) {
                return;
            }
            match host.open_stream(&self.seeds, &[]) {
                Ok(token) => self.link.opened(token, true, now_ms),
                Err(e) => {
                    self.link.closed(Failure::Unavailable(e.clone()), true, now_ms);
                    self.failed(host, format!("cannot open a stream to cluster {}: {e}", self.seeds), now_ms);
                    return;
                }
            }
            message.extend_from_slice(&self.preamble.bytes);
            preamble = message.len();
        }
        let Some(token) = self.link.token() else { return };
        message.extend_from_slice(&if self.use_slots { slots_command() } else { shards_command() });
        match host.send(token, &message) {
            Ok(()) => {
                if preamble > 0 {
                    self.link.sent(Awaited::Preamble, preamble, now_ms);
                }
                self.link.sent(Awaited::Lookup, message.len() - preamble, now_ms);
                self.refresh.sent(now_ms);
            }
            Err(e) => {
                host.cancel(token);
                self.fail(host, e, now_ms);
            }
        }
    }

    /// Reply bytes on the seed stream: whether they brought a different map.
    pub fn on_message(&mut self, host: &mut dyn Host, bytes: &[u8], now_ms: u64) -> bool {
        let (replies, error) = self.link.feed(bytes, now_ms);
        let mut changed = false;
        for (awaited, _, value) in replies {
            if awaited == Awaited::Preamble {
                if let Some(failure) = preamble_failure(&value) {
                    // Refused credentials: this stream is done, and so is
                    // the read behind the `AUTH` (whatever it answered).
                    if let Some(token) = self.link.token() {
                        host.cancel(token);
                    }
                    self.link.closed(failure.clone(), true, now_ms);
                    self.failed(host, failure.to_string(), now_ms);
                    return changed;
                }
                continue;
            }
            if !self.use_slots && shards_unknown(&value) {
                self.use_slots = true;
                self.refresh.failed(now_ms);
                continue;
            }
            let parsed = if self.use_slots { parse_slots(&value) } else { parse_shards(&value) };
            match parsed {
                Ok(map) => {
                    self.refresh.answered(now_ms);
                    host.count(Stat::ClusterRefresh, 1);
                    if self.map.as_ref() != Some(&map) {
                        host.log(Level::Info, &format!("tollgate: cluster slot map: {map}"));
                        self.map = Some(map);
                        changed = true;
                    }
                }
                Err(TopologyError::ErrorReply(e) | TopologyError::BadReply(e)) => self.failed(host, e, now_ms),
            }
        }
        if let Some(e) = error {
            if let Some(token) = self.link.token() {
                host.cancel(token);
            }
            self.fail(host, e.to_string(), now_ms);
        }
        changed
    }

    /// The seed stream closed (the next read opens another, to the next
    /// seed of the Envoy cluster).
    pub fn on_close(&mut self, host: &mut dyn Host, status: u32, now_ms: u64) {
        self.fail(host, format!("stream closed with status {status}"), now_ms);
    }

    /// The stream is gone: an outstanding read failed.
    fn fail(&mut self, host: &mut dyn Host, why: String, now_ms: u64) {
        let outstanding = self.link.closed(Failure::Unavailable(why.clone()), false, now_ms);
        if outstanding.contains(&Awaited::Lookup) {
            self.failed(host, why, now_ms);
        }
    }

    fn failed(&mut self, host: &mut dyn Host, why: String, now_ms: u64) {
        self.refresh.failed(now_ms);
        host.count(Stat::ClusterRefreshFailure, 1);
        if self.log.due(now_ms) {
            let every = Throttle::INTERVAL_MS / 1000;
            host.log(
                Level::Warn,
                &format!("tollgate: cluster slot map from {}: {why} (repeats are not logged for {every}s)", self.seeds),
            );
        }
    }
}
