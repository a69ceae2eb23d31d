//! A bounded load generator for the failure tests: `threads` threads each
//! send `per_thread` requests, one connection per request (no keep-alive),
//! and record per request its status, latency and rate-limit headers.

use super::http::{read_response, Response};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A client-side bound on one request: a request still unanswered after it
/// is recorded as an error (it would have hung).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// One request's outcome.
#[derive(Debug, Clone)]
pub struct Sample {
    pub thread: usize,
    pub index: usize,
    /// `None`: no HTTP response (I/O error or client timeout, in `error`).
    pub response: Option<Response>,
    pub error: Option<String>,
    pub took: Duration,
}

impl Sample {
    pub fn status(&self) -> Option<u16> {
        self.response.as_ref().map(|r| r.status)
    }

    /// The store decided this request (it carries the RateLimit header).
    pub fn decided(&self) -> bool {
        self.response.as_ref().is_some_and(|r| r.header("ratelimit").is_some())
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.response.as_ref()?.header(name)
    }
}

/// What request thread `t` sends as its `i`-th: raw header lines (name, value bytes).
pub type RequestFn = dyn Fn(usize, usize) -> Request + Send + Sync;

/// One request to send.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Request {
    pub fn new(method: &str, path: &str, headers: &[(&str, &str)]) -> Self {
        Request {
            method: method.into(),
            path: path.into(),
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect(),
        }
    }
}

/// Sends `request` (header values as raw bytes, so they may be non-UTF-8)
/// on a new connection and reads the response (by its framing).
pub fn send_raw(port: u16, request: &Request, timeout: Duration) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut out =
        format!("{} {} HTTP/1.1\r\nconnection: close\r\nhost: tollgate.test\r\n", request.method, request.path)
            .into_bytes();
    for (k, v) in &request.headers {
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
    if request.method == "POST" {
        out.extend_from_slice(b"content-length: 0\r\n");
    }
    out.extend_from_slice(b"\r\n");
    stream.write_all(&out)?;
    read_response(&mut stream)
}

/// Load running in the background.
pub struct Load {
    handles: Vec<JoinHandle<Vec<Sample>>>,
    completed: Arc<AtomicUsize>,
    pub total: usize,
}

impl Load {
    pub fn start(port: u16, threads: usize, per_thread: usize, request: Arc<RequestFn>) -> Load {
        let completed = Arc::new(AtomicUsize::new(0));
        let handles = (0..threads)
            .map(|thread| {
                let request = Arc::clone(&request);
                let completed = Arc::clone(&completed);
                std::thread::spawn(move || {
                    (0..per_thread)
                        .map(|index| {
                            let req = request(thread, index);
                            let start = Instant::now();
                            let result = send_raw(port, &req, CLIENT_TIMEOUT);
                            let took = start.elapsed();
                            completed.fetch_add(1, Ordering::SeqCst);
                            let (response, error) = match result {
                                Ok(r) => (Some(r), None),
                                Err(e) => (None, Some(e.to_string())),
                            };
                            Sample { thread, index, response, error, took }
                        })
                        .collect()
                })
            })
            .collect();
        Load { handles, completed, total: threads * per_thread }
    }

    pub fn completed(&self) -> usize {
        self.completed.load(Ordering::SeqCst)
    }

    /// Polls until at least `n` requests have completed.
    pub fn wait_completed(&self, n: usize) {
        super::wait_until(&format!("{n} requests to complete"), Duration::from_secs(60), || self.completed() >= n);
    }

    pub fn join(self) -> Report {
        let samples = self.handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        Report { samples }
    }
}

/// Runs `threads` × `per_thread` requests to completion.
pub fn run(port: u16, threads: usize, per_thread: usize, request: Arc<RequestFn>) -> Report {
    Load::start(port, threads, per_thread, request).join()
}

/// Every request's outcome.
#[derive(Debug)]
pub struct Report {
    pub samples: Vec<Sample>,
}

impl Report {
    pub fn max_latency(&self) -> Duration {
        self.samples.iter().map(|s| s.took).max().unwrap_or_default()
    }

    pub fn count(&self, status: u16) -> usize {
        self.samples.iter().filter(|s| s.status() == Some(status)).count()
    }

    pub fn errors(&self) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.response.is_none()).collect()
    }

    /// Requests the store decided (RateLimit header present).
    pub fn decided(&self) -> usize {
        self.samples.iter().filter(|s| s.decided()).count()
    }

    /// The last request of every thread.
    pub fn last_of_each_thread(&self) -> Vec<&Sample> {
        let threads = self.samples.iter().map(|s| s.thread).max().map_or(0, |t| t + 1);
        (0..threads).filter_map(|t| self.samples.iter().filter(|s| s.thread == t).max_by_key(|s| s.index)).collect()
    }

    /// A one-line summary for the test output (`cargo test -- --nocapture`).
    pub fn summary(&self, what: &str) -> String {
        let mut statuses: Vec<(u16, usize)> = Vec::new();
        for s in &self.samples {
            if let Some(code) = s.status() {
                match statuses.iter_mut().find(|(c, _)| *c == code) {
                    Some((_, n)) => *n += 1,
                    None => statuses.push((code, 1)),
                }
            }
        }
        statuses.sort();
        let mut took: Vec<Duration> = self.samples.iter().map(|s| s.took).collect();
        took.sort();
        let p50 = took.get(took.len() / 2).copied().unwrap_or_default();
        format!(
            "{what}: {} requests, statuses {statuses:?}, {} decided, {} errors, latency p50 {p50:?} max {:?}",
            self.samples.len(),
            self.decided(),
            self.errors().len(),
            self.max_latency()
        )
    }
}
