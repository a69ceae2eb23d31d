//! Real processes for the integration tests: a Valkey server and Envoy with the
//! built `tollgate.wasm`, each on free ports, ready when they answer (polled,
//! never slept for), stopped when dropped. Also a tiny HTTP/1.1 client and a
//! RESP client built on the crate's own codec.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tollgate::resp::{decode, encode_command, Limits, Value};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tool(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| repo_root().join(default))
}

pub fn envoy_bin() -> PathBuf {
    tool("TOLLGATE_ENVOY", ".tools/bin/envoy")
}

pub fn valkey_bin() -> PathBuf {
    tool("TOLLGATE_VALKEY", ".tools/bin/valkey-server")
}

pub fn wasm_path() -> PathBuf {
    tool("TOLLGATE_WASM", "target/wasm32-wasip1/release/tollgate.wasm")
}

/// A port that was free a moment ago, chosen below the kernel's ephemeral
/// range (32768+) so that outgoing connections cannot take it meanwhile.
/// Starts still retry on "address in use" (another test may pick it too).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
    let _ = STATE.compare_exchange(
        0,
        (u64::from(std::process::id()) << 32 ^ nanos) | 1,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    loop {
        let x = STATE
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |mut x| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                Some(x)
            })
            .unwrap_or(1);
        let port = 20_000 + (x % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Polls `ready` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-{name}-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A real valkey-server on a free port, with persistence off.
pub struct Valkey {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
}

impl Valkey {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Self {
        for _ in 0..5 {
            let mut v = Valkey {
                port: free_port(),
                child: None,
                dir: scratch_dir("valkey"),
                extra: extra.iter().map(|s| s.to_string()).collect(),
            };
            if v.try_restart() {
                return v;
            }
        }
        panic!("valkey-server did not start on 5 different ports");
    }

    /// Starts (again) on the same port.
    pub fn restart(&mut self) {
        assert!(self.try_restart(), "valkey-server did not start on port {}", self.port);
    }

    /// Starts on `self.port`; false if the server exits (port taken).
    fn try_restart(&mut self) -> bool {
        self.stop();
        let mut cmd = Command::new(valkey_bin());
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("start valkey-server (run `make tools`)");
        let start = Instant::now();
        loop {
            if matches!(try_command(self.port, &[b"PING"]), Ok(Value::Simple(s)) if s == b"PONG") {
                self.child = Some(child);
                return true;
            }
            if !matches!(child.try_wait(), Ok(None)) || start.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// One command, one connection; panics on I/O errors.
    pub fn cmd(&self, args: &[&str]) -> Value {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        try_command(self.port, &args).unwrap()
    }

    pub fn int(&self, args: &[&str]) -> i64 {
        match self.cmd(args) {
            Value::Integer(n) => n,
            other => panic!("{args:?} gave {other:?}"),
        }
    }
}

impl Drop for Valkey {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends one command to 127.0.0.1:`port` and reads one reply.
pub fn try_command(port: u16, args: &[&[u8]]) -> std::io::Result<Value> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut out = Vec::new();
    encode_command(&mut out, args);
    stream.write_all(&out)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed"));
        }
        buf.extend_from_slice(&chunk[..n]);
        match decode(&buf, &Limits::default()) {
            Ok((value, _)) => return Ok(value),
            Err(tollgate::resp::DecodeError::Incomplete) => continue,
            Err(e) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())),
        }
    }
}

/// Options for one Envoy process running `envoy/envoy.yaml` with substitutions.
pub struct EnvoyOptions {
    /// The plugin configuration JSON (replaces the demo's).
    pub plugin_config: String,
    pub valkey_port: u16,
    pub concurrency: u32,
}

/// A real Envoy running the repository's `envoy/envoy.yaml`, with only its
/// ports, module path and plugin configuration replaced.
pub struct Envoy {
    pub port: u16,
    pub admin_port: u16,
    ports: Ports,
    child: Option<Child>,
    dir: PathBuf,
    pub log: PathBuf,
    valkey_port: u16,
}

/// The ports one Envoy listens on.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub listener: u16,
    pub upstream: u16,
    pub admin: u16,
}

/// A config file of `envoy/` with the given ports, module, plugin
/// configuration and LDS directory substituted; nothing else changes.
pub fn render_envoy_config(text: &str, options: &EnvoyOptions, ports: Ports, lds_dir: &std::path::Path) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let replaced = line
            .replace("port_value: 10000", &format!("port_value: {}", ports.listener))
            .replace("port_value: 10001", &format!("port_value: {}", ports.upstream))
            .replace("port_value: 9901", &format!("port_value: {}", ports.admin))
            .replace("port_value: 6379", &format!("port_value: {}", options.valkey_port))
            .replace(
                "filename: target/wasm32-wasip1/release/tollgate.wasm",
                &format!("filename: {}", wasm_path().display()),
            )
            .replace("envoy/dynamic", &lds_dir.display().to_string());
        out.push_str(&replaced);
        out.push('\n');
        if line.trim_end().ends_with("value: |") {
            // Replace the demo's plugin configuration block.
            let indent = line.len() - line.trim_start().len() + 2;
            while lines.peek().is_some_and(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent) {
                lines.next();
            }
            for json_line in options.plugin_config.lines() {
                out.push_str(&" ".repeat(indent));
                out.push_str(json_line);
                out.push('\n');
            }
        }
    }
    out
}

