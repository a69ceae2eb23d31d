//! A demo upstream for the tests of counting on the response: a tiny
//! HTTP/1.1 server (keep-alive, one thread per connection) that answers
//! what each request asks for in its headers, and records every request
//! it got.
//!
//! | request header | the response |
//! | --- | --- |
//! | `x-demo-status: 401` | that status (default 200) |
//! | `x-demo-header: name=value` | that header (`;`-separated for several) |
//! | `x-demo-usage: 35` | `{"id":"demo","usage":{"prompt_tokens":3,"total_tokens":35}}`, JSON |
//! | `x-demo-pad: 5000` | the JSON body padded with that many bytes |
//! | `x-demo-sse: 35` | an event stream in chunks: three deltas, the usage event, `[DONE]` |
//! | `x-demo-body: text` | that body (text/plain) |
//! | `x-demo-hold: 1` | waits for [`Upstream::release`] first (not while [`Upstream::set_open`]) |
//!
//! Each request is recorded with the time its headers arrived ([`Hit::at`]),
//! on the clock Valkey's `TIME` reads on this machine: when an admitted
//! request reached the service, which a busy client cannot distort.
//!
//! [`demo_upstream`] points the `demo_upstream` cluster of a rendered
//! `envoy/envoy.yaml` at it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One request the upstream got.
#[derive(Debug, Clone)]
pub struct Hit {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When its headers had arrived.
    pub at: SystemTime,
}

impl Hit {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// [`Hit::at`] in ms since the Unix epoch (the clock of Valkey's `TIME`).
    pub fn at_ms(&self) -> u64 {
        self.at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
    }
}

#[derive(Default)]
struct State {
    /// Requests whose headers arrived (whole or not).
    starts: AtomicUsize,
    hits: Mutex<Vec<Hit>>,
    /// Bumped by each release: held requests wait for a change.
    released: Mutex<u64>,
    wake: Condvar,
    stop: AtomicBool,
    /// `x-demo-hold` holds nothing while set.
    open: AtomicBool,
}

pub struct Upstream {
    pub port: u16,
    state: Arc<State>,
}

