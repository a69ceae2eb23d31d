//! A minimal HTTP/1.1 client for the tests.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub fn admin_get(port: u16, path: &str) -> Option<Response> {
    http(port, "GET", path, &[]).ok()
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A minimal HTTP/1.1 client: one request per connection.
pub fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Response> {
    http_to("127.0.0.1", port, method, path, headers)
}

/// [`http`] to another loopback address (`::1`).
pub fn http_to(host: &str, port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Response> {
    let body: Option<&[u8]> = (method == "POST" || method == "PUT").then_some(b"");
    http_body_to(host, port, method, path, headers, body)
}

/// [`http`] with a request body (sent with its `content-length`).
pub fn http_body(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    http_body_to("127.0.0.1", port, method, path, headers, Some(body))
}

fn http_body_to(
    host: &str,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect((host, port))?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nconnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str("host: tollgate.test\r\n");
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(body) = body {
        request.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    stream.write_all(&bytes)?;
    // Read until the response is complete by its own framing (content-length
    // or the last chunk), like a real client: Envoy may keep the connection
    // open for its delayed-close grace period after a local reply.
    read_response(&mut stream)
}

/// A request whose head is sent and whose body is held back (a client
/// slow to send it): [`BodyLater::send`] sends the body and reads the
/// response.
pub struct BodyLater {
    stream: TcpStream,
    body: Vec<u8>,
}

/// Sends the head of `method path` with `headers` and the `content-length`
/// of `body` to 127.0.0.1:`port`, but not `body`.
pub fn body_later(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<BodyLater> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nconnection: close\r\nhost: tollgate.test\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    stream.write_all(head.as_bytes())?;
    Ok(BodyLater { stream, body: body.to_vec() })
}

impl BodyLater {
    /// Sends the body and reads the response.
    pub fn send(mut self) -> std::io::Result<Response> {
        self.stream.write_all(&self.body)?;
        read_response(&mut self.stream)
    }
}

/// Reads one response, complete by its framing (or at EOF).
pub fn read_response(stream: &mut TcpStream) -> std::io::Result<Response> {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(response) = complete_response(&raw) {
            return Ok(response);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return parse_response(&raw)
                .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad HTTP response"));
        }
        raw.extend_from_slice(&chunk[..n]);
    }
}

/// The response if `raw` holds all of it according to its framing.
pub fn complete_response(raw: &[u8]) -> Option<Response> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?.to_ascii_lowercase();
    let body = &raw[end + 4..];
    let length =
        head.lines().find_map(|l| l.strip_prefix("content-length:").and_then(|v| v.trim().parse::<usize>().ok()));
    if let Some(length) = length {
        return (body.len() >= length).then(|| parse_response(&raw[..end + 4 + length])).flatten();
    }
    if head.contains("transfer-encoding: chunked") {
        return body.windows(5).any(|w| w == b"0\r\n\r\n").then(|| parse_response(raw)).flatten();
    }
    None
}

pub fn parse_response(raw: &[u8]) -> Option<Response> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    if chunked {
        body = dechunk(&body)?;
    }
    Some(Response { status, headers, body })
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&data[..line_end]).ok()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

/// `(policy, r)` of every item of a response's `RateLimit` header.
pub fn remaining(resp: &Response) -> Vec<(String, u64)> {
    let header = resp.header("ratelimit").unwrap_or_else(|| panic!("no RateLimit header: {resp:?}"));
    header
        .split(", ")
        .map(|item| {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or_default().trim_matches('"').to_string();
            let r = parts.find_map(|p| p.strip_prefix("r=")).and_then(|r| r.parse().ok()).unwrap_or(u64::MAX);
            (name, r)
        })
        .collect()
}
