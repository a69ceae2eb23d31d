//! The guarantees of the decision across slots, on the reference
//! ([`super`]) with the pure models as three shards: random
//! requests over shared buckets, their steps interleaved at random, windows
//! long enough that nothing expires during a run (so "the limit" is a hard
//! cap). Compared with an ideal store that only ever saw the admitted
//! requests' records. A small deterministic generator (these tests also run
//! in the wasm VM).

mod holding;

use super::{Action, Event, Run};
use crate::limiter::model::Model;
use crate::limiter::{Adjustment, Algorithm, Check, Decision};
use crate::testing::check;
use crate::testing::Rng;
use crate::worker::cross::protocol::{Fate, Step};

const HOUR: u64 = 3_600_000;
const START: u64 = 1_800_000_000_000;

/// 2 to 4 rules of any algorithm, small limits over hours, each its own bucket.
fn rules(rng: &mut Rng) -> Vec<Check> {
    random_rules(rng, 6, true, "t")
}

/// 2 to 4 rules of any algorithm, limits 1 to `most` over 1 or 2 hours,
/// keys `<tag>:{r<i>}:<id>`; each costs 1 to 2 (within its smallest limit)
/// when `costs`, else 1.
pub(super) fn random_rules(rng: &mut Rng, most: u64, costs: bool, tag: &str) -> Vec<Check> {
    (0..2 + rng.next(3))
        .map(|i| {
            let algorithm = Algorithm::ALL[rng.next(4) as usize];
            let windows: Vec<(u64, u64)> = (0..1 + rng.next(2)).map(|w| (1 + rng.next(most), (w + 1) * HOUR)).collect();
            let smallest = windows.iter().map(|w| w.0).min().unwrap_or(1);
            let cost = if costs { 1 + rng.next(smallest.min(2)) } else { 1 };
            check(algorithm, i as usize, &format!("{tag}:{{r{i}}}:{}", algorithm.id()), &windows, cost)
        })
        .collect()
}

/// `n` requests, each matching a random non-empty subset of `rules`; about
/// one in `crash_one_in` crashes between the steps.
pub(super) fn requests(rng: &mut Rng, rules: &[Check], n: u64, crash_one_in: u64) -> Vec<(Vec<Check>, bool)> {
    (0..n)
        .map(|_| {
            let mask = 1 + rng.next((1 << rules.len()) - 1);
            let checks = rules.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| c.clone());
            (checks.collect(), crash_one_in > 0 && rng.next(crash_one_in) == 0)
        })
        .collect()
}

fn schedule(rng: &mut Rng, gap: u64) -> Vec<(u64, u32)> {
    (0..60).map(|_| (rng.next(gap + 1), rng.next(1 << 16) as u32)).collect()
}

/// The state of bucket `c` (a read that changes nothing).
pub(super) fn read(m: &mut Model, c: &Check, now: u64) -> Decision {
    m.adjust(&[Adjustment { check: c.clone(), from: 0, to: 0 }], 0, now)
}

/// The ideal store: the records of admitted requests' groups decided before
/// event `until`, each at its time.
fn ideal(run: &Run<Model>, until: usize) -> Model {
    let mut m = Model::new();
    for e in run.events.iter().take(until) {
        let (Action::Decide(r, g), Some(reply)) = (e.action, &e.reply) else { continue };
        let q = &run.requests[r];
        if q.fate() == Some(Fate::Admit) && reply.allowed {
            let charge: Vec<Adjustment> = q.groups[g]
                .of(&q.checks)
                .into_iter()
                .map(|c| Adjustment { to: c.cost.get(), check: c, from: 0 })
                .collect();
            m.adjust(&charge, e.now_ms, e.now_ms);
        }
    }
    m
}

/// Where event `i` stands: the index of request `r` group `g`'s undo, if any.
fn undo_index(events: &[Event], r: usize, g: usize) -> Option<usize> {
    events.iter().position(|e| e.action == Action::Undo(r, g))
}

/// Whether request `r`'s undo of group `g` could give back its record
/// exactly: anything but `gcra`, or no other admission on a key of the
/// group at a later ms before the undo.
fn clean(run: &Run<Model>, r: usize, g: usize, decided_at: u64) -> bool {
    let q = &run.requests[r];
    let keys: Vec<&Check> = q.groups[g].checks.iter().map(|&i| &q.checks[i]).collect();
    if keys.iter().all(|c| c.algorithm != Algorithm::Gcra) {
        return true;
    }
    let from = run.events.iter().position(|e| e.action == Action::Decide(r, g)).unwrap();
    let to = undo_index(&run.events, r, g).unwrap_or(run.events.len());
    run.events[from + 1..to].iter().all(|e| {
        let (Action::Decide(o, og), Some(reply)) = (e.action, &e.reply) else { return true };
        let other = &run.requests[o];
        let shares = other.groups[og].checks.iter().any(|&i| keys.iter().any(|k| k.key == other.checks[i].key));
        !(reply.allowed && shares && e.now_ms > decided_at)
    })
}

