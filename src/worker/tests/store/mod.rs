//! The store streams: group commit, failures, stalls and floods, Sentinel, the local limiter standing in.

mod chaos;
mod group_commit;
mod local;
mod sentinel;
mod stream;
