//! A flood: thousands of keep-alive clients (one thread each, small stacks)
//! sending requests one after another for a bounded time, every answer
//! sorted into a class on the fly (a flood's answers are too many to keep).

use super::http::{read_response, Response};
use super::load::RequestFn;
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Called with every answer: the client thread, the request's index, the
/// response (if any).
pub type OnAnswer = dyn Fn(usize, usize, Option<&Response>) + Send + Sync;

/// Counts per class, and the slowest answer.
#[derive(Debug, Default)]
pub struct Tally {
    counts: [AtomicU64; 4],
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

    pub fn slowest(&self) -> Duration {
        Duration::from_micros(self.slowest_us.load(Ordering::Relaxed))
    }

    fn add(&self, class: Class, took: Duration) {
        let i = CLASSES.iter().position(|c| *c == class).unwrap_or(3);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.slowest_us.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
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

fn write(stream: &mut TcpStream, request: &super::load::Request) -> std::io::Result<()> {
    let mut out = format!("{} {} HTTP/1.1\r\nhost: tollgate.test\r\n", request.method, request.path).into_bytes();
    for (k, v) in &request.headers {
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    stream.write_all(&out)
}

/// A flood in the background.
pub struct Flood {
    handles: Vec<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    pub tally: Arc<Tally>,
    pub started: Instant,
}

impl Flood {
    /// `connections` clients to 127.0.0.1:`port`, each at most `max_each` requests.
    pub fn start(port: u16, connections: usize, max_each: usize, request: Arc<RequestFn>) -> Flood {
        Flood::start_with(port, connections, max_each, request, Arc::new(|_, _, _| {}))
    }

    /// [`Flood::start`], calling `on_answer(thread, index, response)` for
    /// every answer.
    pub fn start_with(
        port: u16,
        connections: usize,
        max_each: usize,
        request: Arc<RequestFn>,
        on_answer: Arc<OnAnswer>,
    ) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let started = Instant::now();
        let handles = (0..connections)
            .map(|thread| {
                let (stop, tally, request, on_answer) =
                    (stop.clone(), tally.clone(), request.clone(), on_answer.clone());
                std::thread::Builder::new()
                    .stack_size(128 << 10)
                    .spawn(move || {
                        let mut conn: Option<TcpStream> = None;
                        for index in 0..max_each {
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            let req = request(thread, index);
                            let sent = Instant::now();
                            let response = (|| {
                                if conn.is_none() {
                                    let s = TcpStream::connect(("127.0.0.1", port)).ok()?;
                                    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
                                    conn = Some(s);
                                }
                                let stream = conn.as_mut()?;
                                write(stream, &req).ok()?;
                                read_response(stream).ok()
                            })();
                            if response.is_none() {
                                conn = None;
                            }
                            tally.add(classify(response.as_ref()), sent.elapsed());
                            on_answer(thread, index, response.as_ref());
                        }
                    })
                    .expect("spawn a flood client")
            })
            .collect();
        Flood { handles, stop, tally, started }
    }

    pub fn stop(self) -> Arc<Tally> {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            let _ = h.join();
        }
        self.tally
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
