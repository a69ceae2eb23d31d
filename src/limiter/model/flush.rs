//! [`Model::flush`], the model of `flush.lua`: a worker's flush records what
//! it admitted locally per bucket, once per token, as [`Model::adjust`]'s
//! extra charge (from 0); every flush notes its syncer as active in each
//! bucket's syncer set, for that syncer's own horizon. A flush whose token
//! key is not its first bucket's ([`Model::flush_error`]) is refused before
//! any write.

use super::Model;
use crate::key::syncers_key;
use crate::limiter::{Adjustment, Flush, FlushReply};
use std::collections::BTreeMap;

/// What a token key's name (after `<first key>:flush:`) may be: 1 to 64 bytes.
const MAX_NAME: usize = 64;

/// What flushes keep in the store besides the buckets, with the expiry
/// Valkey gives each key.
#[derive(Debug, Default, Clone)]
pub(super) struct Flushes {
    /// Per token key: the last token applied, and when the key expires.
    tokens: BTreeMap<String, (String, u64)>,
    /// Per syncer set: each syncer's expiry (its latest flush plus its
    /// horizon, never lowered), and when the set expires (its latest).
    syncers: BTreeMap<String, (BTreeMap<String, u64>, u64)>,
}

impl Flushes {
    /// Forgets `key`, as Valkey does when it expires.
    pub(super) fn forget(&mut self, key: &str) {
        self.tokens.remove(key);
        self.syncers.remove(key);
    }

    /// When `key`, a token key or a syncer set, expires.
    fn expiry(&self, key: &str) -> Option<u64> {
        self.tokens.get(key).map(|t| t.1).or_else(|| self.syncers.get(key).map(|s| s.1))
    }

    /// Notes `syncer` at `now` in the set `key` until `now + horizon`,
    /// unless it is there until later already, and drops those no longer
    /// active; the set lives as long as its members need: (active syncers,
    /// `syncer`'s rank among them by member name, bytewise). Members are
    /// stored as `~` + syncer, scored by their expiry; a member without
    /// `~` (an older version's: scored by its last flush) is active for
    /// `horizon` after its score.
    fn note(&mut self, key: &str, syncer: &str, horizon: u64, now: u64) -> (u64, u64) {
        let (members, expires) = self.syncers.entry(key.to_string()).or_default();
        if now >= *expires {
            members.clear();
        }
        let active_until = |name: &str, score: u64| match name.starts_with('~') {
            true => score,
            false => score.saturating_add(horizon),
        };
        let me = format!("~{syncer}");
        members.retain(|name, score| *name == me || active_until(name, *score) > now);
        let until = members.entry(me.clone()).or_insert(0);
        *until = (*until).max(now.saturating_add(horizon));
        *expires = members.iter().map(|(name, &score)| active_until(name, score)).max().unwrap_or(now);
        let rank = members.keys().filter(|name| name.as_str() < me.as_str()).count();
        (members.len() as u64, rank as u64)
    }
}

impl Model {
    /// Applies `flush` at `now_ms` (`flush.lua`), which must be well-formed
    /// (the store refuses it otherwise before any write:
    /// [`Model::flush_error`]). Unless its token key holds its token
    /// (unexpired), each entry's units are charged as [`Model::adjust`] from
    /// 0 to `units`, and the token is kept for the longest period of all
    /// entries; a flush already applied records nothing. Either way each
    /// bucket's syncer set notes the syncer until `now_ms + horizon_ms` (this
    /// syncer's horizon; a longer expiry it has already is kept) and drops
    /// the syncers whose expiry has come. The reply holds the buckets' state
    /// afterwards and, per entry, the active syncers and this syncer's rank.
    pub fn flush(&mut self, flush: &Flush, now_ms: u64) -> FlushReply {
        let seen = self
            .flushes
            .tokens
            .get(&flush.token_key)
            .is_some_and(|(token, expires)| *token == flush.token && now_ms < *expires);
        let adjustments: Vec<Adjustment> = flush
            .entries
            .iter()
            .map(|e| Adjustment { check: e.check.clone(), from: 0, to: if seen { 0 } else { e.units } })
            .collect();
        let state = self.adjust(&adjustments, now_ms, now_ms);
        if !seen {
            let windows = flush.entries.iter().flat_map(|e| e.check.windows.iter());
            let longest = windows.map(|w| w.period_ms.get()).max().unwrap_or(0);
            self.flushes.tokens.insert(flush.token_key.clone(), (flush.token.clone(), now_ms.saturating_add(longest)));
        }
        let syncers = flush
            .entries
            .iter()
            .map(|e| self.flushes.note(&syncers_key(&e.check.key), &flush.syncer, flush.horizon_ms, now_ms))
            .collect();
        FlushReply { applied: !seen, state, syncers }
    }

    /// The error `flush.lua` answers, before any write, for a flush whose
    /// token key is not exactly its first bucket's key, `:flush:`, then a
    /// name of 1 to 64 bytes ([`crate::key::flush_token_key`]): a token key
    /// elsewhere could overwrite any key of the hash slot. (Its other argument
    /// checks are the encoder's types.)
    pub fn flush_error(flush: &Flush) -> Option<&'static str> {
        let first = flush.entries.first().map_or("", |e| e.check.key.as_str());
        let name = flush.token_key.strip_prefix(first).and_then(|rest| rest.strip_prefix(":flush:"));
        match name {
            Some(name) if (1..=MAX_NAME).contains(&name.len()) => None,
            _ => Some("ERR tollgate: bad token key"),
        }
    }

    /// When `key`, a flush's token key or syncer set, expires (what its
    /// `PTTL` counts down to), if it is stored.
    pub fn flush_key_expiry(&self, key: &str) -> Option<u64> {
        self.flushes.expiry(key)
    }

    /// Puts `member` in syncer set `key` with `score`, as an older version
    /// wrote it (`member` without `~`, scored by its last flush), the set
    /// living until `expires`: for tests of a rollout.
    pub fn put_syncer(&mut self, key: &str, member: &str, score: u64, expires: u64) {
        let (members, until) = self.flushes.syncers.entry(key.to_string()).or_default();
        members.insert(member.to_string(), score);
        *until = (*until).max(expires);
    }
}
