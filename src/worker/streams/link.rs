//! One long-lived stream to a store (or to the Sentinels, or to a cluster's
//! seeds), the pure part: whether it is open, the commands sent on it and
//! still awaiting replies (in order: the store answers a pipeline in order),
//! and the reply bytes not decoded yet (a reply may span messages; a message
//! may hold many).
//!
//! The stream's health is judged from the stream alone: it is stalled when
//! commands are outstanding and no reply has arrived for `valkey.timeout`,
//! or for four times the stream's recent round trip if that is longer (up
//! to a cap), across at least [`MIN_SILENT_TICKS`] ticks of the worker. A
//! flooded proxy must not blame the store: when Envoy's event loop lags,
//! commands and replies wait in Envoy's own buffers and round trips grow,
//! while replies keep coming; a store that stopped answering stays silent.
//! How long requests waited inside the worker before they were sent has no
//! part in it.

use crate::resp::{decode, DecodeError, Limits, Value};
use crate::store::Failure;
use crate::worker::calls::CallId;
use std::collections::VecDeque;

/// The first pause after a stream that never answered; it doubles up to
/// [`MAX_BACKOFF_MS`] while attempts keep failing.
pub const MIN_BACKOFF_MS: u64 = 50;
/// The longest pause between attempts: a store that comes back is reached
/// within this.
pub const MAX_BACKOFF_MS: u64 = 800;
/// Ticks without a reply, with commands outstanding, before a stream can be
/// declared stalled (besides `valkey.timeout` of silence).
pub const MIN_SILENT_TICKS: u32 = 10;
/// Room made ahead for the replies one message brings (more grow the
/// vector as usual).
const MAX_REPLIES_AHEAD: usize = 64;

/// What a command on the stream was sent for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Awaited {
    /// A command sent when the stream opened (`AUTH`).
    Preamble,
    /// Held call `id` (a decision, a part across slots, a settlement).
    Call(CallId),
    /// The decision of request `id`, which left: its reply is read and dropped.
    Abandoned(CallId),
    /// A Sentinel lookup, or a request for a cluster's slot map.
    Lookup,
    /// `ASKING`, just before the call of a request that follows an `ASK`.
    Asking,
    /// `FUNCTION LOAD` of the limiter's library.
    Load,
}

#[derive(Debug, Clone)]
struct Sent {
    awaited: Awaited,
    at_ms: u64,
    bytes: usize,
    /// The last command of its message: its reply frees the message's
    /// place in the window ([`Link::messages`]).
    ends_message: bool,
}

/// Where the stream stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkState {
    /// No stream: one is opened when work waits.
    Idle,
    /// A stream is open. Not `ready` while its preamble (`AUTH`) is unanswered:
    /// nothing else is sent before.
    Open { token: u32, ready: bool },
    /// The last stream failed before it ever answered: no new one before
    /// `until_ms`, and requests fail at once with `failure`.
    Down { until_ms: u64, failure: Failure },
}

/// One stream's state.
#[derive(Debug)]
pub struct Link {
    state: LinkState,
    sent: VecDeque<Sent>,
    bytes: usize,
    /// Messages whose last reply has not arrived.
    messages: usize,
    pending: Vec<u8>,
    /// The last reply, or when the oldest outstanding command was sent.
    progress_ms: u64,
    /// Whether this stream has answered anything.
    answered: bool,
    backoff_ms: u64,
    /// Ticks since the last reply with commands outstanding.
    silent_ticks: u32,
    /// Replies read on this link, and as seen at the last tick.
    replies: u64,
    replies_at_tick: u64,
    /// The recent round trip (a moving average of each message's oldest
    /// reply), in ms.
    rtt_ms: u64,
}

impl Default for Link {
    fn default() -> Self {
        Link {
            state: LinkState::Idle,
            sent: VecDeque::new(),
            bytes: 0,
            messages: 0,
            pending: Vec::new(),
            progress_ms: 0,
            answered: false,
            backoff_ms: MIN_BACKOFF_MS,
            silent_ticks: 0,
            replies: 0,
            replies_at_tick: 0,
            rtt_ms: 0,
        }
    }
}

