//! What a client is sent: the response a request gets from the filter.
//!
//! - [`response`]: the status and headers of an admitted request and the
//!   local reply of a denied or failed one, built from a decision;
//! - [`headers`]: the draft-11 rate-limit headers and `Retry-After`;
//! - [`problem`]: the RFC 9457 problem+json bodies of a denial and a 503;
//! - [`text`]: decimals and JSON strings appended to one buffer.
//!
//! Pure: the filter only copies the result into Envoy.

pub mod headers;
pub mod problem;
pub mod response;
pub mod text;
