//! The host calls the filter makes, each counted on its way to
//! [`proxy_wasm::hostcalls`]: [`super::tally`] reports them per request when
//! asked to, and is the one other place that calls the host directly (its
//! reporting, which must not count itself). A call whose answer is a
//! non-empty buffer also counts as a buffer: the host allocated it in the
//! module's memory (one more entry into the VM).

use super::tally::{count_buffer, count_host_call};
use proxy_wasm::hostcalls as host;
use proxy_wasm::types::{BufferType, Bytes, MapType, MetricType, Status};
use std::time::{Duration, SystemTime};

fn answered(value: Result<Option<Bytes>, Status>) -> Result<Option<Bytes>, Status> {
    if let Ok(Some(bytes)) = &value {
        if !bytes.is_empty() {
            count_buffer();
        }
    }
    value
}

pub fn get_current_time() -> Result<SystemTime, Status> {
    count_host_call();
    host::get_current_time()
}

pub fn set_tick_period(period: Duration) -> Result<(), Status> {
    count_host_call();
    host::set_tick_period(period)
}

pub fn get_buffer(buffer: BufferType, start: usize, max_size: usize) -> Result<Option<Bytes>, Status> {
    count_host_call();
    answered(host::get_buffer(buffer, start, max_size))
}

pub fn set_buffer(buffer: BufferType, start: usize, size: usize, value: &[u8]) -> Result<(), Status> {
    count_host_call();
    host::set_buffer(buffer, start, size, value)
}

pub fn get_map_value_bytes(map: MapType, key: &str) -> Result<Option<Bytes>, Status> {
    count_host_call();
    answered(host::get_map_value_bytes(map, key))
}

pub fn set_map_value(map: MapType, key: &str, value: Option<&str>) -> Result<(), Status> {
    count_host_call();
    host::set_map_value(map, key, value)
}

pub fn add_map_value(map: MapType, key: &str, value: &str) -> Result<(), Status> {
    count_host_call();
    host::add_map_value(map, key, value)
}

pub fn remove_map_value(map: MapType, key: &str) -> Result<(), Status> {
    count_host_call();
    host::remove_map_value(map, key)
}

pub fn get_property(path: Vec<&str>) -> Result<Option<Bytes>, Status> {
    count_host_call();
    answered(host::get_property(path))
}

pub fn register_shared_queue(name: &str) -> Result<u32, Status> {
    count_host_call();
    host::register_shared_queue(name)
}

pub fn dequeue_shared_queue(queue: u32) -> Result<Option<Bytes>, Status> {
    count_host_call();
    answered(host::dequeue_shared_queue(queue))
}

pub fn enqueue_shared_queue(queue: u32, value: Option<&[u8]>) -> Result<(), Status> {
    count_host_call();
    host::enqueue_shared_queue(queue, value)
}

pub fn resume_http_request() -> Result<(), Status> {
    count_host_call();
    host::resume_http_request()
}

pub fn resume_http_response() -> Result<(), Status> {
    count_host_call();
    host::resume_http_response()
}

/// A local reply with its response code details (through [`super::abi`]).
pub fn send_local_response(status: u32, details: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<(), Status> {
    count_host_call();
    super::abi::send_local_response(status, details, headers, body)
}

/// Sets a property of the current request (through [`super::abi`]).
pub fn set_property(name: &str, value: &[u8]) -> Result<(), Status> {
    count_host_call();
    super::abi::set_property(name, value)
}

pub fn open_grpc_stream(
    cluster: &str,
    service: &str,
    method: &str,
    metadata: Vec<(&str, &[u8])>,
) -> Result<u32, Status> {
    count_host_call();
    host::open_grpc_stream(cluster, service, method, metadata)
}

pub fn send_grpc_stream_message(token: u32, message: Option<&[u8]>, end_stream: bool) -> Result<(), Status> {
    count_host_call();
    host::send_grpc_stream_message(token, message, end_stream)
}

pub fn cancel_grpc_stream(token: u32) -> Result<(), Status> {
    count_host_call();
    host::cancel_grpc_stream(token)
}

pub fn set_effective_context(context: u32) -> Result<(), Status> {
    count_host_call();
    host::set_effective_context(context)
}

pub fn define_metric(kind: MetricType, name: &str) -> Result<u32, Status> {
    count_host_call();
    host::define_metric(kind, name)
}

pub fn increment_metric(metric: u32, by: i64) -> Result<(), Status> {
    count_host_call();
    host::increment_metric(metric, by)
}

pub fn record_metric(metric: u32, value: u64) -> Result<(), Status> {
    count_host_call();
    host::record_metric(metric, value)
}
