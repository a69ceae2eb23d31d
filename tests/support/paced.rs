//! A paced load on one request in the background, for failovers: while a
//! store is down requests fail in microseconds, so each client sends at most
//! one request per millisecond (used by tests/live/sentinel.rs and the cluster
//! tests).

use super::load::{send_raw, Request};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One request of a [`Paced`] load: when it ended, its status, and whether
/// the store decided it (it carries `RateLimit`).
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub at: Instant,
    pub status: u16,
    pub decided: bool,
}

/// Load on one request in the background: `threads` clients, each at most
/// one request per millisecond (while a store is down, requests fail in
/// microseconds: unpaced, the load would be over before it comes back) and
/// at most `max` requests each.
pub struct Paced {
    stop: Arc<AtomicBool>,
    pub admitted: Arc<AtomicUsize>,
    pub outcomes: Arc<Mutex<Vec<Outcome>>>,
    threads: Vec<JoinHandle<()>>,
}

impl Paced {
    pub fn start(port: u16, threads: usize, max: u32, request: Request) -> Paced {
        let stop = Arc::new(AtomicBool::new(false));
        let admitted = Arc::new(AtomicUsize::new(0));
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..threads)
            .map(|_| {
                let (stop, admitted, outcomes, request) =
                    (stop.clone(), admitted.clone(), outcomes.clone(), request.clone());
                std::thread::spawn(move || {
                    let started = Instant::now();
                    for i in 0..max {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        // Pacing, not waiting for a condition: the next slot.
                        if let Some(ahead) =
                            (started + Duration::from_millis(u64::from(i))).checked_duration_since(Instant::now())
                        {
                            std::thread::sleep(ahead);
                        }
                        let r = send_raw(port, &request, Duration::from_secs(5)).expect("every request is answered");
                        let decided = r.header("ratelimit").is_some();
                        if r.status == 200 && decided {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        outcomes.lock().unwrap().push(Outcome { at: Instant::now(), status: r.status, decided });
                    }
                })
            })
            .collect();
        Paced { stop, admitted, outcomes, threads }
    }

    pub fn admitted(&self) -> usize {
        self.admitted.load(Ordering::Relaxed)
    }

    /// Outcomes so far that ended after `t` with `status`.
    pub fn count_after(&self, t: Instant, status: u16) -> usize {
        self.outcomes.lock().unwrap().iter().filter(|o| o.at > t && o.status == status).count()
    }

    /// Stops the clients; every outcome, in the order they ended.
    pub fn stop(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        let mut out = self.outcomes.lock().unwrap().clone();
        out.sort_by_key(|o| o.at);
        out
    }
}
