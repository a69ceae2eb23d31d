//! A slow and streaming upstream for the concurrency tests and
//! `make demo-concurrency`: a tiny HTTP/1.1 server (keep-alive, one thread
//! per connection, std only) whose requests last as long as a test says,
//! and which counts the requests in flight at it.
//!
//! | request header | the response |
//! | --- | --- |
//! | `x-slow-id: a1` | names the request (timeline, [`Slow::release`]); default `r<n>` |
//! | `x-slow-hold: 1` | ends when released ([`Slow::release`], [`Slow::release_all`]) |
//! | `x-slow-ms: 500` | ends after that long (with a hold: whichever comes first) |
//! | `x-slow-sse: 100` | an event stream (chunked), head at once, an event every 100 ms until its end |
//! | `x-slow-tokens: 35` | its usage: the last event (or the JSON body) says `total_tokens` 35 |
//!
//! Neither hold nor time: it ends at once. A plain response sends nothing
//! before its end (a slow service); an event stream sends its head at once.
//!
//! A request is in flight from the moment its head arrived until its end
//! (marked before the last bytes go out: the proxy cannot have seen the
//! response end before the upstream counts it ended) or until the upstream
//! sees its connection closed (the client left; marked when it notices, by
//! a failed write or a look at the socket every 10 ms while it waits). The
//! timeline keeps every start, end and departure in order.

use super::http::{complete_response, parse_response, Response};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What happened to a request at the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Its head arrived.
    Start,
    /// Its response is about to end (its last bytes follow).
    End,
    /// Its connection closed before the end: the client (or proxy) left.
    Gone,
}

/// One entry of the timeline.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: String,
    pub mark: Mark,
    pub at: Instant,
    /// ms since the Unix epoch: the clock Valkey's `TIME` reads on this machine.
    pub epoch_ms: u64,
    /// Requests in flight right after it.
    pub in_flight: usize,
}

#[derive(Default)]
struct Flight {
    timeline: Vec<Event>,
    current: usize,
    max: usize,
    seq: u64,
    /// Held requests released by name.
    released: HashSet<String>,
    /// Bumped by [`Slow::release_all`]: a held request started before ends.
    generation: u64,
}

#[derive(Default)]
struct State {
    flight: Mutex<Flight>,
    wake: Condvar,
    stop: AtomicBool,
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Flight> {
        self.flight.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn mark(&self, id: &str, mark: Mark) {
        let mut f = self.lock();
        match mark {
            Mark::Start => f.current += 1,
            Mark::End | Mark::Gone => f.current = f.current.saturating_sub(1),
        }
        f.max = f.max.max(f.current);
        let epoch_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let in_flight = f.current;
        f.timeline.push(Event { id: id.to_string(), mark, at: Instant::now(), epoch_ms, in_flight });
    }
}

/// The slow upstream; it stops (and lets every held request go) when dropped.
pub struct Slow {
    pub port: u16,
    state: Arc<State>,
}

impl Slow {
    pub fn start() -> Slow {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let state = shared.clone();
                std::thread::spawn(move || serve(stream, &state));
            }
        });
        Slow { port, state }
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.state.lock().current
    }

    /// The most requests ever in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.state.lock().max
    }

    /// Every start, end and departure so far, in order.
    pub fn timeline(&self) -> Vec<Event> {
        self.state.lock().timeline.clone()
    }

    /// How many events of kind `mark` so far.
    pub fn count(&self, mark: Mark) -> usize {
        self.state.lock().timeline.iter().filter(|e| e.mark == mark).count()
    }

    /// The first event of request `id` of kind `mark`.
    pub fn event(&self, id: &str, mark: Mark) -> Option<Event> {
        self.state.lock().timeline.iter().find(|e| e.id == id && e.mark == mark).cloned()
    }

    /// Ends held request `id` (now, or as soon as it arrives).
    pub fn release(&self, id: &str) {
        self.state.lock().released.insert(id.to_string());
        self.state.wake.notify_all();
    }

    /// Ends every request held now (not later ones).
    pub fn release_all(&self) {
        self.state.lock().generation += 1;
        self.state.wake.notify_all();
    }
}

impl Drop for Slow {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.release_all();
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One request's head, as far as the upstream reads it.
struct Ask {
    id: String,
    hold: bool,
    until: Option<Instant>,
    sse: Option<Duration>,
    tokens: u64,
    close: bool,
}

fn serve(stream: TcpStream, state: &State) {
    let _ = stream.set_nodelay(true);
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    let mut n = 0;
    while let Some(ask) = read_request(&mut reader, &mut n) {
        let generation = state.lock().generation;
        state.mark(&ask.id, Mark::Start);
        if respond(&mut writer, &ask, state, generation).is_err() {
            state.mark(&ask.id, Mark::Gone);
            return;
        }
        if ask.close {
            return;
        }
    }
}

/// Reads a request (head and body) and says what to answer; `None` at the
/// connection's end.
fn read_request(reader: &mut BufReader<TcpStream>, n: &mut u64) -> Option<Ask> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
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
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let ms = |name: &str| header(name).and_then(|v| v.parse::<u64>().ok()).map(Duration::from_millis);
    if let Some(length) = header("content-length").and_then(|l| l.parse::<usize>().ok()) {
        reader.read_exact(&mut vec![0; length]).ok()?;
    } else if header("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim(), 16).ok()?;
            reader.read_exact(&mut vec![0; size + 2]).ok()?;
            if size == 0 {
                break;
            }
        }
    }
    *n += 1;
    Some(Ask {
        id: header("x-slow-id").map_or_else(|| format!("r{n}"), str::to_string),
        hold: header("x-slow-hold").is_some(),
        until: ms("x-slow-ms").map(|d| Instant::now() + d),
        sse: ms("x-slow-sse").map(|d| d.max(Duration::from_millis(1))),
        tokens: header("x-slow-tokens").and_then(|v| v.parse().ok()).unwrap_or(0),
        close: header("connection").is_some_and(|c| c.eq_ignore_ascii_case("close")),
    })
}

