//! Handing a request its verdict (admitted, answered, its paused response
//! resumed) within each VM entry's budget: Envoy runs the resumes of one
//! entry nested in one another after it returns, and V8's stack overflowed
//! at ~384. Verdicts past the budget wait for the next entries, and a
//! request's own callback never sends a local reply for another request
//! (Envoy would turn the current request's `Continue` into a pause that
//! never ends).

use crate::answer::response::{Header, LocalReply};
use crate::worker::host::Host;
use std::collections::VecDeque;

/// At most this many requests are resumed or answered per VM entry; the
/// rest wait for the next entry.
pub const MAX_DELIVERED_PER_ENTRY: usize = 128;

/// What happens to a request that is leaving the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Admit(Option<String>),
    /// An admission held for its turn (shaping), after this many ms.
    AdmitDelayed(Option<String>, u64),
    Reply(LocalReply),
    /// A paused response goes on, with these headers.
    Resume(Vec<Header>),
}

/// The verdicts of one worker that wait for a later VM entry, and the
/// budget of the current one.
#[derive(Debug, Default)]
pub struct Deliveries {
    /// Verdicts beyond an entry's budget, for the next entries.
    deferred: VecDeque<(u32, Verdict)>,
    /// Verdicts carried out in the current entry.
    delivered: usize,
    /// The current VM entry is a request's own callback: no local reply
    /// may be sent for another request in it.
    in_request: bool,
}

impl Deliveries {
    /// A VM entry begins: verdicts left over from the last one go first,
    /// within this entry's budget (in a request's callback, only the
    /// admissions ahead of the first reply).
    pub fn begin(&mut self, host: &mut dyn Host, in_request: bool) {
        self.delivered = 0;
        self.in_request = in_request;
        while self.delivered < MAX_DELIVERED_PER_ENTRY {
            if in_request && matches!(self.deferred.front(), Some((_, Verdict::Reply(_)))) {
                break;
            }
            let Some((id, verdict)) = self.deferred.pop_front() else { break };
            self.delivered += 1;
            carry_out(host, id, &verdict);
        }
    }

    /// Carries out the verdict on held request `id` now, or defers it past
    /// this entry's budget (and, as a reply, past a request's callback).
    pub fn deliver(&mut self, host: &mut dyn Host, id: u32, verdict: Verdict) {
        let reply_in_request = self.in_request && matches!(verdict, Verdict::Reply(_));
        if self.delivered < MAX_DELIVERED_PER_ENTRY && self.deferred.is_empty() && !reply_in_request {
            self.delivered += 1;
            carry_out(host, id, &verdict);
        } else {
            self.deferred.push_back((id, verdict));
        }
    }

    /// Verdicts waiting for a later entry.
    pub fn len(&self) -> usize {
        self.deferred.len()
    }

    pub fn is_empty(&self) -> bool {
        self.deferred.is_empty()
    }

    /// Whether request `id`'s verdict waits for a later entry.
    pub fn waits(&self, id: u32) -> bool {
        self.deferred.iter().any(|(d, _)| *d == id)
    }

    /// Whether request `id`'s paused response waits for a later entry to be
    /// resumed.
    pub fn resume_waits(&self, id: u32) -> bool {
        self.deferred.iter().any(|(d, v)| *d == id && matches!(v, Verdict::Resume(_)))
    }
}

fn carry_out(host: &mut dyn Host, id: u32, verdict: &Verdict) {
    match verdict {
        Verdict::Admit(shadow) => host.admit(id, shadow.as_deref()),
        Verdict::AdmitDelayed(shadow, delay_ms) => host.admit_delayed(id, shadow.as_deref(), *delay_ms),
        Verdict::Reply(reply) => host.reply(id, reply),
        Verdict::Resume(headers) => host.resume_response(id, headers),
    }
}
