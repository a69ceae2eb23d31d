//! A real valkey-server on a free port, and a one-shot RESP client.

use super::{free_port, scratch_dir, valkey_bin};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tollgate::resp::{decode, encode_command, Limits, Value};

/// A real valkey-server on a free port, with persistence off.
pub struct Valkey {
    pub port: u16,
    /// The cluster bus port of a node started with `--cluster-enabled`.
    pub bus_port: Option<u16>,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
    /// The network namespace it runs in (see [`super::netns`]), if not ours.
    netns: Option<String>,
}

impl Valkey {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Self {
        let mut log = String::new();
        for _ in 0..5 {
            let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
            // A cluster node also listens on its bus port, by default its
            // port + 10,000, which `free_port` never checked: pick it too.
            let bus_port = extra.iter().any(|a| a == "--cluster-enabled").then(free_port);
            if let Some(bus) = bus_port {
                extra.extend(["--cluster-port".to_string(), bus.to_string()]);
            }
            let mut v =
                Valkey { port: free_port(), bus_port, child: None, dir: scratch_dir("valkey"), extra, netns: None };
            if v.try_restart() {
                return v;
            }
            log = std::fs::read_to_string(v.dir.join("valkey.log")).unwrap_or_default();
        }
        panic!("valkey-server did not start on 5 different ports; the last one's log:\n{log}");
    }

    /// A valkey-server inside network namespace `netns` on port 6379 (the
    /// namespace is the test's own), listening on `ip` and its loopback;
    /// commands are sent from inside the namespace.
    pub fn start_in(netns: &str, ip: &str) -> Self {
        let mut v = Valkey {
            port: 6379,
            bus_port: None,
            child: None,
            dir: scratch_dir("valkey"),
            extra: vec!["--bind".into(), format!("{ip} 127.0.0.1"), "--protected-mode".into(), "no".into()],
            netns: Some(netns.to_string()),
        };
        assert!(v.try_restart(), "valkey-server did not start in {netns}");
        v
    }

    fn ping(&self) -> bool {
        let port = self.port;
        self.net(|| matches!(try_command(port, &[b"PING"]), Ok(Value::Simple(s)) if s == b"PONG"))
    }

    fn net<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        match &self.netns {
            Some(ns) => super::netns::within(ns, f),
            None => f(),
        }
    }

    /// Starts (again) on the same port.
    pub fn restart(&mut self) {
        assert!(self.try_restart(), "valkey-server did not start on port {}", self.port);
    }

    /// Starts on `self.port`; false if the server exits (port taken).
    fn try_restart(&mut self) -> bool {
        self.stop();
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(valkey_bin());
                c
            }
            None => Command::new(valkey_bin()),
        };
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("valkey.log"))
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("start valkey-server (run `make tools`)");
        let start = Instant::now();
        loop {
            if self.ping() {
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
        let port = self.port;
        self.net(|| try_command(port, &args)).unwrap()
    }

    pub fn int(&self, args: &[&str]) -> i64 {
        match self.cmd(args) {
            Value::Integer(n) => n,
            other => panic!("{args:?} gave {other:?}"),
        }
    }

    /// Valkey's clock (`TIME`), in ms since the Unix epoch: what a call
    /// that does not inject the time calls now.
    pub fn time_ms(&self) -> u64 {
        let reply = self.cmd(&["TIME"]);
        let part = |i: usize| -> u64 {
            let items = reply.as_array().unwrap_or_else(|| panic!("TIME gave {reply:?}"));
            String::from_utf8_lossy(items[i].as_bytes().unwrap()).parse().unwrap()
        };
        part(0) * 1000 + part(1) / 1000
    }

    /// The value of `field` in `INFO section` (e.g. `cmdstat_fcall`).
    pub fn info_stat(&self, section: &str, field: &str) -> Option<String> {
        let text = match self.cmd(&["INFO", section]) {
            Value::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            other => panic!("INFO {section} gave {other:?}"),
        };
        text.lines().find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
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
