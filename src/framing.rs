//! gRPC message framing for the store tunnel's shim.
//!
//! The worker's stream to the store is a gRPC stream (the only long-lived
//! stream a stock Envoy gives a wasm filter). Envoy's gRPC client puts a
//! 5-byte prefix (a compression flag and a big-endian length) before every
//! message it sends and expects the same on every message it receives. On
//! the internal listener that tunnels the stream to Valkey as raw TCP, the
//! same module runs a second time as the shim: it strips the prefixes from
//! the request body ([`Unframer`]) and prefixes every chunk of the response
//! body ([`frame`]), so only RESP reaches Valkey and only gRPC messages reach
//! the client. Pure: the filter moves the chunks.
//!
//! ```
//! use tollgate::framing::{frame, Unframer};
//!
//! let message = frame(b"*1\r\n$4\r\nPING\r\n");
//! assert_eq!(&message[..5], &[0, 0, 0, 0, 14]);
//! let mut unframer = Unframer::default();
//! // A prefix or a payload may be split anywhere between chunks.
//! let mut payload = unframer.feed(&message[..3]);
//! payload.extend(unframer.feed(&message[3..9]));
//! payload.extend(unframer.feed(&message[9..]));
//! assert_eq!(payload, b"*1\r\n$4\r\nPING\r\n");
//! ```

/// Length of the gRPC message prefix.
pub const PREFIX: usize = 5;

/// Where the reader stands in the request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a prefix: `have` of its bytes so far.
    Prefix { bytes: [u8; PREFIX], have: usize },
    /// Inside a payload: `left` bytes of it to come.
    Payload { left: u64 },
}

/// Strips the prefixes from a stream of gRPC messages split into chunks.
#[derive(Debug, Clone)]
pub struct Unframer {
    state: State,
}

impl Default for Unframer {
    fn default() -> Self {
        Unframer { state: State::Prefix { bytes: [0; PREFIX], have: 0 } }
    }
}

impl Unframer {
    /// The payload bytes in `chunk`, prefixes removed.
    pub fn feed(&mut self, mut chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(chunk.len());
        while !chunk.is_empty() {
            match &mut self.state {
                State::Prefix { bytes, have } => {
                    let take = (PREFIX - *have).min(chunk.len());
                    let (head, rest) = chunk.split_at(take);
                    if let Some(dst) = bytes.get_mut(*have..*have + take) {
                        dst.copy_from_slice(head);
                    }
                    *have += take;
                    chunk = rest;
                    if *have == PREFIX {
                        let [_, a, b, c, d] = *bytes;
                        let left = u64::from(u32::from_be_bytes([a, b, c, d]));
                        self.state = if left == 0 { Self::default().state } else { State::Payload { left } };
                    }
                }
                State::Payload { left } => {
                    let take = usize::try_from(*left).unwrap_or(usize::MAX).min(chunk.len());
                    let (head, rest) = chunk.split_at(take);
                    out.extend_from_slice(head);
                    *left -= take as u64;
                    chunk = rest;
                    if *left == 0 {
                        self.state = Self::default().state;
                    }
                }
            }
        }
        out
    }
}

/// `payload` as one uncompressed gRPC message. A payload longer than
/// `u32::MAX` bytes never occurs (Envoy's body chunks are far smaller); it
/// would be cut into several messages.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + PREFIX);
    if payload.is_empty() {
        out.extend_from_slice(&[0; PREFIX]);
    }
    for part in payload.chunks(u32::MAX as usize) {
        out.push(0);
        out.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn messages_split_at_every_offset_give_back_the_payloads() {
        let payloads: [&[u8]; 4] = [b"*1\r\n$4\r\nPING\r\n", b"", b"x", b"+OK\r\n"];
        let stream: Vec<u8> = payloads.iter().flat_map(|p| frame(p)).collect();
        let whole: Vec<u8> = payloads.concat();
        for a in 0..stream.len() {
            for b in a..stream.len() {
                let mut u = Unframer::default();
                let mut got = u.feed(&stream[..a]);
                got.extend(u.feed(&stream[a..b]));
                got.extend(u.feed(&stream[b..]));
                assert_eq!(got, whole, "split at {a} and {b}");
            }
        }
    }

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn a_frame_carries_the_flag_and_the_length() {
        assert_eq!(frame(b"ab"), vec![0, 0, 0, 0, 2, b'a', b'b']);
        assert_eq!(frame(b""), vec![0, 0, 0, 0, 0]);
    }
}
