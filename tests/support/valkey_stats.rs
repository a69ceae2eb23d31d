//! What the limiter costs inside Valkey: a pipelined connection, and
//! snapshots of `INFO commandstats` (calls and µs per command, the commands a
//! script or function runs counted under their own names) and `INFO cpu`
//! (the server process's CPU time).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use tollgate::limiter::script::{encode_call, Invocation, Script};
use tollgate::limiter::Check;
use tollgate::resp::{decode, encode_command, DecodeError, Limits, Value};

/// One connection carrying pipelined commands.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn connect(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn { stream, buf: Vec::new() }
    }

    /// Sends `n` encoded commands at once and reads their `n` replies.
    pub fn pipeline(&mut self, commands: &[u8], n: usize) -> Vec<Value> {
        self.stream.write_all(commands).unwrap();
        let mut replies = Vec::with_capacity(n);
        let mut chunk = vec![0u8; 64 * 1024];
        while replies.len() < n {
            match decode(&self.buf, &Limits::default()) {
                Ok((value, used)) => {
                    self.buf.drain(..used);
                    replies.push(value);
                }
                Err(DecodeError::Incomplete) => {
                    let read = self.stream.read(&mut chunk).unwrap();
                    assert!(read > 0, "Valkey closed the connection");
                    self.buf.extend_from_slice(&chunk[..read]);
                }
                Err(e) => panic!("bad reply: {e}"),
            }
        }
        replies
    }

    /// One call per `(checks, now_ms)`, pipelined 250 at a time; the raw
    /// replies, in order.
    pub fn calls(&mut self, script: &Script, how: Invocation, calls: &[(Vec<Check>, Option<u64>)]) -> Vec<Value> {
        let mut replies = Vec::with_capacity(calls.len());
        for batch in calls.chunks(250) {
            let mut out = Vec::new();
            for (checks, now_ms) in batch {
                encode_call(&mut out, script, how, checks, *now_ms);
            }
            replies.extend(self.pipeline(&out, batch.len()));
        }
        replies
    }

    pub fn cmd(&mut self, args: &[&str]) -> Value {
        let mut out = Vec::new();
        encode_command(&mut out, &args.iter().map(|a| a.as_bytes()).collect::<Vec<_>>());
        self.pipeline(&out, 1).pop().unwrap()
    }
}

/// One command's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandStat {
    pub calls: u64,
    pub usec: u64,
}

/// A snapshot (or the difference of two).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// By command name in lower case (`zcount`, `fcall`, `function|load`).
    pub commands: BTreeMap<String, CommandStat>,
    /// The server process's CPU time (user + system), µs.
    pub cpu_us: f64,
}

impl Stats {
    pub fn read(conn: &mut Conn) -> Stats {
        let Value::Bulk(info) = conn.cmd(&["INFO", "commandstats", "cpu"]) else { panic!("INFO") };
        Stats::parse(&String::from_utf8_lossy(&info))
    }

    pub fn parse(info: &str) -> Stats {
        let mut stats = Stats::default();
        for line in info.lines() {
            if let Some((name, rest)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) {
                let field = |key: &str| -> u64 {
                    rest.split(',').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok()).unwrap()
                };
                stats.commands.insert(name.to_owned(), CommandStat { calls: field("calls"), usec: field("usec") });
            } else if let Some((key, value)) = line.split_once(':') {
                if key == "used_cpu_sys" || key == "used_cpu_user" {
                    stats.cpu_us += value.trim().parse::<f64>().unwrap() * 1e6;
                }
            }
        }
        stats
    }

    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &Stats) -> Stats {
        let mut commands = BTreeMap::new();
        for (name, now) in &self.commands {
            let before = earlier.commands.get(name).copied().unwrap_or_default();
            let delta = CommandStat { calls: now.calls - before.calls, usec: now.usec - before.usec };
            if delta.calls > 0 {
                commands.insert(name.clone(), delta);
            }
        }
        Stats { commands, cpu_us: self.cpu_us - earlier.cpu_us }
    }

    /// Adds `other` (a difference) to this one.
    pub fn add(&mut self, other: &Stats) {
        for (name, s) in &other.commands {
            let e = self.commands.entry(name.clone()).or_default();
            e.calls += s.calls;
            e.usec += s.usec;
        }
        self.cpu_us += other.cpu_us;
    }

    /// Calls of `command`.
    pub fn calls(&self, command: &str) -> u64 {
        self.commands.get(command).map_or(0, |s| s.calls)
    }

    /// The commands run from inside the limiter: every command except the
    /// invocations themselves and the snapshots' `INFO`.
    pub fn inner(&self) -> BTreeMap<String, u64> {
        self.commands
            .iter()
            .filter(|(name, _)| !matches!(name.as_str(), "evalsha" | "eval" | "fcall" | "info"))
            .map(|(name, s)| (name.clone(), s.calls))
            .collect()
    }
}
