//! `make bench-script`: what one decision costs inside Valkey, per algorithm,
//! window count and case (allowed on a new key, allowed on a key in use,
//! denied by the store), for each invocation: the function library by
//! `FCALL`, the script by `EVALSHA`, and any other script or library given.
//! Then what the parts of a decision cost, measured with stand-ins
//! (`parts.rs`).
//!
//! It starts its own valkey-server (`TOLLGATE_VALKEY`, or `--server PATH`,
//! e.g. Debian's Redis 7) and pipelines decisions straight to it on one
//! connection (no Envoy), with Valkey's own clock and a new key per decision.
//! Per cell (see `report.rs`): µs per decision from `INFO commandstats` (the
//! time Valkey books to the invoking command, inner commands included) and
//! from the server process's CPU time (`INFO cpu`, which adds reading
//! commands and writing replies), decisions per second of one Valkey core
//! (10^6 / CPU µs), and the commands the limiter ran per decision.
//!
//! Every path has a valkey-server of its own (what one path allocates and
//! collects must not slow another down). Decisions run in rounds of 200 keys,
//! the paths' rounds alternating, and a cell is the median over its rounds:
//! load from elsewhere on the machine falls on every path alike, and a
//! preempted round does not count. Timing on a shared machine is still noisy:
//! compare columns of one run.
//!
//! Options: `--decisions N` (per cell, default 10000), `--only ALGORITHM`,
//! `--script LABEL=FILE` (another script with the same KEYS/ARGV contract,
//! by `EVALSHA`, e.g. an older version's), `--library LABEL=FILE` (another
//! library, its function named like the library), `--dump DIR` (write this
//! version's `script.lua` and `library.lua` there, to measure them later),
//! `--json` (the decision rows as JSON, without the parts, for
//! `scripts/bench/script_cost.py`), `--write-docs`
//! (the tables into `docs/algorithms.md`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

#[path = "../../tests/support/mod.rs"]
mod support;

mod parts;
mod report;

use support::valkey_stats::{Conn, Stats};
use support::Valkey;
use tollgate::limiter::script::{encode_load, is_missing, limiter, Invocation, Script};
use tollgate::limiter::{reply, Algorithm, Check};
use tollgate::resp::{encode_command, Value};

pub const ONE: &[(u64, u64)] = &[(20, 60_000)];
pub const TWO: &[(u64, u64)] = &[(20, 60_000), (5, 3_000)];
/// Keys per round: each round fills its keys, then measures them.
const ROUND: usize = 200;

#[derive(Clone, Copy, PartialEq)]
pub enum Case {
    /// A key never seen: the first decision.
    New,
    /// The third decision on a key (two admitted before it).
    InUse,
    /// A key already at its smallest limit: denied by the store.
    Denied,
}

impl Case {
    pub fn label(self) -> &'static str {
        match self {
            Case::New => "allowed, new key",
            Case::InUse => "allowed, key in use",
            Case::Denied => "denied",
        }
    }
}

/// One way of invoking the limiter (or a stand-in that does not decide).
pub struct Path {
    pub label: String,
    pub script: &'static Script,
    pub how: Invocation,
    /// Whether replies are decisions to check.
    pub decides: bool,
}

/// A path with its own server and connection.
pub struct Target {
    pub path: Path,
    pub conn: Conn,
    _valkey: Valkey,
}

impl Target {
    /// Starts a server for `path` and loads the code into it.
    pub fn start(path: Path) -> Target {
        let valkey = Valkey::start();
        let mut conn = Conn::connect(valkey.port);
        path.load(&mut conn);
        Target { path, conn, _valkey: valkey }
    }
}

