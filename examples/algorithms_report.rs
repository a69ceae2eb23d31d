//! `make algorithms-report`: starts its own Valkey (on a free port), measures
//! the four algorithms through the real script with injected time, and
//! writes `docs/algorithms.md`: memory per key at full quota, the accuracy of
//! the approximate algorithms against the exact log on a bursty trace, and
//! the seed's scenario under each algorithm.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::fmt::Write as _;
use support::differential::{check, store_decide};
use support::Valkey;
use tollgate::limiter::{Algorithm, Check};
use tollgate::resp::Value;

const T0: u64 = 1_800_000_000_000;
const SEED: [(u64, u64); 2] = [(20, 60_000), (5, 3_000)];
const SERVICE: [(u64, u64); 2] = [(600, 600_000), (30, 20_000)];

fn label(windows: &[(u64, u64)]) -> String {
    let w: Vec<String> = windows.iter().map(|(l, p)| format!("{l}/{}s", p / 1_000)).collect();
    format!("{{{}}}", w.join(", "))
}

fn rule(valkey: &Valkey, algorithm: Algorithm, name: &str, windows: &[(u64, u64)]) -> Check {
    let key = format!("report:{{{name}:{}}}:{}", label(windows), algorithm.id());
    valkey.cmd(&["DEL", &key]);
    check(algorithm, 0, &key, windows, 1)
}

/// Admits requests as fast as the windows allow until the longest window
/// (the first) denies: the bucket then holds its full quota.
fn fill(valkey: &Valkey, algorithm: Algorithm, windows: &[(u64, u64)]) -> (u64, i64) {
    let c = rule(valkey, algorithm, "memory", windows);
    let (mut t, mut admitted) = (T0, 0);
    for _ in 0..100_000 {
        let d = store_decide(valkey, std::slice::from_ref(&c), t);
        if d.allowed {
            admitted += 1;
        } else if d.windows[0].denied() {
            break;
        } else {
            t += d.retry_after_ms();
        }
    }
    let bytes = match valkey.cmd(&["MEMORY", "USAGE", &c.key, "SAMPLES", "0"]) {
        Value::Integer(n) => n,
        other => panic!("MEMORY USAGE gave {other:?}"),
    };
    (admitted, bytes)
}

/// A deterministic bursty trace: bursts of 1..=12 requests 0..=40 ms apart,
/// 200 ms to 15 s between bursts.
fn bursty_trace(n: usize) -> Vec<u64> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    };
    let (mut t, mut out) = (T0, Vec::with_capacity(n));
    while out.len() < n {
        for _ in 0..1 + next(12) {
            out.push(t);
            t += next(41);
        }
        t += 200 + next(14_801);
    }
    out.truncate(n);
    out
}

/// Whether one more unit at `t` fits every window given the admitted history.
fn exact_fits(admitted: &[u64], windows: &[(u64, u64)], t: u64) -> bool {
    windows.iter().all(|&(limit, period)| {
        let count = admitted.iter().filter(|&&a| a + period > t && a <= t).count() as u64;
        count < limit
    })
}

/// The most units admitted in any interval `(t - P, t]`, per window.
fn worst_counts(admitted: &[u64], windows: &[(u64, u64)]) -> Vec<u64> {
    windows
        .iter()
        .map(|&(_, period)| {
            let mut worst = 0;
            for (i, &t) in admitted.iter().enumerate() {
                worst = worst.max(admitted[..=i].iter().filter(|&&a| a + period > t).count() as u64);
            }
            worst
        })
        .collect()
}

/// The worst window as a share of its limit, in %.
fn worst_share(admitted: &[u64], windows: &[(u64, u64)]) -> u64 {
    let counts = worst_counts(admitted, windows);
    windows.iter().zip(counts).map(|(&(limit, _), count)| count * 100 / limit).max().unwrap_or(0)
}

struct Accuracy {
    admitted: usize,
    wrongly_admitted: usize,
    wrongly_denied: usize,
    overshoot: u64,
}

/// Runs `trace` through `algorithm` and judges every decision against the
/// exact log over the same admitted history.
fn accuracy(valkey: &Valkey, algorithm: Algorithm, windows: &[(u64, u64)], trace: &[u64]) -> Accuracy {
    let c = rule(valkey, algorithm, "accuracy", windows);
    let mut admitted: Vec<u64> = Vec::new();
    let (mut wrongly_admitted, mut wrongly_denied) = (0, 0);
    for &t in trace {
        let exact = exact_fits(&admitted, windows, t);
        let allowed = store_decide(valkey, std::slice::from_ref(&c), t).allowed;
        match (allowed, exact) {
            (true, false) => wrongly_admitted += 1,
            (false, true) => wrongly_denied += 1,
            _ => {}
        }
        if allowed {
            admitted.push(t);
        }
    }
    Accuracy { admitted: admitted.len(), wrongly_admitted, wrongly_denied, overshoot: worst_share(&admitted, windows) }
}

