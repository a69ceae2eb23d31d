//! Every request is answered, whatever the store does: random interleavings
//! of arrivals, partial replies, closes (refused, reset), refused opens and
//! time, for every failure mode; once the store is healthy again, nothing is
//! left waiting and nothing was answered twice.

use crate::testing::plugin;
use crate::testing::Rng;
use crate::worker::tests::rig::fake::Rig;
use crate::worker::Flow;
use std::collections::HashMap;

fn run(seed: u64, mode: &str) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut rig =
        Rig::new(plugin().failure_mode(mode).valkey(r#""max_in_flight": 4"#).valkey(r#""max_queue": 8"#).rule(
            "api",
            Some("x-user-id"),
            &[(3, "1s")],
        ));
    rig.store.script_loaded = rng.next(2) == 0;
    let mut started: HashMap<u32, bool> = HashMap::new();
    for step in 0..300 {
        match rng.next(10) {
            0..=3 => {
                let (id, flow) = rig.request(&format!("u{}", rng.next(5)));
                started.insert(id, flow == Flow::Continue);
            }
            4 => rig.wake(),
            5 => {
                // The store answers part of what it was sent, split anywhere.
                let tokens: Vec<u32> = rig.host.outbox.keys().copied().collect();
                for token in tokens {
                    let sent = rig.host.take_outbox(token);
                    let reply = rig.store.answer(&sent, rig.now);
                    let cut = rng.next(reply.len() as u64 + 1) as usize;
                    rig.message(token, &reply[..cut]);
                    if rng.next(3) > 0 {
                        rig.message(token, &reply[cut..]);
                    }
                }
            }
            6 => {
                if let Some(&(token, _, _)) = rig.host.opened.last() {
                    rig.close(token, [2, 13, 14][rng.next(3) as usize]);
                }
            }
            7 => rig.host.refuse_open = (rng.next(2) == 0).then(|| "refused".to_string()),
            8 => rig.run_for(rng.next(120)),
            _ => rig.store.script_loaded = step % 7 != 0 || rig.store.script_loaded,
        }
    }
    // The store heals: everything still waiting gets its answer.
    rig.host.refuse_open = None;
    for _ in 0..400 {
        rig.wake();
        let tokens: Vec<u32> = rig.host.outbox.keys().copied().collect();
        for token in tokens {
            rig.answer(token);
        }
        rig.run_for(5);
    }
    assert_eq!(
        {
            let (f, h, _) = rig.gauges();
            (h, f)
        },
        (0, 0),
        "seed {seed}, {mode}: nothing left held"
    );
    assert_eq!(rig.host.foreign_replies, vec![], "seed {seed}, {mode}: no reply in another request's callback");
    for (id, continued) in &started {
        let answers = rig.host.admitted.iter().filter(|(a, _)| a == id).count()
            + rig.host.replies.iter().filter(|(r, _)| r == id).count();
        let expected = usize::from(!continued);
        assert_eq!(
            answers, expected,
            "seed {seed}, {mode}: request {id} answered {answers} times (continued: {continued})"
        );
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn every_request_is_answered_exactly_once_whatever_the_store_does() {
    for seed in 1..200 {
        for mode in ["allow", "deny", "local"] {
            run(seed, mode);
        }
    }
}
