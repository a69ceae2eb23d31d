//! What a store holds over a run, and admissions by time: a reader that
//! polls in the background and folds each read into a state (the entries a
//! log ever held, a window's count as it moves, snapshots of a syncer set),
//! and the most of a sorted list of times in any span.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Reads every `every` in a background thread, folding each read into its
/// state, until stopped (or dropped).
pub struct Poller<S> {
    state: Arc<Mutex<S>>,
    reads: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl<S: Default + Send + 'static> Poller<S> {
    /// Calls `read(&mut state)` now and then every `every`.
    pub fn start(every: Duration, mut read: impl FnMut(&mut S) + Send + 'static) -> Poller<S> {
        let state = Arc::new(Mutex::new(S::default()));
        let (reads, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (shared, done, stopped) = (state.clone(), reads.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                read(&mut shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
                done.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(every);
            }
        });
        Poller { state, reads, stop, handle: Some(handle) }
    }

    /// Waits (polling) until `n` more reads have been made; with `n` >= 2
    /// one began after this call, so what was written before it is in the
    /// state.
    pub fn read_again(&self, n: u64) {
        let target = self.reads.load(Ordering::Relaxed) + n;
        super::wait_until("the poller's next reads", Duration::from_secs(30), || {
            self.reads.load(Ordering::Relaxed) >= target
        });
    }

    /// `f` of the state as the reads so far left it.
    pub fn with<T>(&self, f: impl FnOnce(&S) -> T) -> T {
        f(&self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Stops the reads: the state they left.
    pub fn stop(mut self) -> S {
        self.halt();
        std::mem::take(&mut *self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

impl<S> Drop for Poller<S> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The most of `times` (ms, sorted) in any span `(t - period_ms, t]`, and
/// the `t` ending the first such span.
pub fn most_in_any_span(times: &[u64], period_ms: u64) -> (usize, u64) {
    let (mut most, mut end, mut from) = (0, 0, 0);
    for (i, &t) in times.iter().enumerate() {
        while times[from] + period_ms <= t {
            from += 1;
        }
        // Times equal to t later in the list are in the span too.
        let same = times[i + 1..].iter().take_while(|&&u| u == t).count();
        if i + 1 + same - from > most {
            (most, end) = (i + 1 + same - from, t);
        }
    }
    (most, end)
}
