//! One worker of one proxy in a run: the real [`Worker`] and the
//! [`RecordingHost`] it asks things of, and what the run has read of that
//! host so far.

use crate::config::Config;
use crate::limiter::script::limiter;
use crate::model::host::RecordingHost;
use crate::resp::{decode_all, Limits, Value};
use crate::worker::Worker;

/// One worker of one proxy, from its start to its death.
pub struct Node {
    pub proxy: usize,
    pub worker: Worker,
    pub host: RecordingHost,
    pub alive: bool,
    pub died_at: Option<u64>,
    pub(super) tick_ms: u64,
    pub(super) generation: u64,
    /// How much of the host's records the run has looked at.
    seen: [usize; 4],
}

/// What a node's host was asked since the run last looked.
pub struct Asked {
    pub opened: Vec<u32>,
    pub outbox: Vec<(u32, Vec<u8>)>,
    pub cancelled: Vec<u32>,
    pub wake: bool,
    /// A new tick period and its generation (older ticks are void).
    pub retick: Option<(u64, u64)>,
    /// Requests let go, refused (with the status), resumed.
    pub released: Vec<u32>,
    pub refused: Vec<(u32, u32)>,
    pub resumed: Vec<u32>,
}

impl Node {
    pub fn new(proxy: usize, config: Config) -> Node {
        Node {
            proxy,
            worker: Worker::new(config),
            host: RecordingHost::default(),
            alive: true,
            died_at: None,
            tick_ms: 0,
            generation: 0,
            seen: [0; 4],
        }
    }

    /// Takes what the host was asked since the last look.
    pub fn asked(&mut self) -> Asked {
        let h = &mut self.host;
        let opened = h.opened.iter().skip(self.seen[0]).map(|(t, _, _)| *t).collect();
        self.seen[0] = h.opened.len();
        let outbox = std::mem::take(&mut h.outbox).into_iter().filter(|(_, b)| !b.is_empty()).collect();
        let cancelled = std::mem::take(&mut h.cancelled);
        let wake = std::mem::take(&mut h.wakes) > 0;
        let tick = u64::try_from(h.tick.as_millis()).unwrap_or(u64::MAX);
        let retick = (tick != self.tick_ms).then(|| {
            self.tick_ms = tick;
            self.generation += 1;
            (tick, self.generation)
        });
        let released = h.admitted.iter().skip(self.seen[1]).map(|(id, _)| *id).collect();
        self.seen[1] = h.admitted.len();
        let refused = h.replies.iter().skip(self.seen[2]).map(|(id, r)| (*id, r.status)).collect();
        self.seen[2] = h.replies.len();
        let resumed = h.resumed.iter().skip(self.seen[3]).map(|(id, _)| *id).collect();
        self.seen[3] = h.resumed.len();
        Asked { opened, outbox, cancelled, wake, retick, released, refused, resumed }
    }
}

/// The flushes in `bytes` (a message a worker sends): each one's token and
/// bucket keys, whether or not it ever reaches the store.
pub fn flushes_in(bytes: &[u8]) -> Vec<(String, Vec<String>)> {
    let script = limiter();
    let text = |v: &Value| v.as_bytes().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
    let mut out = Vec::new();
    for command in decode_all(bytes, &Limits::default()).unwrap_or_default() {
        let Some(args) = command.as_array() else { continue };
        let words: Vec<String> = args.iter().map(text).collect();
        let (Some(verb), Some(target)) = (words.first(), words.get(1)) else { continue };
        let flush = match verb.as_str() {
            "FCALL" => *target == script.flush_function,
            "EVALSHA" => *target == script.flush_sha,
            "EVAL" => *target == script.flush_body,
            _ => false,
        };
        let keys: usize = words.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
        if let (true, Some(token)) = (flush, words.get(4 + keys)) {
            let buckets = words.iter().skip(3).take(keys.saturating_sub(1) / 2).cloned().collect();
            out.push((token.clone(), buckets));
        }
    }
    out
}