impl Path {
    /// The `INFO commandstats` name of the invoking command.
    pub fn verb(&self) -> &'static str {
        match self.how {
            Invocation::FCall => "fcall",
            Invocation::EvalSha => "evalsha",
            Invocation::Eval => "eval",
        }
    }

    /// A script (`EVALSHA`) or library (`FCALL`) from its text.
    pub fn from_text(label: &str, text: String, library: bool, decides: bool) -> Path {
        let text: &'static str = Box::leak(text.into_boxed_str());
        let name = text.lines().next().and_then(|l| l.strip_prefix("#!lua name=")).unwrap_or("").trim().to_owned();
        assert!(!library || !name.is_empty(), "{label}: a library starts with `#!lua name=NAME`");
        let sha = sha1_smol::Sha1::from(text).hexdigest();
        // Only decisions are measured: `adjust`, `flush`, `lease` and
        // `peek` are named but never called.
        let script = Script {
            body: text,
            sha: sha.clone(),
            adjust_body: text,
            adjust_sha: sha.clone(),
            flush_body: text,
            flush_sha: sha.clone(),
            lease_body: text,
            lease_sha: sha.clone(),
            peek_body: text,
            peek_sha: sha,
            library: text.to_owned(),
            adjust_function: format!("{name}_adjust"),
            flush_function: format!("{name}_flush"),
            lease_function: format!("{name}_lease"),
            peek_function: format!("{name}_peek"),
            function: name,
        };
        let how = if library { Invocation::FCall } else { Invocation::EvalSha };
        Path { label: label.to_owned(), script: Box::leak(Box::new(script)), how, decides }
    }

    pub fn load(&self, conn: &mut Conn) {
        let mut out = Vec::new();
        match self.how {
            Invocation::FCall => encode_load(&mut out, self.script),
            _ => encode_command(&mut out, &[b"SCRIPT", b"LOAD", self.script.body.as_bytes()]),
        }
        let reply = conn.pipeline(&out, 1).pop().unwrap();
        assert!(!reply.is_error(), "{}: loading failed: {reply:?}", self.label);
    }
}

/// One row of the table: measured per path, per round.
pub struct Row {
    pub algorithm: Algorithm,
    pub windows: usize,
    pub case: Case,
    pub per_path: Vec<Vec<Stats>>,
}

fn checks(algorithm: Algorithm, windows: &[(u64, u64)], key: &str, cost: u64) -> Vec<Check> {
    vec![support::differential::check(algorithm, 0, key, windows, cost)]
}

/// Sends one decision per check set and checks every verdict; returns how
/// many keys meant to be denied were admitted (see [`measure_round`]).
fn decide(conn: &mut Conn, path: &Path, calls: &[Vec<Check>], allowed: bool) -> usize {
    let calls: Vec<(Vec<Check>, Option<u64>)> = calls.iter().map(|c| (c.clone(), None)).collect();
    let mut unexpected = 0;
    for (reply, (c, _)) in conn.calls(path.script, path.how, &calls).iter().zip(&calls) {
        assert!(!is_missing(reply), "{}: not loaded", path.label);
        if !path.decides {
            assert!(!reply.is_error(), "{}: {reply:?}", path.label);
            continue;
        }
        let d = reply::parse(reply, c).unwrap_or_else(|e| panic!("{}: {e}: {reply:?}", path.label));
        if d.allowed != allowed {
            assert!(!allowed, "{}: {c:?} -> {d:?}", path.label);
            unexpected += 1;
        }
    }
    unexpected
}

/// One round through `path`: fills `n` new keys as the case needs, then
/// measures one decision on each (only those are counted). With the server's
/// clock an aligned window (fixed or sliding window) may end between filling
/// a key and deciding on it, so a key meant to be denied is admitted: such a
/// round is measured again on new keys.
pub fn measure_round(conn: &mut Conn, path: &Path, row: &Row, n: usize, first_key: usize) -> Stats {
    let windows = if row.windows == 1 { ONE } else { TWO };
    for attempt in 0..5 {
        let keys: Vec<String> =
            (first_key..first_key + n).map(|i| format!("cost:{{{i}:{attempt}}}:{}", row.algorithm.id())).collect();
        let fill: Vec<Vec<Check>> = match row.case {
            Case::New => vec![],
            Case::InUse => keys.iter().flat_map(|k| vec![checks(row.algorithm, windows, k, 1); 2]).collect(),
            Case::Denied => {
                let full = windows.iter().map(|w| w.0).min().unwrap();
                keys.iter().map(|k| checks(row.algorithm, windows, k, full)).collect()
            }
        };
        decide(conn, path, &fill, true);
        let calls: Vec<Vec<Check>> = keys.iter().map(|k| checks(row.algorithm, windows, k, 1)).collect();
        let before = Stats::read(conn);
        if decide(conn, path, &calls, row.case != Case::Denied) == 0 {
            return Stats::read(conn).since(&before);
        }
    }
    panic!("{}: keys meant to be denied were admitted in 5 rounds in a row", path.label)
}

