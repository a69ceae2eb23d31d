//! What the parts of a decision cost: stand-in functions that do not decide,
//! each `FCALL`ed with the arguments of a 1-window `gcra` decision on a new
//! key, measured like the decisions (median over rounds).

use super::{Case, Path, Row, Target};
use tollgate::limiter::Algorithm;

/// One stand-in: what it does, its function body (`k` = KEYS, `a` = ARGV),
/// the stand-in it is compared with and over how many operations.
struct Part {
    label: &'static str,
    body: &'static str,
    base: Option<usize>,
    operations: f64,
}

const REPLY: &str = "return {1, 0, 20, 0, 0}";

const PARTS: &[Part] = &[
    Part { label: "`FCALL` of a function that only returns a 1-window reply", body: "", base: None, operations: 1.0 },
    Part { label: "… and calls `TIME`", body: "redis.call('TIME')", base: Some(0), operations: 1.0 },
    Part {
        label: "… and `HMGET` of 2 fields (the commands of a 1-window `gcra` denial)",
        body: "redis.call('TIME') redis.call('HMGET', k[1], '20/60000:at', '20/60000:d')",
        base: Some(1),
        operations: 1.0,
    },
    Part {
        label: "… and `HSET` of 2 fields (constant values)",
        body: "redis.call('TIME') redis.call('HMGET', k[1], '20/60000:at', '20/60000:d') \
               redis.call('HSET', k[1], '20/60000:at', '1800000000000', '20/60000:d', '60000')",
        base: Some(2),
        operations: 1.0,
    },
    Part {
        label: "… and `PEXPIRE` (the commands of a 1-window `gcra` admission, no logic)",
        body: "redis.call('TIME') redis.call('HMGET', k[1], '20/60000:at', '20/60000:d') \
               redis.call('HSET', k[1], '20/60000:at', '1800000000000', '20/60000:d', '60000') \
               redis.call('PEXPIRE', k[1], '60000')",
        base: Some(3),
        operations: 1.0,
    },
    Part {
        label:
            "`TIME`, `ZREMRANGEBYSCORE`, `ZCOUNT`, `ZADD`, `PEXPIRE` (a sliding-log admission on a new key, no logic)",
        body: "redis.call('TIME') redis.call('ZREMRANGEBYSCORE', k[1], '-inf', '1799999940000') \
               redis.call('ZCOUNT', k[1], '(1799999940000', '+inf') \
               redis.call('ZADD', k[1], '1800000000000', '1800000000000:0') redis.call('PEXPIRE', k[1], '60000')",
        base: Some(0),
        operations: 1.0,
    },
    Part {
        label: "10 × `string.format('%.0f', x)`",
        body: "local f = string.format for i = 1, 10 do f('%.0f', 1800000000000 + i) end",
        base: Some(0),
        operations: 10.0,
    },
    Part {
        label: "10 × `string.format('%d', x)`",
        body: "local f = string.format for i = 1, 10 do f('%d', 1800000000000 + i) end",
        base: Some(0),
        operations: 10.0,
    },
    Part {
        label: "10 × `tonumber(s)` of an argument",
        body: "for i = 1, 10 do tonumber(a[5]) end",
        base: Some(0),
        operations: 10.0,
    },
    Part {
        label: "10 × a table of 7 named fields",
        body: "for i = 1, 10 do local t = { a = i, b = i, c = i, d = i, e = i, f = i, g = i } end",
        base: Some(0),
        operations: 10.0,
    },
    Part {
        label: "10 × joining two argument strings with `..`",
        body: "for i = 1, 10 do local s = a[5] .. '/' .. a[6] end",
        base: Some(0),
        operations: 10.0,
    },
];

/// One measured stand-in: its label, µs per call (commandstats, CPU) and
/// what it adds per operation over its base (commandstats), if it has one.
pub struct Measured {
    pub label: &'static str,
    pub usec: f64,
    pub cpu: f64,
    pub adds: Option<f64>,
}

pub fn measure(decisions: usize) -> Vec<Measured> {
    let mut targets: Vec<Target> = PARTS
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let name = format!("tollgate_part_{i}");
            let text = format!(
                "#!lua name={name}\nredis.register_function('{name}', function(k, a) {} {REPLY} end)\n",
                p.body
            );
            Target::start(Path::from_text(&name, text, true, false))
        })
        .collect();
    let mut rows = [Row { algorithm: Algorithm::Gcra, windows: 1, case: Case::New, per_path: vec![] }];
    super::measure(&mut targets, &mut rows, decisions);
    let per_call: Vec<(f64, f64)> = targets
        .iter()
        .zip(&rows[0].per_path)
        .map(|(t, rounds)| {
            let (usec, cpu, _) = super::report::per_decision(rounds, &t.path);
            (usec, cpu)
        })
        .collect();
    PARTS
        .iter()
        .zip(&per_call)
        .map(|(part, &(usec, cpu))| Measured {
            label: part.label,
            usec,
            cpu,
            adds: part.base.map(|b| (usec - per_call[b].0) / part.operations),
        })
        .collect()
}