fn read_envoy_file(name: &str) -> String {
    std::fs::read_to_string(repo_root().join("envoy").join(name)).unwrap()
}

impl Envoy {
    pub fn start(options: &EnvoyOptions) -> Self {
        Self::try_start(options).unwrap_or_else(|log| panic!("envoy did not become ready:\n{log}"))
    }

    /// Starts Envoy with `envoy/envoy.yaml`; `Err(log)` if it exits or never becomes ready.
    pub fn try_start(options: &EnvoyOptions) -> Result<Self, String> {
        Self::launch_retrying(options, false)
    }

    /// Another process may take a chosen port first: retry on fresh ports.
    fn launch_retrying(options: &EnvoyOptions, dynamic: bool) -> Result<Self, String> {
        let mut result = Self::launch(options, dynamic);
        for _ in 0..4 {
            match &result {
                Err(log) if log.contains("Address already in use") => result = Self::launch(options, dynamic),
                _ => break,
            }
        }
        result
    }

    /// Starts Envoy with `envoy/envoy-dynamic.yaml`: the demo listener comes
    /// from file-based LDS, so [`Envoy::reload`] can reconfigure it live.
    pub fn start_dynamic(options: &EnvoyOptions) -> Self {
        Self::launch_retrying(options, true).unwrap_or_else(|log| panic!("envoy did not become ready:\n{log}"))
    }

    fn launch(options: &EnvoyOptions, dynamic: bool) -> Result<Self, String> {
        let ports = Ports { listener: free_port(), upstream: free_port(), admin: free_port() };
        let dir = scratch_dir("envoy");
        let lds_dir = dir.join("lds");
        std::fs::create_dir_all(&lds_dir).unwrap();
        let bootstrap = if dynamic { "envoy-dynamic.yaml" } else { "envoy.yaml" };
        let config = dir.join("envoy.yaml");
        std::fs::write(&config, render_envoy_config(&read_envoy_file(bootstrap), options, ports, &lds_dir)).unwrap();
        let log = dir.join("envoy.log");
        let mut envoy = Envoy {
            port: ports.listener,
            admin_port: ports.admin,
            ports,
            child: None,
            dir,
            log,
            valkey_port: options.valkey_port,
        };
        if dynamic {
            envoy.reload(&options.plugin_config);
        }
        let child = Command::new(envoy_bin())
            .arg("-c")
            .arg(&config)
            .args(["--concurrency", &options.concurrency.to_string(), "--use-dynamic-base-id"])
            .args(["--log-level", "info", "--log-path"])
            .arg(&envoy.log)
            .current_dir(repo_root())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start envoy (run `make tools`)");
        envoy.child = Some(child);
        let start = Instant::now();
        loop {
            if !envoy.is_running() {
                return Err(envoy.log_text());
            }
            let ready = admin_get(envoy.admin_port, "/ready").is_some_and(|r| r.status == 200)
                && TcpStream::connect(("127.0.0.1", envoy.port)).is_ok();
            if ready {
                return Ok(envoy);
            }
            if start.elapsed() > Duration::from_secs(30) {
                return Err(envoy.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Rewrites the LDS file with a new plugin configuration (write, then
    /// rename over the watched file, as Envoy's file-based LDS expects).
    pub fn reload(&self, plugin_config: &str) {
        let options =
            EnvoyOptions { plugin_config: plugin_config.to_string(), valkey_port: self.valkey_port, concurrency: 1 };
        let lds_dir = self.dir.join("lds");
        let text = render_envoy_config(&read_envoy_file("dynamic/listeners.yaml"), &options, self.ports, &lds_dir);
        let tmp = self.dir.join("listeners.yaml.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, lds_dir.join("listeners.yaml")).unwrap();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
        http(self.port, method, path, headers).unwrap()
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The value of one counter or gauge from `/stats`.
    pub fn stat(&self, name: &str) -> Option<u64> {
        let body = admin_get(self.admin_port, &format!("/stats?filter=^{name}$"))?.body;
        let text = String::from_utf8_lossy(&body).into_owned();
        text.lines().find_map(|l| l.strip_prefix(&format!("{name}: "))?.trim().parse().ok())
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn admin_get(port: u16, path: &str) -> Option<Response> {
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

/// A minimal HTTP/1.1 client: one request per connection, read to EOF.
pub fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nhost: tollgate.test\r\nconnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" || method == "PUT" {
        request.push_str("content-length: 0\r\n");
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_response(&raw).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "bad HTTP response"))
}

fn parse_response(raw: &[u8]) -> Option<Response> {
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

/// The plugin configuration JSON embedded in `envoy/envoy.yaml`.
pub fn demo_plugin_config() -> String {
    let text = std::fs::read_to_string(repo_root().join("envoy/envoy.yaml")).unwrap();
    let mut lines = text.lines().skip_while(|l| !l.trim_end().ends_with("value: |"));
    let header = lines.next().expect("envoy.yaml has a `value: |` plugin configuration");
    let indent = header.len() - header.trim_start().len() + 2;
    lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent)
        .map(|l| l.get(indent..).unwrap_or("").to_string() + "\n")
        .collect()
}
