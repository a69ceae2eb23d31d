//! What a load's answers came to: requests answered, and those admitted
//! with their `RateLimit` header (decided: never by `failure_mode`), counted
//! as they come, for loads that run while a test acts.

use super::OnAnswer;
use crate::support::Response;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Shared by every load whose plan takes [`Counts::on_answer`].
#[derive(Default, Clone)]
pub struct Counts {
    sent: Arc<AtomicU64>,
    admitted: Arc<AtomicU64>,
}

impl Counts {
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    pub fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }

    /// The callback that counts each answer here (`Plan::on_answer`).
    pub fn on_answer(&self) -> Arc<OnAnswer> {
        let counts = self.clone();
        Arc::new(move |_: usize, _: usize, r: Option<&Response>| {
            counts.sent.fetch_add(1, Ordering::Relaxed);
            if r.is_some_and(|r| r.status == 200 && r.header("ratelimit").is_some()) {
                counts.admitted.fetch_add(1, Ordering::Relaxed);
            }
        })
    }
}
