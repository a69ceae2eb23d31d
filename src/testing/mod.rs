//! Builders shared by the unit tests: plugin configurations and limiter
//! checks (the same files the integration tests include), store answers and
//! a seeded generator for the property tests.

#![cfg(test)]

mod check;
mod plugin;
mod rng;

pub use check::{check, lease};
pub use plugin::{plugin, rule, Plugin};
pub use rng::Rng;

use crate::config::Config;
use crate::limiter::{Decision, WindowOutcome};
// What `check.rs` builds, named where it looks (`super::`).
use crate::limiter::{Algorithm, Check, Window};

impl Plugin {
    /// The configuration, parsed and validated.
    pub fn build(&self) -> Config {
        self.build_with_env(&[])
    }

    /// The configuration, with these environment variables
    /// (`valkey.password_env`).
    pub fn build_with_env(&self, env: &[(&str, &str)]) -> Config {
        let lookup = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string());
        match Config::from_json_with_env(self.json().as_bytes(), &lookup) {
            Ok(config) => config,
            Err(e) => panic!("test configuration: {e}\n{}", self.json()),
        }
    }
}

/// The seed's rule (`auth.createToken`: 20 per 60 s and 5 per 3 s) and its
/// one check, on bucket `k`.
pub fn seed_setup() -> (Config, Vec<Check>) {
    let config = plugin().rule("auth.createToken", None, &[(20, "60s"), (5, "3s")]).build();
    (config, vec![check(Algorithm::SlidingLog, 0, "k", &[(20, 60_000), (5, 3_000)], 1)])
}

/// Window `window` of check 0 as the store reports it.
pub fn outcome(
    window: usize,
    limit: u64,
    period_ms: u64,
    remaining: u64,
    reset_ms: u64,
    retry_ms: u64,
) -> WindowOutcome {
    WindowOutcome { check: 0, window, limit, period_ms, remaining, reset_ms, retry_ms, overridden: false }
}

/// The store's answer to [`seed_setup`]'s check: 15 left of 20 per
/// minute, none of 5 per 3 s, denied for `retry_3s` ms by the latter (0:
/// admitted).
pub fn seed_decision(retry_3s: u64) -> Decision {
    Decision {
        allowed: retry_3s == 0,
        now_ms: 0,
        delay_ms: 0,
        windows: vec![outcome(0, 20, 60_000, 15, 59_500, 0), outcome(1, 5, 3_000, 0, 2_500, retry_3s)],
    }
}

/// Window `window` of check `check` (limit 1 per second), denying for
/// `retry_ms` (0: it fits).
pub fn window(check: usize, window: usize, retry_ms: u64) -> WindowOutcome {
    WindowOutcome {
        overridden: false,
        check,
        window,
        limit: 1,
        period_ms: 1_000,
        remaining: u64::from(retry_ms == 0),
        reset_ms: retry_ms.max(500),
        retry_ms,
    }
}
