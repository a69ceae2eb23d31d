//! Bursts for the shaping tests and `make demo-shaping`: requests fired
//! together, one connection each, with when each was sent and answered and
//! the delay the response reports (`Server-Timing: tollgate-delay;dur=`).

use super::http::http;
use super::plugin::{plugin, rule, Plugin};
use super::Valkey;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tollgate::cli::table::delay_of;
use tollgate::resp::Value;

/// One request of a burst.
#[derive(Debug, Clone)]
pub struct Shot {
    /// ms after the burst's start.
    pub sent_ms: f64,
    /// When it was sent, in ms since the Unix epoch (as `answered_epoch_ms`).
    pub sent_epoch_ms: f64,
    pub answered_ms: f64,
    /// When it was answered, in ms since the Unix epoch (the clock Valkey's
    /// `TIME` reads on this machine).
    pub answered_epoch_ms: f64,
    pub status: u16,
    /// The delay the response reports, if it was held.
    pub delay_ms: Option<u64>,
}

/// Fires `n` requests (`POST path`, `headers`) at `port` at once, `gap`
/// apart: their shots, in sending order.
pub fn burst(port: u16, path: &str, headers: &[(&str, &str)], n: usize, gap: Duration) -> Vec<Shot> {
    let barrier = Arc::new(Barrier::new(n + 1));
    let headers: Vec<(String, String)> = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (barrier, headers, path) = (barrier.clone(), headers.clone(), path.to_string());
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    barrier.wait();
                    std::thread::sleep(gap * u32::try_from(i).unwrap());
                    let at = Instant::now();
                    let sent = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
                    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    let resp = http(port, "POST", &path, &h);
                    let done = Instant::now();
                    let epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
                    (at, done, sent.as_secs_f64() * 1e3, epoch.as_secs_f64() * 1e3, resp)
                })
                .unwrap()
        })
        .collect();
    barrier.wait();
    let t0 = Instant::now();
    threads
        .into_iter()
        .map(|t| {
            let (at, done, sent_epoch_ms, epoch_ms, resp) = t.join().unwrap();
            let ms = |i: Instant| i.saturating_duration_since(t0).as_secs_f64() * 1e3;
            match resp {
                Ok(r) => Shot {
                    sent_ms: ms(at),
                    sent_epoch_ms,
                    answered_ms: ms(done),
                    answered_epoch_ms: epoch_ms,
                    status: r.status,
                    delay_ms: r.header("server-timing").and_then(delay_of),
                },
                Err(_) => Shot {
                    sent_ms: ms(at),
                    sent_epoch_ms,
                    answered_ms: ms(done),
                    answered_epoch_ms: epoch_ms,
                    status: 0,
                    delay_ms: None,
                },
            }
        })
        .collect()
}

/// The `q` quantile (0..=1) of `values` (sorted here).
pub fn quantile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let i = ((values.len() as f64 - 1.0) * q).round() as usize;
    values.get(i).copied().unwrap_or(f64::NAN)
}

/// Every algorithm, 5 per second per user, held up to 2 s: `/log/`,
/// `/gcra/`, `/fw/`, `/sw/`; `/one/` holds one per 500 ms; `/flood/` has
/// `max_waiting` 64.
pub fn rules() -> Plugin {
    let shape = r#""shape": { "max_delay": "2s" }"#;
    plugin()
        .timeout("2s")
        .failure_mode("deny")
        .with(rule("log").path_prefix("/log/").header("x-user-id").limit(5, "1s").field(shape))
        .with(rule("gcra").path_prefix("/gcra/").header("x-user-id").algorithm("gcra").limit(5, "1s").field(shape))
        .with(rule("fw").path_prefix("/fw/").header("x-user-id").algorithm("fixed_window").limit(5, "1s").field(shape))
        .with(
            rule("sw").path_prefix("/sw/").header("x-user-id").algorithm("sliding_window").limit(5, "1s").field(shape),
        )
        .with(rule("one").path_prefix("/one/").header("x-user-id").limit(1, "500ms").field(shape))
        .with(
            rule("flood")
                .path_prefix("/flood/")
                .header("x-user-id")
                .limit(5, "1s")
                .field(r#""shape": { "max_delay": "2s", "max_waiting": 64 }"#),
        )
}

/// The log's entries of `key` (scores, ms on Valkey's clock), sorted.
pub fn log_entries(valkey: &Valkey, key: &str) -> Vec<u64> {
    let Value::Array(items) = valkey.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"]) else { panic!("no log") };
    let scores = items.iter().skip(1).step_by(2);
    scores.map(|v| String::from_utf8_lossy(v.as_bytes().unwrap()).parse().unwrap()).collect()
}

/// No span `(t - period, t]` holds more than `limit` of `slots`.
pub fn assert_within(slots: &[u64], limit: usize, period: u64) {
    for (i, &end) in slots.iter().enumerate() {
        let inside = slots[..=i].iter().filter(|&&s| s + period > end).count();
        assert!(inside <= limit, "{inside} in the {period} ms ending {end}: {slots:?}");
    }
}
