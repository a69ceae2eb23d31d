//! The request lifecycle: a request's arrival (planned, denied from the
//! cache, routed, queued), the ruling on its decision (pure), what
//! `failure_mode` and `overload` make of it, its deadlines, and handing it
//! its verdict within each VM entry's budget. Owns the verdicts waiting for
//! the next VM entry ([`verdict::Deliveries`]) and the local limiter of
//! `failure_mode: local` ([`local::LocalLimiter`]).

pub(super) mod arrival;
pub(super) mod fail;
pub(super) mod local;
pub mod record;
pub(super) mod rule;
pub(super) mod ruling;
pub(super) mod verdict;