/// Measures every row through every target, `decisions` per cell.
pub fn measure(targets: &mut [Target], rows: &mut [Row], decisions: usize) {
    let mut next_key = 0;
    for row in rows {
        row.per_path = targets.iter().map(|_| Vec::new()).collect();
        for t in targets.iter_mut() {
            t.conn.cmd(&["FLUSHALL"]);
        }
        let mut done = 0;
        while done < decisions {
            let n = ROUND.min(decisions - done);
            for (i, t) in targets.iter_mut().enumerate() {
                let stats = measure_round(&mut t.conn, &t.path, row, n, next_key);
                row.per_path[i].push(stats);
            }
            next_key += n;
            done += n;
        }
        eprint!(".");
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut decisions, mut json, mut docs) = (10_000usize, false, false);
    let mut only: Option<Algorithm> = None;
    let mut paths = vec![
        Path { label: "FCALL".into(), script: limiter(), how: Invocation::FCall, decides: true },
        Path { label: "EVALSHA".into(), script: limiter(), how: Invocation::EvalSha, decides: true },
    ];
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--decisions" => decisions = args.next().and_then(|n| n.parse().ok()).expect("--decisions N"),
            "--only" => only = Some(args.next().and_then(|a| Algorithm::from_name(&a)).expect("--only ALGORITHM")),
            "--server" => std::env::set_var("TOLLGATE_VALKEY", args.next().expect("--server PATH")),
            "--json" => json = true,
            "--write-docs" => docs = true,
            "--dump" => {
                let dir = std::path::PathBuf::from(args.next().expect("--dump DIR"));
                std::fs::write(dir.join("script.lua"), limiter().body).unwrap();
                std::fs::write(dir.join("library.lua"), &limiter().library).unwrap();
                return;
            }
            "--script" | "--library" => {
                let spec = args.next().expect("LABEL=FILE");
                let (label, file) = spec.split_once('=').expect("LABEL=FILE");
                let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
                paths.push(Path::from_text(label, text, arg == "--library", true));
            }
            other => panic!("unknown option {other} (see the header of examples/script_cost/main.rs)"),
        }
    }
    let mut targets: Vec<Target> = paths.into_iter().map(Target::start).collect();
    let Value::Bulk(info) = targets[0].conn.cmd(&["INFO", "server"]) else { panic!("INFO") };
    let info = String::from_utf8_lossy(&info).into_owned();
    let server = ["valkey_version:", "redis_version:"]
        .iter()
        .find_map(|p| {
            let name = if p.starts_with("valkey") { "Valkey" } else { "Redis" };
            info.lines().find_map(|l| l.strip_prefix(p).map(|v| format!("{name} {v}")))
        })
        .unwrap_or_default();
    let mut rows = Vec::new();
    for algorithm in Algorithm::ALL.into_iter().filter(|a| only.is_none_or(|o| o == *a)) {
        for (windows, case) in [(1, Case::New), (2, Case::New), (2, Case::InUse), (1, Case::Denied), (2, Case::Denied)]
        {
            rows.push(Row { algorithm, windows, case, per_path: vec![] });
        }
    }
    measure(&mut targets, &mut rows, decisions);
    if json {
        eprintln!();
        println!("{}", report::json(&targets, &rows, &server, decisions));
        return;
    }
    let parts = parts::measure(decisions);
    eprintln!();
    let text = report::markdown(&targets, &rows, &parts, &server, decisions);
    print!("{text}");
    if docs {
        report::write_docs(&text);
    }
}
