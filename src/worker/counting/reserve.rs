//! The request side of counting on the response: what a request of a rule
//! with `count` records on admission. Without a reservation it only checks
//! that the rule's `cost` fits ([`Check::check_only`]); with one it records
//! the reservation: fixed units, a request header's integer, or an integer
//! field of the request's JSON body (the request then waits for its body,
//! at most `max_body_bytes` of it). A reservation is at least 1 and at most
//! the rule's smallest limit (so it can be admitted; the response settles
//! the rest); one that cannot be read is the configured default.

use crate::config::{Config, Reserve};
use crate::limiter::Check;
use crate::plan::RequestView;
use crate::worker::calls::Pending;
use crate::worker::counting::body::{integer, json_field};
use crate::worker::counting::owed::{counts, Settlements};
use crate::worker::host::{Host, Stat};
use std::num::NonZeroU64;

/// `value` as a reservation for `check`: at least 1, at most its smallest
/// limit; `default` when there is none.
fn reservation(value: Option<u64>, default: NonZeroU64, check: &Check) -> NonZeroU64 {
    let smallest = check.windows.iter().map(|w| w.limit).min().unwrap_or(NonZeroU64::MIN);
    value.map_or(default, |v| NonZeroU64::new(v).unwrap_or(NonZeroU64::MIN)).min(smallest)
}

/// Sets what each check of a counting rule records on admission (all but
/// body reservations); true when a reservation needs the request's body.
fn prepare(config: &Config, checks: &mut [Check], request: &dyn RequestView) -> bool {
    let mut body = false;
    // (A lease set's check takes one lease, whatever the reservation.)
    for check in checks.iter_mut().filter(|c| counts(config, c)) {
        let Some(count) = config.rules.get(check.rule).and_then(|r| r.count.as_ref()) else { continue };
        match &count.reserve {
            None => check.check_only = true,
            Some(Reserve::Units(units)) => check.cost = *units,
            Some(Reserve::Header { name, default }) => {
                let value = request.header(name).and_then(|v| integer(&v));
                check.cost = reservation(value, *default, check);
            }
            Some(Reserve::Body { .. }) => body = true,
        }
    }
    body
}

/// Sets the body reservations from `body` (`None`: unreadable, e.g. past
/// `max_body_bytes`).
fn apply_body(config: &Config, checks: &mut [Check], body: Option<&[u8]>) {
    for check in checks.iter_mut().filter(|c| counts(config, c)) {
        let reserve = config.rules.get(check.rule).and_then(|r| r.count.as_ref()).and_then(|c| c.reserve.as_ref());
        if let Some(Reserve::Body { path, default }) = reserve {
            let value = body.and_then(|b| json_field(b, path));
            check.cost = reservation(value, *default, check);
        }
    }
}

/// Sets what request `id`'s checks record on admission; the request
/// back, or `None` when it waits for its body (in `settlements`).
pub(in crate::worker) fn reserve(
    (settlements, config): (&mut Settlements, &Config),
    id: u32,
    mut p: Pending,
    request: &dyn RequestView,
) -> Option<Pending> {
    if settlements.active() && prepare(config, &mut p.checks, request) {
        settlements.await_body(id, p);
        return None;
    }
    Some(p)
}

/// How much of a request body the worker reads, once Envoy has buffered
/// `buffered` bytes of it (None: unknown, as at the trailers) and
/// `end_of_stream` says whether more follow: `None` while it is incomplete
/// and shorter than `max_body_bytes` (Envoy buffers on), else the bytes to
/// take, one past `max_body_bytes` so that a longer body is seen to be
/// longer.
pub(in crate::worker) fn body_take(config: &Config, buffered: Option<usize>, end_of_stream: bool) -> Option<usize> {
    let max = config.max_body_bytes;
    if !end_of_stream && buffered.is_some_and(|size| size < max) {
        return None;
    }
    Some(buffered.unwrap_or(usize::MAX).min(max.saturating_add(1)))
}

/// Request `p`'s reservations from its body (the first `max_body_bytes` of
/// it at most; `complete`: that is all of it), counted when it was too
/// large to read.
pub(in crate::worker) fn read_body(config: &Config, host: &mut dyn Host, p: &mut Pending, body: &[u8], complete: bool) {
    let body = body.get(..config.max_body_bytes.saturating_add(1)).unwrap_or(body);
    let readable = complete && body.len() <= config.max_body_bytes;
    if !readable {
        host.count(Stat::BodyTooLarge, 1);
    }
    apply_body(config, &mut p.checks, readable.then_some(body));
}