/// Whether the peer closed the connection (a read would see its end).
fn closed(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let seen = stream.peek(&mut [0u8; 1]);
    let _ = stream.set_nonblocking(false);
    match seen {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    }
}

/// Waits until `ask` ends (`Ok(true)`), `step` has passed (`Ok(false)`), or
/// its connection closed (`Err`).
fn wait(out: &TcpStream, ask: &Ask, state: &State, generation: u64, step: Option<Duration>) -> std::io::Result<bool> {
    let step_end = step.map(|s| Instant::now() + s);
    let mut f = state.lock();
    loop {
        let now = Instant::now();
        let released = f.generation != generation || f.released.contains(&ask.id) || state.stop.load(Ordering::SeqCst);
        let timed_out = ask.until.is_some_and(|u| now >= u);
        if (ask.hold && released) || timed_out || (!ask.hold && ask.until.is_none()) {
            return Ok(true);
        }
        if step_end.is_some_and(|s| now >= s) {
            return Ok(false);
        }
        drop(f);
        if closed(out) {
            return Err(std::io::Error::new(ErrorKind::ConnectionAborted, "the client left"));
        }
        f = state.lock();
        let mut nap = Duration::from_millis(10);
        for end in [ask.until, step_end].into_iter().flatten() {
            nap = nap.min(end.saturating_duration_since(now));
        }
        f = state.wake.wait_timeout(f, nap.max(Duration::from_millis(1))).unwrap_or_else(|e| e.into_inner()).0;
    }
}

fn respond(out: &mut TcpStream, ask: &Ask, state: &State, generation: u64) -> std::io::Result<()> {
    let usage = format!(r#""usage":{{"prompt_tokens":3,"total_tokens":{}}}"#, ask.tokens);
    let Some(every) = ask.sse else {
        wait(out, ask, state, generation, None)?;
        let body = format!(r#"{{"id":"{}",{usage}}}"#, ask.id);
        let head =
            format!("HTTP/1.1 200 Slow\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len());
        state.mark(&ask.id, Mark::End);
        out.write_all(head.as_bytes())?;
        out.write_all(body.as_bytes())?;
        return out.flush();
    };
    out.write_all(b"HTTP/1.1 200 Slow\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")?;
    out.flush()?;
    let chunk = |event: String| format!("{:x}\r\n{event}\r\n", event.len());
    let mut sent = 0u64;
    while !wait(out, ask, state, generation, Some(every))? {
        sent += 1;
        out.write_all(chunk(format!("data: {{\"delta\":\"t{sent}\"}}\n\n")).as_bytes())?;
        out.flush()?;
    }
    out.write_all(chunk(format!("data: {{{usage}}}\n\n")).as_bytes())?;
    out.write_all(chunk("data: [DONE]\n\n".to_string()).as_bytes())?;
    out.flush()?;
    state.mark(&ask.id, Mark::End);
    out.write_all(b"0\r\n\r\n")?;
    out.flush()
}

/// A request sent, its response read when asked ([`Call::head`],
/// [`Call::finish`]); dropped unread, its client leaves (the connection
/// closes).
pub struct Call {
    stream: TcpStream,
    raw: Vec<u8>,
}

/// Sends `method path` with `headers` (and `body`, with its length) to
/// 127.0.0.1:`port` on a connection of its own; every read waits at most 60 s.
pub fn call(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> std::io::Result<Call> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nhost: tollgate.test\r\nconnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes)?;
    Ok(Call { stream, raw: Vec::new() })
}

impl Call {
    fn more(&mut self) -> std::io::Result<usize> {
        let mut chunk = [0u8; 8192];
        let n = self.stream.read(&mut chunk)?;
        self.raw.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// The response's status and headers, once they arrived (no body).
    pub fn head(&mut self) -> std::io::Result<Response> {
        while !self.raw.windows(4).any(|w| w == b"\r\n\r\n") {
            if self.more()? == 0 {
                return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "closed before the head"));
            }
        }
        let end = self.raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0);
        let head = String::from_utf8_lossy(&self.raw[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status = lines.next().and_then(|l| l.split(' ').nth(1)?.parse().ok());
        let status = status.ok_or_else(|| std::io::Error::new(ErrorKind::InvalidData, "bad status line"))?;
        let headers = lines.filter_map(|l| l.split_once(':'));
        let headers = headers.map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string())).collect();
        Ok(Response { status, headers, body: Vec::new() })
    }

    /// Reads on until `seen` holds of everything read so far (head and
    /// body as they came, chunk framing included), e.g. until an event
    /// stream has sent some events.
    pub fn read_until(&mut self, seen: impl Fn(&[u8]) -> bool) -> std::io::Result<()> {
        while !seen(&self.raw) {
            if self.more()? == 0 {
                return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "closed"));
            }
        }
        Ok(())
    }

    /// The whole response, complete by its framing (or at the end).
    pub fn finish(mut self) -> std::io::Result<Response> {
        loop {
            if let Some(response) = complete_response(&self.raw) {
                return Ok(response);
            }
            if self.more()? == 0 {
                return parse_response(&self.raw).ok_or_else(|| std::io::Error::new(ErrorKind::InvalidData, "bad"));
            }
        }
    }
}