impl Upstream {
    pub fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if shared.stop.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let state = shared.clone();
                std::thread::spawn(move || serve(stream, &state));
            }
        });
        Upstream { port, state }
    }

    /// Requests whose headers arrived, complete or not (a request whose
    /// body never came counts here only).
    pub fn starts(&self) -> usize {
        self.state.starts.load(Ordering::Relaxed)
    }

    /// Every complete request so far.
    pub fn hits(&self) -> Vec<Hit> {
        self.state.hits.lock().unwrap().clone()
    }

    /// Lets every request waiting with `x-demo-hold` be answered.
    pub fn release(&self) {
        *self.state.released.lock().unwrap() += 1;
        self.state.wake.notify_all();
    }

    /// `true`: releases every request waiting with `x-demo-hold`, and
    /// answers later ones at once, until set `false` again (for requests
    /// that reach the upstream at times the test does not know, such as
    /// shaped ones).
    pub fn set_open(&self, open: bool) {
        self.state.open.store(open, Ordering::SeqCst);
        if open {
            self.release();
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        self.release();
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// `text` (a rendered `envoy/envoy.yaml`) with Envoy's buffer filter
/// between tollgate and the router of the demo listener: a request goes on
/// to the router only with its whole body (what a rule reserving from the
/// request body needs, docs/configuration.md).
pub fn buffer_after_tollgate(text: String) -> String {
    let Some(at) = text.find("- name: envoy.filters.http.router") else { return text };
    let indent = text[..at].rsplit('\n').next().unwrap_or("");
    let filter = [
        "- name: envoy.filters.http.buffer",
        "  typed_config:",
        "    \"@type\": type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer",
        "    max_request_bytes: 1048576",
    ];
    let block: String = filter.iter().map(|l| format!("{l}\n{indent}")).collect();
    format!("{}{block}{}", &text[..at], &text[at..])
}

/// `text` (a rendered `envoy/envoy.yaml`) with the `demo_upstream`
/// cluster sending to `127.0.0.1:port`.
pub fn demo_upstream(text: String, port: u16) -> String {
    let Some(at) = text.find("cluster_name: demo_upstream") else { return text };
    let (head, tail) = text.split_at(at);
    let Some(p) = tail.find("port_value: ") else { return text };
    let digits = tail[p + 12..].chars().take_while(char::is_ascii_digit).count();
    format!("{head}{}port_value: {port}{}", &tail[..p], &tail[p + 12 + digits..])
}

fn serve(stream: TcpStream, state: &State) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    // A response is written in parts (head, body): without this the body
    // waits for the head's delayed ACK, about 40 ms per request.
    let _ = stream.set_nodelay(true);
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut reader = BufReader::new(stream);
    while let Some(hit) = read_request(&mut reader, state) {
        let close = hit.header("connection").is_some_and(|c| c.eq_ignore_ascii_case("close"));
        state.hits.lock().unwrap().push(hit.clone());
        if hit.header("x-demo-hold").is_some() {
            let mut released = state.released.lock().unwrap();
            let seen = *released;
            while *released == seen && !state.stop.load(Ordering::Relaxed) && !state.open.load(Ordering::SeqCst) {
                released = state.wake.wait(released).unwrap();
            }
        }
        if respond(&mut writer, &hit).is_err() || close {
            return;
        }
    }
}

fn read_request(reader: &mut BufReader<TcpStream>, state: &State) -> Option<Hit> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    state.starts.fetch_add(1, Ordering::Relaxed);
    let mut hit = Hit { method, path, headers, body: Vec::new(), at: SystemTime::now() };
    if let Some(length) = hit.header("content-length").and_then(|l| l.parse::<usize>().ok()) {
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        hit.body = body;
    } else if hit.header("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
            hit.body.extend_from_slice(&chunk[..size]);
        }
    }
    Some(hit)
}

fn respond(out: &mut TcpStream, hit: &Hit) -> std::io::Result<()> {
    let status: u16 = hit.header("x-demo-status").and_then(|s| s.parse().ok()).unwrap_or(200);
    let mut head = format!("HTTP/1.1 {status} Demo\r\n");
    for pair in hit.header("x-demo-header").unwrap_or("").split(';').filter(|p| !p.is_empty()) {
        if let Some((k, v)) = pair.split_once('=') {
            head.push_str(&format!("{}: {}\r\n", k.trim(), v.trim()));
        }
    }
    if let Some(total) = hit.header("x-demo-sse") {
        head.push_str("content-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
        out.write_all(head.as_bytes())?;
        let mut events: Vec<String> =
            ["He", "llo", "!"].iter().map(|d| format!("data: {{\"delta\":\"{d}\"}}\n\n")).collect();
        events.push(format!("data: {{\"usage\":{{\"prompt_tokens\":3,\"total_tokens\":{total}}}}}\n\n"));
        events.push("data: [DONE]\n\n".to_string());
        for event in events {
            out.write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())?;
            out.flush()?;
        }
        return out.write_all(b"0\r\n\r\n");
    }
    let (body, kind) = match (hit.header("x-demo-usage"), hit.header("x-demo-body")) {
        (Some(total), _) => {
            let pad = hit.header("x-demo-pad").and_then(|p| p.parse::<usize>().ok()).unwrap_or(0);
            let body = format!(
                r#"{{"id":"demo","pad":"{}","usage":{{"prompt_tokens":3,"total_tokens":{total}}}}}"#,
                "x".repeat(pad)
            );
            (body, "application/json")
        }
        (None, Some(text)) => (text.to_string(), "text/plain"),
        (None, None) => ("hello from the demo upstream\n".to_string(), "text/plain"),
    };
    head.push_str(&format!("content-type: {kind}\r\ncontent-length: {}\r\n\r\n", body.len()));
    out.write_all(head.as_bytes())?;
    out.write_all(body.as_bytes())?;
    out.flush()
}