impl Link {
    /// The open stream's token.
    pub fn token(&self) -> Option<u32> {
        match self.state {
            LinkState::Open { token, .. } => Some(token),
            _ => None,
        }
    }

    /// Open and past its preamble: decisions can be sent.
    pub fn ready(&self) -> bool {
        matches!(self.state, LinkState::Open { ready: true, .. })
    }

    /// Commands awaiting replies, and their bytes.
    pub fn in_flight(&self) -> (usize, usize) {
        (self.sent.len(), self.bytes)
    }

    /// Messages sent on the stream whose last reply has not arrived.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// A stream was opened under `token`; `ready` unless a preamble must be
    /// answered first.
    pub fn opened(&mut self, token: u32, ready: bool, now_ms: u64) {
        self.state = LinkState::Open { token, ready };
        self.answered = false;
        self.pending.clear();
        self.progress_ms = now_ms;
    }

    /// The preamble was answered: decisions may follow.
    pub fn set_ready(&mut self) {
        if let LinkState::Open { token, .. } = self.state {
            self.state = LinkState::Open { token, ready: true };
        }
    }

    /// A command awaiting `awaited` of `bytes` bytes was sent at `now_ms`.
    pub fn sent(&mut self, awaited: Awaited, bytes: usize, now_ms: u64) {
        if self.sent.is_empty() {
            self.progress_ms = now_ms;
        }
        self.sent.push_back(Sent { awaited, at_ms: now_ms, bytes, ends_message: false });
        self.bytes = self.bytes.saturating_add(bytes);
    }

    /// The commands [`Link::sent`] since the last message went out as one
    /// message: it holds a place in the window until its last reply.
    pub fn message_sent(&mut self) {
        if let Some(last) = self.sent.back_mut().filter(|s| !s.ends_message) {
            last.ends_message = true;
            self.messages += 1;
        }
    }

    /// Request `id` left while its command was outstanding: its reply will
    /// be read and dropped.
    pub fn abandon(&mut self, id: CallId) {
        if let Some(s) = self.sent.iter_mut().find(|s| s.awaited == Awaited::Call(id)) {
            s.awaited = Awaited::Abandoned(id);
        }
    }

    /// Reply bytes arrived at `now_ms`: every complete reply, paired with
    /// the command it answers and when that was sent, and then the error
    /// that ends the stream, if any: a reply nothing was sent for, or bytes
    /// that are not RESP (replies can no longer be paired with requests).
    pub fn feed(&mut self, bytes: &[u8], now_ms: u64) -> (Vec<(Awaited, u64, Value)>, Option<Failure>) {
        self.pending.extend_from_slice(bytes);
        let limits = Limits::default();
        let mut out = Vec::with_capacity(self.sent.len().min(MAX_REPLIES_AHEAD));
        let mut used = 0;
        let mut error = None;
        while let Some(rest) = self.pending.get(used..).filter(|r| !r.is_empty()) {
            match decode(rest, &limits) {
                Ok((value, n)) => {
                    used += n;
                    let Some(sent) = self.sent.pop_front() else {
                        error = Some(Failure::Lost("a reply with no command outstanding".into()));
                        break;
                    };
                    self.bytes = self.bytes.saturating_sub(sent.bytes);
                    if sent.ends_message {
                        self.messages = self.messages.saturating_sub(1);
                    }
                    out.push((sent.awaited, sent.at_ms, value));
                }
                Err(DecodeError::Incomplete) => break,
                Err(e) => {
                    error = Some(Failure::NotResp(e));
                    break;
                }
            }
        }
        self.pending.drain(..used);
        if let Some((_, sent_ms, _)) = out.first() {
            let sample = now_ms.saturating_sub(*sent_ms);
            self.rtt_ms = if self.rtt_ms == 0 { sample } else { (self.rtt_ms * 7 + sample) / 8 };
            self.replies = self.replies.wrapping_add(out.len() as u64);
            self.progress_ms = now_ms;
            self.answered = true;
            self.backoff_ms = MIN_BACKOFF_MS;
        }
        (out, error)
    }

