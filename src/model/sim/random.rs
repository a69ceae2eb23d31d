//! Random traces from a seed: a rule of any algorithm and mode, one to
//! three proxies of one or two workers, and inputs over many periods, in
//! phases: rates that change (quiet, steady, several times the limit),
//! bursts, each phase served by a subset of the workers (so workers go
//! quiet and come back), clients that leave at any moment, and faults
//! (store pauses and restarts, silent streams, workers killed and started).

use super::trace::{Input, Leave, Mode, Net, Override, Proxy, Rule, Trace};
use crate::limiter::Algorithm;

/// A seeded xorshift generator: the same seed gives the same trace.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // Never 0 (xorshift's fixed point), and seeds close together differ.
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }

    /// A number in `lo..=hi`.
    pub fn within(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True with probability `percent` in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        let i = usize::try_from(self.below(items.len() as u64)).ok()?;
        items.get(i).copied()
    }
}

/// The most requests one trace sends.
const MAX_REQUESTS: usize = 1_500;

fn rule(rng: &mut Rng) -> Rule {
    let algorithm = rng.pick(&Algorithm::ALL).unwrap_or_default();
    let longest = rng.pick(&[1_000, 2_000, 4_000]).unwrap_or(1_000);
    let limit = rng.within(4, 40);
    let mut windows = vec![(limit, longest)];
    if rng.chance(40) {
        // A shorter window that binds first, while the longer one can bind
        // too: limit2 < limit, limit2 × (longest / period2) > limit.
        let parts = rng.pick(&[2, 4, 5]).unwrap_or(2);
        let lo = limit / parts + 1;
        if lo < limit {
            windows.push((rng.within(lo, limit - 1), longest / parts));
        }
    }
    let mode = match rng.below(10) {
        0..=2 => Mode::Exact,
        3..=5 => Mode::Shaped {
            max_delay_ms: rng.pick(&[200, longest / 2, longest, 2 * longest]).unwrap_or(longest),
            max_waiting: rng.within(1, 12),
        },
        _ => Mode::Synced,
    };
    // gcra cannot give a reservation back (a configuration error): it
    // only checks, and is charged on the response.
    // A reservation is at most the smallest limit; gcra cannot give one
    // back (a configuration error): it only checks, charged on the response.
    let smallest = windows.iter().map(|w| w.0).min().unwrap_or(1);
    let count = (mode != Mode::Synced && rng.chance(30)).then(|| {
        if algorithm == Algorithm::Gcra {
            0
        } else {
            rng.below(3).min(smallest)
        }
    });
    Rule { algorithm, windows, mode, count, concurrency: None, overrides: None }
}

/// A concurrency limit for 40% of the rules that allow one (not synced):
/// 1 to 4 leases of 1 to 3 s (the shortest TTL the configuration takes),
/// so that a run spans many TTLs. Drawn from `rng`, the leases' own
/// stream: the traces without a concurrency limit stay as they were.
fn concurrency(rng: &mut Rng, rule: &Rule) -> Option<(u64, u64)> {
    (rule.mode != Mode::Synced && rng.chance(40)).then(|| (rng.within(1, 4), rng.within(1_000, 3_000)))
}

/// An override of user u0's limits for 30% of the rules that allow one
/// (not synced): 2 to 5 times the configured, until a time within the run
/// for half of those of the log and fixed windows (then the limits fall
/// back mid-run, and the store's records hold each admission to the limits
/// it was decided by; gcra's state an override's end starts afresh:
/// docs/configuration.md), else for the whole run. Drawn from `rng`, the overrides' own stream.
fn overrides(rng: &mut Rng, rule: &Rule, until: u64) -> Option<Override> {
    (rule.mode != Mode::Synced && rng.chance(30)).then(|| {
        let ends = matches!(rule.algorithm, Algorithm::SlidingLog | Algorithm::FixedWindow) && rng.chance(50);
        Override { key: 0, times: rng.within(2, 5), until_ms: ends.then(|| rng.within(1, until)) }
    })
}

/// How long the upstream takes with a request of a rule with leases of
/// `ttl` ms: most are short, some last up to a TTL, some several TTLs
/// (their leases are renewed, an SSE stream or a long poll).
fn upstream_ms(rng: &mut Rng, ttl: u64) -> u64 {
    match rng.below(20) {
        0..=11 => rng.within(1, 50),
        12..=16 => rng.within(50, ttl),
        _ => rng.within(ttl, 5 * ttl),
    }
}

