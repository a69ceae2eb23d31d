//! What a request's callbacks do with its body and its response's, as the
//! worker says: read it, hold it, or let it go; and a request or a response
//! that has no body, decided or settled at once on the empty one.

use crate::testing::{plugin, rule, Plugin};
use crate::worker::tests::rig::fake::Rig;
use crate::worker::{BodyStep, CountStat, Flow, ResponseFlow, ResponseView, Stat};

/// 100 per 3 s per tenant, reserving from the request's JSON body and
/// settling with the response's.
fn tokens() -> Plugin {
    let count = r#""count": { "reserve": { "body": "max_tokens" }, "cost": { "body": "usage.total_tokens" } }"#;
    plugin().top(r#""max_body_bytes": 1024"#).with(rule("llm.tokens").header("x-tenant").limit(100, "3s").field(count))
}

const TENANT: [(&str, &str); 1] = [("x-tenant", "acme")];

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_request_body_is_read_once_complete_or_max_body_bytes_long_then_waits_with_it() {
    let mut rig = Rig::new(tokens());
    let (id, flow) = rig.request_with(&TENANT);
    assert_eq!(flow, Flow::ReadBody);
    let step = |rig: &Rig, buffered, end| rig.worker.request_body_step(id, buffered, end);
    assert_eq!(step(&rig, Some(400), false), BodyStep::Wait, "incomplete and short: Envoy buffers on");
    assert_eq!(step(&rig, Some(400), true), BodyStep::Read(400), "complete: all of it");
    assert_eq!(step(&rig, Some(1024), false), BodyStep::Read(1024), "max_body_bytes buffered: read, all of it");
    assert_eq!(step(&rig, Some(5_000), true), BodyStep::Read(1025), "longer: one past the bound shows it is longer");
    assert_eq!(step(&rig, None, true), BodyStep::Read(1025), "at the trailers, size unknown");
    assert_eq!(rig.request_body(id, &[b' '; 1024], false), Flow::Pause);
    assert_eq!(step(&rig, Some(2_048), false), BodyStep::Wait, "decided on its first bytes: the rest waits with it");
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200));
    assert_eq!(step(&rig, Some(2_048), true), BodyStep::Pass, "admitted: the rest goes on");
    let (other, flow) = rig.request_with(&[]);
    assert_eq!(flow, Flow::Continue, "no key: no rule");
    assert_eq!(rig.worker.request_body_step(other, Some(10), true), BodyStep::Pass, "never seen");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_request_without_a_body_is_decided_at_once_on_the_empty_one() {
    let mut rig = Rig::new(tokens());
    let (id, flow) = rig.request_ending(&TENANT, true);
    assert_eq!(flow, Flow::Pause, "sent to the store, not waiting for a body");
    assert!(!rig.host.outbox.is_empty() || rig.host.wakes > 0, "on its way");
    rig.run_until_quiet();
    assert_eq!(rig.host.status(id), Some(200));
    assert_eq!(rig.host.count(Stat::BodyTooLarge), 0, "an empty body is complete");
    assert_eq!(rig.host.count(Stat::Count(0, CountStat::Reserved)), 100, "no max_tokens: the default");
}

#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_response_body_goes_to_the_worker_and_one_without_is_settled_at_once() {
    let mut rig = Rig::new(tokens());
    let json = [("content-type", "application/json")];
    let (first, _) = rig.request_with(&TENANT);
    rig.request_body(first, br#"{"max_tokens":40}"#, true);
    rig.run_until_quiet();
    assert!(!rig.worker.reads_response_body(first), "not before its response");
    assert_eq!(rig.response(first, 200, &json), ResponseFlow::ReadBody);
    assert!(rig.worker.reads_response_body(first));
    rig.response_body(first, br#"{"usage":{"total_tokens":25}}"#, true);
    assert!(!rig.worker.reads_response_body(first), "read to its end");
    rig.run_until_quiet();
    let (second, _) = rig.request_with(&TENANT);
    rig.request_body(second, br#"{"max_tokens":30}"#, true);
    rig.run_until_quiet();
    assert_eq!(rig.response_ending(second, (200, &json), true), ResponseFlow::Continue);
    assert!(!rig.worker.reads_response_body(second), "no body to read");
    rig.run_until_quiet();
    let count = |s| rig.host.count(Stat::Count(0, s));
    assert_eq!(count(CountStat::CostFallback), 1, "no body: its reservation is its cost");
    assert_eq!((count(CountStat::Reserved), count(CountStat::Settled)), (70, 55));
}

/// A response's status is its `:status` header, when it is a number.
#[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
fn a_status_is_read_from_its_pseudo_header() {
    struct Status(&'static str);
    impl ResponseView for Status {
        fn header(&self, name: &str) -> Option<Vec<u8>> {
            (name == ":status").then(|| self.0.as_bytes().to_vec())
        }
    }
    assert_eq!(Status("404").status(), Some(404));
    assert_eq!(Status("4x4").status(), None);
    assert_eq!(Status("").status(), None);
}
