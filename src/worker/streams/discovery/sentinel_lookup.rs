//! Sentinel discovery on a stream of its own: the worker asks
//! `SENTINEL get-master-addr-by-name` through `valkey.sentinel.cluster` when
//! [`Discovery`] says a lookup is due (from the worker's first request on,
//! every `refresh`, and soon after a store failure that suggests the master
//! moved), and routes its store stream to the master it learns.

use crate::config::SentinelConfig;
use crate::store::sentinel::{lookup_command, parse_lookup, Change, Discovery, LookupError};
use crate::store::Failure;
use crate::worker::host::Throttle;
use crate::worker::host::{Host, Level, Stat};
use crate::worker::streams::link::{Awaited, Link};
use std::net::SocketAddr;

/// The Sentinels of one worker.
#[derive(Debug)]
pub struct SentinelLookup {
    cluster: String,
    master_name: String,
    link: Link,
    discovery: Discovery,
    log: Throttle,
}

impl SentinelLookup {
    pub fn new(config: &SentinelConfig) -> SentinelLookup {
        let refresh = u64::try_from(config.refresh.as_millis()).unwrap_or(u64::MAX);
        SentinelLookup {
            cluster: config.cluster.clone(),
            master_name: config.master_name.clone(),
            link: Link::default(),
            discovery: Discovery::new(refresh),
            log: Throttle::default(),
        }
    }

    /// The master last reported.
    pub fn master(&self) -> Option<SocketAddr> {
        self.discovery.master()
    }

    pub fn token(&self) -> Option<u32> {
        self.link.token()
    }

    /// Whether a lookup is due at `now_ms`.
    pub fn due(&self, now_ms: u64) -> bool {
        self.discovery.due(now_ms)
    }

    /// Whether a lookup is outstanding (the worker keeps ticking meanwhile).
    pub fn busy(&self) -> bool {
        self.link.in_flight().0 > 0
    }

    /// A store failure suggests the master moved: ask again soon.
    pub fn suspect(&mut self, now_ms: u64) {
        self.discovery.suspect(now_ms);
    }

    /// Sends a lookup if one is due; from the worker's own callbacks only (it
    /// may open the stream).
    pub fn lookup(&mut self, host: &mut dyn Host, now_ms: u64, timeout_ms: u64) {
        self.link.tick();
        if self.link.stalled(now_ms, timeout_ms, timeout_ms) {
            if let Some(token) = self.link.token() {
                host.cancel(token);
            }
            self.fail(host, LookupError::Unavailable("no answer within the timeout".into()), now_ms);
        }
        if !self.discovery.due(now_ms) {
            return;
        }
        if self.link.token().is_none() {
            if !self.link.may_open(now_ms) {
                return;
            }
            match host.open_stream(&self.cluster, &[]) {
                Ok(token) => self.link.opened(token, true, now_ms),
                Err(e) => {
                    self.link.closed(Failure::Unavailable(e.clone()), true, now_ms);
                    self.failed(host, LookupError::Unavailable(format!("cluster {}: {e}", self.cluster)), now_ms);
                    return;
                }
            }
        }
        let Some(token) = self.link.token() else { return };
        let command = lookup_command(&self.master_name);
        match host.send(token, &command) {
            Ok(()) => {
                self.link.sent(Awaited::Lookup, command.len(), now_ms);
                self.discovery.sent(now_ms);
                host.count(Stat::SentinelLookup, 1);
            }
            Err(e) => {
                host.cancel(token);
                self.fail(host, LookupError::Unavailable(e), now_ms);
            }
        }
    }

    /// Reply bytes on the Sentinel stream: the change they bring, if any.
    pub fn on_message(&mut self, host: &mut dyn Host, bytes: &[u8], now_ms: u64) -> Option<Change> {
        let (replies, error) = self.link.feed(bytes, now_ms);
        let mut change = None;
        for (_, _, value) in replies {
            match self.discovery.on_reply(parse_lookup(&value), now_ms) {
                Ok(c) => change = Some(self.report(host, c)),
                Err(e) => self.failed(host, e, now_ms),
            }
        }
        if let Some(e) = error {
            if let Some(token) = self.link.token() {
                host.cancel(token);
            }
            self.fail(host, LookupError::Unavailable(e.to_string()), now_ms);
        }
        change
    }

    /// The Sentinel stream closed (the next lookup opens another, to the
    /// next Sentinel of the cluster).
    pub fn on_close(&mut self, host: &mut dyn Host, status: u32, now_ms: u64) {
        self.fail(host, LookupError::Unavailable(format!("stream closed with status {status}")), now_ms);
    }

    /// The stream is gone: an outstanding lookup failed.
    fn fail(&mut self, host: &mut dyn Host, error: LookupError, now_ms: u64) {
        let outstanding = self.link.closed(Failure::Unavailable(error.to_string()), false, now_ms);
        if !outstanding.is_empty() {
            self.failed(host, error, now_ms);
        }
    }

    fn failed(&mut self, host: &mut dyn Host, error: LookupError, now_ms: u64) {
        self.discovery.failed(now_ms);
        host.count(Stat::SentinelFailure, 1);
        if self.log.due(now_ms) {
            let message = format!("tollgate: Sentinel master {:?}: {error}", self.master_name);
            host.log(Level::Warn, &format!("{message} (repeats are not logged for {}s)", Throttle::INTERVAL_MS / 1000));
        }
    }

    fn report(&self, host: &mut dyn Host, change: Change) -> Change {
        let name = &self.master_name;
        match change {
            Change::Same => {}
            Change::First(addr) => host.log(Level::Info, &format!("tollgate: Sentinel master {name:?} is {addr}")),
            Change::Switched { from, to } => {
                host.count(Stat::SentinelSwitch, 1);
                host.log(Level::Warn, &format!("tollgate: Sentinel master {name:?} moved from {from} to {to}"));
            }
        }
        change
    }
}
