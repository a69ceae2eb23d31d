//! The two proxy-wasm ABI calls whose SDK wrappers cannot do what the
//! filter needs: `proxy_send_local_response` with the reply's response
//! code details (the SDK's `send_http_response` passes none), and
//! `proxy_set_property` returning its status (the SDK's panics on one it
//! does not expect, which aborts the VM). Declared here as the ABI defines
//! them (proxy-wasm spec, ABI 0.2.1), the status read as a plain integer.
//! Only [`super::hostcalls`] calls them.

use proxy_wasm::types::Status;

#[allow(unsafe_code, clashing_extern_declarations)]
mod ffi {
    #[link(wasm_import_module = "env")]
    extern "C" {
        pub fn proxy_send_local_response(
            status_code: u32,
            details_data: *const u8,
            details_size: usize,
            body_data: *const u8,
            body_size: usize,
            headers_data: *const u8,
            headers_size: usize,
            grpc_status: i32,
        ) -> u32;
        pub fn proxy_set_property(
            path_data: *const u8,
            path_size: usize,
            value_data: *const u8,
            value_size: usize,
        ) -> u32;
    }

    /// Calls the host with slices it only reads during the call.
    pub fn send_local_response(status: u32, details: &[u8], body: &[u8], headers: &[u8]) -> u32 {
        // SAFETY: every pointer comes with its slice's length, and the
        // slices outlive the call; -1: not a gRPC reply.
        unsafe {
            proxy_send_local_response(
                status,
                details.as_ptr(),
                details.len(),
                body.as_ptr(),
                body.len(),
                headers.as_ptr(),
                headers.len(),
                -1,
            )
        }
    }

    pub fn set_property(path: &[u8], value: &[u8]) -> u32 {
        // SAFETY: as above.
        unsafe { proxy_set_property(path.as_ptr(), path.len(), value.as_ptr(), value.len()) }
    }
}

/// The ABI's status codes this module expects (the rest are errors).
fn status(code: u32) -> Result<(), Status> {
    match code {
        0 => Ok(()),
        1 => Err(Status::NotFound),
        2 => Err(Status::BadArgument),
        _ => Err(Status::InternalFailure),
    }
}

/// A header map as the ABI passes it: the number of pairs, each pair's
/// name and value sizes (u32, little-endian), then each name and value
/// followed by a NUL byte.
fn serialize_map(pairs: &[(&str, &str)]) -> Vec<u8> {
    let text: usize = pairs.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    let mut out = Vec::with_capacity(4 + pairs.len() * 8 + text);
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes();
    out.extend_from_slice(&count(pairs.len()));
    for (k, v) in pairs {
        out.extend_from_slice(&count(k.len()));
        out.extend_from_slice(&count(v.len()));
    }
    for (k, v) in pairs {
        for part in [k, v] {
            out.extend_from_slice(part.as_bytes());
            out.push(0);
        }
    }
    out
}

/// Answers the current request with a local reply whose response code
/// details are `details` (`%RESPONSE_CODE_DETAILS%`).
pub fn send_local_response(
    status_code: u32,
    details: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(), Status> {
    status(ffi::send_local_response(status_code, details.as_bytes(), body, &serialize_map(headers)))
}

/// Sets the current request's property `name` (one path element: Envoy
/// keeps it as filter state `wasm.<name>`).
pub fn set_property(name: &str, value: &[u8]) -> Result<(), Status> {
    status(ffi::set_property(name.as_bytes(), value))
}
