//! The lease sets in the differential harness: the `lease` entry point
//! through either path, the leases Valkey stores against the model's, and
//! their keys' TTLs. A lease set's key lives until the expiry of the lease
//! that last had the latest one: an admission or a renewal sets the TTL
//! (the lease's, from its turn or from now) unless a live lease expires
//! later; an end never changes it (the key goes with its last lease).

use super::super::Valkey;
use super::calls::encoded_via;
use super::{ttl_ms, Differential, Path};
use std::collections::BTreeMap;
use std::time::Instant;
use tollgate::limiter::script::{encode_lease, limiter};
use tollgate::limiter::{reply, Algorithm, Check, LeaseChange, LeaseOp, LeaseReply};
use tollgate::resp::Value;

/// One `lease` call through `path` (loading the code when missing).
pub fn store_lease_via(valkey: &Valkey, path: Path, ops: &[LeaseOp], now_ms: Option<u64>) -> LeaseReply {
    let reply = encoded_via(valkey, path, |body, how| encode_lease(body, limiter(), how, ops, now_ms));
    assert!(!reply.is_error(), "{path:?}: store error: {reply:?}");
    reply::parse_lease(&reply, ops).unwrap_or_else(|e| panic!("{path:?}: {e}: {reply:?}"))
}

/// Whether recording `c` at `at` sets its key's TTL: always, but in a lease
/// set whose latest live lease (`latest`, before) expires later than the
/// new one.
pub(super) fn ttl_set(c: &Check, at: u64, latest: Option<u64>) -> bool {
    c.algorithm != Algorithm::Lease || latest.is_none_or(|latest| at + ttl_ms(c) >= latest)
}

impl Differential<'_> {
    /// The latest live lease (expiry > `now`) of `c`'s set in the model, or
    /// `None` (none, or `c` is no lease check).
    pub(super) fn lease_latest(&self, c: &Check, now: u64) -> Option<u64> {
        if c.algorithm != Algorithm::Lease {
            return None;
        }
        self.model.leases(&c.key).into_iter().map(|(_, e)| e).filter(|&e| e > now).max()
    }

    /// Ends or renews leases at `now` in both, and asserts identical answers,
    /// the same live leases, and the TTL of every key whose latest lease is
    /// one this call renewed.
    pub fn lease(&mut self, ops: &[LeaseOp], now: u64) -> LeaseReply {
        self.expire(now);
        let expected = self.model.lease(ops, now);
        let sent = Instant::now();
        let got = store_lease_via(self.valkey, self.path, ops, Some(now));
        assert_eq!(
            got, expected,
            "{:?} step {} at {now} ms: store and model disagree on {ops:#?}",
            self.path, self.steps
        );
        // Per key: the latest expiry a renewal gave.
        let mut renewed: BTreeMap<&str, u64> = BTreeMap::new();
        for (op, &live) in ops.iter().zip(&got.live) {
            if let (LeaseChange::Renew { ttl_ms }, true) = (op.change, live) {
                let until = renewed.entry(&op.key).or_default();
                *until = (*until).max(now + ttl_ms);
            }
        }
        for op in ops {
            self.check_leases(&op.key, now, false);
        }
        for (key, until) in renewed {
            let later = self.model.leases(key).iter().any(|&(_, e)| e > until);
            let exists = self.valkey.int(&["EXISTS", key]) == 1;
            if exists && until > now && !later {
                self.wrote(key, now, until - now, now, sent);
            }
        }
        self.steps += 1;
        got
    }

    /// The leases Valkey stores in `key` against the model's: the same live
    /// ones (expiry > `now`), no other but expired ones the model still
    /// stores, and none expired at all when a decision or adjustment just
    /// checked the set (`checked`: its housekeeping drops them). A key that
    /// holds leases has an expiry.
    pub(super) fn check_leases(&self, key: &str, now: u64, checked: bool) {
        let Value::Array(items) = self.valkey.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"]) else {
            panic!("ZRANGE {key}")
        };
        let text = |v: &Value| String::from_utf8_lossy(v.as_bytes().unwrap()).into_owned();
        let stored: BTreeMap<String, u64> =
            items.chunks(2).map(|pair| (text(&pair[0]), text(&pair[1]).parse().unwrap())).collect();
        let model: BTreeMap<String, u64> = self.model.leases(key).into_iter().collect();
        let live =
            |m: &BTreeMap<String, u64>| m.iter().filter(|(_, &e)| e > now).map(|(id, &e)| (id.clone(), e)).collect();
        let (stored_live, model_live): (BTreeMap<_, _>, BTreeMap<_, _>) = (live(&stored), live(&model));
        let at = format!("{:?} step {} at {now} ms: leases of {key}", self.path, self.steps);
        assert_eq!(stored_live, model_live, "{at}");
        for (id, e) in &stored {
            assert_eq!(model.get(id), Some(e), "{at}: {id} stored, not in the model");
            assert!(!checked || *e > now, "{at}: {id} expired at {e} and was kept");
        }
        if !stored.is_empty() {
            self.check_expires(key);
        }
    }
}
