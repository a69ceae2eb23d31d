//! The limiter's request/reply model: what one atomic store call is asked
//! ([`Check`]s, one per matching rule) and what it answers ([`Decision`]).
//!
//! The algorithm itself is specified twice: by the pure reference model in
//! [`model`] (time passed in, no I/O) and by the Lua script
//! `src/limiter/sliding_log.lua`, which only makes the same algorithm atomic
//! inside Valkey. The differential tests run one behaviour suite against both.

pub mod model;
pub mod reply;
pub mod script;

use std::num::NonZeroU64;

/// One window of one rule: at most `limit` units per `period_ms` milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub limit: NonZeroU64,
    pub period_ms: NonZeroU64,
}

/// Everything the store must decide for one matching rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Index of the rule in the configuration.
    pub rule: usize,
    /// The Valkey key of the rule's bucket (see [`crate::key`]).
    pub key: String,
    /// The rule's windows, in configuration order.
    pub windows: Vec<Window>,
    /// Units the request consumes in every window (1 unless configured).
    pub cost: NonZeroU64,
}

/// The state of one window after the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowOutcome {
    /// Index of the check (and so of the rule, via [`Check::rule`]).
    pub check: usize,
    /// Index of the window within its rule.
    pub window: usize,
    pub limit: u64,
    pub period_ms: u64,
    /// Units still available in the window after this decision.
    pub remaining: u64,
    /// Milliseconds until the oldest counted entry leaves the window (0 if empty).
    pub reset_ms: u64,
    /// Milliseconds until this request would fit this window; 0 if it fits now.
    /// A window with `retry_ms > 0` is one that denied the request.
    pub retry_ms: u64,
}

impl WindowOutcome {
    pub fn denied(&self) -> bool {
        self.retry_ms > 0
    }
}

/// The store's answer for one request: admitted in every window, or in none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The store's clock (milliseconds since the Unix epoch) used for the decision.
    pub now_ms: u64,
    /// Every window of every check, in check order then window order.
    pub windows: Vec<WindowOutcome>,
}

impl Decision {
    /// The windows that denied the request (empty when allowed).
    pub fn denied_by(&self) -> impl Iterator<Item = &WindowOutcome> {
        self.windows.iter().filter(|w| w.denied())
    }

    /// Milliseconds until the request would fit in every window at once.
    pub fn retry_after_ms(&self) -> u64 {
        self.windows.iter().map(|w| w.retry_ms).max().unwrap_or(0)
    }

    /// The window with the fewest remaining units (ties: the longest reset).
    pub fn most_constrained(&self) -> Option<&WindowOutcome> {
        self.windows.iter().min_by(|a, b| a.remaining.cmp(&b.remaining).then(b.reset_ms.cmp(&a.reset_ms)))
    }
}