/// A record of request `r`, group `g`, on `key`, that stays although `r`
/// was denied, at event `at`: decided before, and not undone before (or
/// undone, but gcra could not give it back).
fn phantom(run: &Run<Model>, r: usize, g: usize, key: &str, at: usize) -> bool {
    let q = &run.requests[r];
    let Some(Step::Decided(d)) = q.steps.get(g) else { return false };
    let decided = run.events.iter().position(|e| e.action == Action::Decide(r, g)).unwrap();
    let on_key = q.groups[g].checks.iter().any(|&i| q.checks[i].key == key);
    let undone = undo_index(&run.events, r, g).filter(|&u| u < at && clean(run, r, g, d.now_ms));
    q.fate() == Some(Fate::Deny) && d.allowed && on_key && decided < at && undone.is_none()
}

/// Checks every guarantee on one finished run; the spurious denials seen.
fn check_guarantees(run: &mut Run<Model>, rules: &[Check], end: u64) -> usize {
    for (r, q) in run.requests.iter().enumerate() {
        let (fate, _, answer) = q.answer().unwrap_or_else(|| panic!("request {r} unanswered"));
        assert_eq!(answer.allowed, fate == Fate::Admit, "request {r}");
    }
    // Never over a limit: the admitted costs per bucket.
    for c in rules {
        let admitted: u64 = run
            .requests
            .iter()
            .filter(|q| q.fate() == Some(Fate::Admit) && q.checks.iter().any(|x| x.key == c.key))
            .map(|_| c.cost.get())
            .sum();
        let limit = c.windows.iter().map(|w| w.limit.get()).min().unwrap();
        assert!(admitted <= limit, "{}: {admitted} admitted, limit {limit}", c.key);
    }
    // Undone exactly when the undo landed before other admissions (any
    // algorithm but gcra: always); never more than was taken.
    let mut best = ideal(run, run.events.len());
    for c in rules {
        let shard = usize::from(crate::store::cluster::key_slot(c.key.as_bytes())) % run.shards.len();
        let got = read(&mut run.shards[shard], c, end);
        let want = read(&mut best, c, end);
        let mut bound = 0;
        let mut exact = true;
        for (r, q) in run.requests.iter().enumerate() {
            for (g, step) in q.steps.iter().enumerate() {
                let Step::Decided(d) = step else { continue };
                let on_key = q.groups[g].checks.iter().any(|&i| q.checks[i].key == c.key);
                if q.fate() != Some(Fate::Deny) || !d.allowed || !on_key {
                    continue;
                }
                if q.crashed || !clean(run, r, g, d.now_ms) {
                    bound += c.cost.get();
                    exact = false;
                }
            }
        }
        for (a, b) in got.windows.iter().zip(&want.windows) {
            assert!(a.remaining <= b.remaining, "{}: the undo freed more than was taken", c.key);
            assert!(
                b.remaining - a.remaining <= bound,
                "{}: over-count {} > {bound}",
                c.key,
                b.remaining - a.remaining
            );
        }
        if exact {
            assert_eq!(got, want, "{}: undone exactly", c.key);
        }
    }
    // A denial the ideal store would not give only while another request's
    // record on that bucket waits for its undo.
    let mut spurious = 0;
    for (i, e) in run.events.iter().enumerate() {
        let (Action::Decide(r, g), Some(reply)) = (e.action, &e.reply) else { continue };
        if reply.allowed {
            continue;
        }
        let q = &run.requests[r];
        let checks = q.groups[g].of(&q.checks);
        if !ideal(run, i).decide(&checks, e.now_ms).allowed {
            continue;
        }
        spurious += 1;
        let explained = (0..run.requests.len())
            .filter(|&o| o != r)
            .any(|o| (0..run.requests[o].groups.len()).any(|og| checks.iter().any(|c| phantom(run, o, og, &c.key, i))));
        assert!(explained, "event {i}: request {r} denied with no record in flight:\n{:#?}", run.events);
    }
    spurious
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn interleaved_requests_never_admit_over_a_limit_and_undo_exactly() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut spurious, mut denied, mut runs_with_crash) = (0, 0, 0);
    for _ in 0..400 {
        let rules = rules(&mut rng);
        let n = 3 + rng.next(6);
        let requests = requests(&mut rng, &rules, n, 6);
        runs_with_crash += usize::from(requests.iter().any(|(_, c)| *c));
        let mut run = Run::new(vec![Model::new(), Model::new(), Model::new()], requests);
        let end = run.run(START + rng.next(1_000), &schedule(&mut rng, 3)) + 1;
        spurious += check_guarantees(&mut run, &rules, end);
        denied += run.requests.iter().filter(|q| q.fate() == Some(Fate::Deny)).count();
    }
    println!("spurious {spurious} denied {denied} crash-runs {runs_with_crash}");
    assert!(spurious > 0 && denied > 100 && runs_with_crash > 50, "{spurious} {denied} {runs_with_crash}");
}

