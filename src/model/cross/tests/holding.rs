//! Holding a shaped request across slots ([`super::super::Run::holding`]), on the
//! pure models as three shards: random requests over shared buckets, their
//! steps and rounds interleaved at random. On one instant (every gap 0)
//! the model's clock is exact, so every admitted request's record on every
//! slot sits at its release time, and the release times themselves keep
//! every window; with gaps, every record lies between its target and its
//! release.

use super::super::{Action, Run};
use super::{random_rules, read};
use crate::limiter::model::Model;
use crate::limiter::{Adjustment, Algorithm, Check};
use crate::testing::{check, Rng};
use crate::worker::cross::protocol::{turn_of, Fate, Step};

const HOUR: u64 = 3_600_000;
const START: u64 = 1_800_000_000_000;

/// 2 to 4 rules, limits 1 to 3 over 1 or 2 hours (so a burst waits hours).
fn rules(rng: &mut Rng) -> Vec<Check> {
    random_rules(rng, 3, false, "h")
}

/// `n` requests, each matching a random non-empty subset of `rules`.
fn requests(rng: &mut Rng, rules: &[Check], n: u64) -> Vec<(Vec<Check>, bool)> {
    super::requests(rng, rules, n, 0)
}

fn shard(c: &Check) -> usize {
    usize::from(crate::store::cluster::key_slot(c.key.as_bytes())) % 3
}

