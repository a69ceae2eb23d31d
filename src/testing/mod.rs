//! Builders shared by the unit tests: plugin configurations and limiter
//! checks (the same files the integration tests include), store answers and
//! a seeded generator for the property tests.

#![cfg(test)]

mod check;
mod plugin;
mod rng;

pub use check::check;
pub use plugin::{plugin, rule, Plugin};
pub use rng::Rng;

use crate::config::Config;
use crate::limiter::WindowOutcome;
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

/// Window `window` of check `check` (limit 1 per second), denying for
/// `retry_ms` (0: it fits).
pub fn window(check: usize, window: usize, retry_ms: u64) -> WindowOutcome {
    WindowOutcome {
        check,
        window,
        limit: 1,
        period_ms: 1_000,
        remaining: u64::from(retry_ms == 0),
        reset_ms: retry_ms.max(500),
        retry_ms,
    }
}