    /// For the log: commands outstanding, ms since the last reply (or the
    /// first send), and silent ticks.
    pub fn silence(&self, now_ms: u64) -> (usize, u64, u32) {
        (self.sent.len(), now_ms.saturating_sub(self.progress_ms), self.silent_ticks)
    }

    /// The worker ticked: one more silent tick if commands are outstanding
    /// and nothing came back since the last one.
    pub fn tick(&mut self) {
        if self.sent.is_empty() || self.replies != self.replies_at_tick {
            self.silent_ticks = 0;
        } else {
            self.silent_ticks = self.silent_ticks.saturating_add(1);
        }
        self.replies_at_tick = self.replies;
    }

    /// How long a silence means a stall: `timeout_ms`, or four recent round
    /// trips if longer, at most `cap_ms`.
    pub fn stall_after(&self, timeout_ms: u64, cap_ms: u64) -> u64 {
        self.rtt_ms.saturating_mul(4).min(cap_ms).max(timeout_ms)
    }

    /// Commands are outstanding and nothing came back for
    /// [`Link::stall_after`], over at least [`MIN_SILENT_TICKS`] ticks.
    pub fn stalled(&self, now_ms: u64, timeout_ms: u64, cap_ms: u64) -> bool {
        self.token().is_some()
            && !self.sent.is_empty()
            && now_ms.saturating_sub(self.progress_ms) >= self.stall_after(timeout_ms, cap_ms)
            && self.silent_ticks >= MIN_SILENT_TICKS
    }

    /// The stream is gone (closed, refused, reset by us) at `now_ms`:
    /// returns what every command still outstanding awaited, oldest first.
    /// A stream that never answered, or that failed in a way another stream
    /// would too (`back_off`: refused credentials, garbage), puts the link
    /// `Down` for the backoff, with `failure` for the requests meanwhile; one
    /// that had answered is reopened at once.
    pub fn closed(&mut self, failure: Failure, back_off: bool, now_ms: u64) -> Vec<Awaited> {
        let awaited = self.sent.drain(..).map(|s| s.awaited).collect();
        self.bytes = 0;
        self.messages = 0;
        self.pending.clear();
        self.state = if self.answered && !back_off {
            LinkState::Idle
        } else {
            let until_ms = now_ms.saturating_add(self.backoff_ms);
            self.backoff_ms = self.backoff_ms.saturating_mul(2).min(MAX_BACKOFF_MS);
            LinkState::Down { until_ms, failure }
        };
        self.answered = false;
        awaited
    }

    /// Held calls outstanding on the stream, oldest first.
    pub fn calls(&self) -> impl Iterator<Item = CallId> + '_ {
        self.sent.iter().filter_map(|s| match s.awaited {
            Awaited::Call(id) => Some(id),
            _ => None,
        })
    }

    /// No stream, and no backoff: the next stream may open at once (to
    /// another address). Nothing is outstanding on a link without a stream.
    pub fn forget(&mut self) {
        if self.token().is_none() {
            self.state = LinkState::Idle;
            self.backoff_ms = MIN_BACKOFF_MS;
        }
    }

    /// The backoff is over at `now_ms`: a new stream may be opened.
    pub fn may_open(&self, now_ms: u64) -> bool {
        match &self.state {
            LinkState::Idle => true,
            LinkState::Open { .. } => false,
            LinkState::Down { until_ms, .. } => now_ms >= *until_ms,
        }
    }

    /// The failure requests meet while the link is down, if it is.
    pub fn down(&self, now_ms: u64) -> Option<&Failure> {
        match &self.state {
            LinkState::Down { until_ms, failure } if now_ms < *until_ms => Some(failure),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
