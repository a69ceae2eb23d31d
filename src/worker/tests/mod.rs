//! The worker's whole request lifecycle on the host: a recording host, a
//! store that decides with the pure models, and a fake clock. Each test runs
//! in milliseconds.

mod bodies;
mod chaos;
mod cluster;
mod cluster_cross;
mod cluster_cross_failures;
mod cluster_failures;
mod cluster_settle;
mod decisions;
mod fake;
mod fake_cluster;
mod group_commit;
mod lifecycle;
mod local;
mod sentinel;
mod settle;
mod shaping;
mod shaping_count;
mod shaping_cross;
mod stream;
mod synced;
