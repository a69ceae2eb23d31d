//! A rule that counts on the response and has a concurrency limit: the
//! reservation is the windows'; the lease set's check always takes one
//! lease on the request (docs/concurrency.md, "With the other features").

use crate::testing::{plugin, rule, Plugin};
use crate::worker::tests::rig::fake::Rig;

const LEASES: &str = "tollgate:{llm:alice}:lease";

/// 100 per minute per user, counted on the response as `count` says, at
/// most one request in flight.
fn counted(count: &str) -> Plugin {
    plugin().with(
        rule("llm")
            .header("x-user-id")
            .limit(100, "1m")
            .field(&format!(r#""count": {count}"#))
            .field(r#""concurrency": 1"#),
    )
}

/// Without a reservation the windows only check on the request; with
/// one they record it. Either way the request takes its lease, one, and
/// a second request while it is in flight is denied.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_counted_request_takes_its_lease_whatever_it_reserves() {
    let counts = [
        r#"{ "cost": { "header": "x-used" } }"#,
        r#"{ "reserve": { "units": 3 }, "cost": { "header": "x-used" } }"#,
        r#"{ "reserve": { "header": "x-max", "default": 2 }, "cost": { "header": "x-used" } }"#,
    ];
    for count in counts {
        let mut rig = Rig::new(counted(count));
        let (first, _) = rig.request_with(&[("x-user-id", "alice"), ("x-max", "5")]);
        rig.run_until_quiet();
        assert_eq!(rig.host.status(first), Some(200), "{count}");
        assert_eq!(rig.store.model.leases(LEASES).len(), 1, "{count}: its lease is held");
        let (second, _) = rig.request_with(&[("x-user-id", "alice"), ("x-max", "5")]);
        rig.run_until_quiet();
        assert_eq!(rig.host.status(second), Some(429), "{count}: the lease set is full");
    }
}
