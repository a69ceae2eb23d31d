use super::*;
use crate::limiter::Algorithm::SlidingLog;
use crate::testing::{check, plugin, rule};

fn holding() -> Holding {
    let config = plugin()
        .with(rule("plain").header("x-user-id").limit(5, "1s"))
        .with(
            rule("shaped")
                .header("x-user-id")
                .limit(5, "1s")
                .field(r#""shape": { "max_delay": "1s", "max_waiting": 2 }"#),
        )
        .build();
    Holding::new(&config)
}

fn held(release_ms: u64) -> Held {
    Held {
        release_ms,
        delay_ms: 1,
        shadow_denied: None,
        records: vec![(vec![check(SlidingLog, 1, "k", &[(5, 1_000)], 1)], release_ms)],
        arrival: Arrival::new(None, 0),
    }
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn only_shaping_rules_count_and_each_is_bounded() {
    let mut h = holding();
    let plain = [check(SlidingLog, 0, "p", &[(5, 1_000)], 1)];
    let both = [plain[0].clone(), check(SlidingLog, 1, "s", &[(5, 1_000)], 1)];
    for id in 0..10 {
        assert_eq!(h.enter(id, &plain, |_| true), Ok(()), "not counted");
    }
    assert_eq!(h.enter(10, &both, |_| true), Ok(()));
    assert_eq!(h.enter(11, &both, |_| true), Ok(()));
    assert_eq!(h.enter(12, &both, |_| true), Err(1));
    h.leave(10);
    assert_eq!(h.enter(12, &both, |_| true), Ok(()));
    // Requests that left without saying so are forgotten when full.
    assert_eq!(h.enter(13, &both, |id| id != 11), Ok(()));
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn held_requests_leave_in_release_order_and_gone_ones_give_back() {
    let mut h = holding();
    let both = [check(SlidingLog, 1, "s", &[(5, 1_000)], 1)];
    for id in [1, 2] {
        assert_eq!(h.enter(id, &both, |_| true), Ok(()));
    }
    h.hold(1, held(300));
    h.hold(2, held(200));
    assert_eq!(h.len(), 2);
    assert!(h.take_due(199).is_empty());
    h.gone(1);
    let due: Vec<u32> = h.take_due(1_000).into_iter().map(|(id, _)| id).collect();
    assert_eq!(due, [2]);
    assert_eq!(h.enter(3, &both, |_| true), Ok(()));
    assert_eq!(h.enter(4, &both, |id| id == 3), Err(1), "1 counted until its turn is given back");
    let given: Vec<u32> = h.take_given().into_iter().map(|(id, _)| id).collect();
    assert_eq!(given, [1]);
    assert!(h.is_empty());
    let give_back = h.next_id(Some(1));
    assert_eq!(h.enter(4, &both, |id| id == 3), Err(1), "its give-back on the way");
    h.returned(give_back);
    assert_eq!(h.enter(4, &both, |_| true), Ok(()), "everything left");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn an_orphan_stays_counted_until_its_reply() {
    let mut h = holding();
    let both = [check(SlidingLog, 1, "s", &[(5, 1_000)], 1)];
    for id in [1, 2] {
        assert_eq!(h.enter(id, &both, |_| true), Ok(()));
    }
    h.orphan(1, both.to_vec(), Arrival::new(None, 0));
    assert!(!h.is_empty());
    assert_eq!(h.enter(3, &both, |id| id == 2), Err(1), "neither is stale: 2 is live, 1 an orphan");
    assert!(h.take_orphan(1).is_some());
    h.settle_gone(1);
    assert_eq!(h.enter(3, &both, |_| true), Ok(()));
}
