//! Overrides and the dry run in the differential harness: an override hash
//! written in both Valkey and the model, and `peek` through each path
//! read-only (`FCALL_RO` for the library, `EVAL_RO` for the script: a
//! write would be refused), checked to leave every key as it was.

use super::super::valkey_stats::Conn;
use super::{Differential, Path};
use tollgate::limiter::model::overrides::Override;
use tollgate::limiter::script::{encode_load, encode_peek, encode_shaped_peek, is_loaded, limiter, Invocation};
use tollgate::limiter::{reply, Check, Decision};
use tollgate::resp::Value;

impl Differential<'_> {
    /// Replaces the override hash of `key` by `fields` (none: deletes it),
    /// in Valkey (`DEL`, `HSET`) and in the model.
    pub fn set_override_fields(&mut self, key: &str, fields: &[(String, String)]) {
        self.valkey.cmd(&["DEL", key]);
        if !fields.is_empty() {
            let mut args = vec!["HSET", key];
            for (f, v) in fields {
                args.extend([f.as_str(), v.as_str()]);
            }
            self.valkey.cmd(&args);
        }
        self.model.set_override(key, fields);
    }

    /// [`Differential::set_override_fields`] of `o`.
    pub fn set_override(&mut self, key: &str, o: &Override) {
        self.set_override_fields(key, &o.fields());
    }

    /// Peeks at `checks` at `now` (shaped with `(max_delay, floor)` when
    /// given) in both, asserts identical answers, and that no key changed.
    pub fn peek(&mut self, checks: &[Check], shape: Option<(u64, u64)>, now: u64) -> Decision {
        let before = self.snapshot(checks);
        let expected = match shape {
            Some((max_delay, floor)) => self.model.peek_floored(checks, max_delay, floor, now),
            None => self.model.peek(checks, now),
        };
        let got = store_peek_via(self.valkey.port, self.path, checks, shape, Some(now));
        assert_eq!(got, expected, "{:?} step {} at {now} ms: peek disagrees on {checks:#?}", self.path, self.steps);
        assert_eq!(
            self.snapshot(checks),
            before,
            "{:?} step {} at {now} ms: peek changed a key",
            self.path,
            self.steps
        );
        got
    }

    /// The keys `checks` name (buckets, override keys) and their `DUMP`
    /// and whether they expire. (Only those: keys of earlier traces expire
    /// by Valkey's clock meanwhile. `FCALL_RO` and `EVAL_RO` refuse any
    /// write anyway.)
    fn snapshot(&self, checks: &[Check]) -> Vec<(String, String, bool)> {
        let mut keys: Vec<&str> =
            checks.iter().flat_map(|c| [Some(c.key.as_str()), c.override_key.as_deref()]).flatten().collect();
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter()
            .map(|k| {
                (k.to_string(), format!("{:?}", self.valkey.cmd(&["DUMP", k])), self.valkey.int(&["PTTL", k]) >= 0)
            })
            .collect()
    }
}

/// One `peek` through `path`, read-only: `FCALL_RO` (after a `FUNCTION
/// LOAD`) or `EVAL_RO` with the script's body.
pub fn store_peek_via(
    port: u16,
    path: Path,
    checks: &[Check],
    shape: Option<(u64, u64)>,
    now_ms: Option<u64>,
) -> Decision {
    let mut conn = Conn::connect(port);
    let how = match path {
        Path::Function => {
            let mut load = Vec::new();
            encode_load(&mut load, limiter());
            assert!(is_loaded(&conn.pipeline(&load, 1).remove(0), limiter()));
            Invocation::FCall
        }
        Path::Script => Invocation::Eval,
    };
    let mut body = Vec::new();
    match shape {
        Some(shape) => encode_shaped_peek(&mut body, limiter(), how, checks, shape, now_ms),
        None => encode_peek(&mut body, limiter(), how, checks, now_ms),
    }
    let (from, to): (&[u8], &[u8]) = match how {
        Invocation::FCall => (b"$5\r\nFCALL\r\n", b"$8\r\nFCALL_RO\r\n"),
        _ => (b"$4\r\nEVAL\r\n", b"$7\r\nEVAL_RO\r\n"),
    };
    let at = body.windows(from.len()).position(|w| w == from).expect("the verb");
    body.splice(at..at + from.len(), to.iter().copied());
    let reply = conn.pipeline(&body, 1).remove(0);
    assert!(!reply.is_error(), "{path:?}: store error: {reply:?}");
    reply::parse(&reply, checks).unwrap_or_else(|e| panic!("{path:?}: {e}: {reply:?}"))
}