/// Every window of log and fixed_window rule `c` over the release times of
/// the admitted requests that match it.
fn releases_keep_windows(run: &Run<Model>, c: &Check) {
    let times: Vec<u64> = run
        .requests
        .iter()
        .filter(|q| q.fate() == Some(Fate::Admit) && q.checks.iter().any(|x| x.key == c.key))
        .filter_map(|q| q.released)
        .collect();
    for w in c.windows.iter() {
        let (limit, period) = (w.limit.get(), w.period_ms.get());
        for &t in &times {
            let n = match c.algorithm {
                Algorithm::SlidingLog => times.iter().filter(|&&u| u <= t && u + period > t).count(),
                Algorithm::FixedWindow => times.iter().filter(|&&u| u / period == t / period).count(),
                _ => return,
            };
            assert!(n as u64 <= limit, "{}: {n} released within {period} ms of {t}: {times:?}", c.key);
        }
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn on_one_instant_every_slot_records_a_held_request_at_its_release() {
    let mut rng = Rng(0x5851_F42D_4C95_7F2D);
    let (mut held, mut moves, mut gave_up, mut denied) = (0, 0, 0, 0);
    for _ in 0..400 {
        let rules = rules(&mut rng);
        let max_delay = [0, HOUR, 3 * HOUR, 10 * HOUR][rng.next(4) as usize];
        let n = 3 + rng.next(6);
        let mut run = Run::new(vec![Model::new(), Model::new(), Model::new()], requests(&mut rng, &rules, n));
        run = run.holding(max_delay);
        let schedule: Vec<(u64, u32)> = (0..80).map(|_| (0, rng.next(1 << 16) as u32)).collect();
        run.run_gaps(START, &schedule, 0);
        assert!(run.available().is_empty());
        let mut admitted = Vec::new();
        for (r, q) in run.requests.iter().enumerate() {
            let (fate, _, answer) = q.answer().unwrap_or_else(|| panic!("request {r} unanswered"));
            assert_eq!(answer.allowed, fate == Fate::Admit, "request {r}");
            gave_up += usize::from(q.gave_up);
            denied += usize::from(fate == Fate::Deny);
            moves += q.rounds.as_ref().map_or(0, |r| r.moves);
            if fate != Fate::Admit {
                continue;
            }
            let release = q.released.unwrap_or_else(|| panic!("request {r} admitted, not released"));
            assert!(release <= START + max_delay, "request {r} held past max_delay");
            held += usize::from(release > START);
            for (g, step) in q.steps.iter().enumerate() {
                let Step::Decided(d) = step else { panic!("request {r} group {g}: {step:?}") };
                assert_eq!(turn_of(d), release, "request {r} group {g} recorded away from its release");
            }
            let charge: Vec<Adjustment> =
                q.checks.iter().map(|c| Adjustment { check: c.clone(), from: 0, to: c.cost.get() }).collect();
            admitted.push((release, charge));
        }
        admitted.sort_by_key(|(at, _)| *at);
        let mut ideal = Model::new();
        for (at, charge) in &admitted {
            ideal.adjust(charge, *at, *at);
        }
        let last = admitted.last().map_or(START, |(at, _)| *at);
        // The log holds exactly the admitted requests at their releases:
        // every moved record was given back. (The counters and gcra keep
        // one state, which a read before a future turn does not show.)
        for c in &rules {
            releases_keep_windows(&run, c);
            if c.algorithm == Algorithm::SlidingLog {
                for at in [last, last + HOUR + 1, last + 20 * HOUR] {
                    let (got, want) = (read(&mut run.shards[shard(c)], c, at), read(&mut ideal, c, at));
                    assert_eq!(got, want, "{} at {at}", c.key);
                }
            }
        }
    }
    println!("{held} held, {moves} move rounds, {gave_up} gave up, {denied} denied");
    assert!(held > 300 && moves > 200 && gave_up > 0 && denied > 100, "{held} {moves} {gave_up} {denied}");
}

/// With time passing between steps: every record of an admitted request
/// lies between its rounds' target and its release, within its max_delay
/// of its first step plus the last round's steps.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn with_time_passing_every_record_lies_between_target_and_release() {
    let mut rng = Rng(0x2127_599B_F432_5C37);
    let mut held = 0;
    for _ in 0..300 {
        let rules = rules(&mut rng);
        let max_delay = [HOUR, 3 * HOUR][rng.next(2) as usize];
        let n = 3 + rng.next(6);
        let mut run = Run::new(vec![Model::new(), Model::new(), Model::new()], requests(&mut rng, &rules, n));
        run = run.holding(max_delay);
        let schedule: Vec<(u64, u32)> = (0..80).map(|_| (rng.next(4), rng.next(1 << 16) as u32)).collect();
        let end = run.run_gaps(START, &schedule, 1);
        for (r, q) in run.requests.iter().enumerate() {
            let (fate, _, _) = q.answer().unwrap_or_else(|| panic!("request {r} unanswered"));
            let (Fate::Admit, Some(release), Some(rounds)) = (fate, q.released, &q.rounds) else { continue };
            held += usize::from(release > end);
            let first = run.events.iter().find(|e| matches!(e.action, Action::Decide(o, _) if o == r));
            let first = first.map_or(START, |e| e.now_ms);
            assert!(rounds.target_ms <= first + max_delay, "request {r}: target past max_delay");
            assert!(release <= first + max_delay + (end - START), "request {r}");
            for step in &q.steps {
                let Step::Decided(d) = step else { panic!("request {r}: {step:?}") };
                let turn = turn_of(d);
                assert!(rounds.target_ms <= turn && turn <= release, "request {r}: {turn} {rounds:?} {release}");
            }
        }
    }
    assert!(held > 200, "{held}");
}

/// The figures of docs/shaping.md ("the cost of the rounds"): a burst of
/// 10 against two log rules on two slots (5 and 3 per second, `max_delay`
/// 2 s) on one instant. One request at a time admits the 9 that fit; steps
/// interleaved at random admit fewer, never more.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_burst_across_slots_admits_what_fits_one_at_a_time_and_fewer_interleaved() {
    let rules = [
        check(Algorithm::SlidingLog, 0, "h:{user}:log", &[(5, 1_000)], 1),
        check(Algorithm::SlidingLog, 1, "h:{tenant}:log", &[(3, 1_000)], 1),
    ];
    assert_ne!(shard(&rules[0]), shard(&rules[1]));
    let burst = || (0..10).map(|_| (rules.to_vec(), false)).collect::<Vec<_>>();
    let admitted = |run: &Run<Model>| run.requests.iter().filter(|q| q.fate() == Some(Fate::Admit)).count();
    let mut one = Run::new(vec![Model::new(), Model::new(), Model::new()], burst()).holding(2_000);
    for r in 0..10 {
        while let Some(a) = one
            .available()
            .into_iter()
            .find(|a| matches!(a, Action::Decide(q, _) | Action::Undo(q, _) | Action::GiveBack(q, _) if *q == r))
        {
            one.act(a, START);
        }
    }
    assert_eq!(admitted(&one), 9);
    let mut rng = Rng(0x1405_7B7E_F767_814F);
    let mut total = 0;
    for _ in 0..200 {
        let mut run = Run::new(vec![Model::new(), Model::new(), Model::new()], burst()).holding(2_000);
        let schedule: Vec<(u64, u32)> = (0..200).map(|_| (0, rng.next(1 << 16) as u32)).collect();
        run.run_gaps(START, &schedule, 0);
        let n = admitted(&run);
        assert!(n <= 9);
        total += n;
    }
    println!("interleaved: {:.1} admitted of 9 on average", total as f64 / 200.0);
}
