//! The tables: markdown (printed, and written into `docs/algorithms.md`
//! between `<!-- script_cost:begin -->` and `<!-- script_cost:end -->`) and
//! JSON rows (for `scripts/bench/script_cost.py`).

use super::parts::Measured;
use super::support::valkey_stats::Stats;
use super::{Path, Row, Target};
use std::fmt::Write as _;

/// Per decision: µs (commandstats) and µs (CPU), each the median over the
/// rounds, and the limiter's inner commands (over all rounds).
pub fn per_decision(rounds: &[Stats], path: &Path) -> (f64, f64, f64) {
    let median = |mut v: Vec<f64>| -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let calls = |s: &Stats| s.calls(path.verb()).max(1) as f64;
    let usec =
        median(rounds.iter().map(|s| s.commands.get(path.verb()).map_or(0, |c| c.usec) as f64 / calls(s)).collect());
    let cpu = median(rounds.iter().map(|s| s.cpu_us / calls(s)).collect());
    let decisions: f64 = rounds.iter().map(calls).sum();
    let inner: u64 = rounds.iter().map(|s| s.inner().values().sum::<u64>()).sum();
    (usec, cpu, inner as f64 / decisions)
}

/// The inner commands per decision, e.g. `1 TIME, 2 ZCOUNT`.
fn commands(rounds: &[Stats], path: &Path) -> String {
    let mut total = Stats::default();
    rounds.iter().for_each(|s| total.add(s));
    let decisions = total.calls(path.verb()).max(1) as f64;
    let inner: Vec<String> = total
        .inner()
        .iter()
        .map(|(c, k)| {
            let r = *k as f64 / decisions;
            let r = if (r - r.round()).abs() < 1e-9 { format!("{r:.0}") } else { format!("{r:.2}") };
            format!("{r} {}", c.to_uppercase())
        })
        .collect();
    inner.join(", ")
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name").map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned()))
        })
        .unwrap_or_else(|| "?".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    // What else ran on the machine meanwhile (other work slows every cell).
    let load = std::fs::read_to_string("/proc/loadavg").ok().and_then(|l| l.split(' ').next().map(str::to_owned));
    format!("{cores} cores ({cpu}), load average {} at the end", load.unwrap_or_else(|| "?".into()))
}

fn today() -> String {
    std::process::Command::new("date")
        .arg("+%Y-%m-%d")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

pub fn markdown(targets: &[Target], rows: &[Row], parts: &[Measured], server: &str, decisions: usize) -> String {
    let paths: Vec<&Path> = targets.iter().map(|t| &t.path).collect();
    let mut md = String::new();
    writeln!(
        md,
        "Measured {} by `make bench-script` on {server}, {}: {decisions} decisions per cell,",
        today(),
        machine()
    )
    .unwrap();
    writeln!(md, "pipelined on one connection, the server's clock. Each cell: µs per decision from `INFO").unwrap();
    writeln!(md, "commandstats` / from the server's CPU time, and decisions per second of one core.\n").unwrap();
    let mut head = String::from("| algorithm | windows | decision |");
    let mut rule = String::from("| --- | --- | --- |");
    for p in &paths {
        write!(head, " {} µs | {} per core |", p.label, p.label).unwrap();
        rule.push_str(" --- | --- |");
    }
    head.push_str(" commands per decision |");
    rule.push_str(" --- |");
    writeln!(md, "{head}\n{rule}").unwrap();
    for r in rows {
        write!(md, "| `{}` | {} | {} |", r.algorithm.name(), r.windows, r.case.label()).unwrap();
        for (p, rounds) in paths.iter().zip(&r.per_path) {
            let (usec, cpu, _) = per_decision(rounds, p);
            write!(md, " {usec:.1} / {cpu:.1} | {:.0}k |", 1e3 / cpu).unwrap();
        }
        writeln!(md, " {} |", commands(&r.per_path[0], paths[0])).unwrap();
    }
    writeln!(md, "\nWhat the parts cost (stand-in functions that do not decide, `FCALL`ed like a 1-window").unwrap();
    writeln!(md, "`gcra` decision; µs per call from commandstats / CPU, and what the part adds):\n").unwrap();
    writeln!(md, "| stand-in | µs per call | adds |\n| --- | --- | --- |").unwrap();
    for p in parts {
        let adds = p.adds.map_or_else(|| "—".to_owned(), |a| format!("{a:.2} µs"));
        writeln!(md, "| {} | {:.2} / {:.2} | {adds} |", p.label, p.usec, p.cpu).unwrap();
    }
    md
}

pub fn json(targets: &[Target], rows: &[Row], server: &str, decisions: usize) -> String {
    let mut items = Vec::new();
    for r in rows {
        for (p, rounds) in targets.iter().map(|t| &t.path).zip(&r.per_path) {
            let (usec, cpu, commands) = per_decision(rounds, p);
            items.push(serde_json::json!({
                "server": server, "path": p.label, "algorithm": r.algorithm.name(), "windows": r.windows,
                "decision": r.case.label(), "decisions": decisions, "usec_per_decision": usec,
                "cpu_usec_per_decision": cpu, "decisions_per_core_second": 1e6 / cpu,
                "commands_per_decision": commands,
            }));
        }
    }
    serde_json::Value::Array(items).to_string()
}

/// Replaces the generated block of `docs/algorithms.md`.
pub fn write_docs(text: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/algorithms.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (begin, end) = ("<!-- script_cost:begin -->\n", "<!-- script_cost:end -->");
    let (Some(a), Some(b)) = (doc.find(begin), doc.find(end)) else {
        panic!("{}: no {begin:?} ... {end:?} block", path.display())
    };
    std::fs::write(&path, format!("{}{begin}{text}{}", &doc[..a], &doc[b..])).unwrap();
    eprintln!("wrote {}", path.display());
}