/// Without concurrency and within one millisecond, the two steps answer
/// exactly as one store deciding every check at once, and leave exactly
/// its state.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn one_request_at_a_time_is_one_decision_of_every_check() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for _ in 0..300 {
        let rules = rules(&mut rng);
        let n = 2 + rng.next(6);
        let requests = requests(&mut rng, &rules, n, 0);
        let now = START + rng.next(1_000);
        let mut one = Model::new();
        let mut run = Run::new(vec![Model::new(), Model::new(), Model::new()], requests.clone());
        for (r, (checks, _)) in requests.iter().enumerate() {
            while let Some(action) =
                run.available().into_iter().find(|a| matches!(a, Action::Decide(q, _) | Action::Undo(q, _) if *q == r))
            {
                run.act(action, now);
            }
            let (fate, indices, answer) = run.requests[r].answer().unwrap();
            let whole = one.decide(checks, now);
            assert_eq!(indices, (0..checks.len()).collect::<Vec<_>>());
            assert_eq!((fate == Fate::Admit, &answer.windows), (whole.allowed, &whole.windows), "request {r}");
        }
        for c in &rules {
            let shard = usize::from(crate::store::cluster::key_slot(c.key.as_bytes())) % 3;
            assert_eq!(read(&mut run.shards[shard], c, now), read(&mut one, c, now), "{}", c.key);
        }
    }
}

/// Shaped first steps that may not wait, on buckets without a turn in the
/// future, are the unshaped run: the same replies at every step, the same
/// guarantees.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn shaped_steps_without_future_turns_are_the_unshaped_run() {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for _ in 0..200 {
        let rules = rules(&mut rng);
        let n = 3 + rng.next(6);
        let requests = requests(&mut rng, &rules, n, 6);
        let (start, schedule) = (START + rng.next(1_000), schedule(&mut rng, 3));
        let mut plain = Run::new(vec![Model::new(), Model::new(), Model::new()], requests.clone());
        let mut shaped = Run::new(vec![Model::new(), Model::new(), Model::new()], requests).shaping();
        plain.run(start, &schedule);
        let end = shaped.run(start, &schedule) + 1;
        let replies = |run: &Run<Model>| run.events.iter().map(|e| (e.now_ms, e.action, e.reply.clone())).collect();
        let (a, b): (Vec<_>, Vec<_>) = (replies(&plain), replies(&shaped));
        assert_eq!(a, b);
        check_guarantees(&mut shaped, &rules, end);
    }
}

/// Buckets holding turns in the future (given to requests of one slot that
/// wait): a request across slots is never delayed, and no group of it
/// admits on a bucket before that bucket's last turn.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn across_slots_a_shaped_request_waits_for_nothing_and_passes_no_turn() {
    let mut rng = Rng(0x94D0_49BB_1331_11EB);
    let (mut behind, mut admitted) = (0, 0);
    for _ in 0..300 {
        let rules = rules(&mut rng);
        let mut shards = vec![Model::new(), Model::new(), Model::new()];
        // Per bucket, maybe: requests of it alone, shaped up to 10 h, until
        // one is given a turn in the future.
        let mut last_turn = vec![0; rules.len()];
        for (i, c) in rules.iter().enumerate() {
            if rng.next(2) == 0 {
                continue;
            }
            let shard = usize::from(crate::store::cluster::key_slot(c.key.as_bytes())) % 3;
            for _ in 0..8 {
                let d = shards[shard].decide_shaped(std::slice::from_ref(c), 10 * HOUR, START);
                if d.allowed {
                    last_turn[i] = START + d.delay_ms;
                }
                if d.delay_ms > 0 || !d.allowed {
                    break;
                }
            }
        }
        let n = 3 + rng.next(6);
        let requests = requests(&mut rng, &rules, n, 6);
        let mut run = Run::new(shards, requests).shaping();
        run.run(START + 1 + rng.next(1_000), &schedule(&mut rng, 3));
        for e in &run.events {
            let (Action::Decide(r, g), Some(reply)) = (e.action, &e.reply) else { continue };
            assert_eq!(reply.delay_ms, 0, "never delayed: {e:?}");
            let q = &run.requests[r];
            let waits = q.groups[g].checks.iter().any(|&i| {
                let k = rules.iter().position(|c| c.key == q.checks[i].key).unwrap();
                last_turn[k] > e.now_ms
            });
            if waits {
                behind += 1;
                assert!(!reply.allowed, "admitted before a turn given in its bucket: {e:?}");
            }
            admitted += usize::from(reply.allowed);
        }
        for (r, q) in run.requests.iter().enumerate() {
            let (fate, _, answer) = q.answer().unwrap_or_else(|| panic!("request {r} unanswered"));
            assert_eq!(answer.allowed, fate == Fate::Admit);
            assert_eq!(answer.delay_ms, 0);
        }
    }
    println!("{behind} steps behind a future turn, {admitted} admitted");
    assert!(behind > 100 && admitted > 100, "{behind} {admitted}");
}
