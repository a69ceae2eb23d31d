//! What each algorithm promises of the units it admits, checked on a
//! ledger of admissions (`(time, units)`, sorted by time) with an allowed
//! excess per span (0 for a rule the store decides; the synced bound for
//! a synced one). Written from the algorithms' definitions, not from their
//! code: the log counts any span `(t - P, t]`; fixed windows their aligned
//! windows; the sliding-window counter its estimate at each admission (the
//! previous window's count capped at the limit, as the algorithm caps it);
//! gcra any span of `Δ` ms, `L + Δ × L / P` (its bucket drains `L` per
//! `P`), checked over spans shorter than `2P`.

use crate::limiter::Algorithm;

/// A window: `(limit, period_ms)`.
pub type Window = (u64, u64);

/// A span where the admissions went over: what was admitted, what was
/// allowed, and the span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Over {
    pub from_ms: u64,
    pub to_ms: u64,
    pub admitted: u64,
    pub allowed: u64,
}

/// The first span of `ledger` over what `algorithm` allows window `w`,
/// with `excess(from, to)` more allowed in the span `[from, to]`.
pub fn first_over(
    algorithm: Algorithm,
    (limit, period): Window,
    ledger: &[(u64, u64)],
    excess: &dyn Fn(u64, u64) -> u64,
) -> Option<Over> {
    match algorithm {
        Algorithm::SlidingLog => spans(ledger, period, |from, to, admitted| {
            let allowed = limit + excess(from, to);
            (admitted > allowed).then_some(Over { from_ms: from, to_ms: to, admitted, allowed })
        }),
        Algorithm::FixedWindow => aligned(ledger, period, |from, to, admitted| {
            let allowed = limit + excess(from, to);
            (admitted > allowed).then_some(Over { from_ms: from, to_ms: to, admitted, allowed })
        }),
        Algorithm::SlidingWindow => estimates(ledger, (limit, period), excess),
        Algorithm::Gcra => drained(ledger, (limit, period), excess),
        // Leases bound what is in flight, not what is admitted per period.
        Algorithm::Lease => None,
    }
}

/// Every span `(t - period, t]` ending at an admission: `f(from, to, units)`.
fn spans(ledger: &[(u64, u64)], period: u64, f: impl Fn(u64, u64, u64) -> Option<Over>) -> Option<Over> {
    let (mut start, mut sum) = (0, 0u64);
    for (j, &(t, u)) in ledger.iter().enumerate() {
        sum += u;
        while ledger.get(start).is_some_and(|&(s, _)| s + period <= t) {
            sum -= ledger.get(start).map_or(0, |e| e.1);
            start += 1;
        }
        // Units at the same instant later in the ledger count too.
        let same: u64 = ledger.iter().skip(j + 1).take_while(|e| e.0 == t).map(|e| e.1).sum();
        if let Some(over) = f((t + 1).saturating_sub(period), t, sum + same) {
            return Some(over);
        }
    }
    None
}

/// Every aligned window `[kP, (k+1)P)`: `f(from, to, units)`.
fn aligned(ledger: &[(u64, u64)], period: u64, f: impl Fn(u64, u64, u64) -> Option<Over>) -> Option<Over> {
    let mut i = 0;
    while let Some(&(t, _)) = ledger.get(i) {
        let k = t / period;
        let units: u64 = ledger.iter().skip(i).take_while(|e| e.0 / period == k).map(|e| e.1).sum();
        let n = ledger.iter().skip(i).take_while(|e| e.0 / period == k).count();
        if let Some(over) = f(k * period, (k + 1) * period - 1, units) {
            return Some(over);
        }
        i += n;
    }
    None
}

/// The counter's estimate at every admission `t` in window `k` (`e = t -
/// kP`): `cur + min(prev, L) × (P - e) / P <= L + excess`, in integers.
fn estimates(ledger: &[(u64, u64)], (limit, period): Window, excess: &dyn Fn(u64, u64) -> u64) -> Option<Over> {
    let prefix: Vec<u64> = std::iter::once(0)
        .chain(ledger.iter().scan(0, |s, e| {
            *s += e.1;
            Some(*s)
        }))
        .collect();
    let at = |i: usize| prefix.get(i).copied().unwrap_or(0);
    let units_in = |from: u64, to: u64| -> u64 {
        at(ledger.partition_point(|e| e.0 <= to)).saturating_sub(at(ledger.partition_point(|e| e.0 < from)))
    };
    for &(t, _) in ledger {
        let k = t / period;
        let (start, e) = (k * period, t - k * period);
        let cur = units_in(start, t);
        let prev = if k == 0 { 0 } else { units_in(start - period, start - 1).min(limit) };
        let allowed = limit + excess(t.saturating_sub(period), t);
        let lhs = u128::from(cur) * u128::from(period) + u128::from(prev) * u128::from(period - e);
        if lhs > u128::from(allowed) * u128::from(period) {
            let admitted = u64::try_from(lhs / u128::from(period)).unwrap_or(u64::MAX);
            return Some(Over { from_ms: start.saturating_sub(period), to_ms: t, admitted, allowed });
        }
    }
    None
}

/// gcra: for admissions `i..=j` less than `2P` apart, `units × P <=
/// (L + excess) × P + (t_j - t_i) × L`.
fn drained(ledger: &[(u64, u64)], (limit, period): Window, excess: &dyn Fn(u64, u64) -> u64) -> Option<Over> {
    for (j, &(tj, _)) in ledger.iter().enumerate() {
        // Units at tj later in the ledger count too.
        let mut units: u64 = ledger.iter().skip(j + 1).take_while(|e| e.0 == tj).map(|e| e.1).sum();
        for &(ti, u) in ledger.iter().take(j + 1).rev() {
            if ti + 2 * period <= tj {
                break;
            }
            units += u;
            let allowed = limit + excess(ti, tj);
            let lhs = u128::from(units) * u128::from(period);
            let rhs = u128::from(allowed) * u128::from(period) + u128::from(tj - ti) * u128::from(limit);
            if lhs > rhs {
                let drain = (tj - ti) * limit / period;
                return Some(Over { from_ms: ti, to_ms: tj, admitted: units, allowed: allowed + drain });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