struct Seed {
    first_eight: usize,
    retry_ms: u64,
    minute: usize,
    worst_minute: u64,
}

/// The seed's scenario: 8 calls at t0, then 8 calls every 3 s for a minute.
fn seed_scenario(valkey: &Valkey, algorithm: Algorithm) -> Seed {
    let c = rule(valkey, algorithm, "seed", &SEED);
    let mut admitted = Vec::new();
    let mut retry_ms = 0;
    for call in 1..=8 {
        let d = store_decide(valkey, std::slice::from_ref(&c), T0);
        if d.allowed {
            admitted.push(T0);
        } else if call == 6 {
            retry_ms = d.retry_after_ms();
        }
    }
    let first_eight = admitted.len();
    for burst in 1..40u64 {
        let t = T0 + 3_000 * burst + 1;
        for _ in 0..8 {
            if store_decide(valkey, std::slice::from_ref(&c), t).allowed {
                admitted.push(t);
            }
        }
    }
    let minute = admitted.iter().filter(|&&t| t < T0 + 60_000).count();
    Seed { first_eight, retry_ms, minute, worst_minute: worst_counts(&admitted, &SEED)[0] }
}

fn main() {
    let valkey = Valkey::start();
    let version = match valkey.cmd(&["INFO", "server"]) {
        Value::Bulk(b) => String::from_utf8_lossy(&b)
            .lines()
            .find_map(|l| l.strip_prefix("valkey_version:").map(str::to_owned))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let mut md = String::new();
    md.push_str(INTRO);

    writeln!(md, "\n## Memory per key at full quota\n").unwrap();
    writeln!(md, "`MEMORY USAGE <key> SAMPLES 0` in Valkey {version}, after admitting requests as fast as the")
        .unwrap();
    writeln!(md, "windows allow until the longest window denies (one bucket, cost 1).\n").unwrap();
    writeln!(md, "| algorithm | {} | {} |", label(&SEED), label(&SERVICE)).unwrap();
    writeln!(md, "| --- | --- | --- |").unwrap();
    for algorithm in Algorithm::ALL {
        let (a1, b1) = fill(&valkey, algorithm, &SEED);
        let (a2, b2) = fill(&valkey, algorithm, &SERVICE);
        writeln!(md, "| `{}` | {b1} bytes ({a1} admitted) | {b2} bytes ({a2} admitted) |", algorithm.name()).unwrap();
    }

    let trace = bursty_trace(3_000);
    let span_s = (trace[trace.len() - 1] - trace[0]) / 1_000;
    writeln!(md, "\n## Accuracy against the exact log\n").unwrap();
    writeln!(md, "A bursty trace of {} requests over {span_s} s (bursts of 1 to 12 requests 0 to 40 ms", trace.len())
        .unwrap();
    writeln!(md, "apart, 0.2 to 15 s between bursts), cost 1. Every decision is judged against the exact sliding")
        .unwrap();
    writeln!(md, "log over the same admitted history: *wrongly admitted* = admitted although some window already")
        .unwrap();
    writeln!(md, "held its limit in the last period; *wrongly denied* = denied although every window had room.")
        .unwrap();
    writeln!(md, "*Worst window* = the most units admitted in any interval of a window's period, as a share of")
        .unwrap();
    writeln!(md, "its limit (100% = never above the limit).\n").unwrap();
    writeln!(md, "| algorithm | windows | admitted | wrongly admitted | wrongly denied | worst window |").unwrap();
    writeln!(md, "| --- | --- | --- | --- | --- | --- |").unwrap();
    for windows in [&SEED, &SERVICE] {
        for algorithm in [Algorithm::SlidingWindow, Algorithm::SlidingLog, Algorithm::FixedWindow, Algorithm::Gcra] {
            let a = accuracy(&valkey, algorithm, windows, &trace);
            writeln!(
                md,
                "| `{}` | {} | {} | {} | {} | {}% |",
                algorithm.name(),
                label(windows),
                a.admitted,
                a.wrongly_admitted,
                a.wrongly_denied,
                a.overshoot
            )
            .unwrap();
        }
    }

    writeln!(md, "\n## The seed's scenario under each algorithm\n").unwrap();
    writeln!(md, "`auth.createToken` with {}: eight calls at one instant, then eight calls every 3 s.", label(&SEED))
        .unwrap();
    writeln!(md, "*Worst 60 s* is the most calls admitted in any 60 s interval (the limit is 20).\n").unwrap();
    writeln!(
        md,
        "| algorithm | admitted of the first 8 | retry after the 6th | admitted in the first minute | worst 60 s |"
    )
    .unwrap();
    writeln!(md, "| --- | --- | --- | --- | --- |").unwrap();
    for algorithm in Algorithm::ALL {
        let s = seed_scenario(&valkey, algorithm);
        writeln!(
            md,
            "| `{}` | {} | {} ms | {} | {} |",
            algorithm.name(),
            s.first_eight,
            s.retry_ms,
            s.minute,
            s.worst_minute
        )
        .unwrap();
    }
    md.push_str(GUIDE);

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/algorithms.md");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    // The cost section is written by hand and `make bench-script`: kept.
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    if let Some(at) = old.find(COST_SECTION) {
        md.push_str(&old[at..]);
    }
    std::fs::write(&path, md).unwrap();
    println!("wrote {}", path.display());
}

/// The heading of the last section, which this report keeps as it is.
const COST_SECTION: &str = "\n## What a decision costs in Valkey\n";

const INTRO: &str = "# Algorithms

<!-- Generated by `make algorithms-report` (examples/algorithms_report.rs) up to \"What a decision
costs in Valkey\", which it keeps as it is; do not edit above that. -->

Every rule picks one algorithm with `\"algorithm\"`. Whatever the mix, one call of the limiter's
Lua code (a Valkey Function by `FCALL`, or the same code as a script by `EVALSHA`) decides every
window of every matching rule: the request is admitted only if it fits all of them, and only then
is it recorded anywhere. Each algorithm has a pure Rust model (`src/limiter/model/`, the
specification) and a Lua file (`src/limiter/*.lua`, with its per-bucket contract in its header);
the differential tests (`tests/live/differential/`) require identical decisions, remaining, reset
and retry from both, through both invocations. All arithmetic is on integers below 2^53, so Lua's
doubles are exact.

- **`sliding_log`** (default, exact). Every admitted unit is one sorted-set entry at its admission
  time. A window of `limit` per `P` counts the entries in `(now - P, now]`; a request fits when
  `count + cost <= limit`. `retry_ms` is when the `(count + cost - limit)`-th oldest counted entry
  leaves. Memory grows with the longest window's limit; `cost` is at most 10000.
- **`gcra`** (generic cell rate algorithm). Each window is a token bucket of `limit` units refilled
  continuously at `limit / P`, kept as one theoretical arrival time per window (stored exactly as a
  debt in units of `1 / limit` ms, so `limit x P <= 2^53`). A request fits when every window has
  `cost` units; only then do all of them advance. `retry_ms` is the exact ms when enough has
  refilled; `reset_ms` when the bucket is full again. Allows a burst of `limit`, then a steady rate.
- **`sliding_window`** (sliding-window counter, approximate). Windows aligned to multiples of `P`;
  the estimate is `cur + prev x (P - e) / P` (`e` = time into the current window), compared in exact
  integer form (`limit x P <= 2^53`). `retry_ms` solves exactly for the first ms the weighted count
  has dropped enough (possibly in the next window or the one after).
- **`fixed_window`** (as envoyproxy/ratelimit). Counters aligned to multiples of `P` (from the Unix
  epoch); the count restarts at each window's start. `retry_ms` is the window's end. A burst
  straddling a boundary can reach twice the limit within one period.

Bucket keys end in the algorithm's id (`log`, `gcra`, `sw`, `fw`), so switching a rule's algorithm
never reads another algorithm's data; every key has a TTL (the longest period; twice that for
`sliding_window`, whose previous window still counts).
";

