//! The framing shim on the store tunnel's internal listener (`root_id:
//! tollgate.framing`): strips the gRPC prefixes from the request body the
//! worker's stream sends, and frames every chunk of Valkey's reply, so the
//! route's raw TCP tunnel carries only RESP. See [`crate::framing`].

use super::hostcalls;
use crate::framing::{frame, Unframer};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, BufferType};

/// The `root_id` that selects this role.
pub const SHIM_ROOT_ID: &str = "tollgate.framing";

#[derive(Default)]
pub struct Shim {
    unframer: Unframer,
}

impl Context for Shim {}

/// Replaces the current chunk of `buffer` by `f` of it.
fn rewrite(buffer: BufferType, size: usize, f: impl FnOnce(&[u8]) -> Vec<u8>) {
    if size == 0 {
        return;
    }
    let chunk = hostcalls::get_buffer(buffer, 0, size).ok().flatten().unwrap_or_default();
    let out = f(&chunk);
    if let Err(status) = hostcalls::set_buffer(buffer, 0, size, &out) {
        log::warn!("tollgate: framing shim could not rewrite a body chunk: {status:?}");
    }
}

impl HttpContext for Shim {
    fn on_http_request_body(&mut self, size: usize, _end_of_stream: bool) -> Action {
        let unframer = &mut self.unframer;
        rewrite(BufferType::HttpRequestBody, size, |chunk| unframer.feed(chunk));
        Action::Continue
    }

    fn on_http_response_body(&mut self, size: usize, _end_of_stream: bool) -> Action {
        rewrite(BufferType::HttpResponseBody, size, frame);
        Action::Continue
    }
}
