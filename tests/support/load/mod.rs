//! The one load generator of the tests: `clients` threads, each sending its
//! requests to Envoy one after another (a closed loop: the next leaves when
//! the previous one is answered), at most `per_client` of them, until
//! stopped. A [`Plan`] picks the mode:
//!
//! - [`Plan::closed`]: a new connection per request (`connection: close`),
//!   every answer kept (the failure and store-error tests);
//! - [`Plan::keep_alive`]: one keep-alive connection per client, as `wrk`
//!   sends, opened again after an error (the steady loads);
//! - [`Plan::paced`]: as `closed`, but a client's `i`-th request leaves no
//!   earlier than `i` × the pace after its start: while a store is down,
//!   requests fail in microseconds, and unpaced the load would be over
//!   before it comes back (failovers, the soak);
//! - [`Plan::flood`]: keep-alive on thousands of clients with small stacks,
//!   answers only counted (a flood's are too many to keep).
//!
//! Every mode counts its answers by [`Class`] while it runs ([`Tally`]).

mod counts;
mod tally;

pub use tally::{classify, raise_fd_limit, Class, Tally, CLASSES};

use super::http::{read_response, Response};
pub use counts::Counts;
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A client-side bound on one request: a request still unanswered after it
/// is recorded as an error (it would have hung).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// One request to send.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Header lines: name, value bytes (which may be non-UTF-8).
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

/// What client `thread` sends as its `index`-th request.
pub type RequestFn = dyn Fn(usize, usize) -> Request + Send + Sync;

/// The same request every time.
pub fn repeat(request: Request) -> Arc<RequestFn> {
    Arc::new(move |_, _| request.clone())
}

/// Called with every answer: the client, the request's index, the response
/// (if any).
pub type OnAnswer = dyn Fn(usize, usize, Option<&Response>) + Send + Sync;

/// How a client reaches Envoy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    PerRequest,
    KeepAlive,
}

/// A load's shape; see the module's modes.
#[derive(Clone)]
pub struct Plan {
    pub clients: usize,
    pub per_client: usize,
    pub connection: Connection,
    /// A client's `i`-th request leaves no earlier than `i` × this after its
    /// start (after a slow answer, the slots already past leave at once).
    pub pace: Option<Duration>,
    /// Every answer kept as a [`Sample`]; `false`: only counted.
    pub keep: bool,
    /// Read and write timeout of each request.
    pub timeout: Duration,
    /// Each client thread's stack, when not the default.
    pub stack: Option<usize>,
    pub on_answer: Option<Arc<OnAnswer>>,
}

impl Plan {
    pub fn closed(clients: usize, per_client: usize) -> Plan {
        Plan {
            clients,
            per_client,
            connection: Connection::PerRequest,
            pace: None,
            keep: true,
            timeout: CLIENT_TIMEOUT,
            stack: None,
            on_answer: None,
        }
    }

    pub fn keep_alive(clients: usize, per_client: usize) -> Plan {
        Plan { connection: Connection::KeepAlive, ..Plan::closed(clients, per_client) }
    }

    pub fn paced(clients: usize, per_client: usize, pace: Duration) -> Plan {
        Plan { pace: Some(pace), ..Plan::closed(clients, per_client) }
    }

    pub fn flood(clients: usize, per_client: usize) -> Plan {
        Plan {
            keep: false,
            timeout: Duration::from_secs(10),
            stack: Some(128 << 10),
            ..Plan::keep_alive(clients, per_client)
        }
    }

    /// Calls `f(thread, index, response)` for every answer.
    pub fn on_answer(self, f: Arc<OnAnswer>) -> Plan {
        Plan { on_answer: Some(f), ..self }
    }
}

/// One request's outcome.
#[derive(Debug, Clone)]
pub struct Sample {
    pub thread: usize,
    pub index: usize,
    /// When it was answered (or failed).
    pub at: Instant,
    pub took: Duration,
    /// `None`: no HTTP response (I/O error or client timeout, in `error`).
    pub response: Option<Response>,
    pub error: Option<String>,
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

/// A load running in the background.
pub struct Load {
    handles: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    pub tally: Arc<Tally>,
    pub started: Instant,
}

impl Load {
    pub fn start(port: u16, plan: Plan, request: Arc<RequestFn>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let tally = Arc::new(Tally::default());
        let started = Instant::now();
        let handles = (0..plan.clients)
            .map(|thread| {
                let client = Client {
                    port,
                    thread,
                    plan: plan.clone(),
                    request: request.clone(),
                    stop: stop.clone(),
                    samples: samples.clone(),
                    tally: tally.clone(),
                };
                let mut builder = std::thread::Builder::new();
                if let Some(size) = plan.stack {
                    builder = builder.stack_size(size);
                }
                builder.spawn(move || client.run()).expect("spawn a load client")
            })
            .collect();
        Load { handles, stop, samples, tally, started }
    }

