//! What a load's answers were, counted while it runs: per [`Class`], the
//! admissions and the slowest answer.

use super::super::http::Response;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a response was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Decided by the store (it carries `RateLimit`), admitted or denied.
    Decided,
    /// Refused by the worker as overload (`rate limiter overloaded`).
    Overloaded,
    /// `failure_mode` (200 without `RateLimit`, or its 503).
    FailureMode,
    /// No response, or anything else.
    Other,
}

pub const CLASSES: [Class; 4] = [Class::Decided, Class::Overloaded, Class::FailureMode, Class::Other];

pub fn classify(response: Option<&Response>) -> Class {
    let Some(r) = response else { return Class::Other };
    let body = r.body_text();
    if r.header("ratelimit").is_some() {
        Class::Decided
    } else if r.status == 503 && body.contains("overloaded") {
        Class::Overloaded
    } else if r.status == 200 || (r.status == 503 && body.contains("store unavailable")) {
        Class::FailureMode
    } else {
        Class::Other
    }
}

/// Counts per class, the admissions (200 decided by the store), and the
/// slowest answer.
#[derive(Debug, Default)]
pub struct Tally {
    counts: [AtomicU64; 4],
    admitted: AtomicU64,
    slowest_us: AtomicU64,
}

impl Tally {
    pub fn count(&self, class: Class) -> u64 {
        let i = CLASSES.iter().position(|c| *c == class).unwrap_or(3);
        self.counts[i].load(Ordering::Relaxed)
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }

    pub fn slowest(&self) -> Duration {
        Duration::from_micros(self.slowest_us.load(Ordering::Relaxed))
    }

    pub(super) fn add(&self, response: Option<&Response>, took: Duration) {
        let class = classify(response);
        if class == Class::Decided && response.is_some_and(|r| r.status == 200) {
            self.admitted.fetch_add(1, Ordering::Relaxed);
        }
        self.slowest_us.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
        let i = CLASSES.iter().position(|c| *c == class).unwrap_or(3);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn summary(&self) -> String {
        let total = self.total().max(1) as f64;
        let parts: Vec<String> = CLASSES
            .iter()
            .map(|c| format!("{c:?} {} ({:.2}%)", self.count(*c), 100.0 * self.count(*c) as f64 / total))
            .collect();
        format!("{} answers: {}; slowest {:?}", self.total(), parts.join(", "), self.slowest())
    }
}

/// Raises this process's open-file limit to its hard limit (children, Envoy
/// among them, inherit it): a flood needs a socket per client on each side.
pub fn raise_fd_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    #[allow(unsafe_code)]
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
