//! The store's override hashes: the KEYS of marked checks (`@`), and
//! `HSET`, `HGETALL`, `DEL` as `tollgate override set/list/rm` use them
//! (on the model's hashes; `DEL` also forgets a bucket).

use super::{error, text, ModelStore};
use crate::limiter::{Check, Decision, Window};
use crate::resp::Value;
use std::num::NonZeroU64;

/// `checks` (each with whether it is marked `@`) given their KEYS: one
/// bucket per check, then one override key per marked check, in order;
/// `None` when KEYS are not as many.
pub(super) fn with_keys(checks: Vec<(Check, bool)>, keys: Vec<String>) -> Option<Vec<Check>> {
    let marked = checks.iter().filter(|(_, m)| *m).count();
    if keys.len() != checks.len() + marked {
        return None;
    }
    let (buckets, override_keys) = keys.split_at(checks.len());
    let mut override_keys = override_keys.iter();
    checks
        .into_iter()
        .zip(buckets)
        .map(|((check, marked), key)| {
            let override_key = if marked { Some(override_keys.next()?.as_str().into()) } else { None };
            Some(Check { key: key.clone(), override_key, ..check })
        })
        .collect()
}

impl ModelStore {
    /// `HSET key field value...` (the fields added to the hash), `HGETALL
    /// key`, `DEL key...` (answering how many override hashes it deleted).
    pub(super) fn hash_command(&mut self, verb: &str, args: &[Value]) -> Value {
        let words: Vec<String> = args.iter().skip(1).map(text).collect();
        match (verb, words.as_slice()) {
            ("HSET", [key, pairs @ ..]) if !pairs.is_empty() && pairs.len() % 2 == 0 => {
                let mut fields = self.model.override_fields(key).cloned().unwrap_or_default();
                let before = fields.len();
                for pair in pairs.chunks(2) {
                    if let [field, value] = pair {
                        fields.insert(field.clone(), value.clone());
                    }
                }
                let added = fields.len() - before;
                self.model.set_override(key, &fields.into_iter().collect::<Vec<_>>());
                Value::Integer(i64::try_from(added).unwrap_or(i64::MAX))
            }
            ("HGETALL", [key]) => {
                let fields = self.model.override_fields(key).cloned().unwrap_or_default();
                Value::Array(
                    fields.into_iter().flat_map(|(f, v)| [f, v].map(|s| Value::Bulk(s.into_bytes()))).collect(),
                )
            }
            ("DEL", keys) if !keys.is_empty() => {
                let mut gone = 0;
                for key in keys {
                    gone += i64::from(self.model.override_fields(key).is_some());
                    self.model.expire(key);
                }
                Value::Integer(gone)
            }
            _ => error(&format!("ERR wrong number of arguments for '{}' command", verb.to_ascii_lowercase())),
        }
    }
}

