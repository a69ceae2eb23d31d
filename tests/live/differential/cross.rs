//! The decision across cluster slots (`src/worker/cross/protocol.rs`) run by its
//! reference (`src/model/cross.rs`) over three real Valkey servers
//! standing in for a cluster's masters (a group's slot modulo 3 picks its
//! server): random requests over shared buckets of any algorithm, their
//! steps (record if it fits, per slot; undo where recorded once a group
//! denied; crashes between the steps) interleaved at random, with injected
//! time. At every step the pure model of that server must give the same
//! reply (`support::differential::Differential`: answers and the log's
//! entries), so the two-step protocol on Lua is the protocol on the models,
//! whose guarantees `src/model/cross/tests.rs` checks. One server answers
//! through the script, the others through the function library. About half
//! the cases are shaping runs (each first step a shaped call, as across
//! slots; docs/shaping.md), some buckets first given slots in the future by
//! shaped requests of their own. Half of those may wait: the request is
//! held, its groups below the target give their record back and decide
//! again with a floor (`src/worker/cross/rounds.rs`).

use crate::support;

use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use support::differential::{check, Differential, Path};
use support::props::{rule, runner, Rule, GAPS};
use support::Valkey;
use tollgate::limiter::{Adjustment, Check, Decision};
use tollgate::model::cross::{Action, Run, Shard};
use tollgate::store::cluster::key_slot;
use tollgate::worker::cross::protocol::Fate;

/// A Valkey server and the model beside it.
struct Both<'a>(Differential<'a>);

impl Shard for Both<'_> {
    fn decide(&mut self, checks: &[Check], now_ms: u64) -> Decision {
        self.0.step(checks, now_ms)
    }

    fn decide_floored(&mut self, checks: &[Check], max_delay_ms: u64, floor_ms: u64, now_ms: u64) -> Decision {
        self.0.step_floored(checks, max_delay_ms, floor_ms, now_ms)
    }

    fn adjust(&mut self, adjustments: &[Adjustment], at_ms: u64, now_ms: u64) -> Decision {
        self.0.adjust(adjustments, at_ms, now_ms)
    }
}

/// Requests: which rules each matches (a non-empty bitmask), and whether
/// its proxy crashes between the steps.
fn requests() -> impl Strategy<Value = Vec<(u8, bool)>> {
    prop::collection::vec((1..16u8, prop::bool::weighted(0.2)), 2..8)
}

fn schedule() -> impl Strategy<Value = Vec<(u64, u32)>> {
    prop::collection::vec((prop::sample::select(GAPS.to_vec()), any::<u32>()), 1..40)
}

static CASE: AtomicU64 = AtomicU64::new(0);
/// Undos run, over every case.
static UNDOS: AtomicU64 = AtomicU64::new(0);
/// Shaping runs.
static SHAPED: AtomicU64 = AtomicU64::new(0);

/// A shaping run (`shaped`: first steps shaped with `max_delay`, held
/// across slots when above 0), its buckets in `placed` first given slots in
/// the future by requests of one bucket.
#[derive(Debug, Clone, Copy)]
struct Shaping {
    shaped: bool,
    max_delay: u64,
    placed: u8,
}

/// Move rounds, over every case.
static MOVES: AtomicU64 = AtomicU64::new(0);

fn run_case(
    servers: &[Valkey; 3],
    rules: &[Rule],
    start: u64,
    requests: &[(u8, bool)],
    schedule: &[(u64, u32)],
    shaping: Shaping,
) {
    let case = CASE.fetch_add(1, Ordering::Relaxed);
    let checks: Vec<Check> = rules
        .iter()
        .enumerate()
        .map(|(i, r)| check(r.algorithm, i, &format!("x:{{c{case}:r{i}}}:{}", r.algorithm.id()), &r.windows, r.cost))
        .collect();
    let requests: Vec<(Vec<Check>, bool)> = requests
        .iter()
        .map(|&(mask, crashed)| {
            let chosen = checks.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| c.clone());
            (chosen.collect::<Vec<_>>(), crashed)
        })
        .filter(|(c, _)| !c.is_empty())
        .collect();
    let paths = [Path::Script, Path::Function, Path::Function];
    let mut shards: Vec<Both> = servers.iter().zip(paths).map(|(v, path)| Both(Differential::via(v, path))).collect();
    if shaping.shaped {
        for (_, c) in checks.iter().enumerate().filter(|(i, _)| shaping.placed & (1 << i) != 0) {
            let shard = &mut shards[usize::from(key_slot(c.key.as_bytes())) % 3];
            for _ in 0..8 {
                let d = shard.decide_floored(std::slice::from_ref(c), 30_000, 0, start);
                if d.delay_ms > 0 || !d.allowed {
                    break;
                }
            }
        }
    }
    let mut run = Run::new(shards, requests);
    if shaping.shaped {
        run = run.holding(shaping.max_delay);
        SHAPED.fetch_add(1, Ordering::Relaxed);
    }
    run.run(start, schedule);
    let moves: u32 = run.requests.iter().filter_map(|q| q.rounds.as_ref()).map(|r| r.moves).sum();
    MOVES.fetch_add(u64::from(moves), Ordering::Relaxed);
    assert!(run.available().is_empty());
    let undos = run.events.iter().filter(|e| matches!(e.action, Action::Undo(..))).count();
    UNDOS.fetch_add(undos as u64, Ordering::Relaxed);
    for (r, q) in run.requests.iter().enumerate() {
        let (fate, _, answer) = q.answer().unwrap_or_else(|| panic!("request {r} unanswered"));
        assert_eq!(answer.allowed, fate == Fate::Admit, "request {r}");
        let undone = run.events.iter().filter(|e| matches!(e.action, Action::Undo(o, _) if o == r)).count();
        let recorded = q.steps.iter().filter(|s| s.recorded()).count();
        match fate {
            Fate::Admit => assert_eq!(undone, 0, "request {r}: an admitted request keeps its records"),
            _ if q.crashed => assert_eq!(undone, 0, "request {r} crashed"),
            _ => assert_eq!(undone, recorded, "request {r}: every record undone"),
        }
    }
}

#[test]
fn interleaved_requests_across_three_servers_agree_with_the_models() {
    let servers = [Valkey::start(), Valkey::start(), Valkey::start()];
    let mut runner = runner(300, file!());
    let delays = prop::sample::select(vec![0u64, 0, 800, 40_000]);
    let shaping = (any::<bool>(), delays, any::<u8>()).prop_map(|(shaped, max_delay, placed)| Shaping {
        shaped,
        max_delay,
        placed,
    });
    let strategy = (
        prop::collection::vec(rule(), 2..=4),
        1_600_000_000_000u64..1_900_000_000_000,
        requests(),
        schedule(),
        shaping,
    );
    let result = runner.run(&strategy, |(rules, start, requests, schedule, shaping)| {
        run_case(&servers, &rules, start, &requests, &schedule, shaping);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (cases, undos) = (CASE.load(Ordering::Relaxed), UNDOS.load(Ordering::Relaxed));
    let shaped = SHAPED.load(Ordering::Relaxed);
    let moves = MOVES.load(Ordering::Relaxed);
    println!("{cases} cases ({shaped} shaping), {undos} undos, {moves} move rounds");
    assert!(shaped >= cases / 4, "{shaped} shaping runs in {cases}");
    assert!(moves >= cases / 30, "{moves} move rounds in {cases} cases");
    assert!(undos >= cases / 2, "the cases undo: {undos} undos in {cases} cases");
}
