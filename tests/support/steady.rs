//! Steady load over keep-alive connections (as `wrk` sends it): `threads`
//! clients, each with one connection to Envoy (opened again after an error),
//! sending its requests one after another until stopped, and at most
//! `max_per_thread` of them. Every answer is timed and kept.

use super::http::{read_response, Response};
use super::load::{Request, RequestFn};
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One request's answer.
#[derive(Debug, Clone)]
pub struct Answer {
    pub thread: usize,
    /// When it was answered, since the load started.
    pub at: Duration,
    pub took: Duration,
    pub response: Option<Response>,
}

impl Answer {
    /// Decided by the store (it carries `RateLimit`).
    pub fn decided(&self) -> bool {
        self.response.as_ref().is_some_and(|r| r.header("ratelimit").is_some())
    }
}

/// Load running in the background.
pub struct Steady {
    handles: Vec<JoinHandle<Vec<Answer>>>,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
    pub started: Instant,
}

fn write(stream: &mut TcpStream, request: &Request) -> std::io::Result<()> {
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

fn connect(port: u16) -> Option<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.set_nodelay(true).ok()?;
    Some(stream)
}

impl Steady {
    pub fn start(port: u16, threads: usize, max_per_thread: usize, request: Arc<RequestFn>) -> Steady {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let handles = (0..threads)
            .map(|thread| {
                let (stop, answered, request) = (stop.clone(), answered.clone(), request.clone());
                std::thread::spawn(move || {
                    let mut out = Vec::new();
                    let mut conn = None;
                    for index in 0..max_per_thread {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let req = request(thread, index);
                        let sent = Instant::now();
                        let response = (|| {
                            let stream = match &mut conn {
                                Some(s) => s,
                                None => conn.insert(connect(port)?),
                            };
                            write(stream, &req).ok()?;
                            read_response(stream).ok()
                        })();
                        if response.is_none() {
                            conn = None;
                        }
                        answered.fetch_add(1, Ordering::Relaxed);
                        out.push(Answer { thread, at: started.elapsed(), took: sent.elapsed(), response });
                    }
                    out
                })
            })
            .collect();
        Steady { handles, stop, answered, started }
    }

    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::Relaxed)
    }

    /// Stops the clients and gives every answer, in no particular order.
    pub fn stop(self) -> Vec<Answer> {
        self.stop.store(true, Ordering::Relaxed);
        self.handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    }
}