    /// Requests answered (or failed) so far.
    pub fn answered(&self) -> usize {
        self.tally.total() as usize
    }

    /// Requests admitted by the store so far (200 with `RateLimit`).
    pub fn admitted(&self) -> usize {
        self.tally.admitted() as usize
    }

    /// Polls until at least `n` requests have been answered.
    pub fn wait_answered(&self, n: usize) {
        super::wait_until(&format!("{n} requests to be answered"), Duration::from_secs(60), || self.answered() >= n);
    }

    /// Kept samples so far that ended after `t` with `status`.
    pub fn count_after(&self, t: Instant, status: u16) -> usize {
        let samples = self.samples.lock().unwrap();
        samples.iter().filter(|s| s.at > t && s.status() == Some(status)).count()
    }

    /// Waits until every client has sent its `per_client` requests.
    pub fn join(self) -> Report {
        for h in self.handles {
            h.join().unwrap();
        }
        let mut samples = std::mem::take(&mut *self.samples.lock().unwrap());
        samples.sort_by_key(|s| s.at);
        Report { started: self.started, samples, tally: self.tally }
    }

    /// Stops the clients after their current request.
    pub fn stop(self) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        self.join()
    }
}

/// Runs a load to completion.
pub fn run(port: u16, plan: Plan, request: Arc<RequestFn>) -> Report {
    Load::start(port, plan, request).join()
}

/// One client thread.
struct Client {
    port: u16,
    thread: usize,
    plan: Plan,
    request: Arc<RequestFn>,
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    tally: Arc<Tally>,
}

impl Client {
    fn run(self) {
        let started = Instant::now();
        let mut conn: Option<TcpStream> = None;
        for index in 0..self.plan.per_client {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            if let Some(pace) = self.plan.pace {
                // Pacing, not waiting for a condition: the next slot.
                if let Some(ahead) = (started + pace * index as u32).checked_duration_since(Instant::now()) {
                    std::thread::sleep(ahead);
                }
            }
            let req = (self.request)(self.thread, index);
            let sent = Instant::now();
            let result = match self.plan.connection {
                Connection::PerRequest => send_raw(self.port, &req, self.plan.timeout),
                Connection::KeepAlive => self.keep_alive(&mut conn, &req),
            };
            let at = Instant::now();
            let (response, error) = match result {
                Ok(r) => (Some(r), None),
                Err(e) => {
                    conn = None;
                    (None, Some(e.to_string()))
                }
            };
            self.tally.add(response.as_ref(), at - sent);
            if let Some(f) = &self.plan.on_answer {
                f(self.thread, index, response.as_ref());
            }
            if self.plan.keep {
                let sample = Sample { thread: self.thread, index, at, took: at - sent, response, error };
                self.samples.lock().unwrap().push(sample);
            }
        }
    }

    fn keep_alive(&self, conn: &mut Option<TcpStream>, request: &Request) -> std::io::Result<Response> {
        let stream = match conn {
            Some(s) => s,
            None => conn.insert(connect(self.port, self.plan.timeout)?),
        };
        write_request(stream, request, false)?;
        read_response(stream)
    }
}

fn connect(port: u16, timeout: Duration) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

fn write_request(stream: &mut TcpStream, request: &Request, close: bool) -> std::io::Result<()> {
    let mut out = format!("{} {} HTTP/1.1\r\n", request.method, request.path).into_bytes();
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"host: tollgate.test\r\n");
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
    stream.write_all(&out)
}

/// Sends `request` on a new connection and reads the response (by its
/// framing).
pub fn send_raw(port: u16, request: &Request, timeout: Duration) -> std::io::Result<Response> {
    let mut stream = connect(port, timeout)?;
    write_request(&mut stream, request, true)?;
    read_response(&mut stream)
}

/// A finished load: every kept answer, in the order they ended, and the
/// counts of all of them.
#[derive(Debug)]
pub struct Report {
    pub started: Instant,
    pub samples: Vec<Sample>,
    pub tally: Arc<Tally>,
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

    /// The samples, once asserted that every request got a response.
    pub fn all_answered(self) -> Vec<Sample> {
        assert!(self.errors().is_empty(), "every request is answered: {:?}", self.errors());
        self.samples
    }

    /// Requests the store decided (RateLimit header present).
    pub fn decided(&self) -> usize {
        self.samples.iter().filter(|s| s.decided()).count()
    }

    /// The last request of every client.
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