const GUIDE: &str = "
## Which algorithm when

- **`sliding_log`: when the limit must never be exceeded in any interval** (authentication,
  security-sensitive or paid actions) and limits per key are moderate (the log holds one entry per
  unit of the longest window). In the seed's scenario it admits exactly the first 5 calls, never
  more than 20 in any 60 s, and the retry is the exact moment the oldest call leaves.
- **`gcra`: for rates with a bounded burst and constant memory**, at any limit. In the seed's
  scenario it admits a burst of 5, then one call per emission interval (600 ms for 5/3s); the 60 s
  bucket refills continuously, so more than 20 calls can pass in some 60 s interval (see the
  table): choose it when the *rate* matters more than a hard count per interval.
- **`sliding_window`: for large limits with near-exact behaviour and O(windows) memory**. In the
  seed's scenario it behaves like the log at the first burst; over time the weighted estimate
  admits slightly more or fewer calls than the exact log (see the accuracy table).
- **`fixed_window`: for compatibility with envoyproxy/ratelimit** and the simplest reset semantics
  (everything resets at the window's end). In the seed's scenario calls are admitted again as soon
  as a new aligned window starts, so up to twice the limit can pass around a boundary.

The configuration rejects windows that can never bind (seed `000`); the exact condition per
algorithm is derived in `src/config/binding.rs`.
";
