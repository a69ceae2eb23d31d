//! A failing trace cut down: inputs are dropped, in chunks that halve,
//! as long as the run still fails, so that a failing seed prints the few
//! inputs that matter. Deterministic, and bounded in runs.

use super::trace::{Input, Leave, Trace};

/// Runs at most this many traces while shrinking.
const MAX_RUNS: usize = 3_000;

/// The smallest trace found that still `fails`, starting from `trace`.
pub fn shrink(trace: &Trace, fails: &dyn Fn(&Trace) -> bool) -> Trace {
    let mut best = trace.clone();
    let mut runs = 0;
    let mut chunk = best.inputs.len().div_ceil(2).max(1);
    loop {
        let mut i = 0;
        let mut cut = false;
        while i < best.inputs.len() && runs < MAX_RUNS {
            let mut smaller = best.clone();
            let end = (i + chunk).min(smaller.inputs.len());
            smaller.inputs.drain(i..end);
            runs += 1;
            if fails(&smaller) {
                best = smaller;
                cut = true;
            } else {
                i += chunk;
            }
        }
        if runs >= MAX_RUNS || (chunk == 1 && !cut) {
            return best;
        }
        if !cut {
            chunk = chunk.div_ceil(2);
        }
    }
}

/// What kind of violation `v` is: its words, without its figures (a
/// trace cut down must still fail the same way).
pub fn kind(v: &str) -> String {
    v.chars().filter(|c| !c.is_ascii_digit()).take(60).collect()
}

/// The trace as lines a person can read (and turn into a test).
pub fn describe(trace: &Trace) -> String {
    let mut out = format!(
        "seed {}: {:?} {:?} {:?} count {:?} concurrency {:?} overrides {:?}; proxies {:?}; net {:?}; until {} ms\n",
        trace.seed,
        trace.rule.algorithm,
        trace.rule.windows,
        trace.rule.mode,
        trace.rule.count,
        trace.rule.concurrency,
        trace.rule.overrides,
        trace.proxies.iter().map(|p| (p.workers, p.interval_ms, p.max_keys)).collect::<Vec<_>>(),
        (trace.net.min_ms, trace.net.max_ms),
        trace.until_ms,
    );
    for (at, input) in &trace.inputs {
        let line = match input {
            Input::Request { proxy, worker, key, leave, used, upstream_ms } => {
                let leave = match leave {
                    Leave::Never => String::new(),
                    Leave::After(ms) => format!(", leaves after {ms} ms"),
                };
                let upstream = upstream_ms.map(|ms| format!(", upstream {ms} ms")).unwrap_or_default();
                format!("request u{key} to {proxy}.{worker} (used {used}{upstream}{leave})")
            }
            other => format!("{other:?}"),
        };
        out.push_str(&format!("  {at:>6} ms  {line}\n"));
    }
    out
}