fn proxies(rng: &mut Rng, rule: &Rule) -> Vec<Proxy> {
    let shortest = rule.windows.iter().map(|w| w.1).min().unwrap_or(1_000);
    let n = rng.within(1, 3);
    let base = rng.pick(&[50, 100, 200]).unwrap_or(100).min(shortest / 2);
    (0..n)
        .map(|i| {
            let interval_ms = match rule.mode {
                Mode::Synced if i > 0 && rng.chance(20) => None,
                Mode::Synced if rng.chance(25) => Some((base * rng.within(1, 3)).min(shortest / 2).max(10)),
                Mode::Synced => Some(base.max(10)),
                _ => None,
            };
            // A table of one or two buckets: keys beyond are decided by
            // the store until one leaves.
            let max_keys = (interval_ms.is_some() && rng.chance(25)).then(|| rng.within(1, 2));
            Proxy { workers: usize::try_from(rng.within(1, 2)).unwrap_or(1), interval_ms, max_keys }
        })
        .collect()
}

/// A random trace from `seed`.
pub fn trace(seed: u64) -> Trace {
    let mut rng = Rng::new(seed);
    let mut rule = rule(&mut rng);
    let mut leases = Rng::new(seed ^ 0x1ea5_e5ee_d000_0001);
    rule.concurrency = concurrency(&mut leases, &rule);
    let ttl = rule.ttl_ms();
    let proxies = proxies(&mut rng, &rule);
    let min_ms = rng.within(0, 2);
    let net = Net { min_ms, max_ms: min_ms + rng.within(0, 15) };
    let mut t = Trace { seed, rule, proxies, net, timeout_ms: 200, inputs: Vec::new(), until_ms: 0 };
    let workers: Vec<(usize, usize)> = t.workers().collect();
    let longest = t.rule.longest_ms();
    let limit = t.rule.windows.first().map_or(10, |w| w.0);
    let keys = rng.within(1, 3);
    let until = longest * rng.within(5, 9);
    // Runs of a concurrency limit span 10 TTLs at least.
    let until = if ttl > 0 { until.max(ttl * leases.within(10, 15)) } else { until };
    let mut now = 0;
    let mut inputs = Vec::new();
    while now < until && inputs.len() < MAX_REQUESTS {
        // A phase: some workers, a rate (requests per longest period, from
        // quiet to several times the limit), perhaps a burst at its start.
        let length = rng.within(longest / 4, 2 * longest);
        let serving: Vec<(usize, usize)> = workers.iter().copied().filter(|_| rng.chance(60)).collect();
        let serving = if serving.is_empty() { workers.clone() } else { serving };
        let per_period = match rng.below(6) {
            0 => 0,
            1 => limit / 2,
            2 | 3 => limit + limit / 2,
            _ => limit * rng.within(2, 4),
        };
        let burst = if rng.chance(25) { rng.within(2, limit + 2) } else { 0 };
        let mut at = now;
        for i in 0..burst + per_period * length / longest.max(1) {
            if i >= burst {
                at += rng.within(0, 2 * longest / per_period.max(1));
            }
            if at >= now + length || inputs.len() >= MAX_REQUESTS {
                break;
            }
            let (proxy, worker) = rng.pick(&serving).unwrap_or((0, 0));
            // (With leases, a client may leave a long request at any moment.)
            let leave = if rng.chance(12) { Leave::After(rng.within(0, longest.max(3 * ttl))) } else { Leave::Never };
            let key = u8::try_from(rng.below(keys)).unwrap_or(0);
            let upstream_ms = (ttl > 0).then(|| upstream_ms(&mut leases, ttl));
            inputs.push((at, Input::Request { proxy, worker, key, leave, used: rng.below(4), upstream_ms }));
        }
        now += length;
    }
    faults(&mut rng, &workers, until, &mut inputs);
    if ttl > 0 {
        // More faults over the longer runs of leases: expiries to explain.
        faults(&mut leases, &workers, until, &mut inputs);
    }
    inputs.sort_by_key(|(at, _)| *at);
    t.rule.overrides = overrides(&mut Rng::new(seed ^ 0x0e11_de55_0000_0002), &t.rule, until);
    t.inputs = inputs;
    t.until_ms = until;
    t
}

/// Store pauses and restarts, silent streams, workers killed: a few per
/// trace, none in most.
fn faults(rng: &mut Rng, workers: &[(usize, usize)], until: u64, inputs: &mut Vec<(u64, Input)>) {
    let n = if rng.chance(50) { rng.within(1, 4) } else { 0 };
    for _ in 0..n {
        let at = rng.below(until);
        let (proxy, worker) = rng.pick(workers).unwrap_or((0, 0));
        let input = match rng.below(10) {
            0..=2 => Input::Pause { ms: rng.within(50, 600) },
            3 | 4 => Input::Restart { ms: rng.within(50, 800), keep: true },
            5 => Input::Restart { ms: rng.within(50, 800), keep: false },
            6 | 7 => Input::Silence { proxy, worker },
            _ => Input::Kill { proxy, worker, ms: rng.within(0, 1_000) },
        };
        inputs.push((at, input));
    }
}
