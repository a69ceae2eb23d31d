//! Sentinel discovery in the root context: sends `SENTINEL
//! get-master-addr-by-name` through `valkey.sentinel.cluster` when a lookup
//! is due (the first tick after configuration, every `refresh`, and soon
//! after a store call fails to connect, times out or meets a replica), and
//! records the master it learns. The pure schedule and parsing live in
//! [`crate::store::sentinel`].

use super::root::{now_ms, Shared};
use crate::batch::Answer;
use crate::store::sentinel::{lookup_command, Change};
use crate::store::{FailureKind, Outcome};
use proxy_wasm::hostcalls;
use std::time::Duration;

/// Failure kinds that suggest the master moved: ask the Sentinels again.
fn master_suspect(kind: FailureKind) -> bool {
    matches!(kind, FailureKind::Unavailable | FailureKind::Timeout | FailureKind::ReadOnly)
}

impl Shared {
    /// Sends a lookup if one is due. Must run with the root as the effective context.
    pub fn lookup(&self) {
        let (Some(discovery), Some(sentinel)) = (&self.discovery, &self.config.valkey.sentinel) else { return };
        let now = now_ms();
        if !discovery.borrow().due(now) {
            return;
        }
        let body = lookup_command(&sentinel.master_name);
        let headers = super::http::store_call_headers();
        let timeout: Duration = self.config.valkey.timeout;
        match hostcalls::dispatch_http_call(&sentinel.cluster, headers, Some(&body), vec![], timeout) {
            Ok(token) => {
                self.metrics.sentinel_lookup();
                discovery.borrow_mut().sent(token, now);
            }
            Err(status) => {
                self.metrics.sentinel_failure();
                discovery.borrow_mut().send_failed(now);
                self.log_failure(&format!(
                    "sentinel lookup dispatch to cluster {} failed: {status:?}",
                    sentinel.cluster
                ));
            }
        }
    }

    /// Handles the reply of call `token` if it is the lookup in flight;
    /// false when it is a store call.
    pub fn on_lookup_reply(&self, token: u32, status: Option<&str>, body: &[u8]) -> bool {
        let Some(discovery) = &self.discovery else { return false };
        let result = discovery.borrow_mut().on_reply(token, status, body, now_ms());
        let Some(result) = result else { return false };
        let name = self.config.valkey.sentinel.as_ref().map_or("", |s| s.master_name.as_str());
        match result {
            Ok(Change::Same) => {}
            Ok(Change::First(addr)) => log::info!("tollgate: Sentinel master {name:?} is {addr}"),
            Ok(Change::Switched { from, to }) => {
                self.metrics.sentinel_switch();
                log::warn!("tollgate: Sentinel master {name:?} moved from {from} to {to}");
            }
            Err(e) => {
                self.metrics.sentinel_failure();
                self.log_failure(&format!("master {name:?}: {e}"));
            }
        }
        true
    }

    /// Asks the Sentinels again soon when a store call's failure suggests
    /// that the master moved.
    pub fn suspect_master(&self, answers: &[Answer]) {
        let Some(discovery) = &self.discovery else { return };
        let suspect = answers.iter().any(|a| match &a.outcome {
            Err(f) | Ok(Outcome::Failed(f)) => master_suspect(f.kind()),
            Ok(_) => false,
        });
        if suspect {
            discovery.borrow_mut().suspect(now_ms());
        }
    }
}