/// `checks` with the limits in force that `decision` reports (an override's,
/// where one applied): what the journal records, so that the simulator's
/// checks hold each admission to the limits it was decided by.
pub(super) fn in_force(checks: Vec<Check>, decision: &Decision) -> Vec<Check> {
    checks
        .into_iter()
        .enumerate()
        .map(|(i, check)| {
            let outcomes = decision.windows.iter().filter(|w| w.check == i);
            if !outcomes.clone().any(|w| w.overridden) {
                return check;
            }
            let windows: Vec<Window> = check
                .windows
                .iter()
                .zip(outcomes)
                .map(|(w, o)| Window { limit: NonZeroU64::new(o.limit).unwrap_or(w.limit), ..*w })
                .collect();
            Check { windows: windows.into(), ..check }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::override_key;
    use crate::limiter::model::Model;
    use crate::limiter::script::{encode_adjust, encode_call, encode_peek, encode_shaped_peek, limiter, Invocation};
    use crate::limiter::{reply, Adjustment, Algorithm};
    use crate::model::store::Ran;
    use crate::resp::{decode, encode_command, Limits};
    use crate::testing::{check, lease};

    fn answer(store: &mut ModelStore, command: &[u8]) -> Value {
        decode(&store.answer(command, 0), &Limits::default()).unwrap().0
    }

    fn marked(mut c: Check) -> Check {
        c.override_key = Some(override_key(&c.key).into());
        c
    }

    /// An override written with `HSET` applies to the marked checks through
    /// the stream (decide, peek, adjust), as the model answers; peek
    /// records nothing; `DEL` ends it.
    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn overrides_and_peek_through_the_stream_answer_as_the_model() {
        let (mut store, mut model) = (ModelStore { journal: true, ..ModelStore::default() }, Model::new());
        let t = 1_800_000_000_000;
        let ovr = "p:{a}:ovr";
        let mut hset = Vec::new();
        encode_command(&mut hset, &[b"HSET", ovr.as_bytes(), b"w1000", b"4", b"c", b"2", b"until", b"1800000005000"]);
        assert_eq!(answer(&mut store, &hset), Value::Integer(3));
        let fields = [("w1000", "4"), ("c", "2"), ("until", "1800000005000")];
        model.set_override(ovr, &fields.map(|(f, v)| (f.to_string(), v.to_string())));
        let window = marked(check(Algorithm::FixedWindow, 0, "p:{a}:fw", &[(2, 1_000), (50, 60_000)], 1));
        for i in 0..5u64 {
            let checks = [window.clone(), marked(lease(0, "p:{a}:lease", 1, 1_000, &format!("r{i}")))];
            let mut out = Vec::new();
            encode_peek(&mut out, limiter(), Invocation::FCall, &checks, Some(t + i));
            let peeked = reply::parse(&answer(&mut store, &out), &checks).unwrap();
            assert_eq!(peeked, model.peek(&checks, t + i), "peek {i}");
            let mut out = Vec::new();
            encode_call(&mut out, limiter(), Invocation::FCall, &checks, Some(t + i));
            let got = reply::parse(&answer(&mut store, &out), &checks).unwrap();
            assert_eq!(got, model.decide(&checks, t + i), "decide {i}");
            assert_eq!((got.allowed, peeked.allowed), (i < 2, i < 2), "{i}: the lease override lets 2 in");
            let marked: Vec<bool> = got.windows.iter().map(|w| w.overridden).collect();
            assert_eq!(marked, [true, false, true], "1 s and the lease set overridden, 60 s as configured");
            assert_eq!(got.windows[0].limit, 4);
        }
        let mut out = Vec::new();
        encode_shaped_peek(
            &mut out,
            limiter(),
            Invocation::EvalSha,
            std::slice::from_ref(&window),
            (5_000, 0),
            Some(t + 9),
        );
        let got = reply::parse(&answer(&mut store, &out), std::slice::from_ref(&window)).unwrap();
        assert_eq!(got, model.peek_floored(std::slice::from_ref(&window), 5_000, 0, t + 9));
        let undo = [Adjustment { check: window.clone(), from: 1, to: 0 }];
        let mut out = Vec::new();
        encode_adjust(&mut out, limiter(), Invocation::Eval, &undo, t, Some(t + 10));
        let got = reply::parse(&answer(&mut store, &out), std::slice::from_ref(&window)).unwrap();
        assert_eq!(got, model.adjust(&undo, t, t + 10));
        assert_eq!(store.ran.iter().filter(|r| matches!(r, Ran::Decide { .. })).count(), 5, "peeks are not journaled");
        let mut del = Vec::new();
        encode_command(&mut del, &[b"DEL", ovr.as_bytes()]);
        assert_eq!(answer(&mut store, &del), Value::Integer(1));
        let mut get = Vec::new();
        encode_command(&mut get, &[b"HGETALL", ovr.as_bytes()]);
        assert_eq!(answer(&mut store, &get), Value::Array(vec![]));
    }

    /// KEYS not one per check plus one per marked check are refused.
    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn marked_checks_without_their_keys_are_refused() {
        let mut store = ModelStore::default();
        let c = marked(check(Algorithm::Gcra, 0, "p:{a}:gcra", &[(2, 1_000)], 1));
        let mut out = Vec::new();
        encode_call(&mut out, limiter(), Invocation::FCall, &[c], Some(1));
        let text =
            String::from_utf8(out).unwrap().replacen("*8\r\n", "*7\r\n", 1).replacen("$1\r\n2\r\n", "$1\r\n1\r\n", 1);
        let text = text.replacen("$9\r\np:{a}:ovr\r\n", "", 1);
        assert!(answer(&mut store, text.as_bytes()).is_error());
        assert_eq!(store.executed, 0);
    }
}
